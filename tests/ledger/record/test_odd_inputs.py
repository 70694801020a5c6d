"""Odd input is named, not dropped in silence nor repeated whole (issue 34, item 10): rank directories whose
names are not a rank's are left out with a note in the receipt, and a `--name` too long for a ref gets an
error that shows its start and its length, not its 10,000 characters."""

from __future__ import annotations

from helpers import ids_in, load_receipt


def test_rank_directories_with_odd_names_are_left_out_with_a_note(ledger_cli, ledger_dir, workload) -> None:
    script = workload(
        """
import os
run_dir = os.environ["LEDGER_RUN_DIR"]
for name in ("rank--1", "rank-99999999999", "rank-x"):
    os.makedirs(os.path.join(run_dir, name))
    with open(os.path.join(run_dir, name, "steps.jsonl"), "w") as f:
        f.write('{"step": 1000, "loss": 0.1}\\n')
""",
        steps=3,
    )
    proc = ledger_cli("record", "--name", "odd", "--", "python", str(script))
    assert proc.returncode == 0, proc.stderr
    (rid,) = ids_in(ledger_dir)
    r = load_receipt(ledger_dir, rid)
    assert r["status"] == "succeeded" and r["summary"]["steps"] == 3  # their rows are not taken
    notes = {p["source"]: p["message"] for p in r["problems"]}
    for name in ("rank--1", "rank-99999999999", "rank-x"):
        assert notes.get(f"{name}/", "").startswith("not a rank directory"), notes


def test_an_overlong_name_is_refused_without_repeating_it(ledger_cli, ledger_dir) -> None:
    name = "n" * 10_000
    proc = ledger_cli("record", "--name", name, "--", "true")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and len(line) < 400, line[:400]
    assert line.startswith(f"Error: --name {'n' * 40!r}... (10,000 characters): a name is also a ref, so it must be "
                           "1 to 200 characters")
    assert ids_in(ledger_dir) == []
    refused = ledger_cli("show", "r" * 5_000)
    assert refused.returncode == 2 and "(5,000 characters)" in refused.stderr and len(refused.stderr) < 400
