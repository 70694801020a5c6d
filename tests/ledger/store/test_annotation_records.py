"""Notes and archive flags as records beside a sealed receipt (ledger/store/annotation.py), in process: the bytes
of a record written out by hand, its file named by their sha256 (hashlib), every input a user types (kinds, ids,
empty, padded and over-long text, authors, times in any zone), and every way a file in the annotations folder can
change (edited bytes, a foreign record, a stray name, a folder, a record placed twice, a temporary file left by a
crash); the archive state read from records in any order."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import BadInput
from ledger.store import annotation
from ledger.store.annotation import Annotation

RID = "ab" + "0" * 62
OTHER = "cd" + "1" * 62


def _bytes(rid: str, kind: str, text: str, author: str, at: str) -> bytes:
    """A record's file as the format says, written out by hand (sorted keys, no spaces, UTF-8)."""
    return ('{"at":"' + at + '","author":"' + author + '","kind":"' + kind + '","receipt_id":"' + rid
            + '","text":"' + text + '","v":1}').encode()


def test_a_record_is_canonical_json_named_by_its_sha256(tmp_path: Path) -> None:
    at = datetime(2026, 12, 2, 11, 31, 5, 250, tzinfo=timezone(timedelta(hours=1)))  # 10:31 UTC
    record = annotation.add(tmp_path, RID, "note", "  ran on a degraded node – gpu3  \n", author="  alice@node17 ",
                            at=at)
    expected = _bytes(RID, "note", "ran on a degraded node – gpu3", "alice@node17", "2026-12-02T10:31:05.000250+00:00")
    assert record.to_bytes() == expected
    assert record.digest == hashlib.sha256(expected).hexdigest()
    assert record.to_json() == {"receipt_id": RID, "kind": "note", "text": "ran on a degraded node – gpu3",
                                "author": "alice@node17", "at": "2026-12-02T10:31:05.000250+00:00"}
    folder = tmp_path / "annotations" / "ab" / RID
    assert annotation.directory(tmp_path, RID) == folder
    assert sorted(os.listdir(folder)) == [hashlib.sha256(expected).hexdigest() + ".json"]  # no temporary file left
    assert (folder / f"{record.digest}.json").read_bytes() == expected
    assert annotation.of(tmp_path, RID) == [record]
    assert annotation.describe(record) == "2026-12-02 10:31 alice@node17: ran on a degraded node – gpu3"


