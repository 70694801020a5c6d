"""Tamper evidence, in this process (mutation testing cannot run the `ledger` CLI that test_integrity.py starts):
a receipt published here, then each file a user or another process may change changed in each way it can change
(edited, truncated, grown, replaced by a directory, removed, added beside it; receipt.json edited, re-sealed with
a wrong listing, written indented by an older version, of an older schema version), and what :func:`verify_receipt`,
:func:`verified`, :func:`sealed`, :func:`check_intact` and :func:`statement` say about it compared with digests,
sizes and row counts computed here (hashlib, os.stat, the rows written)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import DamagedReceipt, InvalidReceipt, SchemaTooNew
from ledger.store import integrity
from ledger.store.integrity import (
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    Finding,
    check_intact,
    raw_digest,
    recorded_sha256,
    seal_json,
    sealed,
    sha256_file,
    statement,
    verified,
    verify_receipt,
)
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome
from schemas import SCHEMA_VERSION, canonical_json

STEPS = 3
TABLES = ("steps.parquet", "evals.parquet", "routing.parquet", "timing.parquet", "events.parquet", "telemetry.parquet")
LOG = b"hello\nstep 1 loss 2\n"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _publish(tmp: Path, name: str = "r") -> tuple[Ledger, str, Path]:
    lg = Ledger(tmp / "receipts")
    lg.ensure_writable()
    run = lg.staging / uuid.uuid4().hex
    (run / "rank-00000").mkdir(parents=True)
    (run / "wrapper.json").write_text(json.dumps({"name": name, "run_uuid": run.name}))
    (run / "stack.json").write_text("{}")
    (run / "rank-00000" / "steps.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0 + s}) + "\n" for s in range(STEPS)))
    (run / "output.log").write_bytes(LOG)
    receipt = publish(lg, run, Outcome(status="succeeded", exit_code=0), redact=lambda s: s)
    return lg, receipt.id, lg.path(receipt.id)


@pytest.fixture
def pub(tmp_path: Path) -> tuple[Ledger, str, Path]:
    return _publish(tmp_path)


def _raw(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "receipt.json").read_bytes())


def _reseal(lg: Ledger, directory: Path, raw: dict[str, Any], *, indent: bool = False) -> tuple[str, Path]:
    """Write ``raw`` as a sealed receipt (its id the sha256 of its canonical JSON with the id blank, by hand) in the
    directory of that id: what someone who edits a receipt and recomputes its id leaves."""
    new_id = _digest(json.dumps(dict(raw, id=""), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    raw = dict(raw, id=new_id)
    target = lg.new_path(new_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(directory, target)
    text = json.dumps(raw, indent=2) if indent else json.dumps(raw, sort_keys=True, separators=(",", ":"),
                                                                 ensure_ascii=False)
    (target / "receipt.json").write_text(text + "\n")
    return new_id, target


def _artifact(raw: dict[str, Any], path: str) -> dict[str, Any]:
    return next(a for a in raw["artifacts"] if a["path"] == path)


# -- a clean receipt ------------------------------------------------------------------------------------------------

def test_a_clean_receipt_lists_every_file_with_its_digest_size_and_rows(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    assert sorted(a["path"] for a in raw["artifacts"]) == sorted([*TABLES, "output.log"])
    for a in raw["artifacts"]:
        data = (d / a["path"]).read_bytes()
        assert (a["sha256"], a["bytes"]) == (_digest(data), len(data))
    assert _artifact(raw, "steps.parquet")["rows"] == STEPS
    assert verify_receipt(lg, rid) == [] and verify_receipt(lg, rid, deep=False) == []
    assert raw_digest(raw) == rid
    v = verified(lg, rid)
    assert v.receipt.id == rid and v.data == raw  # the JSON as stored, not re-dumped
    s = sealed(lg, rid)
    assert s.data == raw and s.text == (d / "receipt.json").read_text().rstrip("\n")
    assert sealed(lg, rid, directory=d).text == s.text
    assert check_intact(lg, rid).id == rid


def test_the_seen_files_are_remembered_by_inode_with_size_digest_and_times(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    seen: dict[tuple[int, int], tuple[int, str, int, int]] = {}
    sealed(lg, rid, seen=seen)
    expected = {}
    for a in _raw(d)["artifacts"]:
        st_ = os.stat(d / a["path"])
        expected[(st_.st_dev, st_.st_ino)] = (st_.st_size, _digest((d / a["path"]).read_bytes()), st_.st_mtime_ns,
                                              st_.st_ctime_ns)
    assert seen == expected
    again = dict(seen)
    assert sealed(lg, rid, seen=again).data == _raw(d) and again == seen
    # the same inode changed since (its times): read again, and the damage found
    log = d / "output.log"
    log.write_bytes(LOG.replace(b"hello", b"HELLO"))
    with pytest.raises(DamagedReceipt, match=r"^output\.log: sha256 does not match the listed digest$"):
        sealed(lg, rid, seen=again)
    # a file removed while a seen entry names its old inode
    log.unlink()
    with pytest.raises(DamagedReceipt, match=r"^output\.log: missing$"):
        sealed(lg, rid, seen=dict(seen))


def test_a_seen_entry_for_another_digest_or_size_does_not_pass_a_file(pub: tuple[Ledger, str, Path]) -> None:
    """A seen entry counts only for the same size, digest and times: with a wrong digest remembered, the file is
    hashed again (and passes, being intact); a damaged file whose old entry is stale is found."""
    lg, rid, d = pub
    seen: dict[tuple[int, int], tuple[int, str, int, int]] = {}
    sealed(lg, rid, seen=seen)
    wrong = {k: (v[0], "0" * 64, v[2], v[3]) for k, v in seen.items()}
    sealed(lg, rid, seen=wrong)
    assert wrong == seen  # re-verified: the true digests replace the wrong ones


# -- each file changed ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["output.log", "steps.parquet"])
def test_a_file_edited_in_place_keeping_its_size(pub: tuple[Ledger, str, Path], name: str) -> None:
    lg, rid, d = pub
    data = bytearray((d / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (d / name).write_bytes(bytes(data))
    problem = "sha256 does not match the listed digest"
    assert verify_receipt(lg, rid) == [Finding(rid, name, problem)]
    assert verify_receipt(lg, rid, deep=False) == []  # sizes only
    with pytest.raises(DamagedReceipt, match=rf"^{name}: {re.escape(problem)}$"):
        verified(lg, rid)
    with pytest.raises(DamagedReceipt, match=rf"^{name}: {re.escape(problem)}$"):
        sealed(lg, rid)
    with pytest.raises(DamagedReceipt) as err:
        check_intact(lg, rid)
    assert str(err.value) == f"receipt {rid[:12]} is damaged: {name}: {problem}; run `ledger verify {rid[:12]}`"


@pytest.mark.parametrize("change", ["truncated", "grown", "emptied"])
def test_a_file_whose_size_changed(pub: tuple[Ledger, str, Path], change: str) -> None:
    lg, rid, d = pub
    data = (d / "output.log").read_bytes()
    new = {"truncated": data[:-1], "grown": data + b"x", "emptied": b""}[change]
    (d / "output.log").write_bytes(new)
    problem = f"size {len(new)} bytes, listed as {len(data)}"
    for deep in (True, False):
        assert verify_receipt(lg, rid, deep=deep) == [Finding(rid, "output.log", problem)]
    with pytest.raises(DamagedReceipt, match=rf"^output\.log: {re.escape(problem)}$"):
        sealed(lg, rid)
    with pytest.raises(DamagedReceipt, match=rf"^output\.log: {re.escape(problem)}$"):
        sealed(lg, rid, seen={})


@pytest.mark.parametrize("how", ["removed", "directory", "dangling link"])
def test_a_file_that_went_or_is_no_longer_a_file(pub: tuple[Ledger, str, Path], how: str) -> None:
    lg, rid, d = pub
    (d / "steps.parquet").unlink()
    if how == "directory":
        (d / "steps.parquet").mkdir()
    elif how == "dangling link":
        (d / "steps.parquet").symlink_to(d / "nowhere")
    assert verify_receipt(lg, rid) == [Finding(rid, "steps.parquet", "missing")]
    for seen in (None, {}):
        with pytest.raises(DamagedReceipt, match=r"^steps\.parquet: missing$"):
            sealed(lg, rid, seen=seen)


def test_several_findings_in_order_and_the_count_of_the_others(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    (d / "evals.parquet").unlink()
    (d / "output.log").write_bytes(b"x")
    (d / "b-added.txt").write_text("later")
    (d / "a-added.txt").write_text("later")
    listed = [a["path"] for a in _raw(d)["artifacts"]]
    expected = sorted([Finding(rid, "evals.parquet", "missing"),
                       Finding(rid, "output.log", f"size 1 bytes, listed as {len(LOG)}")],
                      key=lambda f: listed.index(f.path))
    expected += [Finding(rid, "a-added.txt", "not listed in the receipt (added after publishing)"),
                 Finding(rid, "b-added.txt", "not listed in the receipt (added after publishing)")]
    assert verify_receipt(lg, rid) == expected
    assert str(expected[0]) == f"{rid[:12]} {expected[0].path}: {expected[0].problem}"
    with pytest.raises(DamagedReceipt) as err:
        check_intact(lg, rid)
    assert str(err.value) == (f"receipt {rid[:12]} is damaged: {expected[0].path}: {expected[0].problem} (and 3 more);"
                              f" run `ledger verify {rid[:12]}`")
    with pytest.raises(DamagedReceipt) as err:
        statement(lg, rid)
    assert str(err.value) == f"cannot attest a damaged receipt: {expected[0]}"


@pytest.mark.parametrize("what", ["file", "directory"])
def test_something_added_beside_the_files(pub: tuple[Ledger, str, Path], what: str) -> None:
    lg, rid, d = pub
    (d / "notes.txt").mkdir() if what == "directory" else (d / "notes.txt").write_text("x")
    problem = "not listed in the receipt (added after publishing)"
    assert verify_receipt(lg, rid) == [Finding(rid, "notes.txt", problem)]
    with pytest.raises(DamagedReceipt, match=rf"^notes\.txt: {re.escape(problem)}$"):
        sealed(lg, rid)
    with pytest.raises(DamagedReceipt, match=rf"^notes\.txt: {re.escape(problem)}$"):
        verified(lg, rid)


# -- receipt.json changed -------------------------------------------------------------------------------------------

def test_receipt_json_edited_without_resealing(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["name"] = "renamed"
    (d / "receipt.json").write_text(json.dumps(raw, sort_keys=True, separators=(",", ":")) + "\n")
    digest = _digest(canonical_json(dict(raw, id="")))
    problem = f"content digest {digest[:12]} does not match the id: edited after publishing"
    assert verify_receipt(lg, rid) == [Finding(rid, "receipt.json", problem)]
    with pytest.raises(DamagedReceipt, match="^receipt.json: content digest does not match the id: edited after "
                                             "publishing$"):
        sealed(lg, rid)
    with pytest.raises(DamagedReceipt, match=rf"^receipt\.json: {re.escape(problem)}$"):
        verified(lg, rid)


def test_receipt_json_moved_under_another_id(tmp_path: Path) -> None:
    """An intact receipt.json in the directory of another id: its own id is right, the directory's is not."""
    lg, rid, d = _publish(tmp_path)
    other = "f" * 64
    target = lg.new_path(other)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(d, target)
    digest_problem = f"content digest {rid[:12]} does not match the id: edited after publishing"
    assert verify_receipt(lg, other) == [Finding(other, "receipt.json", digest_problem)]
    with pytest.raises(DamagedReceipt, match="content digest does not match the id"):
        sealed(lg, other)


