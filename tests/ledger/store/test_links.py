"""No symbolic link is followed inside the ledger or the staging fallback (issue 34, item 5): a journal planted as
a link does not get published ids appended to its target (the run waits in staging, with a one-line error that
says how to fix it, and is published once the link is gone); the gates and the shard directories are not
written through links either; and a run whose ledger cannot be written is staged in a private directory of its
user's, never in a directory or link planted under the shared name in $TMPDIR."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from helpers import ids_in, load_receipt


def test_a_linked_journal_is_never_written_through(ledger_cli, ledger_dir, workload, tmp_path: Path) -> None:
    script = workload(steps=3)
    ledger_cli("record", "--name", "first", "--", "python", str(script), check=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file\n")
    (ledger_dir / "journal").unlink()
    (ledger_dir / "journal").symlink_to(outside)
    gate = tmp_path / "planted-gate"
    (ledger_dir / "index.readers").unlink(missing_ok=True)
    (ledger_dir / "index.readers").symlink_to(gate)
    proc = ledger_cli("record", "--name", "second", "--", "python", str(script))
    assert proc.returncode == 75, proc.stderr
    journal = ledger_dir / "journal"
    assert f"{journal} is a symbolic link (to {outside}); ledger never writes through one: remove it" in proc.stderr
    assert outside.read_text() == "someone else's file\n"  # before: the new id was appended here
    assert len(ids_in(ledger_dir)) == 1  # the second run waits in staging
    listed = ledger_cli("ls", "--json", check=True)  # a linked journal reads as none: every shard is listed
    assert [r["name"] for r in json.loads(listed.stdout)] == ["first"]
    assert not gate.exists()  # the readers' gate was not created through its link
    journal.unlink()
    out = ledger_cli("recover")
    assert out.returncode == 0 and "published" in out.stdout, out.stdout + out.stderr
    assert sorted(r["name"] for r in json.loads(ledger_cli("ls", "--json", check=True).stdout)) == ["first", "second"]
    assert not journal.is_symlink() and outside.read_text() == "someone else's file\n"


def test_a_linked_shard_directory_is_not_published_into(ledger_cli, ledger_dir, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ledger_dir.mkdir()
    for shard in (f"{i:02x}" for i in range(256)):  # whichever shard the receipt lands in is a link outside
        (ledger_dir / shard).symlink_to(elsewhere, target_is_directory=True)
    out = ledger_cli("record", "--name", "other", "--", "python", "-c", "print('hello')")
    assert out.returncode == 75 and "is a symbolic link; ledger never writes through one" in out.stderr, out.stderr
    assert list(elsewhere.iterdir()) == []
    assert len(list((ledger_dir / ".staging").iterdir())) == 1  # the run waits for `ledger recover`


def _unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    return blocker / "receipts"


def test_the_staging_fallback_is_private_and_follows_no_planted_link(ledger_cli, workload, tmp_path: Path) -> None:
    """Before: ``$TMPDIR/ledger-staging``, a link planted by another user to their world-writable directory, got
    the run staged into it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    for name in ("ledger-staging", f"ledger-staging-{os.getuid()}"):
        (tmpdir / name).symlink_to(theirs, target_is_directory=True)
    script = workload(steps=3)
    proc = ledger_cli("record", "--ledger", str(_unwritable(tmp_path)), "--", "python", str(script),
                      env={"TMPDIR": str(tmpdir)})
    assert proc.returncode == 75, proc.stderr
    assert list(theirs.iterdir()) == []
    staged = re.search(r"staging this run in (\S+) instead", proc.stderr)
    assert staged, proc.stderr
    root = Path(staged.group(1))
    st = os.lstat(root)
    assert root.parent == tmpdir and stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid()
    target = tmp_path / "target"
    out = ledger_cli("recover", "--from", str(root), "--ledger", str(target))
    assert out.returncode == 0 and "published" in out.stdout, out.stdout + out.stderr
    (rid,) = ids_in(target)
    assert load_receipt(target, rid)["summary"]["steps"] == 3
    # with no planted name, the user's own fallback is made once, private, and used again
    for name in ("ledger-staging", f"ledger-staging-{os.getuid()}"):
        (tmpdir / name).unlink()
    again = ledger_cli("record", "--ledger", str(_unwritable(tmp_path)), "--", "true", env={"TMPDIR": str(tmpdir)})
    assert f"staging this run in {tmpdir / f'ledger-staging-{os.getuid()}'} instead" in again.stderr
    assert stat.S_IMODE(os.lstat(tmpdir / f"ledger-staging-{os.getuid()}").st_mode) == 0o700


def test_a_linked_staging_directory_is_not_staged_into(ledger_cli, ledger_dir, workload, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ledger_dir.mkdir()
    (ledger_dir / ".staging").symlink_to(elsewhere, target_is_directory=True)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = ledger_cli("record", "--", "python", str(workload(steps=2)), env={"TMPDIR": str(tmpdir)})
    assert proc.returncode == 0, proc.stderr  # staged in the private fallback, published into the ledger
    assert f"{ledger_dir / '.staging'} is a symbolic link; ledger never stages runs through one" in proc.stderr
    assert f"staging this run in {tmpdir / f'ledger-staging-{os.getuid()}'} instead" in proc.stderr
    assert list(elsewhere.iterdir()) == []
    (rid,) = ids_in(ledger_dir)
    assert load_receipt(ledger_dir, rid)["summary"]["steps"] == 2
