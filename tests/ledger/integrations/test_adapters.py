"""A Hugging Face Trainer run and a Lightning run (tiny, randomly initialised, CPU, no downloads), each
wrapped with `ledger record`: first with no change to the script, then with the one-line adapter. Expected
values come from the frameworks' own files (trainer_state.json, CSVLogger's metrics.csv)."""

from __future__ import annotations

import csv
import json
import re
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import LedgerAt

HF_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(16)]
    args = TrainingArguments(output_dir="out", max_steps=6, logging_steps=2, eval_strategy="steps", eval_steps=3,
                             save_strategy="no", report_to=[], use_cpu=True, per_device_train_batch_size=4,
                             learning_rate=1e-3)
    callbacks = []
    if "--ledger" in sys.argv:
        from ledger.integrations.hf import LedgerCallback
        callbacks.append(LedgerCallback())
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4], callbacks=callbacks)
    trainer.train()
    trainer.save_state()
""")

PL_SCRIPT = textwrap.dedent("""
    import sys
    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger
    torch.manual_seed(0)

    class Tiny(L.LightningModule):
        def __init__(self, lr=0.05):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)
        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss
        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    x = torch.randn(32, 4); y = x.sum(1, keepdim=True)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    loggers = [CSVLogger("logs")]
    if "--ledger" in sys.argv:
        from ledger.integrations.lightning import LedgerLogger
        loggers.append(LedgerLogger())
    trainer = L.Trainer(max_steps=6, log_every_n_steps=1, val_check_interval=3, limit_val_batches=2,
                        logger=loggers, enable_progress_bar=False, enable_checkpointing=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Tiny(), loader, loader)
""")


def _record(lg: LedgerAt, name: str, *args: str) -> tuple[str, dict, dict, dict]:
    """`ledger record` of the script; its stderr, and the receipt and tables read from the published files
    (no `ledger show` process: the receipt's id is in record's last line)."""
    out = lg("record", "--name", name, "--telemetry-interval", "0", "--", "python", "train.py", *args)
    found = re.search(r"ledger: recorded ([0-9a-f]{64}) ", out.stderr)
    assert found is not None, out.stderr[-2000:]
    d = lg.dir / found.group(1)
    r = json.loads((d / "receipt.json").read_text())
    return out.stderr, r, pq.read_table(d / "steps.parquet").to_pydict(), pq.read_table(d / "evals.parquet").to_pydict()


@pytest.mark.slow
def test_hf_trainer_with_no_change_and_with_the_callback(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(HF_SCRIPT)
    lg = LedgerAt(tmp_path, timeout=600)
    err, _, steps, evals = _record(lg, "plain")
    assert ("captured 3 steps (loss, lr, grad_norm, epoch) from out/trainer_state.json [hf-trainer]; evals 2"
            in err)
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    train = [h for h in history if "loss" in h]
    assert steps["step"] == [h["step"] for h in train] == [2, 4, 6]
    assert steps["loss"] == [h["loss"] for h in train] and steps["lr"] == [h["learning_rate"] for h in train]
    assert evals["value"] == [h["eval_loss"] for h in history if "eval_loss" in h] and evals["step"] == [3, 6]

    err, r, steps, evals = _record(lg, "callback", "--ledger")
    assert "from the SDK" in err
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    assert steps["step"] == [1, 2, 3, 4, 5, 6] and all(t > 0 for t in steps["step_time_s"])
    logged = {s: loss for s, loss in zip(steps["step"], steps["loss"], strict=True) if loss is not None}
    assert logged == {h["step"]: h["loss"] for h in history if "loss" in h}
    assert dict(zip(evals["step"], evals["value"], strict=True)) == {
        h["step"]: h["eval_loss"] for h in history if "eval_loss" in h}
    assert r["workload"]["optimizer"]["lr"] == 1e-3 and r["workload"]["batch"]["micro_batch"] == 4


@pytest.mark.slow
def test_lightning_with_no_change_and_with_the_logger(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(PL_SCRIPT)
    lg = LedgerAt(tmp_path, timeout=600)
    err, _, steps, evals = _record(lg, "plain")
    assert "captured 6 steps (loss, epoch) from logs/lightning_logs/version_0/metrics.csv [lightning-csv]; evals 2" \
        in err
    with (tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert steps["step"] == [int(r["step"]) for r in rows if r["train_loss"]]
    assert steps["loss"] == [float(r["train_loss"]) for r in rows if r["train_loss"]]
    assert evals["value"] == [float(r["val_loss"]) for r in rows if r["val_loss"]]

    err, r, steps, evals = _record(lg, "logger", "--ledger")
    assert "from the SDK" in err
    with (tmp_path / "logs" / "lightning_logs" / "version_1" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert steps["step"] == [int(r["step"]) for r in rows if r["train_loss"]]
    assert steps["loss"] == [float(r["train_loss"]) for r in rows if r["train_loss"]]
    assert list(zip(evals["step"], evals["split"], evals["value"], strict=True)) == [
        (int(r["step"]), "val", float(r["val_loss"])) for r in rows if r["val_loss"]]
    assert r["workload"]["optimizer"]["lr"] == 0.05
