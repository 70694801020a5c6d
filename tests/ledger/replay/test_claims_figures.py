"""`ledger claim` in this process: the sentence for every kind of comparison row (words, figures and their
rounding), whether a claim holds at another scale, and :func:`ledger.replay.claims.claim` on a real ledger of
imported runs (three replicates a side, B exactly twice as fast in every run), its interval checked against
scipy's t interval on the runs' log throughputs, and a damaged file of any run of the evidence refused."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import golden_run
from scipy import stats

from ledger.errors import BadInput, DamagedReceipt, LedgerError
from ledger.replay.claims import LOSS, THROUGHPUT, Claim, ClaimCheck, claim, holds, state
from ledger.store.receipts import Ledger

STEPS = ["ledger ab A B --rounds 3", "ledger rerun A --times 2 && ledger rerun B --times 2", "ledger rerun C"]


def thr(ratio: float | None, verdict: str, ci: list[float] | None = None, **extra: object) -> dict:
    return {"name": THROUGHPUT, "ratio": ratio, "ci": ci, "verdict": verdict, "reason": None, **extra}


def loss(verdict: str, ratio: float | None = 1.0, note: str = "mean over 1,000..2,048 tokens", **extra: object) -> dict:
    return {"name": LOSS, "ratio": ratio, "verdict": verdict, "note": note, "reason": None, **extra}


def comparison(*rows: dict, **extra: object) -> dict:
    return {"metrics": [{"name": "step time", "verdict": "better", "ratio": 9.0}, *rows], **extra}


# ---------------------------------------------------------------------------------------------- state
def test_a_supported_claim_in_words_and_figures() -> None:
    c = state(comparison(thr(1.3149, "better", [1.2449, 1.3851], evidence="3 vs 3 runs", rule="p = 0.001 < 0.05"),
                         loss("no significant difference"),
                         confounded=[{"factors": ["software", "hardware"]}, {"factors": ["hardware", "code"]}]),
              "base", "new")
    assert c == Claim("new runs at 1.31x the speed of base (31% faster) at equal loss at 2,048 tokens (tokens/s per "
                      "device, 95% CI [1.24, 1.39], 3 vs 3 runs; p = 0.001 < 0.05); confounded: code, hardware, "
                      "software changed together", 1.3149, (1.2449, 1.3851), True, "no significant difference",
                      ["code", "hardware", "software"])
    assert c.supported and c.missing == ()
    assert c.to_json() == {"claim": c.text, "speedup": 1.3149, "speedup_ci": (1.2449, 1.3851), "faster": True,
                           "loss_verdict": "no significant difference",
                           "confounded": ["code", "hardware", "software"], "supported": True, "missing": []}
    # without an interval, evidence or rule: the unit alone; the default names are A and B
    bare = state(comparison(thr(0.5, "worse"), loss("identical", note="1,000..4,096 tokens")))
    assert bare.text == ("B runs at 0.50x the speed of A (50% slower) at identical loss at 4,096 tokens (tokens/s per "
                         "device)")
    assert bare.faster is False and bare.speedup_ci is None and bare.loss_verdict == "identical"
    ruled = state(comparison(thr(2, "better", rule="p = 0.01 < 0.05"), loss("no significant difference", note="")))
    assert ruled.text == ("B runs at 2.00x the speed of A (100% faster) at equal loss at matched tokens "
                          "(tokens/s per device; p = 0.01 < 0.05)")
    assert ruled.speedup == 2.0 and isinstance(ruled.speedup, float)
    almost = state(comparison(thr(1.004, "better", [1.001, 1.007]), loss("no significant difference")))
    assert almost.text.startswith("B runs at 1.00x the speed of A at equal loss") and almost.faster is True


def test_a_claim_says_when_the_loss_is_worse_better_or_unknown() -> None:
    worse = state(comparison(thr(1.5, "better", [1.4, 1.6]), loss("worse", 1.02345, note="512..1,536 tokens")))
    assert worse.text == ("B runs at 1.50x the speed of A (50% faster), but its loss at matched tokens is worse "
                          "(1.023x at 1,536 tokens) (tokens/s per device, 95% CI [1.40, 1.60])")
    assert worse.loss_verdict == "worse"
    no_ratio = state(comparison(thr(1.5, "better"), loss("better", None, note="")))
    assert ", but its loss at matched tokens is better (nanx at matched tokens)" in no_ratio.text
    missing = state(comparison(thr(1.5, "better")))
    assert missing.text == ("B runs at 1.50x the speed of A (50% faster), loss at matched tokens unavailable (no loss "
                            "row) (tokens/s per device)") and missing.loss_verdict == "unavailable"
    gone = state(comparison(thr(1.5, "better"), {**loss("unavailable", None), "reason": "A: no tokens column"}))
    assert gone.text.startswith("B runs at 1.50x the speed of A (50% faster), loss at matched tokens unavailable "
                                "(A: no tokens column) (")
    same = state(comparison(thr(1.0123, "no significant difference", [0.98, 1.04]), loss("no significant difference")),
                 "x", "y")
    assert same.text == ("no significant throughput difference between y and x: 1.01x at equal loss at 2,048 tokens "
                         "(tokens/s per device, 95% CI [0.98, 1.04])")
    assert same.faster is None and same.supported and same.speedup == 1.0123


def test_no_claim_without_evidence_and_what_would_give_it() -> None:
    identical = state(comparison(thr(1.0, "identical"), identical=True, same_config=True, next_steps=STEPS,
                                 confounded=[{"factors": ["seed"]}]), "r1", "r2")
    assert identical == Claim("no claim: r1 and r2 are identical (one configuration, bit-identical loss curves); "
                              "their speed differs only by the machine's run-to-run noise", None, None, None,
                              "identical", ["seed"], False)
    replicas = state(comparison(thr(1.0, "no significant difference"), same_config=True), "r1", "r2")
    assert replicas == Claim("no claim: r1 and r2 are replicates of one configuration (they differ at most in the "
                             "seed)", None, None, None, "same configuration", [], False)
    for verdict in ("better", "worse"):
        found = state(comparison(thr(1.25, verdict, rule="p = 0.002 < 0.05"), same_config=True), "r1", "r2")
        assert found.text == ("no claim: r1 and r2 are replicates of one configuration (they differ at most in the "
                              "seed); but these two runs differ: r2 ran at 1.25x the speed of r1 (25% faster) (p = "
                              "0.002 < 0.05): a finding about the runs (a node, a driver, a noisy neighbour), not "
                              "the configuration")
    assert state(comparison(thr(1.25, "higher"), same_config=True)).text.endswith("(they differ at most in the seed)")
    assert state(comparison(thr(None, "better"), same_config=True)).text.endswith("(they differ at most in the seed)")
    assert "but these two runs differ: B ran at 0.80x the speed of A (20% slower): a finding" in state(
        comparison(thr(0.8, "worse"), same_config=True)).text
    # one run per side: the reason, the first two commands, and every command in `missing`
    one = state(comparison({**thr(1.36, "inconclusive"), "reason": "one run per side"}, loss("inconclusive"),
                           next_steps=STEPS))
    assert one == Claim(f"no claim: the throughput verdict is inconclusive (one run per side); get it with: "
                        f"{STEPS[0]} or {STEPS[1]}", None, None, None, "inconclusive", [], False, tuple(STEPS))
    nothing = state(comparison())
    assert nothing == Claim("no claim: the throughput verdict is unavailable (no throughput row)", None, None, None,
                            "unavailable", [], False, ())
    no_ratio = state(comparison({**thr(None, "better"), "reason": None}, loss("worse")))
    assert not no_ratio.supported and no_ratio.loss_verdict == "worse"
    for verdict in ("unavailable", "same configuration", "identical"):
        assert not state(comparison({**thr(1.2, verdict), "reason": "why"})).supported


def test_a_throughput_row_without_a_reason_is_not_called_missing() -> None:
    """Two configurations whose throughput values are equal get an ``identical`` row whose reason is None and whose
    rule says why: the claim said "(no throughput row)" about a row that is there."""
    equal = state(comparison(thr(1.0, "identical", rule="equal values on both sides"), loss("worse")))
    assert equal.text == "no claim: the throughput verdict is identical (equal values on both sides)"
    assert not equal.supported
    bare = state(comparison(thr(1.2, "inconclusive"), loss("worse")))
    assert bare.text == "no claim: the throughput verdict is inconclusive (no reason given)"


# ---------------------------------------------------------------------------------------------- holds
def test_whether_a_claim_holds_at_another_scale() -> None:
    faster = state(comparison(thr(1.3, "better"), loss("no significant difference")))
    slower = state(comparison(thr(0.7, "worse"), loss("no significant difference")))
    flat = state(comparison(thr(1.01, "no significant difference"), loss("no significant difference")))
    none = state(comparison())
    assert holds(faster, state(comparison(thr(1.1, "better"), loss("no significant difference")))) == (
        True, "same sign, significant, same loss verdict")
    assert holds(slower, state(comparison(thr(0.9, "worse"), loss("no significant difference"))))[0] is True
    assert holds(faster, slower) == (False, "at the other scale the effect has the opposite sign")
    assert holds(slower, faster) == (False, "at the other scale the effect has the opposite sign")
    assert holds(faster, flat) == (False, "at the other scale the throughput difference is not significant")
    assert holds(faster, none) == (False, f"at the other scale the evidence supports no claim ({none.text})")
    assert holds(flat, faster) == (False, "the original comparison supports no speed claim")
    assert holds(none, faster) == (False, "the original comparison supports no speed claim")
    assert holds(faster, state(comparison(thr(1.1, "better"), loss("better")))) == (
        False, "the loss verdict changed: no significant difference -> better")


def test_a_claim_check_and_its_json() -> None:
    faster = state(comparison(thr(1.3, "better"), loss("no significant difference")))
    alone = ClaimCheck(faster)
    assert alone.ok and alone.to_json() == faster.to_json()
    assert not ClaimCheck(state(comparison())).ok
    scaled = state(comparison(thr(0.9, "worse"), loss("no significant difference")))
    check = ClaimCheck(faster, "layers=x2", scaled, False, "opposite", ("r1", "r2"))
    assert not check.ok
    assert check.to_json() == {"original": faster.to_json(), "scaled": scaled.to_json(), "at": "layers=x2",
                               "holds": False, "why": "opposite", "replayed": ["r1", "r2"]}
    assert ClaimCheck(faster, "layers=x2", faster, True, "same").ok


# --------------------------------------------------------------------------------------- claim (ledger)
SLOWNESS = (1.0, 1.1, 0.95)
"""The three replicates' step-time factors: B's runs take half the time of A's, run for run."""


