"""End to end: launches wrapped with `ledger record` and no change to their code get steps, evals and their
configuration; `compare` of two learning rates names the change."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import LedgerAt, ids_in, receipt_dir

from ledger.ingest.launch import NOTHING

PRINTING = textwrap.dedent("""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float)
    p.add_argument("config", nargs="?")
    a = p.parse_args()
    loss = 3.0
    print("saving checkpoint at step 0")
    for step in range(1, 6):
        loss *= 1 - 10 * a.lr
        print(f"step {step} loss {loss:.6f} lr {a.lr}")
    print("Epoch 1/1 done")
""")


def _receipt(lg: LedgerAt, ref: str) -> dict:
    return lg.json("show", ref)


@pytest.mark.slow
def test_two_lrs_of_a_plain_script_differ_in_arguments(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(PRINTING)
    (tmp_path / "train.yaml").write_text("optimizer:\n  betas: [0.9, 0.95]\nwandb:\n  api_key: s3cr3tv4lue99\n")
    lg = LedgerAt(tmp_path)
    first = lg("record", "--name", "lr1", "--", "python", "train.py", "--lr", "1e-3", "train.yaml")
    # config: lr, arg1 and three of the file (two keys and its digest)
    assert ("captured 5 steps (loss, lr) from output [key-value], timed by arrival; config 5 keys from argv + "
            "train.yaml") in first.stderr
    lg("record", "--name", "lr3", "--", "python", "train.py", "--lr=3e-3", "train.yaml")
    a = _receipt(lg, "lr1")
    assert a["summary"]["steps"] == 5 and a["summary"]["final_loss"] == round(3.0 * 0.99 ** 5, 6)
    args = a["workload"]["arguments"]
    assert args["lr"] == "1e-3" and args["arg1"] == "train.yaml"
    assert args["train.yaml:optimizer.betas"] == "[0.9, 0.95]"
    assert args["train.yaml:wandb.api_key"] == "<redacted>"
    assert "s3cr3tv4lue99" not in (receipt_dir(tmp_path / "receipts", a["id"]) / "receipt.json").read_text()
    import hashlib
    assert args["train.yaml:@sha256"] == hashlib.sha256((tmp_path / "train.yaml").read_bytes()).hexdigest()
    assert a["capture"]["tables"][0]["source"] == "output" and a["capture"]["config_sources"] == ["argv", "train.yaml"]
    report = lg.json("compare", "lr1", "lr3")
    assert report["same_config"] is False
    changed = {c["factor"]: c["changes"] for c in report["changed_factors"]}
    assert list(changed) == ["arguments"]
    assert not any("no causal factor" in n for n in report["notes"])
    text = lg("compare", "lr1", "lr3").stdout
    assert "lr: 1e-3 -> 3e-3" in text


@pytest.mark.slow
def test_nothing_captured_is_said_and_parse_reads_own_lines(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text("print('hello')\nprint('it=1 L=0.5')\n")
    lg = LedgerAt(tmp_path)
    out = lg("record", "--", "python", "quiet.py")
    assert NOTHING in out.stderr
    out = lg("record", "--parse", r"it=(?P<step>\d+) L=(?P<loss>\S+)", "--", "python", "quiet.py")
    assert "captured 1 steps (loss) from output [pattern]" in out.stderr
    bad = lg("record", "--parse", "loss (?P<loss>\\S+)", "--", "python", "quiet.py", check=False)
    assert bad.returncode == 2 and "named group for the step" in bad.stderr
    assert len(ids_in(tmp_path / "receipts")) == 2  # the bad one never ran


@pytest.mark.slow
def test_tensorboard_script(tmp_path: Path) -> None:
    (tmp_path / "tb.py").write_text(textwrap.dedent("""
        from torch.utils.tensorboard import SummaryWriter
        w = SummaryWriter("runs/exp")
        for step in range(1, 5):
            w.add_scalar("train/loss", 4.0 / step, step)
            w.add_scalar("train/learning_rate", 0.01, step)
            if step % 2 == 0:
                w.add_scalar("eval/loss", 5.0 / step, step)
        w.close()
    """))
    lg = LedgerAt(tmp_path)
    out = lg("record", "--name", "tb", "--", "python", "tb.py")
    assert "captured 4 steps (loss, lr) from runs/exp [tensorboard]; evals 2" in out.stderr
    r = _receipt(lg, "tb")
    steps = pq.read_table(receipt_dir(tmp_path / "receipts", r["id"]) / "steps.parquet").to_pydict()
    assert steps["step"] == [1, 2, 3, 4] and steps["loss"] == pytest.approx([4.0, 2.0, 4.0 / 3, 1.0], rel=1e-7)
    assert steps["lr"] == pytest.approx([0.01] * 4, rel=1e-7)  # TensorBoard keeps float32
    evals = pq.read_table(receipt_dir(tmp_path / "receipts", r["id"]) / "evals.parquet").to_pydict()
    assert list(zip(evals["step"], evals["split"], evals["metric"], evals["value"], strict=True)) == [
        (2, "eval", "loss", 2.5), (4, "eval", "loss", 1.25)]  # exact in float32
