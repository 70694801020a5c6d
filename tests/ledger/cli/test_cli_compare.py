"""`ledger compare` and `ledger report`, end to end on real runner receipts recorded with `ledger record`.

The receipts are recorded once for the module, all at the same time (a file barrier lines up their
training loops, so they share the machine's conditions):

- a **planted effect**: two git checkouts of a small launcher of ``runners.moe``; the variant's commit adds
  ``PLANTED_S`` of sleep to every step (so only the *code* factor changes, and its effect is known by
  construction); ``precision=bf16`` is the second factor; base, A (code), B (precision), AB (both). Every
  step also sleeps ``FLOOR_S``, so machine noise in the tiny model's compute moves step times little;
- replicates, the run being the unit of evidence: the base and the combination each run with seeds 1 and 2
  too (``base-s1``, ``base-s2``, ``AB-s1``, ``AB-s2``), which compare takes into the sides; ``base-again``
  is the base run again with the same seed (bit-identical losses);
- a confounded run (C: learning rate and router z-loss changed at once), a run of another task (T: another
  data seed), and two runs with no steps.

(An A/A pair of compute-bound runs passes on a quiet machine, but on a shared one two runs recorded even
side by side can differ by 30% in throughput: a real difference in conditions, rightly called significant.
The planted sleep keeps these tests about the statistics rather than the neighbours.)
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import receipt_dir

BIN = Path(sys.executable).parent
FLOOR_S = 0.05
PLANTED_S = 0.05
NANO = [
    "model.layers=1", "model.hidden=16", "model.heads=2", "model.ffn_hidden=32", "model.seq_len=16",
    "moe.num_experts=4", "moe.top_k=2", "batch_size=4", "data.train_sequences=128", "data.val_sequences=4",
    "warmup_steps=2", "lr=1e-2", "steps=60", "eval_every=30",
]
"""A model whose step computes in ~2 ms on a CPU (the step time is mostly the planted sleeps)."""

LAUNCHER = textwrap.dedent('''
    """Test launcher: runners.moe with a per-step sleep that this file defines (FLOOR_S + PLANTED_S).

    Imports torch first, then waits at a file barrier until every launcher of the batch is ready; waits
    again after training until every one has finished."""
    import os
    import sys
    import time
    from pathlib import Path

    import torch
    import runners.moe.train  # noqa: F401
    from runners.moe.cli import main

    FLOOR_S = {floor}
    PLANTED_S = 0.0

    def barrier(kind):
        where = Path(os.environ["PLANT_BARRIER"])
        (where / f"{{kind}}-{{os.getpid()}}").touch()
        deadline = time.time() + 300
        while len(list(where.glob(f"{{kind}}-*"))) < int(os.environ["PLANT_N"]) and time.time() < deadline:
            time.sleep(0.01)

    if PLANTED_S:  # the code change: every optimizer step sleeps PLANTED_S more (no config field changes)
        step = torch.optim.AdamW.step

        slept = []

        def slower(self, *args, **kwargs):
            t0 = time.perf_counter()
            time.sleep(PLANTED_S)  # the OS sleeps a little longer than asked: the test reads what it slept
            slept.append(time.perf_counter() - t0)
            return step(self, *args, **kwargs)

        torch.optim.AdamW.step = slower

    barrier("ready")  # every run starts training at the same time...
    status = main([*sys.argv[1:], "--set", f"delay_s={{FLOOR_S}}"])
    barrier("done")  # ...and no run publishes its receipt while another still trains
    if PLANTED_S:
        slept.sort()
        (Path(os.environ["PLANT_BARRIER"]) / ("slept-" + os.environ["PLANT_NAME"])).write_text(
            str(slept[len(slept) // 2]))
    sys.exit(status)
''')


def child_env(**extra: str) -> dict[str, str]:
    """This interpreter's venv first on PATH, no inherited ledger variables, the tree under test first on
    PYTHONPATH (as conftest's: otherwise the subprocesses run the venv's editable install)."""
    from conftest import child_env as shared

    return shared(**extra)


def sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


@dataclass
class Planted:
    """The module's ledger and its receipts."""

    root: Path
    ledger: Path
    ids: dict[str, str]
    base_repo: Path

    def cli(self, *args: str, ledger: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "ledger"), *args], env=child_env(LEDGER_DIR=str(ledger or self.ledger)),
                              cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def json(self, *args: str, ledger: Path | None = None) -> dict[str, Any]:
        proc = self.cli(*args, "--json", ledger=ledger)
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    root = tmp_path_factory.mktemp("compare")
    ledger = root / "receipts"
    base = root / "base"
    base.mkdir()
    (base / "launcher.py").write_text(LAUNCHER.format(floor=FLOOR_S))
    git(base, "init", "-q")
    git(base, "add", ".")
    git(base, "commit", "-qm", "launchers")
    variant = root / "variant"
    git(root, "clone", "-q", str(base), str(variant))
    text = (variant / "launcher.py").read_text()
    (variant / "launcher.py").write_text(text.replace("PLANTED_S = 0.0", f"PLANTED_S = {PLANTED_S}"))
    git(variant, "commit", "-qam", "planted per-step delay")
    barrier = root / "barrier"
    barrier.mkdir()
    py = str(BIN / "python")
    runs: dict[str, tuple[Path, list[str], list[str]]] = {
        "base": (base, ["launcher.py"], [*NANO]),
        "A": (variant, ["launcher.py"], [*NANO]),
        "B": (base, ["launcher.py"], [*NANO, "precision=bf16"]),
        "AB": (variant, ["launcher.py"], [*NANO, "precision=bf16"]),
        "base-s1": (base, ["launcher.py"], [*NANO, "seed=1"]),
        "base-s2": (base, ["launcher.py"], [*NANO, "seed=2"]),
        "AB-s1": (variant, ["launcher.py"], [*NANO, "precision=bf16", "seed=1"]),
        "AB-s2": (variant, ["launcher.py"], [*NANO, "precision=bf16", "seed=2"]),
        "base-again": (base, ["launcher.py"], [*NANO]),
        "C": (base, ["launcher.py"], [*NANO, "lr=2e-2", "moe.z_loss_coeff=0.002"]),
        "T": (base, ["launcher.py"], [*NANO, "data.seed=7"]),
    }
    tags = {"base": ["cfg=base", "mix=1"], "base-s1": ["cfg=base"], "B": ["mix=1"]}
    env = child_env(LEDGER_DIR=str(ledger), PLANT_BARRIER=str(barrier), PLANT_N=str(len(runs)))
    procs = {}
    for name, (cwd, script, overrides) in runs.items():
        tag_args = [a for t in tags.get(name, []) for a in ("--tag", t)]
        cmd = [str(BIN / "ledger"), "record", "--name", name, *tag_args, "--telemetry-interval", "0", "--",
               py, *script, "--config", "tiny", *sets(overrides)]
        procs[name] = subprocess.Popen(cmd, cwd=cwd, env={**env, "PLANT_NAME": name}, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    for name, code in (("empty1", "pass"), ("empty2", "import sys")):
        procs[name] = subprocess.Popen([str(BIN / "ledger"), "record", "--name", name, "--", py, "-c", code],
                                       cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = {name: proc.communicate(timeout=400)[0] for name, proc in procs.items()}
    failed = {name: outputs[name][-3000:] for name, proc in procs.items() if proc.returncode != 0}
    assert not failed, failed
    rows = json.loads(subprocess.run([str(BIN / "ledger"), "ls", "--json"], env=child_env(LEDGER_DIR=str(ledger)),
                                     capture_output=True, text=True, check=True).stdout)
    ids = {r["name"]: r["id"] for r in rows}
    assert set(ids) == {*runs, "empty1", "empty2"}
    return Planted(root, ledger, ids, base)


def metric(result: dict[str, Any], name: str) -> dict[str, Any]:
    rows = [m for m in result["metrics"] if m["name"] == name]
    assert rows, f"no metric {name!r}"
    return rows[0]


def shares(result: dict[str, Any], headline: str) -> dict[str, dict[str, Any]]:
    return {a["factor"]: a for a in result["attribution"] if a["metric"] == headline}


def totals(result: dict[str, Any], headline: str) -> dict[str, Any]:
    return next(t for t in result["attribution_totals"] if t["metric"] == headline)


def steady_median_step_time(planted: Planted, name: str) -> float:
    from ledger.analyses.series import load_run
    from ledger.store import index
    from ledger.store.receipts import Ledger

    with index.reader(Ledger(planted.ledger)) as con:
        run = load_run(con, planted.ids[name])
    return float(np.median(run.steps["step_time_s"][run.steady]))


def within(share: dict[str, Any], truth: float) -> None:
    """The share's 95% interval is tight (under 0.4 in log throughput, where the effect is -0.3 to -0.65 as
    load slows the compute) and holds the truth up to its own width: a run of this test is one draw, and a
    correct 95% interval misses the truth by more than a full half-width beyond its end (over 2x the
    t-quantile) with probability under 0.5% at the df these sides give, while a biased or too-narrow one still
    fails (the calibration tests measure the coverage itself over many draws).

    The width is the seven runs' own noise, which this test cannot control (they share the machine's cores):
    usually about 0.1 (0.097 and 0.11 seen, the latter under load 30), and 0.35 in one CI run on 2026-12-02
    (a correct interval around one slow replicate), which the earlier bound of 0.25 failed. 0.4 still refuses
    an interval as wide as the effect itself."""
    lo, hi = share["ci"]
    assert hi - lo < 0.4, share
    half = (hi - lo) / 2
    assert lo - half <= truth <= hi + half, (truth, share)


# ------------------------------------------------------------------------------------------ the effects
def test_planted_effects_are_recovered_within_their_ci(planted: Planted) -> None:
    result = planted.json("compare", "base", "AB")
    assert result["comparable"] is True
    assert [c["factor"] for c in result["changed_factors"]] == ["code", "precision"]
    assert result["confounded"] == [] and result["missing_ablations"] == []
    # the sides hold their replicates: base, base-s1, base-s2, base-again and AB, AB-s1, AB-s2
    assert sorted(result["a"]["names"]) == ["base", "base-again", "base-s1", "base-s2"]
    assert sorted(result["b"]["names"]) == ["AB", "AB-s1", "AB-s2"]
    assert metric(result, "tokens/s per device")["n"] == [4, 3] and metric(result, "tokens/s per device")["df"] >= 5

    through = shares(result, "throughput")
    assert set(through) == {"code", "precision"}
    total = totals(result, "throughput")
    assert total["orders"] == 2 and total["shapley"] is True
    # shares sum to the total (complete lattice: nothing unexplained)
    assert math.isclose(sum(s["share"] for s in through.values()), total["total"], abs_tol=1e-9)
    assert abs(total["unexplained"]) < 1e-9

    # code: every step sleeps PLANTED_S more (what the OS made of it: the median sleep the variant runs
    # measured, a little over PLANTED_S). Known by construction, in each order: log(t / (t + slept)) from
    # the run without the delay; Shapley averages the two orders.
    slept = float(np.mean([float((planted.root / "barrier" / f"slept-{n}").read_text())
                           for n in ("A", "AB", "AB-s1", "AB-s2")]))
    assert PLANTED_S <= slept < 1.5 * PLANTED_S
    t_base, t_b = steady_median_step_time(planted, "base"), steady_median_step_time(planted, "B")
    planted_code = 0.5 * (math.log(t_base / (t_base + slept)) + math.log(t_b / (t_b + slept)))
    within(through["code"], planted_code)
    # (its size depends on the machine: ~log(55 / 105) quiet, nearer -0.3 when load slows the compute)
    assert through["code"]["share"] < 0
    assert through["code"]["verdict"] == "credited" and total["total_verdict"] == "significant"

    # precision: the rest of the total (its effect is not known by construction: the bf16 compute time is
    # what this machine makes of it); in the order base -> B it is exactly its single-factor ablation, and
    # the spread over the two orders shows the interaction (a fixed sleep dilutes a compute slowdown)
    planted_precision = total["total"] - planted_code
    within(through["precision"], planted_precision)
    single = planted.json("compare", "base", "B")
    single_precision = totals(single, "throughput")["total"]
    lo, hi = through["precision"]["spread"]
    assert lo - 1e-9 <= single_precision <= hi + 1e-9, (single_precision, through["precision"])

    # loss at matched tokens: the delay changes no arithmetic, so code explains none of it (its share is
    # the seeds' noise between the replicate sides and the single runs, and is not credited)
    loss = shares(result, "loss at matched tokens")
    assert loss["code"]["ci"][0] <= 0.0 <= loss["code"]["ci"][1]
    assert loss["code"]["verdict"] != "credited"

    assert metric(result, "tokens/s per device")["verdict"] == "worse"
    assert metric(result, "step time (median)")["verdict"] == "worse"


def test_two_seeds_of_one_configuration_are_replicates_and_still_tested(planted: Planted) -> None:
    """Two replicates are tested like any two sides (two that differ are a finding: a node, a driver, a noisy
    neighbour), against the ledger's noise floor; nothing is attributed (no factor changed but the seed)."""
    result = planted.json("compare", "base", "base-s1")
    assert result["same_config"] is True and result["identical"] is False
    assert [c["factor"] for c in result["changed_factors"]] == ["seed"]
    for name in ("tokens/s per device", "step time (median)", "loss @ matched tokens"):
        row = metric(result, name)
        assert row["test"] == "t-test (noise floor)" and row["p_value"] is not None and row["ci"] is not None, row
        assert row["rule"], row
    assert result["attribution"] == [] and result["replicates"] == {}
    assert any("replicates of one configuration. They are still tested" in n for n in result["notes"])
    assert not any("every difference below is run-to-run noise" in n for n in result["notes"])


def test_the_same_run_twice_is_identical(planted: Planted) -> None:
    result = planted.json("compare", "base", "base-again")
    assert result["identical"] is True and result["changed_factors"] == []
    assert metric(result, "loss @ matched tokens")["verdict"] == "identical"
    assert metric(result, "tokens/s per device")["p_value"] is not None  # tested against the noise floor
    assert any(n.startswith("identical:") for n in result["notes"])
    claim = planted.cli("claim", "base", "base-again")
    assert claim.returncode == 1 and "identical" in claim.stdout


def test_one_run_per_side_is_inconclusive_with_the_commands_that_settle_it(planted: Planted,
                                                                          tmp_path: Path) -> None:
    ledger = tmp_path / "receipts"
    ledger.mkdir()
    for name in ("A", "B"):  # code vs precision, one run each, and no replicate group to learn a floor from
        shutil.copytree(receipt_dir(planted.ledger, planted.ids[name]), ledger / planted.ids[name])
    result = planted.json("compare", "A", "B", ledger=ledger)
    row = metric(result, "tokens/s per device")
    assert row["verdict"] == "inconclusive" and row["n"] == [1, 1] and row["p_value"] is None
    assert row["ci_a"] is not None and row["ci_b"] is not None  # each run's own precision is still shown
    assert "ledger ab A B --rounds 3" in result["next_steps"]
    assert all(s["verdict"] == "inconclusive" for s in result["attribution"])
    claim = planted.cli("claim", "A", "B", ledger=ledger)
    assert claim.returncode == 1 and "ledger ab A B" in claim.stdout
    # in the full ledger the base and AB replicate groups give a noise floor on this hardware: a verdict
    full = planted.json("compare", "A", "B")
    row = metric(full, "tokens/s per device")
    assert row["test"] == "t-test (noise floor)" and "noise floor" in row["evidence"]


def test_confounded_pair_lists_the_two_missing_runs(planted: Planted) -> None:
    result = planted.json("compare", "base", "C")
    assert [c["factor"] for c in result["changed_factors"]] == ["router", "hyperparameters"]
    assert [c["factors"] for c in result["confounded"]] == [["router", "hyperparameters"]]
    assert result["confounded"][0]["message"] == "confounded: router, hyperparameters changed together"
    assert result["attribution"] == []  # no single factor can be credited
    through = totals(result, "throughput")
    assert math.isclose(through["unexplained"], through["total"], abs_tol=1e-12)
    missing = result["missing_ablations"]
    assert [m["adds"] for m in missing] == ["router", "hyperparameters"]
    router, arch = (m["command"] for m in missing)
    for command in (router, arch):
        assert command.startswith("ledger record --name base+") and "-- python -m runners.moe --config tiny" in command
        assert f"--baseline {planted.ids['base'][:12]}" in command
    assert "--set moe.z_loss_coeff=0.002" in router and "--set lr=1e-2" in router
    assert "--set lr=2e-2" in arch and "z_loss_coeff" not in arch

    text = planted.cli("compare", "base", "C")
    assert text.returncode == 0, text.stderr
    assert "confounded: router, hyperparameters changed together" in text.stdout
    assert "missing ablation runs" in text.stdout


def test_a_missing_run_recorded_from_its_command_splits_the_confounded_pair(planted: Planted,
                                                                          tmp_path: Path) -> None:
    ledger = tmp_path / "receipts"
    ledger.mkdir()
    for name in ("base", "C"):
        shutil.copytree(receipt_dir(planted.ledger, planted.ids[name]), ledger / planted.ids[name])
    arch = next(m for m in planted.json("compare", "base", "C", ledger=ledger)["missing_ablations"]
                if m["adds"] == "hyperparameters")
    argv = arch["command"].split()  # a plain command: no quoting needed
    proc = subprocess.run(argv, cwd=planted.base_repo, env=child_env(LEDGER_DIR=str(ledger)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = planted.json("compare", "base", "C", ledger=ledger)
    assert result["confounded"] == [] and result["missing_ablations"] == []
    assert set(shares(result, "throughput")) == {"router", "hyperparameters"}
    assert totals(result, "throughput")["orders"] == 1


# ------------------------------------------------------------------------------------------ bad input
def test_task_mismatch_is_refused_unless_allowed(planted: Planted) -> None:
    refused = planted.cli("compare", "base", "T")
    assert refused.returncode == 2
    assert refused.stderr.startswith("Error: the runs have different tasks (workload.task.dataset_fingerprint")
    assert "--allow-task-change" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    allowed = planted.json("compare", "base", "T", "--allow-task-change")
    assert allowed["comparable"] is False
    assert "task" in [c["factor"] for c in allowed["changed_factors"]]
    assert metric(allowed, "tokens/s per device")["verdict"] != "unavailable"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["base", "no-such-run"], "no receipt has the id prefix or name 'no-such-run'"),
        (["base", "base"], "A and B are the same receipt"),
        (["base"], "give exactly two sides"),
        (["base", "--group", "cfg=base"], "A and B share 1 receipt(s)"),
        (["base", "--group", "nothing=here"], "no receipt is tagged nothing=here"),
        (["base", "--group", "novalue"], "expected KEY=VALUE, e.g. --group sweep=bf16"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(planted: Planted, args: list[str], message: str) -> None:
    proc = planted.cli("compare", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("Error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_receipts_without_steps_show_unavailable_metrics_never_zero(planted: Planted) -> None:
    result = planted.json("compare", "empty1", "empty2")
    for name in ("tokens/s per device", "step time (median)", "loss @ matched tokens", "load CV"):
        row = metric(result, name)
        assert row["verdict"] == "unavailable" and row["a"] is None and row["b"] is None
        assert row["reason"], row
    assert "no step rows" in metric(result, "tokens/s per device")["reason"]
    assert all(t["total"] is None and t["reason"] for t in result["attribution_totals"])


def test_groups_compare_between_runs(planted: Planted) -> None:
    result = planted.json("compare", "--group", "cfg=base", "B")
    assert result["a"]["group"] is True and len(result["a"]["ids"]) == 2
    assert [c["factor"] for c in result["changed_factors"]] == ["precision"]  # the seed varies within A
    row = metric(result, "tokens/s per device")
    assert row["test"] == "t-test" and row["n"] == [2, 1]
    assert set(shares(result, "throughput")) == {"precision"}


def test_a_group_must_be_replicates(planted: Planted) -> None:
    proc = planted.cli("compare", "--group", "mix=1", "AB")
    assert proc.returncode == 2
    assert "--group mix=1 is not a replicate group" in proc.stderr and "in precision" in proc.stderr


# --------------------------------------------------------------------------------------------- output
def test_markdown_and_terminal_reports(planted: Planted) -> None:
    md = planted.cli("compare", "base", "AB", "--markdown")
    assert md.returncode == 0, md.stderr
    assert "### Metrics" in md.stdout and "| **tokens/s per device** |" in md.stdout
    assert "### Attribution" in md.stdout and "| code |" in md.stdout
    text = planted.cli("compare", "base", "AB")
    assert text.returncode == 0, text.stderr
    for part in ("what changed, by factor", "stack.code.commit", "workload.precision.compute: fp32 -> bf16",
                 "tokens/s per device", "attribution"):
        assert part in text.stdout


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_html_report_renders_in_headless_chromium(planted: Planted, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    proc = planted.cli("report", "base", "AB", "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert html.count("<svg") >= 5 and "<script" not in html
    external = [w for w in ("src=\"http", "href=\"http", "url(http", "@import") if w in html]
    assert not external, external
    for title in ("training loss vs tokens", "training loss vs training time", "step time after warm-up",
                  "layer 0", "Goodput timeline"):
        assert title in html
    timelines = html.split('id="goodput"', 1)[1].split("<h2", 1)[0]
    assert timelines.count("<svg") == 2 and "unavailable" not in timelines  # one timeline per side
    # the two timelines share one time axis: the same tick labels
    axes = [re.findall(r'text-anchor="middle">([^<]+)</text>', part) for part in timelines.split("<svg")[1:]]
    assert axes[0] and axes[0] == axes[1]
    for title in ("loss difference B - A at matched tokens", "time per phase", 'id="smoothing"', 'class="smooth"'):
        assert title in html
    assert "1e-09" not in html

    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install the Debian package `chromium`)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    url = page.as_uri()
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
    shot_proc = run([browser, *flags, f"--screenshot={shot}", "--window-size=1280,2000", url],
                    capture_output=True, text=True, timeout=120)
    dom = run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in (shot_proc.stderr + dom.stderr).splitlines()
               if "CONSOLE" in line or "Uncaught" in line or "Failed to load resource" in line]
    assert not console, console
    assert dom.stdout.count("<svg") >= 5 and "training loss vs tokens" in dom.stdout
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


PLAIN_LOOP = """
import sys, time
pause = float(sys.argv[1])
for i in range(1, 31):
    time.sleep(pause)
    print(f"step {i} | loss {3.0 / i ** 0.5:.4f} | lr 0.001", flush=True)
"""


def test_compare_of_two_wrapped_runs_gives_speed_and_loss(ledger_cli, tmp_path: Path) -> None:
    """Issue 33: two runs of a plain loop that prints `step N | loss X` (no SDK, no tokens), one pausing twice as
    long per step. Before, every speed and loss row was unavailable (no captured step had a time). Now steps/s and
    step time come from when the lines arrived, about 2x apart, and the loss is matched by wall time and by step;
    only the rows that need tokens are unavailable, and they say so."""
    script = tmp_path / "loop.py"
    script.write_text(PLAIN_LOOP)
    for name, pause in (("slow", "0.06"), ("fast", "0.03")):
        ledger_cli("record", "--name", name, "--telemetry-interval", "0", "--", sys.executable, str(script), pause,
                   check=True)
    rows = {m["name"]: m for m in json.loads(ledger_cli("compare", "slow", "fast", "--json", check=True).stdout)[
        "metrics"]}
    speed = rows["steps/s"]
    assert speed["verdict"] != "unavailable" and 1.5 <= speed["ratio"] <= 2.5, speed
    assert 0.4 <= rows["step time (median)"]["ratio"] <= 0.67, rows["step time (median)"]
    for name in ("loss @ matched wall time", "loss @ matched steps"):
        assert rows[name]["verdict"] != "unavailable", rows[name]
    assert rows["loss @ matched steps"]["ratio"] == pytest.approx(1.0)  # the same losses at the same steps
    assert rows["tokens/s per device"]["verdict"] == "unavailable"
