"""`ledger ingest log`: every format `ledger record` reads can be imported after the fact."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import LedgerAt, receipt_dir

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


@pytest.mark.slow
def test_ingest_log_autodetects_and_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    lg = LedgerAt(tmp_path)
    out = lg("ingest", "log", str(LOGS / "nanogpt.log"), "--name", "nano")
    assert "9 step(s), 4 eval value(s) [nanogpt]" in out.stderr
    r = lg.json("show", "nano")
    assert r["status"] == "imported" and r["source"]["kind"] == "log:nanogpt" and r["summary"]["steps"] == 9
    steps = pq.read_table(receipt_dir(lg.dir, r["id"]) / "steps.parquet").to_pydict()
    assert steps["step"][:3] == [0, 10, 20] and steps["loss"][:3] == [4.2648, 3.2202, 2.7697]
    out = lg("ingest", "log", str(LOGS / "trainer_state.json"))
    assert "2 step(s), 4 eval value(s) [hf-trainer]" in out.stderr
    wrong = lg("ingest", "log", str(LOGS / "nanogpt.log"), "--format", "deepspeed", check=False)
    assert wrong.returncode == 2 and "no step or eval lines of a known format (deepspeed)" in wrong.stderr
    own = tmp_path / "own.log"
    own.write_text("it 1 | L 2.5\nit 2 | L 2.25\n")
    out = lg("ingest", "log", str(own), "--parse", r"it (?P<step>\d+) \| L (?P<loss>\S+)")
    assert "2 step(s), 0 eval value(s) [pattern]" in out.stderr


def test_open_instruct_log_is_refused_by_megatron_and_read_by_ingest_log(tmp_path: Path) -> None:
    """The issue's example: open-instruct's ``Step: N, LR: X, Loss: Y`` lines; values copied from the fixture."""
    from ledger.errors import BadInput
    from ledger.ingest.api import ingest_log, ingest_megatron
    from ledger.store.receipts import Ledger

    ledger = Ledger(tmp_path / "receipts")
    with pytest.raises(BadInput, match=r"expected a Megatron-LM log.*`ledger ingest log FILE`"):
        ingest_megatron(ledger, LOGS / "openinstruct.log")
    imported = ingest_log(ledger, LOGS / "openinstruct.log")
    assert imported.notes[0] == "3 step(s), 0 eval value(s) [open-instruct]"
    assert imported.receipt.source is not None and imported.receipt.source.kind == "log:open-instruct"
    steps = pq.read_table(ledger.path(imported.receipt.id) / "steps.parquet").to_pydict()
    assert (steps["step"], steps["loss"], steps["lr"]) == ([10, 20, 30], [1.2345, 1.1021, 1.0533],
                                                            [1.9e-05, 1.6e-05, 1.0e-05])
    assert steps["aux_loss"] == [None, None, 0.0123] and ledger.ids() == [imported.receipt.id]
