"""Goodput and gates on real runs: the reference MoE runner under the real `ledger record`.

- a run crashed with --fail-at-step 7 (checkpoint every 4 steps) and resumed with --resume under
  `ledger record --attempt-of`: steps 5 and 6 are computed twice;
- a group of three seeds tagged grp=seeds with a declared gate val loss <= 3.9: two train 12 steps and
  reach it, the third has a 3-step budget and never does (censored, still listed and summarised).

On a machine without readable energy counters (no NVML, no RAPL) every energy figure must say
"not measured"; where counters exist, it must be a number with its method.
"""

from __future__ import annotations

import contextlib
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any

import pyarrow.parquet as pq
import pytest
from helpers import LedgerAt, ids_in, load_receipt, receipt_dir

MICRO = [
    "model.layers=2", "model.hidden=32", "model.heads=2", "model.ffn_hidden=64", "model.seq_len=32",
    "moe.num_experts=4", "moe.top_k=2", "batch_size=8", "data.train_sequences=256", "data.val_sequences=8",
    "warmup_steps=2", "lr=1e-2", "eval_every=3",
]
"""The runner tests' micro model (trains 12 steps in well under a second), evaluating every 3 steps."""
GATE = 3.9
"""val loss after 12 micro steps is ~3.80-3.85 for seeds 0-2 and ~4.03-4.07 after 3: reached at 9 or 12."""


def runner(*overrides: str, extra: tuple[str, ...] = ()) -> list[str]:
    sets = [a for o in (*MICRO, *overrides) for a in ("--set", o)]
    return ["python", "-m", "runners.moe", "--config", "tiny", *sets, *extra]


