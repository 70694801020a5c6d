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
