"""`ledger claim`: the sentence a comparison supports, and whether it holds at another scale (end to end on
CPU with a planted slowdown, plus the rules on hand-made comparison rows)."""

from __future__ import annotations

import json

import pytest
from helpers import load_receipt

from ledger.replay.claims import LOSS, THROUGHPUT, holds, state

TINY = ["python", "-m", "runners.moe", "--config", "tiny", "--set", "steps=16", "--set", "model.layers=1",
        "--set", "eval_every=8"]


def _cmp(ratio: float, verdict: str, loss_verdict: str = "no significant difference", **extra: object) -> dict:
    return {"metrics": [
        {"name": THROUGHPUT, "ratio": ratio, "ci": [ratio * 0.95, ratio * 1.05], "verdict": verdict, "reason": None},
        {"name": LOSS, "ratio": 1.0, "verdict": loss_verdict, "note": "mean over 1,000..2,048 tokens",
         "reason": None}], "confounded": [], **extra}


def test_claim_sentences() -> None:
    faster = state(_cmp(1.31, "better"), "A", "B")
    assert faster.text == ("B runs at 1.31x the speed of A (31% faster) at equal loss at 2,048 tokens "
                           "(tokens/s per device, 95% CI [1.24, 1.38])")
    slower = state(_cmp(0.5, "worse", "worse"), "A", "B")
    assert slower.faster is False and "but its loss at matched tokens is worse" in slower.text
    none = state(_cmp(1.01, "no significant difference"))
    assert none.faster is None and none.text.startswith("no significant throughput difference")
    assert holds(faster, state(_cmp(1.2, "better")))[0]
    assert not holds(faster, state(_cmp(0.9, "worse")))[0]
    assert not holds(faster, none)[0]
    assert holds(faster, state(_cmp(1.2, "better", "worse"))) == (False, "the loss verdict changed: "
                                                                 "no significant difference -> worse")


def test_the_words_match_the_numbers() -> None:
    """Issue 35's misleading texts: a verdict that did not say which rule decided it, and a ratio below 1 read
    as "0.90x slower" (it is 0.90x the speed: 10% slower)."""
    def row(ratio: float, ci: list[float], verdict: str, rule: str) -> dict:
        return {"metrics": [
            {"name": THROUGHPUT, "ratio": ratio, "ci": ci, "verdict": verdict, "reason": None,
             "evidence": "3 vs 3 runs", "rule": rule},
            {"name": LOSS, "ratio": 1.0, "verdict": "no significant difference", "note": "..2,048 tokens",
             "reason": None}], "confounded": []}

    level = state(row(1.12, [1.0, 1.26], "no significant difference",
                      "p = 0.048 > 0.04, the speed family's level"), "e10", "l1")
    assert level.text == ("no significant throughput difference between l1 and e10: 1.12x at equal loss at 2,048 "
                          "tokens (tokens/s per device, 95% CI [1.00, 1.26], 3 vs 3 runs; p = 0.048 > 0.04, the "
                          "speed family's level)")
    small = state(row(1.05, [1.01, 1.09], "no significant difference",
                      "1.05x is below the 5% minimum change (p = 0.011 < 0.04, the speed family's level)"))
    assert "1.05x is below the 5% minimum change" in small.text and small.faster is None
    slower = state(row(0.90, [0.866, 0.942], "worse", "p = 0.001 < 0.04, and 0.9x exceeds the 5% minimum change"),
                   "e10", "l1")
    assert slower.text.startswith("l1 runs at 0.90x the speed of e10 (10% slower) at equal loss")
    assert "slower than" not in slower.text and slower.faster is False
    faster = state(row(1.15, [1.1, 1.2], "better", "p = 0.001 < 0.04"), "A", "B")
    assert faster.text.startswith("B runs at 1.15x the speed of A (15% faster)")
    # two replicates that differ: still no claim about the configuration, but the finding is named
    same = state({**row(0.85, [0.8, 0.9], "worse", "p = 0.002 < 0.04, the speed family's level"),
                  "same_config": True}, "r1", "r2")
    assert not same.supported
    assert "but these two runs differ: r2 ran at 0.85x the speed of r1 (15% slower)" in same.text
    assert "a finding about the runs" in same.text


def test_no_claim_without_between_run_evidence() -> None:
    steps = ["ledger ab A B --rounds 3", "ledger rerun A --times 2 && ledger rerun B --times 2"]
    one = state(_cmp(1.36, "inconclusive", next_steps=steps), "A", "B")
    assert not one.supported and one.faster is None and one.speedup is None
    assert one.text.startswith("no claim: the throughput verdict is inconclusive") and "ledger ab A B" in one.text
    assert list(one.missing) == steps
    same = state(_cmp(1.36, "same configuration", same_config=True), "A", "B")
    assert not same.supported and "replicates of one configuration" in same.text
    twin = state(_cmp(1.36, "same configuration", same_config=True, identical=True), "A", "B")
    assert not twin.supported and "identical" in twin.text
    faster = state(_cmp(1.31, "better"), "A", "B")
    assert holds(faster, one) == (False, f"at the other scale the evidence supports no claim ({one.text})")


@pytest.mark.slow
def test_claim_at_another_scale_end_to_end(ledger_cli, ledger_dir) -> None:
    # the planted delay (0.5 s) dominates a tiny step (~20 ms) even on a loaded machine: load can halve the fast
    # runs' throughput, and differently in each, so that 2 vs 2 runs (t at 2 df: 4.3) need a large effect; with
    # 0.25 s, a 7.6x ratio once came out inconclusive (95% CI [0.96, 49.6]) at load 8
    ledger_cli("record", "--name", "slow", "--", *TINY, "--set", "steps=8", "--set", "delay_s=0.5", check=True)
    ledger_cli("record", "--name", "fast", "--", *TINY, "--set", "steps=8", check=True)
    alone = ledger_cli("claim", "slow", "fast")  # one run per side, no replicate group: no claim
    assert alone.returncode == 1 and alone.stdout.startswith("no claim: the throughput verdict is inconclusive")
    # a replicate each (another seed), recorded the way the claim's message says (2 vs 2 runs: df=2, enough
    # for a 5x planted effect, and four replays rather than six keep the test lean)
    for ref in ("slow", "fast"):
        rep = ledger_cli("rerun", ref, "--times", "1")
        assert rep.returncode == 0, rep.stderr
    stated = ledger_cli("claim", "slow", "fast")
    assert stated.returncode == 0, stated.stderr
    assert stated.stdout.startswith("fast runs at ") and "x the speed of slow (" in stated.stdout
    assert "% faster)" in stated.stdout
    assert "2 vs 2 runs" in stated.stdout
    out = ledger_cli("claim", "slow", "fast", "--at", "layers=x2", "--json", timeout=600)  # four replays
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["holds"] is True and result["at"] == "layers=x2"
    assert result["original"]["faster"] is True and result["scaled"]["faster"] is True
    replayed = [load_receipt(ledger_dir, rid) for rid in result["replayed"]]
    assert [r["workload"]["model"]["layers"] for r in replayed] == [2] * 4
    assert sorted(r["workload"]["seed"] for r in replayed) == [0, 0, 1, 1]
    assert all(r["links"]["replicates"] for r in replayed)
    bad = ledger_cli("claim", "slow", "fast", "--at", "depth=2")
    assert bad.returncode == 2 and "unknown scale dimension" in bad.stderr