def test_a_resealed_receipt_that_lists_other_rows(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    _artifact(raw, "steps.parquet")["rows"] = STEPS + 2
    _artifact(raw, "evals.parquet")["rows"] = 1
    new, nd = _reseal(lg, d, raw)
    assert verify_receipt(lg, new) == [Finding(new, "steps.parquet", f"{STEPS} rows, listed as {STEPS + 2}"),
                                       Finding(new, "evals.parquet", "0 rows, listed as 1")]
    assert verify_receipt(lg, new, deep=False) == []
    assert verified(lg, new, rows=False).receipt.id == new  # rows left to the caller
    with pytest.raises(DamagedReceipt, match=rf"^steps\.parquet: {STEPS} rows, listed as {STEPS + 2}$"):
        verified(lg, new)
    assert sealed(lg, new).data["id"] == new  # the index counts the rows itself


def test_a_resealed_receipt_that_calls_its_log_a_table(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    _artifact(raw, "output.log")["kind"] = "table"
    _artifact(raw, "output.log")["rows"] = 2
    new, _ = _reseal(lg, d, raw)
    [finding] = verify_receipt(lg, new)
    assert finding.receipt_id == new and finding.path == "output.log"
    assert finding.problem.startswith("unreadable Parquet: ") and len(finding.problem) > len("unreadable Parquet: ")
    assert "\n" not in finding.problem


def test_a_resealed_receipt_with_a_wrong_digest_or_size(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    _artifact(raw, "output.log")["sha256"] = _digest(b"something else")
    _artifact(raw, "steps.parquet")["bytes"] += 1
    new, nd = _reseal(lg, d, raw)
    size = (nd / "steps.parquet").stat().st_size
    assert verify_receipt(lg, new) == [Finding(new, "steps.parquet", f"size {size} bytes, listed as {size + 1}"),
                                       Finding(new, "output.log", "sha256 does not match the listed digest")]
    with pytest.raises(DamagedReceipt, match=rf"^steps\.parquet: size {size} bytes, listed as {size + 1}$"):
        sealed(lg, new)


def test_an_indented_receipt_json_of_an_older_writer(pub: tuple[Ledger, str, Path]) -> None:
    """Receipts written before 2026-12-02 hold the same JSON indented: the same id, read alike."""
    lg, rid, d = pub
    raw = _raw(d)
    (d / "receipt.json").write_text(json.dumps(raw, indent=2) + "\n")
    assert verify_receipt(lg, rid) == []
    s = sealed(lg, rid)
    assert s.data == raw
    assert s.text == json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert verified(lg, rid).data == raw
    # indented and edited: refused
    raw["name"] = "other"
    (d / "receipt.json").write_text(json.dumps(raw, indent=2) + "\n")
    with pytest.raises(DamagedReceipt, match="content digest does not match the id"):
        sealed(lg, rid)


def test_a_canonical_receipt_json_without_its_final_newline(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    text = (d / "receipt.json").read_bytes()
    (d / "receipt.json").write_bytes(text.rstrip(b"\n"))
    assert sealed(lg, rid).text == text.decode().rstrip("\n")
    assert verify_receipt(lg, rid) == []


def test_a_canonical_receipt_json_with_the_id_string_earlier_in_it(tmp_path: Path) -> None:
    """A receipt whose name holds ``"id":"<its id>"`` text cannot hold its own id (the id depends on the name), but
    one that holds another receipt's id there is read by its top-level id."""
    lg, rid, d = _publish(tmp_path)
    raw = _raw(d)
    raw["command"] = f'"id":"{rid}"'  # sorted before "id": its escaped text comes first in the file
    new, nd = _reseal(lg, d, raw)
    s = sealed(lg, new)
    assert s.data["id"] == new and s.data["command"] == f'"id":"{rid}"'


def test_an_older_schema_version_is_migrated_and_validated(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["schema_version"] = SCHEMA_VERSION - 1
    new, nd = _reseal(lg, d, raw)
    assert verify_receipt(lg, new) == []
    v = verified(lg, new)
    assert v.data["schema_version"] == SCHEMA_VERSION and v.data["id"] == new  # migrated, then dumped
    assert v.data != raw
    s = sealed(lg, new)
    assert s.data == v.data and json.loads(s.text) == v.data
    # the same, written indented
    (nd / "receipt.json").write_text(json.dumps(dict(raw, id=new), indent=2))
    assert sealed(lg, new).data["schema_version"] == SCHEMA_VERSION


def test_an_older_schema_version_is_checked_file_by_file_and_its_rows_left_to_the_index(
        pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["schema_version"] = SCHEMA_VERSION - 1
    _artifact(raw, "steps.parquet")["rows"] = STEPS + 1
    new, nd = _reseal(lg, d, raw)
    assert sealed(lg, new).data["id"] == new  # the index counts the rows it inserts
    with pytest.raises(DamagedReceipt, match=rf"^steps\.parquet: {STEPS} rows, listed as {STEPS + 1}$"):
        verified(lg, new)
    data = bytearray((nd / "output.log").read_bytes())
    data[0] ^= 0x20
    (nd / "output.log").write_bytes(bytes(data))  # the same size
    with pytest.raises(DamagedReceipt, match=r"^output\.log: sha256 does not match the listed digest$"):
        sealed(lg, new)


def test_two_findings_say_one_more(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    (d / "extra.txt").write_text("x")
    (d / "output.log").unlink()
    with pytest.raises(DamagedReceipt) as err:
        check_intact(lg, rid)
    assert str(err.value) == (f"receipt {rid[:12]} is damaged: output.log: missing (and 1 more); run `ledger verify "
                              f"{rid[:12]}`")


def test_a_newer_schema_version_is_named(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["schema_version"] = SCHEMA_VERSION + 1
    new, nd = _reseal(lg, d, raw)
    [finding] = verify_receipt(lg, new)
    assert finding.path == "receipt.json" and str(nd) not in finding.problem
    assert finding.problem.startswith(f"schema_version {SCHEMA_VERSION + 1} is newer than this stackreceipt")
    with pytest.raises(SchemaTooNew):
        check_intact(lg, new)
    with pytest.raises(DamagedReceipt, match=rf"^receipt\.json: schema_version {SCHEMA_VERSION + 1} is newer"):
        sealed(lg, new)  # the index lists it as damaged, with the reason


@pytest.mark.parametrize("text", [b"", b"{not json", b"[1, 2]", b'{"id": 3}', b"{" * 70 + b"}" * 70,
                                  b'{"' + b'a":{"' * 70 + b'a":1' + b"}" * 71])
def test_a_receipt_json_that_is_not_a_receipt(pub: tuple[Ledger, str, Path], text: bytes) -> None:
    lg, rid, d = pub
    (d / "receipt.json").write_bytes(text)
    [finding] = verify_receipt(lg, rid)
    assert finding.path == "receipt.json" and str(d) not in finding.problem
    with pytest.raises((InvalidReceipt, DamagedReceipt)):
        sealed(lg, rid)
    with pytest.raises((InvalidReceipt, DamagedReceipt, SchemaTooNew)):
        check_intact(lg, rid)


def test_a_missing_receipt_json(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    (d / "receipt.json").unlink()
    message = f"{d / 'receipt.json'} is missing; run `ledger verify {rid[:12]}`"
    assert verify_receipt(lg, rid) == [Finding(rid, "receipt.json", message)]
    with pytest.raises(DamagedReceipt) as err:
        sealed(lg, rid)
    assert str(err.value) == message
    with pytest.raises(DamagedReceipt) as err:
        check_intact(lg, rid)
    assert str(err.value) == message


@pytest.mark.parametrize("bad", [None, [{"path": "x"}], ["steps.parquet"],
                                 [{"path": "x", "bytes": "many", "sha256": "0"}], {"path": "x"}])
def test_a_sealed_receipt_json_whose_artifacts_are_not_a_list_of_files(pub: tuple[Ledger, str, Path],
                                                                        bad: Any) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["artifacts"] = bad
    new, _ = _reseal(lg, d, raw)
    with pytest.raises(InvalidReceipt, match=rf"not a receipt \(\w+Error: .*\); run `ledger verify {new[:12]}`$"):
        sealed(lg, new)


def test_a_sealed_receipt_json_holding_what_json_cannot_encode_canonically(pub: tuple[Ledger, str, Path]) -> None:
    """An indented receipt.json with a NaN: Python reads it, the canonical encoder refuses it."""
    lg, rid, d = pub
    raw = _raw(d)
    (d / "receipt.json").write_text(json.dumps(dict(raw, name=float("nan")), indent=2))
    with pytest.raises(InvalidReceipt, match=rf"not a receipt \(ValueError: .*\); run `ledger verify {rid[:12]}`"):
        sealed(lg, rid)


# -- digests --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17])
def test_sha256_file_of_files_around_its_block_size(tmp_path: Path, size: int) -> None:
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == sha256_file(str(tmp_path / "f")) == _digest(data)


@pytest.mark.parametrize("delta", [-1, 0, 1, 1 << 20])
def test_a_listed_file_around_the_one_read_limit(tmp_path: Path, delta: int) -> None:
    """Files up to 8 MiB are hashed from one read, larger ones in blocks: the same digest, and a change in the
    last byte is found either way."""
    size = (8 << 20) + delta
    data = bytes(range(251)) * (size // 251) + b"z" * (size % 251)
    (tmp_path / "big").write_bytes(data)
    assert integrity._file_problem(tmp_path, "big", size, _digest(data)) is None
    assert integrity._file_problem(tmp_path, "big", size, _digest(data[:-1] + b"y")) == \
        "sha256 does not match the listed digest"
    assert integrity._file_problem(tmp_path, "big", size + 1, _digest(data)) == \
        f"size {size} bytes, listed as {size + 1}"
    assert integrity._file_problem(tmp_path, "nothing", size, _digest(data)) == "missing"


def _record(path: Path, **change: Any) -> Path:
    st_ = path.stat()
    facts = {"sha256": _digest(path.read_bytes()), "bytes": st_.st_size, "mtime_ns": st_.st_mtime_ns} | change
    record = path.with_name("digest.json")
    record.write_text(json.dumps(facts))
    return record


def test_a_recorded_digest_is_used_while_the_file_is_as_recorded(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(LOG)
    assert recorded_sha256(log, _record(log)) == _digest(LOG)
    upper = _digest(LOG).upper()
    st_ = log.stat()
    for change in ({"bytes": st_.st_size + 1}, {"bytes": st_.st_size - 1}, {"mtime_ns": st_.st_mtime_ns + 1},
                   {"mtime_ns": st_.st_mtime_ns - 1}, {"sha256": upper}, {"sha256": _digest(LOG)[:63]},
                   {"sha256": _digest(LOG) + "0"}, {"sha256": "g" * 64}, {"sha256": "X" * 64}, {"sha256": 5},
                   {"sha256": None},
                   {"sha256": list(_digest(LOG))}):
        assert recorded_sha256(log, _record(log, **change)) is None, change
    # another process appends to the log: size and time no longer match
    record = _record(log)
    with open(log, "ab") as f:
        f.write(b"more\n")
    assert recorded_sha256(log, record) is None
    # the record missing, damaged, of the wrong shape; the file missing
    for text in ("", "{", "[]", '{"sha256": "x"}', "null", '"text"'):
        record.write_text(text)
        assert recorded_sha256(log, record) is None, text
    assert recorded_sha256(log, tmp_path / "none.json") is None
    record = _record(log)
    log.unlink()
    assert recorded_sha256(log, record) is None
    assert recorded_sha256(log, tmp_path) is None  # a directory where the record should be


_KEYS = st.sampled_from(["a", "i", "ic", "id", "id0", "ie", "j", "z", "", "I", "é", "artifacts", "zz"])
_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=5)
                       | st.floats(allow_nan=False, allow_infinity=False),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
                       max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6), st.text(max_size=8))
def test_seal_json_is_the_canonical_json_with_the_id_blanked(data: dict[str, Any], old_id: str) -> None:
    """The id of any JSON object is the sha256 of its canonical JSON (sorted keys, no whitespace, UTF-8) with the
    id blank, whatever id it held; the text is that JSON with the id in place."""
    data = dict(data, id=old_id)
    blank = json.dumps(dict(data, id=""), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                       allow_nan=False)
    expected = _digest(blank.encode())
    rid, text = seal_json(data)
    assert rid == expected == raw_digest(data)
    assert text == json.dumps(dict(data, id=expected), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    blanked, canonical = integrity._canonical_texts(data)
    assert blanked == blank.encode()
    assert canonical == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- the attestation ------------------------------------------------------------------------------------------------

def test_the_statement_names_every_file_with_its_digest_relative_to_the_ledger(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    s = statement(lg, rid)
    assert s["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert s["predicateType"] == PREDICATE_TYPE == "https://stackreceipt.dev/receipt/v2"
    where = f"{rid[:2]}/{rid}"
    assert d.relative_to(lg.root).as_posix() == where
    names = ["receipt.json", *(a["path"] for a in raw["artifacts"])]
    assert s["subject"] == [{"name": f"{where}/{n}", "digest": {"sha256": _digest((d / n).read_bytes())}}
                            for n in names]
    p = s["predicate"]
    assert p == {"receipt_id": rid, "name": "r", "status": "succeeded", "started_at": raw["started_at"],
                 "stack": raw["stack"], "workload": raw["workload"], "summary": raw["summary"]}
    json.dumps(s)  # JSON values throughout


def _write_sealed_text(lg: Ledger, directory: Path, raw: dict[str, Any], receipt_id: str) -> Path:
    """receipt.json holding ``raw`` as canonical JSON (by json.dumps), in the directory of ``receipt_id``."""
    target = lg.new_path(receipt_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(directory, target)
    (target / "receipt.json").write_text(json.dumps(raw, sort_keys=True, separators=(",", ":"),
                                                    ensure_ascii=False) + "\n")
    return target


def test_a_sealed_receipt_nested_too_deeply_is_refused(pub: tuple[Ledger, str, Path]) -> None:
    """Anyone can seal a hostile receipt.json (the id is a digest): one nested deeper than any receipt is refused
    before anything recurses through it, its seal notwithstanding."""
    lg, rid, d = pub
    raw = _raw(d)
    deep: Any = "bottom"
    for _ in range(70):
        deep = {"k": deep}
    raw["tags"] = {"deep": deep}
    new = _digest(json.dumps(dict(raw, id=""), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    _write_sealed_text(lg, d, dict(raw, id=new), new)
    with pytest.raises(InvalidReceipt, match="nested too deeply to be a receipt"):
        sealed(lg, new)


def test_a_receipt_whose_seal_is_a_nested_id_is_not_taken_as_sealed(pub: tuple[Ledger, str, Path]) -> None:
    """A receipt.json crafted so that the first ``"id":"<directory's id>"`` in it is a nested object's, and the text
    with that one blanked hashes to the directory's id, while its own top-level id is another: not sealed."""
    lg, rid, d = pub
    raw = _raw(d)
    raw["id"] = "f" * 64
    raw["artifacts"][0]["id"] = ""  # an object sorted before the top-level id, holding an id of its own
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    forged = _digest(text.encode())  # the digest of the text with the nested id blank
    raw["artifacts"][0]["id"] = forged
    target = _write_sealed_text(lg, d, raw, forged)
    assert (target / "receipt.json").read_bytes().find(f'"id":"{forged}"'.encode()) < \
        (target / "receipt.json").read_bytes().find(b'"id":"ffff')
    with pytest.raises(DamagedReceipt, match="content digest does not match the id"):
        sealed(lg, forged)


def test_verifying_writes_nothing(pub: tuple[Ledger, str, Path], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Verifying reads: nothing is written into the receipt, the ledger or the current directory (the row counts
    are read with an in-memory DuckDB)."""
    lg, rid, d = pub
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert verify_receipt(lg, rid) == [] and verified(lg, rid).receipt.id == rid
    statement(lg, rid)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_current_receipt_is_given_as_stored_not_as_the_model_writes_it(pub: tuple[Ledger, str, Path]) -> None:
    """A time written with an offset (as another writer may) is kept as written: the seal is of these bytes."""
    lg, rid, d = pub
    raw = _raw(d)
    assert raw["ended_at"].endswith("Z")
    raw["ended_at"] = raw["ended_at"][:-1] + "+00:00"
    new, _ = _reseal(lg, d, raw)
    assert verified(lg, new).data["ended_at"] == raw["ended_at"]
    assert verify_receipt(lg, new) == []


def test_an_invalid_field_is_named_without_the_files_path(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    raw = _raw(d)
    raw["status"] = "bogus"
    new, nd = _reseal(lg, d, raw)
    [finding] = verify_receipt(lg, new)
    assert finding.path == "receipt.json" and finding.problem.startswith("field status: ")
    assert str(nd) not in finding.problem and "None" not in finding.problem


def test_every_damaged_file_is_named_not_only_the_first(pub: tuple[Ledger, str, Path]) -> None:
    lg, rid, d = pub
    names = ["steps.parquet", "evals.parquet", "timing.parquet", "output.log"]
    for name in names:
        data = bytearray((d / name).read_bytes())
        data[-1] ^= 0x01
        (d / name).write_bytes(bytes(data))
    (d / "events.parquet").unlink()
    (d / "routing.parquet").write_bytes(b"")
    listed = [a["path"] for a in _raw(d)["artifacts"]]
    routing = _artifact(_raw(d), "routing.parquet")["bytes"]
    expected = {n: "sha256 does not match the listed digest" for n in names}
    expected |= {"events.parquet": "missing", "routing.parquet": f"size 0 bytes, listed as {routing}"}
    assert verify_receipt(lg, rid) == [Finding(rid, n, expected[n]) for n in listed if n in expected]
    assert verify_receipt(lg, rid, deep=False) == [Finding(rid, n, expected[n]) for n in listed
                                                   if n in ("events.parquet", "routing.parquet")]


def test_an_unreadable_table_is_named_with_duckdbs_reason_and_the_others_still_counted(
        pub: tuple[Ledger, str, Path]) -> None:
    import duckdb

    lg, rid, d = pub
    raw = _raw(d)
    garbage = b"PAR1 this is not a parquet file PAR1"
    (d / "steps.parquet").write_bytes(garbage)  # listed with its own digest: only its rows cannot be read
    _artifact(raw, "steps.parquet").update(sha256=_digest(garbage), bytes=len(garbage))
    _artifact(raw, "evals.parquet")["rows"] = 4
    new, nd = _reseal(lg, d, raw)
    try:
        duckdb.connect(":memory:").execute("SELECT num_rows FROM parquet_file_metadata(?)",
                                           [str(nd / "steps.parquet")]).fetchone()
    except duckdb.Error as exc:
        reason = str(exc).splitlines()[0]
    assert verify_receipt(lg, new) == [Finding(new, "steps.parquet", f"unreadable Parquet: {reason}"),
                                       Finding(new, "evals.parquet", "0 rows, listed as 4")]