@pytest.fixture
def evidence(tmp_path: Path) -> tuple[Ledger, dict[str, str]]:
    """a1..a3 (NCCL ring) and b1..b3 (NCCL tree), seeds 1..3, one loss curve for all; b_i takes half a_i's time."""
    ledger = Ledger(tmp_path / "receipts")
    ids = {}
    for i, slow in enumerate(SLOWNESS, 1):
        ids[f"a{i}"] = golden_run(ledger, tmp_path, f"a{i}", i, "Ring", slow)
        ids[f"b{i}"] = golden_run(ledger, tmp_path, f"b{i}", i, "Tree", slow / 2)
    return ledger, ids


def test_a_claim_from_the_ledger_agrees_with_a_t_interval_by_hand(evidence: tuple[Ledger, dict[str, str]]) -> None:
    ledger, _ = evidence
    # per run, throughput is (tokens per step) / (step time) with one step pattern: log throughput = c - log(slow)
    # for A and c + log 2 - log(slow) for B; the pooled t interval of the difference of the means, exponentiated
    log_a = -np.log(SLOWNESS)
    log_b = math.log(2) - np.log(SLOWNESS)
    se = np.std(log_a, ddof=1) * math.sqrt(1 / 3 + 1 / 3)  # both sides have the same spread
    t = stats.t.ppf(0.975, 4)
    low, high = math.exp(math.log(2) - t * se), math.exp(math.log(2) + t * se)
    p = stats.ttest_ind(log_b, log_a).pvalue
    result = claim(ledger, "a1", "b1")
    assert result.ok and result.at is None and result.scaled is None and result.holds is None
    got = result.original
    assert got.supported and got.faster is True and got.loss_verdict == "identical" and got.confounded == []
    assert got.speedup == pytest.approx(2.0, rel=1e-12)
    assert got.speedup_ci == pytest.approx((low, high), rel=1e-9)
    assert got.text == (f"b1 runs at 2.00x the speed of a1 (100% faster) at identical loss at 15,360 tokens "
                        f"(tokens/s per device, 95% CI [{low:.2f}, {high:.2f}], 3 vs 3 runs; p = {p:.2g} < 0.05, the "
                        "speed family's level, and 2x exceeds the 5% minimum change)")
    assert (30 * 128 * 4) == 15_360  # the tokens at the last matched step: 30 steps of 128 x 4 tokens
    assert result.to_json() == got.to_json()
    slower = claim(ledger, "b2", "a3").original
    assert slower.faster is False and slower.speedup == pytest.approx(0.5, rel=1e-12)
    assert slower.text.startswith("a3 runs at 0.50x the speed of b2 (50% slower) at identical loss")


