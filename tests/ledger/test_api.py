"""The typed Python API (ledger/api.py): the README's example, run as written on a real ledger, and the
facade's edges. Expected figures come from the example's own inputs (1,800 / 1,000 tokens/s; 40 steps; a val
loss of 1.1 against a gate of 1.2), never from the code under test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import child_env

import ledger
import ledger.sdk
from ledger.errors import BadInput, LedgerError

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
    assert ns["plan"].to_json()["cluster_optimal"]["geometry"]["experts"] in (8, 16)


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
