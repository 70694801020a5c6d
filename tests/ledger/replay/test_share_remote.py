"""`ledger push` and `ledger pull` in this process, against a remote on the local disk in every form a user types it
(an absolute path, ``./``, ``../``, a ``file://`` URL, a DVC remote by name or the default one): what lands on the
remote byte for byte, what comes back, the messages, a push cut short (files without their marker), receipts
damaged on either side, names on the remote that are not receipts, and remotes that cannot be opened. Expected
values are written by hand from the receipts' files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import BadInput, LedgerError, MissingExtra
from ledger.replay import share
from ledger.store.receipts import Ledger


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path (the index and temporary folders left out)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "index.duckdb" not in p.name and ".lock" not in p.name}


def _receipt_files(ledger_root: Path, rid: str) -> dict[str, bytes]:
    folder = Ledger(ledger_root).path(rid)
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_push_and_pull_through_a_folder(tmp_path: Path, source: dict[str, str], clone: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = source["a"], source["b"], source["c"]
    here = clone(tmp_path / "here", "a", "b")
    remote = tmp_path / "remote"
    pushed = share.push(Ledger(here), str(remote))
    assert (sorted(pushed.moved), pushed.already, pushed.damaged, pushed.annotations) == (sorted([a, b]), 0, {}, 0)
    assert pushed.message == f"pushed 2 receipt(s) to {remote} (0 already there)"
    expected = {f"receipts/{rid}/{name}": data for rid in (a, b) for name, data in _receipt_files(here, rid).items()}
    expected |= {f"ids/{rid}": b"" for rid in (a, b)}
    assert _files(remote) == expected
    assert share.remote_ids(share.resolve(Ledger(here), str(remote))) == {a, b}

    there = tmp_path / "there"
    pulled = share.pull(Ledger(there), str(remote))
    assert (sorted(pulled.moved), pulled.already, pulled.damaged) == (sorted([a, b]), 0, {})
    assert pulled.message == f"pulled 2 receipt(s) from {remote} (0 already here)"
    assert sorted(Ledger(there).ids()) == sorted([a, b])
    for rid in (a, b):
        assert _receipt_files(there, rid) == _receipt_files(here, rid)
    assert not [p for p in there.iterdir() if p.name.startswith(".tmp-")]

    # the relative forms people type: ./remote from the folder above, ../remote from a folder beside it
    monkeypatch.chdir(tmp_path)
    clone(here, "c")
    again = share.push(Ledger(here), "./remote")
    assert (again.moved, again.already) == ([c], 2)
    assert again.message == "pushed 1 receipt(s) to ./remote (2 already there)"
    (tmp_path / "beside").mkdir()
    monkeypatch.chdir(tmp_path / "beside")
    fetched = share.pull(Ledger(there), "../remote")
    assert (fetched.moved, fetched.already) == ([c], 2)
    assert fetched.message == "pulled 1 receipt(s) from ../remote (2 already here)"
    assert _receipt_files(there, c) == _receipt_files(here, c)
    nothing = share.pull(Ledger(there), f"file://{remote}")
    assert (nothing.moved, nothing.already) == ([], 3)
    assert nothing.message == f"pulled 0 receipt(s) from file://{remote} (3 already here)"
    assert share.push(Ledger(there), str(remote)).message == f"pushed 0 receipt(s) to {remote} (3 already there)"


def test_a_push_cut_short_is_finished_by_the_next_and_a_pull_skips_what_is_incomplete(
        tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    a, b = source["a"], source["b"]
    here = clone(tmp_path / "here", "a", "b")
    remote = tmp_path / "remote"
    share.push(Ledger(here), str(remote))
    (remote / "ids" / b).unlink()  # b's files went up, its marker never did
    (remote / "receipts" / b / "steps.parquet").unlink()  # nor all its files
    pulled = share.pull(Ledger(tmp_path / "early"), str(remote))
    assert pulled.moved == [a] and pulled.damaged == {} and pulled.already == 0  # b is not there yet
    again = share.push(Ledger(here), str(remote))
    assert (again.moved, again.already) == ([b], 1)
    assert _files(remote / "receipts" / b) == _receipt_files(here, b) and (remote / "ids" / b).read_bytes() == b""
    assert share.pull(Ledger(tmp_path / "early"), str(remote)).moved == [b]
    # markers whose files are gone, and names under ids/ that are not receipts
    gone = "e" * 64
    (remote / "ids" / gone).write_bytes(b"")
    (remote / "receipts" / gone).mkdir()
    for junk in ("README", "E" * 64, "e" * 63, "e" * 65, f"{'e' * 64}.tmp", f"{'d' * 64}X"):
        (remote / "ids" / junk).write_bytes(b"")
    assert share.remote_ids(share.resolve(Ledger(here), str(remote))) == {a, b, gone}
    late = share.pull(Ledger(tmp_path / "late"), str(remote))
    assert sorted(late.moved) == sorted([a, b]) and late.already == 0
    reason = f"{gone[:12]}: ids/{gone[:12]}... is on the remote but receipts/{gone[:12]}... holds no file"
    assert late.damaged == {gone: reason}
    assert late.message == (f"pulled 2 receipt(s) from {remote} (0 already here); 1 damaged or incomplete on the "
                            f"remote and left out ({reason}; `ledger verify` checks a receipt)")


def test_damaged_receipts_are_left_out_on_either_side(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    names = ("a", "b", "c", "d")
    here = clone(tmp_path / "here", *names)
    for name in ("b", "c", "d"):  # damaged here: a byte of its steps changed
        steps = Ledger(here).path(source[name]) / "steps.parquet"
        os.chmod(steps, 0o644)
        data = bytearray(steps.read_bytes())
        data[-20] ^= 1
        steps.write_bytes(bytes(data))
    remote = tmp_path / "remote"
    pushed = share.push(Ledger(here), str(remote))
    assert pushed.moved == [source["a"]] and pushed.already == 0
    assert sorted(pushed.damaged) == sorted(source[n] for n in ("b", "c", "d"))
    assert all("steps.parquet" in why for why in pushed.damaged.values())
    reasons = list(pushed.damaged.values())
    assert pushed.message == (f"pushed 1 receipt(s) to {remote} (0 already there); 3 damaged or incomplete locally "
                              f"and left out ({'; '.join(reasons)}; `ledger verify` checks a receipt)")
    assert sorted(p.name for p in (remote / "receipts").iterdir()) == [source["a"]]
    assert sorted(p.name for p in (remote / "ids").iterdir()) == [source["a"]]
    # four damaged on the remote: the first three reasons and how many more
    good = clone(tmp_path / "good", *names)
    share.push(Ledger(good), str(tmp_path / "r2"))
    for name in names:
        (tmp_path / "r2" / "receipts" / source[name] / "receipt.json").write_text("{}")
    pulled = share.pull(Ledger(tmp_path / "there"), str(tmp_path / "r2"))
    assert pulled.moved == [] and len(pulled.damaged) == 4
    why = list(pulled.damaged.values())
    assert pulled.message == (f"pulled 0 receipt(s) from {tmp_path / 'r2'} (0 already here); 4 damaged or incomplete "
                              f"on the remote and left out ({'; '.join(why[:3])}; and 1 more; `ledger verify` checks "
                              "a receipt)")
    assert Ledger(tmp_path / "there").ids() == []
    assert not [p for p in (tmp_path / "there").iterdir() if p.name.startswith(".tmp-")]
    # a receipt folder without its receipt.json
    (tmp_path / "r2" / "receipts" / source["a"] / "receipt.json").unlink()
    missing = share.pull(Ledger(tmp_path / "there"), str(tmp_path / "r2"))
    assert source["a"] in missing.damaged and missing.moved == []


def test_remotes_that_cannot_be_opened_leave_the_ledger_untouched(tmp_path: Path, source: dict[str, str],
                                                                  clone: Any) -> None:
    here = clone(tmp_path / "here", "a")
    before = _files(here)
    with pytest.raises(LedgerError) as info:
        share.push(Ledger(here), "nosuchkind://bucket/ledger")
    text = str(info.value)
    assert text.startswith("remote nosuchkind://bucket/ledger cannot be opened: ValueError: ") and "\n" not in text
    assert text.endswith("; the local ledger is untouched")
    blocker = tmp_path / "file"
    blocker.write_text("")
    for action in (share.push, share.pull):
        with pytest.raises(LedgerError) as info:
            action(Ledger(here), str(blocker / "remote"))
        text = str(info.value)
        assert text.startswith(f"listing {blocker / 'remote'} failed: NotADirectoryError: ") and "\n" not in text
        assert text.endswith("; the local ledger is untouched")
    assert _files(here) == before
    with pytest.raises(BadInput) as info:
        share.push(Ledger(tmp_path / "nothing"), str(tmp_path / "remote"))
    assert str(info.value) == f"no ledger at {tmp_path / 'nothing'}"
    # a remote name without a DVC repository around the ledger
    with pytest.raises(BadInput) as info:
        share.push(Ledger(here), "team")
    assert str(info.value) == (f"no DVC repository contains {here}: run `dvc init` and `dvc remote add -d NAME URL` in "
                               "the repository that holds the ledger, or give the remote as a URL (--remote s3://...)")
    with pytest.raises(BadInput, match="^no DVC repository contains "):
        share.pull(Ledger(tmp_path / "new" / "receipts"), None)


def test_a_dvc_remote_by_name_or_by_default(tmp_path: Path, source: dict[str, str], clone: Any,
                                            make_dvc_repo: Any) -> None:
    repo = make_dvc_repo(tmp_path / "repo", str(tmp_path / "store"))
    here = clone(repo / "receipts", "a")
    pushed = share.push(Ledger(here))
    assert pushed.moved == [source["a"]]
    assert pushed.message == "pushed 1 receipt(s) to the default DVC remote (0 already there)"
    assert (tmp_path / "store" / "ids" / source["a"]).is_file()
    named = share.push(Ledger(here), "team")
    assert named.message == "pushed 0 receipt(s) to DVC remote team (1 already there)"
    # a ledger not created yet, inside the repository: its parent is looked up
    other = share.pull(Ledger(repo / "second"), "team")
    assert other.moved == [source["a"]] and sorted(Ledger(repo / "second").ids()) == [source["a"]]
    with pytest.raises(BadInput) as info:
        share.push(Ledger(here), "nosuch")
    assert str(info.value).startswith("DVC remote nosuch: ") and str(info.value).endswith(
        "; add one with `dvc remote add -d NAME URL`")


def test_annotations_on_the_remote_that_are_not_records_are_ignored(tmp_path: Path, source: dict[str, str],
                                                                   clone: Any) -> None:
    import ledger

    remote = tmp_path / "remote"
    here = ledger.open(clone(tmp_path / "here", "a"))
    here.note("a", "checked", author="alice")
    share.push(Ledger(here.root), str(remote))
    folder = remote / "annotations" / source["a"]
    (record,) = folder.iterdir()
    (folder / "notes.txt").write_text("x")  # not a record's name
    (folder / f"{'0' * 64}.json ").write_bytes(record.read_bytes())  # nor this (a space after .json)
    other = remote / "annotations" / ("A" * 64)
    other.mkdir()
    (other / record.name).write_bytes(record.read_bytes())  # not a receipt id
    where = share.resolve(Ledger(here.root), str(remote))
    assert share.remote_annotations(where) == {(source["a"], record.name)}
    there = clone(tmp_path / "there", "a", "b")
    pulled = share.pull(Ledger(there), str(remote))
    assert pulled.annotations == 1 and pulled.damaged == {}
    assert pulled.message == f"pulled 0 receipt(s) from {remote} (1 already here); 1 note/archive record(s)"
    assert [n.text for n in ledger.open(there).notes("a")] == ["checked"]
    # a record about a receipt that is not here (its marker gone from the remote, so it is not pulled) stays there
    (remote / "ids" / source["a"]).unlink()
    b_only = share.pull(Ledger(clone(tmp_path / "b-only", "b")), str(remote))
    assert (b_only.moved, b_only.annotations) == ([], 0)
    assert b_only.message == f"pulled 0 receipt(s) from {remote} (0 already here)"


def test_push_and_pull_through_s3(tmp_path: Path, s3: Any, source: dict[str, str], clone: Any) -> None:
    """The same through an S3 API (moto's server), whose listings come back with details unless asked not to."""
    a, b = source["a"], source["b"]
    here = clone(tmp_path / "here", "a", "b")
    bucket = s3.bucket()
    remote = f"s3://{bucket}/team"
    pushed = share.push(Ledger(here), remote)
    assert sorted(pushed.moved) == sorted([a, b])
    assert pushed.message == f"pushed 2 receipt(s) to {remote} (0 already there)"
    keys = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"])
    expected = sorted([f"team/ids/{rid}" for rid in (a, b)]
                      + [f"team/receipts/{rid}/{name}" for rid in (a, b) for name in _receipt_files(here, rid)])
    assert keys == expected
    pulled = share.pull(Ledger(tmp_path / "there"), remote)
    assert sorted(pulled.moved) == sorted([a, b]) and pulled.damaged == {}
    for rid in (a, b):
        assert _receipt_files(tmp_path / "there", rid) == _receipt_files(here, rid)


def test_a_pulled_receipt_joins_a_shard_folder_that_exists(tmp_path: Path, source: dict[str, str],
                                                           clone: Any) -> None:
    """Receipts live in folders named by the first characters of their id; another receipt of the same folder may
    be there already (here: the folder alone)."""
    a = source["a"]
    remote = tmp_path / "remote"
    share.push(Ledger(clone(tmp_path / "here", "a")), str(remote))
    there = tmp_path / "there"
    shard = Ledger(there).path(a).parent
    shard.mkdir(parents=True)
    pulled = share.pull(Ledger(there), str(remote))
    assert pulled.moved == [a] and Ledger(there).ids() == [a]


INSTALL = "is not installed; install it with: pip install 'stackreceipt[dvc]'"


def test_a_missing_backend_is_named_with_the_line_that_installs_it(tmp_path: Path, source: dict[str, str],
                                                                   clone: Any, make_dvc_repo: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that is not installed (here its import fails: its sys.modules entry is None) is named: s3fs for an
    s3:// URL, dvc for a DVC remote, dvc-s3 for a DVC remote on S3, each with the line that installs the dvc extra;
    a backend the extra does not bring (gcsfs, dvc-hdfs) in the words of the library that wanted it (before: every
    missing backend was called s3fs, or dvc-s3)."""
    from fsspec.registry import _registry as fsspec_classes

    here = clone(tmp_path / "here", "a")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "s3fs", None)
        for protocol in ("s3", "s3a"):
            m.delitem(fsspec_classes, protocol, raising=False)  # fsspec's class, once s3fs was imported
            with pytest.raises(MissingExtra) as info:
                share.push(Ledger(here), f"{protocol}://bucket/team")
            assert str(info.value) == f"s3fs {INSTALL}"
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "gcsfs", None)
        with pytest.raises(LedgerError) as info:
            share.pull(Ledger(here), "gs://bucket/team")
        text = str(info.value)
        assert type(info.value) is LedgerError and "gcsfs" in text and "stackreceipt" not in text
        assert text.startswith("remote gs://bucket/team cannot be opened: ImportError: ")
        assert text.endswith("; the local ledger is untouched")

    repo = make_dvc_repo(tmp_path / "repo", "s3://bucket/team")
    inside = clone(repo / "receipts", "a")
    with monkeypatch.context() as m:
        for name in ("dvc", "dvc.exceptions", "dvc.repo"):
            m.setitem(sys.modules, name, None)
        with pytest.raises(MissingExtra) as info:
            share.pull(Ledger(inside), None)
        assert str(info.value) == f"dvc {INSTALL}"
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "dvc_s3", None)
        for remote in (None, "team"):
            with pytest.raises(MissingExtra) as info:
                share.push(Ledger(inside), remote)
            assert str(info.value) == f"dvc-s3 {INSTALL}"

    hdfs = make_dvc_repo(tmp_path / "hdfs", "hdfs://namenode/team")
    elsewhere = clone(hdfs / "receipts", "a")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "dvc_hdfs", None)
        for remote, label in ((None, "(default)"), ("team", "team")):
            with pytest.raises(LedgerError) as info:
                share.push(Ledger(elsewhere), remote)
            text = str(info.value)
            assert type(info.value) is LedgerError and text.startswith(
                f"DVC remote {label} cannot be opened: ImportError: ")
            assert "'dvc-hdfs'" in text and "stackreceipt" not in text and "\n" not in text


def test_a_dvc_repository_without_a_default_remote(tmp_path: Path, source: dict[str, str], clone: Any,
                                                   make_dvc_repo: Any) -> None:
    repo = make_dvc_repo(tmp_path / "repo", str(tmp_path / "store"))
    config = repo / ".dvc" / "config"
    config.write_text(config.read_text().replace("    remote = team\n", ""))
    here = clone(repo / "receipts", "a")
    with pytest.raises(BadInput) as info:
        share.push(Ledger(here))
    text = str(info.value)
    assert text.startswith("DVC remote (default): ") and text.endswith("; add one with `dvc remote add -d NAME URL`")
    assert share.push(Ledger(here), "team").message == "pushed 1 receipt(s) to DVC remote team (0 already there)"


def test_a_dvc_remote_on_s3_given_with_a_trailing_slash(tmp_path: Path, s3: Any, source: dict[str, str],
                                                        clone: Any, make_dvc_repo: Any) -> None:
    """`dvc remote add -d team s3://bucket/team/`: the keys are team/ids/<id> and team/receipts/<id>/<file>, the
    same as without the slash (an object store would take team//ids/... for another key)."""
    a = source["a"]
    bucket = s3.bucket()
    repo = make_dvc_repo(tmp_path / "repo", f"s3://{bucket}/team/", s3.endpoint)
    here = clone(repo / "receipts", "a")
    assert share.push(Ledger(here)).moved == [a]
    keys = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == sorted([f"team/ids/{a}"] + [f"team/receipts/{a}/{name}" for name in _receipt_files(here, a)])
    pulled = share.pull(Ledger(tmp_path / "there"), f"s3://{bucket}/team")
    assert pulled.moved == [a] and _receipt_files(tmp_path / "there", a) == _receipt_files(here, a)


def test_transfers_that_fail_after_the_listing(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    """The remote lists fine, then a transfer fails: a push to a remote with a file where its receipts folder would
    be, a pull of a receipt one of whose files on the remote is a link to nowhere, a pull of a note record that is
    such a link. Each is one line naming the action, the remote and the error; a push, or a pull of receipts, leaves
    the ledger untouched; a pull that fails on a record says what it had pulled before (published already)."""
    import ledger

    a, c = source["a"], source["c"]
    here = clone(tmp_path / "here", "a")
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "receipts").write_text("")
    with pytest.raises(LedgerError) as info:
        share.push(Ledger(here), str(blocked))
    text = str(info.value)
    assert text.startswith(f"push to {blocked} failed: NotADirectoryError: ") and "\n" not in text
    assert text.endswith("; the local ledger is untouched") and not (blocked / "ids").exists()

    remote = tmp_path / "remote"
    share.push(Ledger(here), str(remote))
    (remote / "receipts" / a / "receipt.json").unlink()
    (remote / "receipts" / a / "receipt.json").symlink_to(tmp_path / "nowhere")
    there = tmp_path / "there"
    with pytest.raises(LedgerError) as info:
        share.pull(Ledger(there), str(remote))
    text = str(info.value)
    assert text.startswith(f"pull from {remote} failed: FileNotFoundError: ") and "\n" not in text
    assert text.endswith("; the local ledger is untouched")
    assert Ledger(there).ids() == [] and not [p for p in there.iterdir() if p.name.startswith(".tmp-")]

    noted = ledger.open(clone(tmp_path / "noted", "a", "c"))
    noted.note("a", "checked", author="alice")
    records = tmp_path / "records"
    share.push(Ledger(noted.root), str(records))
    (record,) = (records / "annotations" / a).iterdir()
    record.unlink()
    record.symlink_to(tmp_path / "nowhere")
    half = clone(tmp_path / "half", "a")
    with pytest.raises(LedgerError) as info:
        share.pull(Ledger(half), str(records))
    text = str(info.value)
    assert type(info.value) is LedgerError and "\n" not in text
    assert text.startswith(f"pull from {records} failed: FileNotFoundError: ")
    assert text.endswith("; 1 receipt(s) and 0 note/archive record(s) were pulled before it; the next pull fetches "
                         "the rest")
    assert sorted(Ledger(half).ids()) == sorted([a, c])  # c came over before the record failed


def test_pulls_that_fetch_no_receipt(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    """Into a ledger whose folder (and the folder above it) does not exist yet; then with nothing to fetch but a
    marker whose files are gone (no receipt folder is ever made for the pull); then with nothing new but a note
    record whose bytes do not match its name: each said in the message, and nothing left behind."""
    a = source["a"]
    remote = tmp_path / "remote"
    share.push(Ledger(clone(tmp_path / "here", "a")), str(remote))
    new = tmp_path / "team" / "receipts"
    assert share.pull(Ledger(new), str(remote)).moved == [a] and Ledger(new).ids() == [a]
    gone = "e" * 64
    (remote / "ids" / gone).write_bytes(b"")
    pulled = share.pull(Ledger(new), str(remote))
    reason = f"{gone[:12]}: ids/{gone[:12]}... is on the remote but receipts/{gone[:12]}... holds no file"
    assert (pulled.moved, pulled.already, pulled.damaged) == ([], 1, {gone: reason})
    assert pulled.message == (f"pulled 0 receipt(s) from {remote} (1 already here); 1 damaged or incomplete on the "
                              f"remote and left out ({reason}; `ledger verify` checks a receipt)")
    assert not [p for p in new.iterdir() if p.name.startswith(".tmp-")]
    (remote / "ids" / gone).unlink()
    (remote / "annotations" / a).mkdir(parents=True)
    (remote / "annotations" / a / ("0" * 64 + ".json")).write_text("{}")
    quiet = share.pull(Ledger(new), str(remote))
    why = f"annotation {'0' * 12} of {a[:12]}: its bytes do not match its name"
    assert (quiet.moved, quiet.annotations, quiet.damaged) == ([], 0, {f"annotations/{a}/{'0' * 64}.json": why})
    assert quiet.message == (f"pulled 0 receipt(s) from {remote} (1 already here); 1 damaged or incomplete on the "
                             f"remote and left out ({why}; `ledger verify` checks a receipt)")


def test_a_file_on_the_remote_that_the_receipt_does_not_list(tmp_path: Path, source: dict[str, str],
                                                             clone: Any) -> None:
    """Fetched under its own name, then named by the verification that leaves the receipt out."""
    a = source["a"]
    remote = tmp_path / "remote"
    share.push(Ledger(clone(tmp_path / "here", "a")), str(remote))
    for name in ("notesX", f"{a} "):  # the second named as the receipt's folder, with a space after it
        (remote / "receipts" / a / name).write_text("x")
        pulled = share.pull(Ledger(tmp_path / "there"), str(remote))
        assert pulled.moved == [] and pulled.damaged == {a: f"{a[:12]} {name}: not listed in the receipt (added "
                                                            "after publishing)"}
        (remote / "receipts" / a / name).unlink()


def test_a_receipt_published_meanwhile_is_left_as_it_is(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    """A pull places each verified receipt with one rename, making its folder (and the ledger's) if need be; where
    the same receipt was published meanwhile (another pull, a local run: the same content, by its id) the rename
    fails and the receipt there stays; any other failure of the rename is raised."""
    a = source["a"]
    landing = Ledger(clone(tmp_path / "landing", "a"))
    fresh = Ledger(tmp_path / "fresh" / "receipts")
    share._place(landing.path(a), fresh.path(a))
    assert fresh.ids() == [a] and not landing.path(a).exists()
    there = clone(tmp_path / "there", "a")
    before = _receipt_files(there, a)
    again = Ledger(clone(tmp_path / "again", "a"))
    share._place(again.path(a), Ledger(there).path(a))
    assert _receipt_files(there, a) == before
    with pytest.raises(FileNotFoundError):
        share._place(tmp_path / "nothing", Ledger(tmp_path / "other").path(a))