def test_no_claim_between_replicates_and_no_replay_of_it(evidence: tuple[Ledger, dict[str, str]]) -> None:
    ledger, _ = evidence
    twins = claim(ledger, "a1", "a2", at="layers=x2")  # no claim: nothing is replayed
    assert twins == ClaimCheck(twins.original)
    assert not twins.ok and twins.original.text.startswith("no claim: a1 and a2 are identical")
    assert len(ledger.ids()) == 6
    with pytest.raises(BadInput, match="unknown scale dimension in 'depth=2'"):
        claim(ledger, "a1", "b1", at="depth=2")
    # a claim that would be replayed: imported runs have no launch to rebuild, and nothing is recorded
    with pytest.raises(BadInput, match=r"was imported from evidence \(megatron-golden\); there is no launch to "
                                       "rebuild"):
        claim(ledger, "a1", "b1", at="layers=x2")
    assert len(ledger.ids()) == 6


@pytest.mark.parametrize("damaged", ["b3", "a2"])
def test_a_changed_file_of_any_run_of_the_evidence_is_refused(evidence: tuple[Ledger, dict[str, str]],
                                                              damaged: str) -> None:
    ledger, ids = evidence
    steps = ledger.path(ids[damaged]) / "steps.parquet"
    steps.chmod(0o644)
    data = bytearray(steps.read_bytes())
    data[len(data) // 2] ^= 0xFF
    steps.write_bytes(bytes(data))
    with pytest.raises(DamagedReceipt, match=f"receipt {ids[damaged][:12]}: "):
        claim(ledger, "a1", "b1")


def test_a_replay_that_does_not_finish_is_refused_and_kept_as_a_failed_replicate(tmp_path: Path) -> None:
    """Runner receipts (recorded through the SDK, their launch `runners.moe --config nosuch`): the claim is stated,
    then the first run of the evidence is replayed at the other scale under `ledger record`; the runner refuses
    the unknown config at once, and the claim stops there, naming the run, the scale and the exit status. The
    replay is in the ledger as what it was: a failed run, linked as a replicate of its run, tagged with the scale,
    its command the rebuilt one."""
    import io
    import sys

    import ledger
    import ledger.sdk

    lg = ledger.open(tmp_path / "receipts")
    ids = {}
    for side, precision, factor in (("a", "fp32", 1.0), ("b", "bf16", 0.5)):
        for seed, slow in enumerate(SLOWNESS, 1):
            with lg.recording(name=f"{side}{seed}", tags={"sweep": side}) as rec:
                run = ledger.sdk.current()
                run.set_workload({"seed": seed, "precision": {"compute": precision},
                                  "model": {"num_experts": 4, "top_k": 2, "layers": 1},
                                  "launch": {"runner": "runners.moe", "config": "nosuch"}})
                for step in range(1, 13):
                    seconds = slow * factor * (1 + 0.01 * (step * 7 % 5))
                    run.log_step(step, loss=4.0 / step, tokens=step * 256, step_time_s=seconds,
                                 tokens_per_s=256 / seconds)
            assert rec.receipt is not None
            ids[f"{side}{seed}"] = rec.receipt.id
    stated = claim(Ledger(lg.root), "a1", "b1")
    assert stated.ok and stated.original.faster is True
    assert stated.original.speedup == pytest.approx(2.0, rel=1e-9)
    output = io.BytesIO()
    first = ids["a1"][:12]  # A named by an id prefix: the replay is still named after its run
    with pytest.raises(LedgerError) as info:
        claim(Ledger(lg.root), first, "b1", at="layers=x2", replay_output=output)
    assert type(info.value) is LedgerError
    assert str(info.value) == f"the replay of {first} at layers=x2 did not finish (exit 2)"
    (replay,) = [r for r in lg.receipts() if r.id not in ids.values()]
    assert replay.name == "a1@layers=x2" and replay.status == "failed" and replay.exit_code == 2
    assert replay.tags == {"sweep": "a", "claim_scale": "layers=x2"}
    assert replay.links.replicates == ids["a1"]
    assert list(replay.command) == [sys.executable, "-m", "runners.moe", "--config", "nosuch", "--set",
                                    "model.layers=2"]
