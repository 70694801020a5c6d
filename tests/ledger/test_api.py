"""The typed Python API (ledger/api.py): the README's example, run as written on a real ledger, and the
facade's edges. Expected figures come from the example's own inputs (1,800 / 1,000 tokens/s; 40 steps; a val
loss of 1.1 against a gate of 1.2), never from the code under test."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars
import pytest
import scipy.stats
from conftest import SHARED, Runner, child_env

import ledger
import ledger.api
import ledger.sdk
from ledger.errors import BadInput, DamagedReceipt, LedgerError
from ledger.store.layout import receipt_dir

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "README.md: the Python API section has no ```python example"
    return found.group(1)


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEDGER_DIR", raising=False)
    ns: dict[str, Any] = {"__name__": "readme"}
    exec(compile(readme_example(), "README.md (Python API)", "exec"), ns)  # noqa: S102 (our own README)

    printed = capsys.readouterr().out
    # one run a side and no replicates in the ledger: the run is the unit of evidence, so no verdict (DESIGN.md)
    assert "bf16 is 1.80x baseline's tokens/s (inconclusive)" in printed
    runs = ns["runs"]
    assert [r.name for r in runs] == ["bf16"] and runs[0].workload.precision.compute == "bf16"
    steps = ns["steps"]
    assert steps.num_rows == 40 and set(steps.column("receipt_id").to_pylist()) == {runs[0].id}
    # Arrow, as the user likes it: pandas (through arch, a core dependency) or polars (the dev extra)
    assert steps.to_pandas()["loss"].tolist() == steps.column("loss").to_pylist()
    assert polars.from_arrow(steps).get_column("tokens").to_list() == [4096 * s for s in range(1, 41)]
    assert ns["speed"]["a"] == 1000.0 and ns["speed"]["ratio"] == pytest.approx(1.8)
    json.dumps(ns["result"].to_json(), allow_nan=False)
    good = ns["good"]
    assert good.run_id == runs[0].id and 0 < good.goodput <= 1 and good.steps_useful == 40
    gate = ns["cost"].results[0]
    assert gate.reached and gate.step == 40 and ns["cost"].to_json()["gates"][0]["reached"] is True
    hello = ns["hello"]
    assert hello.exit_code == 0 and hello.receipt.status == "succeeded" and "hello" in printed
    lg = ns["lg"]
    assert lg.table("steps", refs=["hello"]).num_rows == 0  # a launch without the SDK logs no steps
    assert [r.name for r in lg.receipts()] == ["baseline", "bf16", "hello"]
    assert lg.get("bf16") == runs[0]
    frame = ns["frame"]  # runs() with a where on a hyperparameter: the two SDK runs, not the launch without one
    assert list(frame["name"]) == ["baseline", "bf16"] and list(frame["workload.optimizer.lr"]) == [3e-4, 3e-4]
    assert list(frame["summary.tokens_per_s"]) == [1000.0, 1800.0] and "bf16" in printed
    assert list(ns["curve"]["step"]) == list(range(1, 41)) and ns["curve"]["tokens"].iloc[-1] == 4096 * 40
    assert ns["plan"].to_json()["cluster_optimal"]["geometry"]["experts"] in (8, 16)


def _run(lg: ledger.api.Ledger, name: str, tokens_per_s: float, seed: int, replicates: str | None = None) -> None:
    """One run recorded in this process: 40 steps at a constant, planted throughput."""
    with lg.recording(name=name, replicates=replicates):
        run = ledger.sdk.current()
        run.set_workload({"model": {"num_experts": 8, "top_k": 2}, "seed": seed,
                          "precision": {"compute": "bf16" if tokens_per_s > 1500 else "fp32"}})
        for step in range(1, 41):
            run.log_step(step, loss=4.0 * math.exp(-step / 30), tokens=4096 * step,
                         step_time_s=4096 / tokens_per_s, tokens_per_s=tokens_per_s)


@pytest.mark.slow
def test_claim_is_a_library_call_and_the_cli_prints_it(ledger_cli: Runner, ledger_dir: Path) -> None:
    """``Ledger.claim`` (ledger/replay/claims.claim) states no claim on one run a side, then the planted 1.8x
    with its t interval once each side has a replicate; ``ledger claim --json`` prints the same result."""
    lg = ledger.open(ledger_dir)
    _run(lg, "base", 1000.0, 0)
    _run(lg, "fast", 1800.0, 0)
    alone = lg.claim("base", "fast")
    assert not alone.ok and not alone.original.supported and alone.scaled is None
    assert "ledger rerun base --times 2 && ledger rerun fast --times 2" in alone.to_json()["missing"]
    _run(lg, "base-2", 1010.0, 1, replicates="base")  # a replicate each, 1% apart: 2 vs 2 runs
    _run(lg, "fast-2", 1818.0, 1, replicates="fast")
    stated = lg.claim("base", "fast")
    # by hand: the geometric means' ratio is exactly 1.8; on the log scale each side's two runs are ln(1.01)
    # apart, so the pooled standard error is ln(1.01)/sqrt(2) with 2 degrees of freedom
    half = scipy.stats.t.ppf(0.975, 2) * math.log(1.01) / math.sqrt(2)
    assert stated.ok and stated.original.faster is True
    assert stated.original.speedup == pytest.approx(1.8, rel=1e-9)
    assert stated.original.speedup_ci == pytest.approx((1.8 * math.exp(-half), 1.8 * math.exp(half)), rel=1e-6)
    assert stated.original.text.startswith("fast runs at 1.80x the speed of base (80% faster)")
    assert "2 vs 2 runs" in stated.original.text
    printed = ledger_cli("claim", "base", "fast", "--json")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == json.loads(json.dumps(stated.to_json()))
    with pytest.raises(BadInput, match="unknown scale dimension"):
        lg.claim("base", "fast", at="depth=2")


@pytest.mark.slow
def test_compare_checks_the_runs_against_their_files(tmp_path: Path) -> None:
    """The facade's compare (which `ledger compare` calls) refuses a run whose table changed on disk."""
    lg = ledger.open(tmp_path / "receipts")
    _run(lg, "base", 1000.0, 0)
    _run(lg, "fast", 1800.0, 0)
    fast = lg.get("fast")
    steps = receipt_dir(lg.root, fast.id) / "steps.parquet"
    steps.chmod(0o644)
    steps.write_bytes(steps.read_bytes()[:-8] + b"damaged!")
    with pytest.raises(DamagedReceipt, match=f"{fast.id[:12]}.*steps.parquet"):
        lg.compare("base", "fast", attribution=False, plugins=False)