def test_the_author_is_given_else_the_environment_else_the_login_and_host(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    at = datetime(2026, 1, 1, tzinfo=UTC)
    monkeypatch.setenv("LEDGER_AUTHOR", "  bob  ")
    assert annotation.default_author() == "bob"
    assert annotation.add(tmp_path, RID, "note", "x", at=at).author == "bob"
    assert annotation.add(tmp_path, RID, "note", "x", author="carol", at=at).author == "carol"
    assert annotation.add(tmp_path, RID, "note", "x", author="   ", at=at).author == "unknown"
    monkeypatch.setenv("LEDGER_AUTHOR", "   ")
    monkeypatch.setenv("LOGNAME", "dave")
    assert annotation.default_author() == f"dave@{socket.gethostname()}"
    monkeypatch.delenv("LEDGER_AUTHOR")
    assert annotation.add(tmp_path, RID, "archive", at=at).author == f"dave@{socket.gethostname()}"


def test_in_a_container_whose_user_has_no_name_the_author_is_unknown_at_the_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd
    import socket

    for name in ("LEDGER_AUTHOR", "LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    uid = next(u for u in range(4_000_000, 4_001_000) if u not in {p.pw_uid for p in pwd.getpwall()})
    monkeypatch.setattr(os, "getuid", lambda: uid)  # `docker run --user 4000000`: no passwd entry
    assert annotation.default_author() == f"unknown@{socket.gethostname()}"


def test_redaction_applies_to_the_text_and_the_author(tmp_path: Path) -> None:
    record = annotation.add(tmp_path, RID, "note", "token hunter2 leaked", author="hunter2@box",
                            redact=lambda s: s.replace("hunter2", "[REDACTED]"), at=datetime(2026, 1, 1, tzinfo=UTC))
    assert (record.text, record.author) == ("token [REDACTED] leaked", "[REDACTED]@box")
    on_disk = json.loads((annotation.directory(tmp_path, RID) / f"{record.digest}.json").read_bytes())
    assert "hunter2" not in json.dumps(on_disk)


def test_a_note_written_in_another_time_zone_is_stamped_in_utc(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # the machine's zone: +05:30
    time.tzset()
    try:
        at = datetime(2026, 12, 2, 11, 31, tzinfo=timezone(timedelta(hours=1)))
        assert annotation.add(tmp_path, RID, "note", "x", author="a", at=at).at == "2026-12-02T10:31:00.000000+00:00"
        assert annotation.add(tmp_path, RID, "note", "y", author="a").at.endswith("+00:00")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_time_now_is_utc_with_microseconds(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    record = annotation.add(tmp_path, RID, "note", "x", author="a")
    after = datetime.now(UTC)
    assert record.at.endswith("+00:00") and len(record.at) == len("2026-12-02T10:31:05.000250+00:00")
    assert before <= datetime.fromisoformat(record.at) <= after


EMPTY = "empty note: give the text, e.g. ledger note REF 'ran on a degraded node'"


@pytest.mark.parametrize(("kind", "rid", "text", "message"), [
    ("comment", RID, "x", "unknown annotation kind 'comment'; use one of: note, archive, unarchive"),
    ("Note", RID, "x", "unknown annotation kind 'Note'; use one of: note, archive, unarchive"),
    ("note", RID[:12], "x", f"not a receipt id: '{RID[:12]}'"),
    ("note", RID.upper(), "x", f"not a receipt id: '{RID.upper()}'"),
    ("note", RID + "0", "x", f"not a receipt id: '{RID}0'"),
    ("note", RID, "", EMPTY),
    ("note", RID, " \n\t ", EMPTY),
    ("note", RID, "y" * 4001, "a note holds at most 4000 characters (this one has 4001)"),
])
def test_what_a_user_may_type_wrong_is_refused_and_nothing_is_written(tmp_path: Path, kind: str, rid: str, text: str,
                                                                     message: str) -> None:
    with pytest.raises(BadInput) as err:
        annotation.add(tmp_path, rid, kind, text, author="a")  # type: ignore[arg-type]
    assert str(err.value) == message
    assert not (tmp_path / "annotations").exists()


def test_limits_that_are_allowed(tmp_path: Path) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert len(annotation.add(tmp_path, RID, "note", " " + "y" * 4000 + " ", author="a", at=at).text) == 4000
    assert annotation.add(tmp_path, RID, "archive", author="a", at=at).text == ""  # a flag needs no reason
    assert annotation.add(tmp_path, RID, "unarchive", "  mistake  ", author="a", at=at).text == "mistake"
    assert len(annotation.of(tmp_path, RID)) == 3


@pytest.mark.parametrize(("data", "message"), [
    (b"not json", "annotation is not JSON"),
    (b"\xff\xfe{}", "annotation is not JSON"),
    (b"[1, 2]", "annotation of an unknown version (expected v=1)"),
    (b'{"v": 2}', "unknown version"),
    (b'{"v": "1"}', "unknown version"),
    (_bytes(RID, "note", "t", "a", "2026").replace(b',"v":1', b',"v":1,"extra":"x"'),
     "annotation fields must be v and receipt_id, kind, text, author, at (strings)"),
    (_bytes(RID, "note", "t", "a", "2026").replace(b'"author":"a",', b""), "annotation fields must be"),
    (_bytes(RID, "note", "t", "a", "2026").replace(b'"text":"t"', b'"text":7'), "annotation fields must be"),
    (_bytes(RID, "comment", "t", "a", "2026"), f"annotation of kind 'comment' about '{RID}'"),
    (_bytes(RID[:10], "note", "t", "a", "2026"), f"annotation of kind 'note' about '{RID[:10]}'"),
])
def test_a_record_that_is_not_one_is_refused_by_name(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(BadInput) as err:
        annotation.write(tmp_path, data)
    assert message in str(err.value)
    assert not (tmp_path / "annotations").exists()


def test_writing_a_pulled_record_places_it_once(tmp_path: Path) -> None:
    data = _bytes(RID, "note", "pulled", "eve", "2026-03-04T05:06:07.000000+00:00")
    target = annotation.write(tmp_path, data)
    assert target == tmp_path / "annotations" / "ab" / RID / (hashlib.sha256(data).hexdigest() + ".json")
    assert target.read_bytes() == data
    inode = target.stat().st_ino
    assert annotation.write(tmp_path, data) == target
    assert target.stat().st_ino == inode  # already there: left as it is, not written again
    assert os.listdir(target.parent) == [target.name]
    assert annotation.parse(data) == Annotation(RID, "note", "pulled", "eve", "2026-03-04T05:06:07.000000+00:00")


def _place(root: Path, rid: str, data: bytes, name: str | None = None) -> Path:
    folder = root / "annotations" / rid[:2] / rid
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or hashlib.sha256(data).hexdigest() + ".json")
    path.write_bytes(data)
    return path


def test_files_changed_by_hand_or_by_another_process_are_ignored(tmp_path: Path) -> None:
    good = _bytes(RID, "note", "kept", "a", "2026-01-02T00:00:00.000000+00:00")
    _place(tmp_path, RID, good)
    edited = _place(tmp_path, RID, _bytes(RID, "note", "original", "a", "2026-01-01T00:00:00.000000+00:00"))
    edited.write_bytes(edited.read_bytes().replace(b"original", b"rewritten"))  # its name no longer matches
    _place(tmp_path, RID, _bytes(OTHER, "archive", "", "a", "2026-01-03T00:00:00.000000+00:00"))  # another's
    malformed = b'{"v":1,"kind":"note"}'
    _place(tmp_path, RID, malformed)  # named by its bytes, but not a record
    _place(tmp_path, RID, good, name=".tmp-0123")  # a crash's temporary file
    _place(tmp_path, RID, good, name="copy.json.bak")
    (annotation.directory(tmp_path, RID) / ("0" * 64 + ".json")).mkdir()  # a folder, not a file
    assert [r.text for r in annotation.of(tmp_path, RID)] == ["kept"]
    assert annotation.everything(tmp_path) == {RID: annotation.of(tmp_path, RID)}
    assert not annotation.is_archived(annotation.of(tmp_path, RID))  # the foreign archive flag does not count
    assert annotation.archived_ids(tmp_path) == set()
    assert annotation.of(tmp_path, OTHER) == []  # no folder at all


def test_files_lists_every_record_in_a_stable_order(tmp_path: Path) -> None:
    a = _bytes(OTHER, "note", "later id", "a", "2026-01-01T00:00:00.000000+00:00")
    b = _bytes(RID, "note", "one", "a", "2026-01-02T00:00:00.000000+00:00")
    c = _bytes(RID, "archive", "", "a", "2026-01-01T00:00:00.000000+00:00")
    paths = [_place(tmp_path, rid, d) for rid, d in ((OTHER, a), (RID, b), (RID, c))]
    (tmp_path / "annotations" / "ab" / "not-an-id").mkdir()
    _place(tmp_path, RID, b, name="notes.txt")
    expected = sorted([(RID, paths[1]), (RID, paths[2])], key=lambda p: p[1].name) + [(OTHER, paths[0])]
    assert annotation.files(tmp_path) == expected
    assert annotation.files(tmp_path / "nowhere") == []
    everything = annotation.everything(tmp_path)
    assert {k: [(r.kind, r.text) for r in v] for k, v in everything.items()} == {
        RID: [("archive", ""), ("note", "one")], OTHER: [("note", "later id")]}
    assert annotation.archived_ids(tmp_path) == {RID}


def _rec(kind: str, at: str, text: str = "") -> Annotation:
    return Annotation(RID, kind, text, "a", at)  # type: ignore[arg-type]


def test_the_archive_state_is_the_latest_flag_by_time_whatever_the_order_given() -> None:
    archive, unarchive = _rec("archive", "2026-01-01T10:00"), _rec("unarchive", "2026-01-01T11:00")
    note = _rec("note", "2026-01-01T12:00", "after both")
    assert not annotation.is_archived([])
    assert not annotation.is_archived([note])
    assert annotation.is_archived([archive])
    assert annotation.is_archived([archive, note])
    assert not annotation.is_archived([unarchive, archive])  # listed out of order: the unarchive is later
    assert annotation.is_archived([_rec("archive", "2026-01-01T12:00"), unarchive, archive])
    assert annotation.notes([note, archive, _rec("note", "2026-01-01T09:00", "first")]) == [
        _rec("note", "2026-01-01T09:00", "first"), note]


@given(st.lists(st.tuples(st.sampled_from(["note", "archive", "unarchive"]), st.integers(0, 10**6)), max_size=8))
@settings(max_examples=60, deadline=None)
def test_archived_means_the_latest_flag_said_so(flags: list[tuple[str, int]]) -> None:
    records = [_rec(kind, f"2026-01-01T00:00:00.{us:06d}+00:00", str(i)) for i, (kind, us) in enumerate(flags)]
    by_time = sorted(records, key=lambda r: (r.at, hashlib.sha256(r.to_bytes()).hexdigest()))
    last = [r.kind for r in by_time if r.kind != "note"]
    assert annotation.is_archived(records) == (bool(last) and last[-1] == "archive")
    assert annotation.is_archived(reversed(records)) == annotation.is_archived(records)
    assert annotation.notes(reversed(records)) == [r for r in by_time if r.kind == "note"]


def test_records_at_the_same_time_are_ordered_by_their_digest(tmp_path: Path) -> None:
    at = datetime(2026, 5, 5, 5, 5, tzinfo=UTC)
    made = [annotation.add(tmp_path, RID, kind, text, author="a", at=at)
            for kind, text in (("archive", "x"), ("unarchive", "y"), ("note", "z"))]
    by_digest = sorted(made, key=lambda r: hashlib.sha256(r.to_bytes()).hexdigest())
    assert annotation.of(tmp_path, RID) == by_digest
    expected = [r.kind for r in by_digest if r.kind != "note"][-1] == "archive"
    assert annotation.is_archived(annotation.of(tmp_path, RID)) == expected


@pytest.mark.parametrize(("kind", "text", "line"), [
    ("note", "ECC errors", "2026-12-02 10:31 alice@node17: ECC errors"),
    ("archive", "", "2026-12-02 10:31 alice@node17: archived"),
    ("archive", "mistyped launch", "2026-12-02 10:31 alice@node17: archived (mistyped launch)"),
    ("unarchive", "", "2026-12-02 10:31 alice@node17: unarchived"),
    ("unarchive", "needed after all", "2026-12-02 10:31 alice@node17: unarchived (needed after all)"),
])
def test_describe_is_one_line_to_the_minute(kind: str, text: str, line: str) -> None:
    record = Annotation(RID, kind, text, "alice@node17", "2026-12-02T10:31:59.999999+00:00")  # type: ignore[arg-type]
    assert annotation.describe(record) == line


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(lambda s: s.strip()),
       st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(lambda s: s.strip()))
@settings(max_examples=40, deadline=None)
def test_any_text_round_trips_through_its_file(text: str, author: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        record = annotation.add(root, RID, "note", text, author=author, at=datetime(2026, 1, 1, tzinfo=UTC))
        assert (record.text, record.author) == (text.strip(), author.strip())
        (path,) = (annotation.directory(root, RID)).iterdir()
        data = path.read_bytes()
        assert json.loads(data) == {"v": 1, "receipt_id": RID, "kind": "note", "text": text.strip(),
                                    "author": author.strip(), "at": "2026-01-01T00:00:00.000000+00:00"}
        assert data.decode() == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":"),
                                           ensure_ascii=False)
        assert annotation.parse(data) == record == annotation.of(root, RID)[0]
