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


LINE_FILES = {"hf-trainer": "hf_trainer.log", "nanogpt": "nanogpt.log", "torchtitan": "torchtitan.log",
              "deepspeed": "deepspeed.log", "open-instruct": "openinstruct.log", "nanotron": "nanotron.log",
              "json-lines": "jsonl.log", "key-value": "keyvalue.log"}


def _tfevents(folder: Path) -> Path:
    """A TensorBoard event file written with tensorboard's own writer: loss at steps 1 and 2, an eval at 2."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for step, tag, value in ((1, "train/loss", 3.5), (2, "train/loss", 3.25), (2, "eval/loss", 3.75)):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0e9 + step, summary=summary))
    writer.close()
    [path] = folder.glob("events.out.tfevents.*")
    return path


def test_every_format_record_reads_is_imported_by_ingest_log(tmp_path: Path) -> None:
    from ledger.ingest.api import LOG_FORMATS, ingest_log
    from ledger.ingest.formats import LINE_FORMATS
    from ledger.store.receipts import Ledger

    assert set(LINE_FORMATS) == set(LINE_FILES) and set(LINE_FILES) <= set(LOG_FORMATS)
    assert {"megatron", "trainer-state", "lightning-csv", "tensorboard"} <= set(LOG_FORMATS)
    ledger = Ledger(tmp_path / "receipts")
    for fmt, name in LINE_FILES.items():
        imported = ingest_log(ledger, LOGS / name, fmt)
        assert imported.receipt.source is not None and imported.receipt.source.kind == f"log:{fmt}"
        assert imported.receipt.summary.steps >= 2, fmt
    csv = tmp_path / "metrics.csv"
    csv.write_text("epoch,step,train_loss,val_loss\n0,9,2.5,\n0,19,2.25,\n0,19,,2.75\n")
    (tmp_path / "tb").mkdir()
    for path, fmt in ((csv, "lightning-csv"), (_tfevents(tmp_path / "tb"), "tensorboard")):
        imported = ingest_log(ledger, path)  # found by the file's name
        assert imported.notes[0] == f"2 step(s), 1 eval value(s) [{fmt}]"
        steps = pq.read_table(ledger.path(imported.receipt.id) / "steps.parquet").column("loss").to_pylist()
        assert steps == ([2.5, 2.25] if fmt == "lightning-csv" else [3.5, 3.25])
