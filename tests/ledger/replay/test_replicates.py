"""`ledger ab A B --rounds N` and `ledger rerun REF --times N`: the runs that give a verdict its between-run
evidence. The plans on hand-made receipts (order, seeds, names, tags), then `ledger ab` end to end on a plain
wrapped script: the rounds alternate A, B, are tagged as one experiment, link to what they repeat, and
`compare` takes them into the sides as replicates."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from helpers import load_receipt

from ledger.errors import BadInput
from ledger.replay.replicates import plan_ab, plan_replicates
from schemas.receipt import Launch, Receipt, Workload


def _runner(name: str, seed: int) -> Receipt:
    return Receipt(run_uuid="u", status="succeeded", name=name, tags={"sweep": "x"},
                   workload=Workload(seed=seed, launch=Launch(runner="runners.moe", config="tiny",
                                                              overrides=("steps=4",))))


def test_ab_alternates_the_sides_with_one_new_seed_per_round() -> None:
    plan = plan_ab(_runner("a", 5), _runner("b", 9), 2, experiment="e1")
    assert [p.side for p in plan] == ["A", "B", "A", "B"]
    assert [p.name for p in plan] == ["a-abe1-1", "b-abe1-1", "a-abe1-2", "b-abe1-2"]
    assert [p.command[-1] for p in plan] == ["seed=6", "seed=10", "seed=7", "seed=11"]
    assert all(p.command[1:6] == ["-m", "runners.moe", "--config", "tiny", "--set"] for p in plan)
    assert [p.tags for p in plan[:2]] == [{"sweep": "x", "ab": "e1", "ab_side": "A"},
                                          {"sweep": "x", "ab": "e1", "ab_side": "B"}]
    same = plan_ab(_runner("a", 5), _runner("b", 9), 1, same_seed=True, experiment="e1")
    assert [p.command[-1] for p in same] == ["steps=4", "steps=4"]  # no seed override: the seed is kept


def test_rerun_times_plans_seeds_plus_one_to_n() -> None:
    plan = plan_replicates(_runner("a", 5), 3, experiment="e2")
    assert [p.command[-1] for p in plan] == ["seed=6", "seed=7", "seed=8"]
    assert [p.name for p in plan] == ["a-repe2-1", "a-repe2-2", "a-repe2-3"]
    assert all(p.tags == {"sweep": "x", "replicates": "e2"} and p.side == "A" for p in plan)


@pytest.mark.parametrize("n", [0, 51])
def test_counts_out_of_range_are_refused(n: int) -> None:
    with pytest.raises(BadInput, match=f"--rounds must be between 1 and 50, got {n}"):
        plan_ab(_runner("a", 0), _runner("b", 0), n)
    with pytest.raises(BadInput, match=f"--times must be between 1 and 50, got {n}"):
        plan_replicates(_runner("a", 0), n)


SCRIPT = textwrap.dedent("""
    import sys
    lr = float(sys.argv[1])
    loss = 3.0
    for step in range(1, 5):
        loss *= 1 - 10 * lr
        print(f"step {step} loss {loss:.6f}")
""")


@pytest.mark.slow  # four `ledger record` launches
def test_ab_records_alternating_replicates_that_compare_takes(ledger_cli, ledger_dir, tmp_path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    for name, lr in (("slow", "1e-3"), ("fast", "3e-3")):
        ledger_cli("record", "--name", name, "--", sys.executable, "train.py", lr, check=True)
    bad = ledger_cli("ab", "slow", "fast", "--rounds", "0")
    assert bad.returncode == 2 and bad.stderr.strip() == "Error: --rounds must be between 1 and 50, got 0"
    done = ledger_cli("ab", "slow", "fast", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    assert "ledger: recording 2 run(s): 1 of slow, 1 of fast" in done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line[:2] in ("A ", "B ")]
    assert [(side, name.split("-ab")[0]) for side, name, _ in lines] == [("A", "slow"), ("B", "fast")]
    ids = {row["name"]: row["id"] for row in json.loads(ledger_cli("ls", "--json", check=True).stdout)}
    show = {side: load_receipt(ledger_dir, ids[name]) for side, name, _ in lines}
    original = {side: load_receipt(ledger_dir, ids[ref]) for side, ref in (("A", "slow"), ("B", "fast"))}
    experiment = show["A"]["tags"]["ab"]
    for side in ("A", "B"):
        assert show[side]["tags"] == {"ab": experiment, "ab_side": side}
        assert show[side]["links"]["replicates"] == original[side]["id"]
        assert show[side]["command"] == original[side]["command"]
    assert show["A"]["started_at"] < show["B"]["started_at"]  # type: ignore[operator]
    assert [short for _, _, short in lines] == [show["A"]["id"][:12], show["B"]["id"][:12]]  # type: ignore[index]
    result = json.loads(ledger_cli("compare", "slow", "fast", "--json", check=True).stdout)
    assert result["replicates"] == {"A": [show["A"]["id"]], "B": [show["B"]["id"]]}
    assert sorted(result["a"]["names"]) == sorted(["slow", show["A"]["name"]])
