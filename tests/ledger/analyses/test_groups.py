"""``--group TAG=VALUE``: one resolver (:func:`ledger.analyses.groups.tagged`) behind compare's sides and the
logical runs that `gate` and `plan --goodput-from` read (:func:`ledger.analyses.groups.group_runs`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.analyses.groups import Catalog, InvalidGroup, group_runs, resolve_side, tagged
from ledger.ingest.api import ingest_golden
from ledger.store import index
from ledger.store.receipts import Ledger


def _golden(path: Path, loss: float) -> Path:
    values = {str(s): loss - 0.01 * s for s in range(1, 6)}
    path.write_text(json.dumps({"lm loss": {"start_step": 1, "end_step": 5, "step_interval": 1, "values": values}}))
    return path


def test_a_group_is_every_receipt_tagged_so_oldest_first(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ids = [ingest_golden(ledger, _golden(tmp_path / f"g{i}.json", 3.0 + i), name=f"g{i}", tags={"sweep": sweep})
           .receipt.id for i, sweep in enumerate(("a", "b", "a"))]
    with index.reader(ledger) as con:
        assert set(tagged(con, "sweep=a")) == {ids[0], ids[2]}
        assert tagged(con, "sweep=b") == (ids[1],)
        assert [r.ids for r in group_runs(con, "sweep=a")] == [[i] for i in tagged(con, "sweep=a")]
        side = resolve_side(con, Catalog.load(con), "A", group="sweep=b")
        assert side.ids == (ids[1],) and side.is_group and side.label == "--group sweep=b (1 run)"
        with pytest.raises(InvalidGroup, match="no receipt is tagged sweep=c; `ledger ls --where tag.sweep=c`"):
            group_runs(con, "sweep=c")
        with pytest.raises(InvalidGroup, match=r"--group 'sweep': expected KEY=VALUE, e\.g\. --group sweep=bf16"):
            tagged(con, "sweep")