class Ledger(LedgerAt):
    """The CLI bound to one test ledger, with a reader of its receipt files. `ledger record` runs as a real
    process (it launches the runner); the analysis commands run in this process through click's runner,
    the same command line without a fresh interpreter importing duckdb, scipy and arch for each call."""

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args[0] == "record":
            return super().__call__(*args, check=check)
        from click.testing import CliRunner

        from ledger.cli.app import cli
        from ledger.report.console import console

        width = console.width
        console.width = 200  # as the subprocesses' COLUMNS=200 (conftest.child_env)
        try:
            with contextlib.chdir(self.root):
                result = CliRunner().invoke(cli, ["--ledger", str(self.dir), *args])
        finally:
            console.width = width
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        proc = subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(f"ledger {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def receipt(self, receipt_id: str) -> dict[str, Any]:
        return load_receipt(self.dir, receipt_id)

    def ids(self) -> list[str]:
        return ids_in(self.dir)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ledger, str, str]:
    led = Ledger(tmp_path_factory.mktemp("crashed"))
    ck = str(led.root / "ck")
    first = led("record", "--name", "crashy", "--", *runner("steps=12", "checkpoint_every=4",
                extra=("--checkpoint-dir", ck, "--fail-at-step", "7")), check=False)
    assert first.returncode == 1, first.stderr[-3000:]
    led("record", "--name", "crashy", "--attempt-of", "crashy", "--",
        *runner("steps=12", "checkpoint_every=4", extra=("--checkpoint-dir", ck, "--resume")))
    by_attempt = {led.receipt(i)["attempt"]: i for i in led.ids()}
    return led, by_attempt[1], by_attempt[2]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    from conftest import BIN, child_env

    led = Ledger(tmp_path_factory.mktemp("seeds"))
    # the three runs are independent: recorded at once (concurrent publishers are part of the design)
    procs = [subprocess.Popen([str(BIN / "ledger"), "--ledger", str(led.dir), "record", "--name", f"seed{seed}",
                               "--tag", "grp=seeds", "--", *runner(f"seed={seed}", f"steps={steps}",
                                                                    f"data.gate_loss={GATE}")],
                              env=child_env(), cwd=led.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed, steps in ((0, 12), (1, 12), (2, 3))]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    return led


def _t(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_crashed_and_resumed_run(crashed: tuple[Ledger, str, str]) -> None:
    led, a1, a2 = crashed
    r1, r2 = led.receipt(a1), led.receipt(a2)
    assert r1["status"] == "failed" and r2["links"]["attempt_of"] == a1 and r2["attempt"] == 2
    g = led.json("goodput", "crashy")
    assert g["run_id"] == a1 and [a["id"] for a in g["attempts"]] == [a1, a2]
    assert 0 < g["goodput"] < 1
    # the buckets and the productive time add up to the wall time, first start to last end
    assert g["productive_s"] + sum(g["badput_s"].values()) == pytest.approx(g["wall_s"], abs=1e-9)
    assert g["wall_s"] == pytest.approx(_t(r2["ended_at"]) - _t(r1["started_at"]), abs=1e-6)
    # progress lost: the first computations of the steps attempt 2 computed again (5 and 6)
    s1 = pq.read_table(receipt_dir(led.dir, a1) / "steps.parquet").to_pylist()
    s2 = {r["step"] for r in pq.read_table(receipt_dir(led.dir, a2) / "steps.parquet").to_pylist()}
    redone = [r for r in s1 if r["step"] in s2]
    assert sorted(r["step"] for r in redone) == [5, 6]
    assert g["badput_s"]["progress_lost"] == pytest.approx(sum(r["step_time_s"] for r in redone), abs=1e-6)
    assert g["steps_recomputed"] == 2 and g["steps_useful"] == 12
    # downtime: from attempt 1's end to attempt 2's start
    downtime = _t(r2["started_at"]) - _t(r1["ended_at"])
    assert downtime > 0 and g["badput_s"]["downtime"] == pytest.approx(downtime, abs=1e-6)
    for bucket in ("startup", "checkpoint_save", "checkpoint_restore", "eval", "other"):
        assert g["badput_s"][bucket] > 0, bucket
    assert g["attempts"][1]["restored_step"] == 4 and g["attempts"][0]["steps_lost"] == 2
    assert g["token_goodput"] == pytest.approx(12 / 14)
    assert g["checkpoints_useful"] == 3 and g["checkpoints_saved"] == 3  # steps 4 (attempt 1), 8, 12
    assert g["steady_step_time_s"] <= g["step_time_median_s"] and g["problems"] == []


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_goodput_text_and_timeline(crashed: tuple[Ledger, str, str]) -> None:
    led, a1, _ = crashed
    svg = led.root / "timeline.svg"
    out = led("goodput", a1[:10], "--svg", str(svg)).stdout
    for text in ("productive", "progress lost", "downtime", "checkpoint restore", "goodput", "step 4"):
        assert text in out, text
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(list(root.iter())) > 20


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_crashed_run_against_its_declared_gates(crashed: tuple[Ledger, str, str]) -> None:
    led, _, _ = crashed
    report = led.json("gate", "crashy", "--price-per-device-hour", "3.6")
    names = [g["gate"] for g in report["gates"]]
    assert names == ["val-loss", "arith-val-loss"]  # the tiny config's gates, from the task
    for g in report["gates"]:  # 12 micro steps reach neither: censored at the run's total cost
        assert not g["reached"] and g["censored"]
        assert g["cost"]["wall_s"] == pytest.approx(led.json("goodput", "crashy")["wall_s"], abs=1e-6)
        assert g["cost"]["money"] == pytest.approx(g["cost"]["device_hours"] * 3.6)
    assert report["run_cost"]["checkpoints_useful"] == 3
    # an ad-hoc gate it does reach, measured from the first attempt's start
    reached = led.json("gate", "crashy", "--gate", "val/loss<=4.0")["gates"][0]
    assert reached["reached"] and reached["step"] == 6 and reached["attempt"] == 1


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_energy_is_measured_or_says_not_measured(crashed: tuple[Ledger, str, str]) -> None:
    led, a1, a2 = crashed
    methods = {led.receipt(i)["summary"]["energy_method"] for i in (a1, a2)}
    report = led.json("gate", "crashy")
    total = report["run_cost"]["total"]
    if methods == {"not measured"} or "not measured" in methods:
        assert total["energy_j"] is None and total["energy_method"] == "not measured"
        assert "energy not measured" in led("gate", "crashy").stdout
    else:  # counters were readable here: a number and how it was measured, never a guess
        assert total["energy_j"] > 0 and total["energy_method"] in ("counter", "power-integral")
    for g in report["gates"]:
        assert (g["cost"]["energy_j"] is None) == (g["cost"]["energy_method"] == "not measured")


def product_limit_median(times: list[float], reached: list[bool]) -> float | None:
    """Kaplan-Meier's median written out from its definition (independent of ledger.analyses.km)."""
    s = 1.0
    for t in sorted({u for u, r in zip(times, reached, strict=True) if r}):
        at_risk = sum(u >= t for u in times)
        events = sum(r and u == t for u, r in zip(times, reached, strict=True))
        s *= 1 - events / at_risk
        if s <= 0.5:
            return t
    return None


def test_product_limit_median_by_hand() -> None:
    # 3 runs: events at 10 and 20, one censored at 30: S(10) = 2/3, S(20) = 2/3 x 1/2 = 1/3 -> median 20
    assert product_limit_median([10.0, 20.0, 30.0], [True, True, False]) == 20.0
    # censored at 5, before both events: S(10) = 1 - 1/2 = 1/2 -> median 10
    assert product_limit_median([10.0, 20.0, 5.0], [True, True, False]) == 10.0
    # one event of three runs: S(10) = 2/3 stays above 1/2: no median
    assert product_limit_median([10.0, 30.0, 40.0], [True, False, False]) is None


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_group_of_three_seeds_with_a_censored_run(seeds: Ledger) -> None:
    report = seeds.json("gate", "--group", "grp=seeds", "--gate", "val-loss")
    runs = {r["name"]: r for r in report["runs"]}
    assert sorted(runs) == ["seed0", "seed1", "seed2"]
    results = {r["name"]: r for r in report["summaries"][0]["results"]}
    assert results["seed0"]["reached"] and results["seed1"]["reached"]
    assert not results["seed2"]["reached"] and results["seed2"]["censored"]  # kept, never dropped
    for name in ("seed0", "seed1"):
        r = results[name]
        assert r["step"] in (9, 12) and r["value"] <= GATE
        assert r["interpolated"] is not None and r["interpolated"]["wall_s"] <= r["cost"]["wall_s"]
        assert r["cost"]["wall_s"] < runs[name]["run_cost"]["total"]["wall_s"]
    # the censored run counts at its total cost
    assert results["seed2"]["cost"]["wall_s"] == pytest.approx(runs["seed2"]["run_cost"]["total"]["wall_s"])
    summary = report["summaries"][0]
    assert summary["runs"] == 3 and summary["reached"] == 2 and summary["fraction_reached"] == pytest.approx(2 / 3)
    walls = [results[n]["cost"]["wall_s"] for n in ("seed0", "seed1", "seed2")]
    # the median by hand: the product-limit estimate S(t) = prod over event times t_i <= t of
    # (1 - d_i / n_i), n_i the runs still at risk (cost >= t_i); the median is the first t with S <= 0.5
    assert summary["median"]["wall_s"] == pytest.approx(product_limit_median(walls, [True, True, False]))
    assert summary["median"]["energy_j"] is None  # not measured here (or all measured: then a number)
    text = seeds("gate", "--group", "grp=seeds", "--gate", "val-loss").stdout
    assert "not reached (>=" in text and "reached by 2 of 3" in text and "Kaplan-Meier" in text


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_bad_input_is_one_line_exit_2(seeds: Ledger, crashed: tuple[Ledger, str, str]) -> None:
    proc = seeds("gate", "seed0", "--gate", "val/accuracy>=0.5", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: run seed0 never logged") and "it logged: val/all/loss" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    for args, message in (
        (("gate",), "give either a REF or --group"),
        (("gate", "seed0", "--group", "grp=seeds"), "not both"),
        (("gate", "--group", "grp=nothing"), "no receipt is tagged grp=nothing"),
        (("gate", "seed0", "--gate", "nope"), "no quality gate named 'nope'"),
        (("goodput", "nosuchrun"), "no receipt has the id prefix or name"),
    ):
        proc = seeds(*args, check=False)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_compare_plugin_rows_and_headline(seeds: Ledger, crashed: tuple[Ledger, str, str]) -> None:
    """The rows `ledger compare` collects from ledger.analyses.goodput_compare agree with the commands."""
    import numpy as np

    from ledger.analyses import goodput_compare
    from ledger.analyses.metrics import plugins
    from ledger.analyses.series import load_run
    from ledger.store import index
    from ledger.store.receipts import Ledger as Store

    found = plugins()
    assert set(goodput_compare.METRICS) <= set(found.metrics) and goodput_compare.HEADLINES[0] in found.headlines
    with index.reader(Store(seeds.dir)) as con:
        ids = {n: con.execute("SELECT id FROM receipts WHERE name = ?", [n]).fetchone()[0] for n in ("seed0", "seed2")}
        runs = {n: load_run(con, i) for n, i in ids.items()}
    rows = {m.spec.name: m for p in goodput_compare.METRICS for m in p.build([runs["seed0"]], [runs["seed2"]])}
    assert rows["goodput"].observe(runs["seed0"]).value == pytest.approx(seeds.json("goodput", "seed0")["goodput"])
    gate = seeds.json("gate", "seed0", "--gate", "val-loss")["gates"][0]
    # compare's RunData has no eval times: the eval_end event's time stands in (microseconds later)
    assert rows["time to first gate"].observe(runs["seed0"]).value == pytest.approx(gate["cost"]["wall_s"], abs=0.05)
    censored = rows["time to val-loss"].observe(runs["seed2"])
    assert censored.value is None and "not reached (>=" in (censored.reason or "")
    nodes = goodput_compare.HEADLINES[0].values([[runs["seed0"]], [runs["seed2"]]])
    assert nodes.point[0] == pytest.approx(np.log(gate["cost"]["wall_s"]), abs=0.02) and 1 in nodes.missing
    # a later attempt alone is not the logical run: said, not guessed
    led, _, a2 = crashed
    with index.reader(Store(led.dir)) as con:
        later = load_run(con, a2)
    obs = goodput_compare._goodput_obs(later)
    assert obs.value is None and "attempt 2 of the logical run" in (obs.reason or "")
