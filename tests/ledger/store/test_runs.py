"""`Ledger.runs()` and `Ledger.steps()`: the runs as a pandas DataFrame, one row per receipt with summary, tags,
params and workload columns (as mlflow.search_runs), for an SDK run and a wrapped run that only prints lines;
`where` on a hyperparameter; every column is a --where key; pandas missing is said."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import BIN, child_env

import ledger
import ledger.sdk
from ledger.store.filters import parse

WRAPPED = """
import sys
for step in range(1, 13):
    print(f"step {step} loss {8.0 / step:.4f}", flush=True)
"""


@pytest.fixture(scope="module")
def lg(tmp_path_factory: pytest.TempPathFactory) -> ledger.api.Ledger:
    root = tmp_path_factory.mktemp("runs")
    lg = ledger.open(root / "receipts")
    for name, precision, lr in (("sdk-a", "fp32", 1e-3), ("sdk-b", "bf16", 3e-4)):
        with lg.recording(name=name, tags={"sweep": "precision"}):
            run = ledger.sdk.current()
            run.set_workload({"model": {"num_experts": 8, "top_k": 2}, "precision": {"compute": precision},
                              "optimizer": {"lr": lr}, "seed": 1})
            for step in range(1, 11):
                run.log_step(step, loss=4.0 / step, tokens=256 * step, step_time_s=0.5, tokens_per_s=512.0,
                             **{"moe/load_cv": step / 10})
            run.log_eval(10, 0.75, metric="loss", split="val")
    (root / "train.py").write_text(textwrap.dedent(WRAPPED))
    (root / "train.yaml").write_text("optimizer:\n  lr: 0.003\n  name: adamw\nbatch: 64\n")
    for name, lr in (("wrapped-hi", "3e-3"), ("wrapped-lo", "1e-4")):
        subprocess.run([str(BIN / "ledger"), "--ledger", str(lg.root), "record", "--name", name, "--tag", "sweep=lr",
                        "--", "python", "train.py", "--lr", lr, "--config", "train.yaml"],
                       cwd=root, env=child_env(), check=True, capture_output=True, timeout=120)
    return lg


def test_one_row_per_run_with_summary_tags_params_and_workload(lg: ledger.api.Ledger) -> None:
    df = lg.runs()
    assert list(df["name"]) == ["sdk-a", "sdk-b", "wrapped-hi", "wrapped-lo"]  # oldest first
    assert list(df.columns[:10]) == ["id", "name", "status", "started_at", "ended_at", "duration_s", "exit_code",
                                     "attempt", "archived", "notes"]
    assert str(df["started_at"].dtype).startswith("datetime64") and str(df["started_at"].dt.tz) == "UTC"
    by = df.set_index("name")
    assert by.loc["sdk-a", "summary.final_loss"] == pytest.approx(0.4)  # 4/10, as logged
    assert by.loc["wrapped-hi", "summary.final_loss"] == pytest.approx(round(8.0 / 12, 4))  # the last line printed
    assert by.loc["sdk-b", "summary.tokens_per_s"] == pytest.approx(512.0)
    assert by.loc["sdk-a", "summary.final_eval.val/all/loss"] == pytest.approx(0.75)
    assert by.loc["sdk-b", "workload.precision.compute"] == "bf16"
    assert by.loc["sdk-b", "workload.optimizer.lr"] == pytest.approx(3e-4)
    assert by.loc["sdk-a", "workload.model.num_experts"] == 8
    assert (by.loc["wrapped-hi", "tags.sweep"], by.loc["sdk-a", "tags.sweep"]) == ("lr", "precision")
    # a wrapped run's hyperparameters: its command line and the config file it named, as text
    assert (by.loc["wrapped-hi", "params.lr"], by.loc["wrapped-lo", "params.lr"]) == ("3e-3", "1e-4")
    assert by.loc["wrapped-lo", "params.train.yaml:optimizer.lr"] == "0.003"
    assert by.loc["wrapped-lo", "params.train.yaml:batch"] == "64"
    assert isinstance(by.loc["sdk-a", "params.lr"], float) and math.isnan(by.loc["sdk-a", "params.lr"])
    assert set(by["status"]) == {"succeeded"} and not by["archived"].any() and (by["notes"] == 0).all()


def test_where_on_a_hyperparameter_and_every_column_is_a_where_key(lg: ledger.api.Ledger) -> None:
    assert list(lg.runs("param.lr<1e-3")["name"]) == ["wrapped-lo"]  # 1e-4; 3e-3 is not below
    assert list(lg.runs("params.lr in (0.003, 1)")["name"]) == ["wrapped-hi"]  # numbers, however written
    assert list(lg.runs("workload.optimizer.lr>=1e-3 or param.train.yaml:optimizer.name=adamw")["name"]) == [
        "sdk-a", "wrapped-hi", "wrapped-lo"]
    assert list(lg.runs("loss<0.5 and precision!=bf16")["name"]) == ["sdk-a"]
    df = lg.runs()
    for column in df.columns:  # what you see as a column, you can filter on
        cond = parse(f"{column}=null or {column}!=null")
        assert len(lg.runs(cond.text)) == len(df), column


def test_steps_frame_of_an_sdk_run_and_a_wrapped_run(lg: ledger.api.Ledger) -> None:
    steps = lg.steps("sdk-a")
    assert list(steps["step"]) == list(range(1, 11))
    assert list(steps["loss"]) == pytest.approx([4.0 / s for s in range(1, 11)])
    assert list(steps["moe/load_cv"]) == pytest.approx([s / 10 for s in range(1, 11)])  # a custom metric's column
    assert {"epoch", "printed_step", "tokens", "step_time_s"} <= set(steps.columns)
    assert "extra" not in steps.columns and "receipt_id" not in steps.columns
    wrapped = lg.steps("wrapped-hi")
    assert list(wrapped["step"]) == list(range(1, 13))
    assert list(wrapped["loss"]) == pytest.approx([round(8.0 / s, 4) for s in range(1, 13)])


def test_without_pandas_the_api_says_which_extra(lg: ledger.api.Ledger, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        class NoPandas:
            def find_spec(self, name, path=None, target=None):
                if name == "pandas" or name.startswith("pandas."):
                    raise ImportError("no pandas here")
        sys.meta_path.insert(0, NoPandas())
        import ledger
        from ledger.errors import MissingExtra
        try:
            ledger.open({str(lg.root)!r}).runs()
        except MissingExtra as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "pandas is not installed; install it with: pip install 'stackreceipt[pandas]'"
