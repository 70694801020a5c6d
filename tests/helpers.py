"""Helpers shared by tests (importable: tests/ is on pythonpath)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

CAUSAL = ["code", "software", "kernels", "drivers", "container", "hardware", "parallelism", "precision", "router",
          "architecture", "hyperparameters", "arguments", "task", "data", "seed", "scale"]
"""The causal factors in the order DESIGN.md lists them, written out here (not read from the code under test)."""


def ids_in(ledger_dir: Path) -> list[str]:
    """Ids of the receipt directories in a ledger, in either layout (``<id[:2]>/<id>`` or the old ``<id>``),
    found by listing here, independently of the code under test."""
    if not ledger_dir.exists():
        return []
    flat = {p.name for p in ledger_dir.iterdir() if len(p.name) == 64}
    sharded = {p.name for s in ledger_dir.iterdir() if len(s.name) == 2 and s.is_dir() for p in s.iterdir()
               if len(p.name) == 64}
    return sorted(flat | sharded)


def receipt_dir(ledger_dir: Path, receipt_id: str) -> Path:
    """A receipt's directory in a ledger: its shard, else the old flat place."""
    sharded = ledger_dir / receipt_id[:2] / receipt_id
    return sharded if sharded.is_dir() else ledger_dir / receipt_id


def load_receipt(ledger_dir: Path, receipt_id: str) -> dict[str, object]:
    return json.loads((receipt_dir(ledger_dir, receipt_id) / "receipt.json").read_text())


class LedgerAt:
    """The real `ledger` CLI bound to the ledger under ``root/receipts``, run from ``root``."""

    def __init__(self, root: Path, timeout: float = 180) -> None:
        self.root = root
        self.dir = root / "receipts"
        self.timeout = timeout

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        from conftest import BIN, child_env

        proc = subprocess.run([str(BIN / "ledger"), "--ledger", str(self.dir), *args], env=child_env(),
                              cwd=self.root, capture_output=True, text=True, timeout=self.timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"ledger {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)


def failed_receipt(root: Path, tmp: Path, text: str = "") -> str:
    """The id of a failed receipt named ``oom-run`` whose ``failure`` holds a traceback's last lines (ending
    ``RuntimeError: CUDA out of memory <text>``), published through the store's amend hook, as a failed wrapped run
    gets it; its log and staging are written under ``tmp``."""
    from ledger.ingest.common import Evidence, sha256_of, stage_evidence, table
    from ledger.store.publish import publish
    from ledger.store.receipts import Ledger
    from ledger.store.staging import Outcome
    from schemas import Failure, Receipt

    log = tmp / "oom.log"
    log.write_text("step 1 loss 4.0\nstep 2 loss 3.5\nTraceback (most recent call last):\n"
                   '  File "train.py", line 9, in <module>\n    loss.backward()\n'
                   f"RuntimeError: CUDA out of memory {text}\n")
    store = Ledger(root)
    ev = Evidence(kind="log", path=log, sha256=sha256_of(log), log=log, command=("python", "train.py"),
                  tables={"steps": table("steps", {"rank": [0, 0], "step": [1, 2], "loss": [4.0, 3.5]})})
    staged = stage_evidence(store, ev, "oom-run")
    failure = Failure(exception=f"RuntimeError: CUDA out of memory {text}", first_line=3, log="output.log",
                      lines=("Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
                             "    loss.backward()", f"RuntimeError: CUDA out of memory {text}"))

    def amend(r: Receipt, tables: dict[str, Any]) -> Receipt:
        assert staged.amend is not None
        return staged.amend(r, tables).model_copy(update={"status": "failed", "exit_code": 1, "failure": failure})

    return publish(store, staged.run_dir, Outcome(status="failed", exit_code=1), amend=amend).id


def golden_run(ledger: Any, tmp: Path, name: str, seed: int, algo: str = "Ring", seconds: float = 1.0,
               gpu: str = "a100", experts: int = 8, loss: float = 0.0, tags: dict[str, str] | None = None) -> str:
    """Import a Megatron golden-values run of 30 steps (``ingest_golden``) and return its receipt id: NCCL algorithm,
    seed, GPU and experts in its model_config.yaml; loss ``4 - step/100 + loss``; iteration time ``seconds`` with a
    fixed ripple of up to 4%."""
    from ledger.ingest.api import ingest_golden

    folder = tmp / name
    folder.mkdir()
    config = folder / "model_config.yaml"
    config.write_text(f"ENV_VARS:\n  NCCL_ALGO: {algo}\nMODEL_ARGS:\n  --seed: {seed}\n  --num-experts: {experts}\n"
                      "  --moe-router-topk: 2\n  --seq-length: 128\n  --global-batch-size: 4\n")
    n = 30
    values = folder / f"golden_values_dev_dgx_{gpu}.json"
    values.write_text(json.dumps({
        "lm loss": {"start_step": 1, "end_step": n, "step_interval": 1,
                    "values": {str(s): 4.0 - s / 100 + loss for s in range(1, n + 1)}},
        "iteration-time": {"start_step": 1, "end_step": n, "step_interval": 1,
                           "values": {str(s): seconds * (1 + 0.01 * (s * 7 % 5)) for s in range(1, n + 1)}}}))
    imported = ingest_golden(ledger, values, config, name=name, tags=tags)
    assert imported.receipt is not None
    return imported.receipt.id
