"""`ledger recover` publishes what a run staged, once, and only from a staging root (issue 34, items 1 and 7):
a run whose wrapper died before its metric capture ran gets its steps from ``output.log``; ``--from`` given one
run's own staging directory (the path a wrapper that could not publish names), or a part of it, is refused with
the root to give instead, and nothing is published from it."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from helpers import ids_in, load_receipt

ZERO_CODE = """
import time
for step in range(1, 6):
    print(f"step {step} loss {2.0 / step:.4f}", flush=True)
time.sleep(0.2)
"""


def _unwritable(tmp_path: Path) -> Path:
    """A ledger path that cannot be made: its parent is a file."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    return blocker / "receipts"


def test_a_runs_own_staging_directory_is_refused_with_its_root(ledger_cli, workload, tmp_path: Path) -> None:
    """Before: `recover --from <the run's directory>` published two bogus receipts (its rank-00000/ and wrapper/
    as runs) and the real run then came out with 0 of its 3 steps."""
    script = workload(steps=3)
    proc = ledger_cli("record", "--ledger", str(_unwritable(tmp_path)), "--", "python", str(script),
                      env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 75, proc.stderr
    kept = re.search(r"the run's data is kept in (\S+);", proc.stderr)
    root = re.search(r"`ledger recover --from (\S+) --ledger", proc.stderr)
    assert kept and root, proc.stderr
    run_dir, staging = Path(kept.group(1)), Path(root.group(1))
    assert run_dir.parent == staging and (run_dir / "rank-00000").is_dir()
    target = tmp_path / "target"
    for wrong in (run_dir, run_dir / "rank-00000", run_dir / "wrapper"):
        if not wrong.is_dir():
            continue
        out = ledger_cli("recover", "--from", str(wrong), "--ledger", str(target))
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip() == (f"Error: {wrong} is one run's staging directory (or a part of one), not a "
                                      f"staging root: give the directory that holds it, `ledger recover --from "
                                      f"{staging}`")
        assert ids_in(target) == []
    out = ledger_cli("recover", "--from", str(staging), "--ledger", str(target))
    assert out.returncode == 0 and "published" in out.stdout, out.stdout + out.stderr
    (rid,) = ids_in(target)
    r = load_receipt(target, rid)
    assert (r["status"], r["summary"]["steps"]) == ("succeeded", 3)


def test_a_wrapper_killed_before_its_capture_is_recovered_from_the_log(ledger_cli, ledger_dir, tmp_path) -> None:
    """The wrapper is SIGKILLed once the launch ended and the log is written, before the output's metric tables
    are staged (the `finalizing` fault): `ledger recover` reads output.log and publishes every printed step."""
    script = tmp_path / "zero_code.py"
    script.write_text(textwrap.dedent(ZERO_CODE))
    proc = ledger_cli("record", "--name", "killed", "--", "python", str(script), env={"LEDGER_FAULT_AT": "finalizing"})
    assert proc.returncode == -9
    (run_dir,) = (ledger_dir / ".staging").iterdir()
    assert "step 5 loss 0.4000" in (run_dir / "output.log").read_text()
    assert not any((run_dir / name).exists() for name in ("rank-00000", "captured"))  # nothing of the capture
    out = ledger_cli("recover")
    assert out.returncode == 0 and "published" in out.stdout, out.stdout + out.stderr
    (rid,) = ids_in(ledger_dir)
    r = load_receipt(ledger_dir, rid)
    assert (r["status"], r["summary"]["steps"], r["summary"]["final_loss"]) == ("succeeded", 5, 0.4)