def test_ingest_takes_each_kinds_own_options(tmp_path: Path) -> None:
    golden = SHARED / "fixtures" / "megatron_golden"
    values = golden / "8experts2parallel_dist_optimizer__golden_values_dev_dgx_h100.json"
    raw = json.loads(values.read_text())["lm loss"]["values"]  # the expected rows, read here from the file
    lg = ledger.open(tmp_path / "receipts")
    with pytest.raises(BadInput, match=r"ingest\('golden', ...\) takes no into, parse; it takes config"):
        lg.ingest("golden", values, into="x", parse="(?P<step>\\d+)")
    done = lg.ingest("golden", values, config=golden / "8experts2parallel_dist_optimizer__model_config.yaml",
                     name="h100", tags={"ci": "golden"})
    assert done.receipt.name == "h100" and done.receipt.status == "imported" and done.receipt.tags == {"ci": "golden"}
    steps = lg.table("steps", refs=[done.receipt])
    assert steps.column("step").to_pylist() == sorted(int(k) for k in raw)
    assert steps.column("loss").to_pylist() == [raw[k] for k in sorted(raw, key=int)]
    log = tmp_path / "train.out"
    log.write_text("".join(f"it {i} loss={4.0 - i / 10:.1f}\n" for i in range(1, 6)))
    parsed = lg.ingest("log", log, parse=r"it (?P<step>\d+) loss=(?P<loss>\S+)")
    assert lg.table("steps", refs=[parsed.receipt]).column("loss").to_pylist() == [3.9, 3.8, 3.7, 3.6, 3.5]


def test_plan_options_are_the_plan_request_fields() -> None:
    """``Ledger.plan``'s typed options and `ledger plan`'s request name the same fields."""
    from ledger.planning.api import PlanRequest

    fields = {f.name for f in dataclasses.fields(PlanRequest)} - {"hardware", "nodes", "days"}
    assert set(ledger.PlanOptions.__annotations__) == fields


def test_recording_a_failing_block_publishes_a_failed_receipt(tmp_path: Path) -> None:
    lg = ledger.open(tmp_path / "receipts")
    with pytest.raises(ZeroDivisionError), lg.recording(name="crash") as rec:
        ledger.sdk.current().log_step(1, loss=2.5, tokens=128)
        _ = 1 / 0
    assert rec.receipt is not None and rec.receipt.status == "failed" and rec.receipt.exit_code == 1
    assert rec.to_json()["status"] == "failed"
    assert lg.table("steps", refs=[rec.receipt]).column("loss").to_pylist() == [2.5]
    assert isinstance(ledger.sdk.current(), ledger.sdk.NullRun)  # the block's run is gone with it


def test_bad_input_names_what_to_give(tmp_path: Path) -> None:
    lg = ledger.open(tmp_path / "receipts")
    with pytest.raises(BadInput, match="no table 'stepz'; the tables are steps, evals"):
        lg.table("stepz")
    with pytest.raises(BadInput, match="unknown ingest kind 'wandb'"):
        lg.ingest("wandb", tmp_path / "x.json")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="--group 'sweep'"):
        ledger.group("sweep")
    with pytest.raises(BadInput, match="either a ref or group"):
        lg.gate()
    with pytest.raises(LedgerError, match="no receipt has the id prefix or name 'nothing'"):
        lg.get("nothing")


def test_the_facade_is_exported_and_import_ledger_stays_light() -> None:
    import ledger.api

    assert set(ledger.api.__all__) <= set(ledger.__all__)
    assert all(hasattr(ledger, name) for name in ledger.__all__)
    code = ("import sys, ledger, ledger.sdk; print(sorted(m for m in ('duckdb', 'torch', 'ledger.store.index', "
            "'ledger.analyses', 'ledger.planning', 'ledger.report', 'ledger.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env=child_env())
    assert out.stdout.strip() == "[]"
