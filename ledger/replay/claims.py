"""Claims: the sentence a comparison supports ("B runs at 1.31x the speed of A (31% faster) at equal loss at 2.1M
tokens"), with its confidence interval and the rule that decided it, and whether it still holds when both runs
are replayed at another scale.

A claim is built from two rows of `ledger compare`: throughput (tokens/s per device) and loss at matched
tokens. It is only stated when the evidence supports it: a throughput verdict that rests on between-run
variance (replicates or the ledger's noise floor). Identical runs, two runs of one configuration and one run
per side without a floor get no claim (``supported`` is False, exit status 1) and the commands that get the
missing evidence. It holds at another scale when the throughput effect has the same sign there and is
still significant, and the loss verdict (equal, or which side is better) is unchanged.

:func:`claim` is the whole of `ledger claim A B [--at DIM=V]` (and of ``ledger.open(dir).claim``): compare,
state, and with a scale change replay every run of the evidence at that scale, compare again and judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.store.receipts import Ledger

THROUGHPUT = "tokens/s per device"
LOSS = "loss @ matched tokens"
NO_DIFFERENCE = "no significant difference"
UNSUPPORTED = ("inconclusive", "same configuration", "identical", "unavailable")


@dataclass(frozen=True)
class Claim:
    """What a comparison of A and B supports."""

    text: str
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    faster: bool | None
    """True: B faster; False: B slower; None: no significant throughput difference (or unavailable)."""
    loss_verdict: str
    confounded: list[str]
    supported: bool = True
    """False when the evidence supports no claim (then ``missing`` says what would)."""
    missing: tuple[str, ...] = ()
    """Commands that get the missing evidence."""

    def to_json(self) -> dict[str, Any]:
        """The claim as `ledger claim --json` prints it."""
        return {"claim": self.text, "speedup": self.speedup, "speedup_ci": self.speedup_ci, "faster": self.faster,
                "loss_verdict": self.loss_verdict, "confounded": self.confounded, "supported": self.supported,
                "missing": list(self.missing)}


def _row(comparison: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in comparison["metrics"] if m["name"] == name), None)


def _tokens(note: str) -> str:
    """The matched token range of the loss row, e.g. '25,600..30,720 tokens' -> 'up to 30,720 tokens'."""
    m = re.search(r"\.\.([\d,]+) tokens", note or "")
    return f"at {m.group(1)} tokens" if m else "at matched tokens"


def state(comparison: dict[str, Any], a: str = "A", b: str = "B") -> Claim:
    """The claim that `ledger compare --json` output supports."""
    thr, loss = _row(comparison, THROUGHPUT), _row(comparison, LOSS)
    confounded = sorted({f for c in comparison.get("confounded") or [] for f in c.get("factors", [])})
    steps = tuple(comparison.get("next_steps") or ())
    if comparison.get("identical"):
        return Claim(f"no claim: {a} and {b} are identical (one configuration, bit-identical loss curves); their "
                     "speed differs only by the machine's run-to-run noise", None, None, None, "identical",
                     confounded, False)
    if comparison.get("same_config"):
        finding = ""
        if thr is not None and thr["verdict"] in ("better", "worse") and thr.get("ratio") is not None:
            finding = (f"; but these two runs differ: {b} ran at {_ratio_words(float(thr['ratio']), a)}"
                       f"{_rule_text(thr)}: a finding about the runs (a node, a driver, a noisy neighbour), not "
                       "the configuration")
        return Claim(f"no claim: {a} and {b} are replicates of one configuration (they differ at most in the "
                     "seed)" + finding, None, None, None, "same configuration", confounded, False)
    if thr is None or thr["verdict"] in UNSUPPORTED or thr["ratio"] is None:
        reason = (thr.get("reason") or thr.get("rule") or "no reason given") if thr else "no throughput row"
        need = f"; get it with: {' or '.join(steps[:2])}" if steps else ""
        return Claim(f"no claim: the throughput verdict is {thr['verdict'] if thr else 'unavailable'} ({reason}){need}",
                     None, None, None, loss["verdict"] if loss else "unavailable", confounded, False, steps)
    ratio = float(thr["ratio"])
    ci = (float(thr["ci"][0]), float(thr["ci"][1])) if thr.get("ci") else None
    runs = f", {thr['evidence']}" if thr.get("evidence") else ""
    rule = thr.get("rule")
    evidence = ", ".join(x for x in (f"95% CI [{ci[0]:.2f}, {ci[1]:.2f}]{runs}" if ci else "",) if x)
    evidence = f" (tokens/s per device{', ' + evidence if evidence else ''}{'; ' + rule if rule else ''})"
    if thr["verdict"] == NO_DIFFERENCE:
        faster: bool | None = None
        head = f"no significant throughput difference between {b} and {a}: {ratio:.2f}x"
    else:
        faster = ratio > 1
        head = f"{b} runs at {_ratio_words(ratio, a)}"
    loss_verdict = loss["verdict"] if loss else "unavailable"
    if loss is None or loss_verdict == "unavailable":
        tail = f", loss at matched tokens unavailable ({loss['reason'] if loss else 'no loss row'})"
    elif loss_verdict in (NO_DIFFERENCE, "identical"):
        same = "identical" if loss_verdict == "identical" else "equal"
        tail = f" at {same} loss {_tokens(loss.get('note', ''))}"
    else:
        lr = float(loss["ratio"]) if loss.get("ratio") is not None else float("nan")
        tail = f", but its loss at matched tokens is {loss_verdict} ({lr:.3f}x {_tokens(loss.get('note', ''))})"
    text = head + tail + evidence
    if confounded:
        text += f"; confounded: {', '.join(confounded)} changed together"
    return Claim(text, ratio, ci, faster, loss_verdict, confounded)


def _ratio_words(ratio: float, of: str) -> str:
    from ledger.analyses.metrics import ratio_words

    return ratio_words(ratio, of)


def _rule_text(row: dict[str, Any]) -> str:
    """The rule that decided the throughput verdict (`` (p = 0.048 > 0.04, the speed family's level)``)."""
    rule = row.get("rule")
    return f" ({rule})" if rule else ""


def holds(original: Claim, scaled: Claim) -> tuple[bool, str]:
    """Whether the claim holds at the other scale, and why (same sign and significance of the speed-up,
    same loss verdict)."""
    if not original.supported or original.faster is None:
        return False, "the original comparison supports no speed claim"
    if not scaled.supported:
        return False, f"at the other scale the evidence supports no claim ({scaled.text})"
    if scaled.faster is None:
        return False, "at the other scale the throughput difference is not significant"
    if scaled.faster != original.faster:
        return False, "at the other scale the effect has the opposite sign"
    if scaled.loss_verdict != original.loss_verdict:
        return False, f"the loss verdict changed: {original.loss_verdict} -> {scaled.loss_verdict}"
    return True, "same sign, significant, same loss verdict"


@dataclass(frozen=True)
class ClaimCheck:
    """`ledger claim A B [--at DIM=V]`: the claim as recorded and, with a scale change, as replayed there."""

    original: Claim
    at: str | None = None
    """The scale change the runs were replayed at (None: no replay)."""
    scaled: Claim | None = None
    holds: bool | None = None
    why: str | None = None
    replayed: tuple[str, ...] = field(default=())
    """Ids of the replayed receipts (every run of both sides' evidence)."""

    @property
    def ok(self) -> bool:
        """A claim is stated and, when replayed, holds (the command exits 0)."""
        return self.original.supported and self.holds is not False

    def to_json(self) -> dict[str, Any]:
        """What `ledger claim --json` prints: the claim alone, or both claims and the judgement."""
        if self.scaled is None:
            return self.original.to_json()
        return {"original": self.original.to_json(), "scaled": self.scaled.to_json(), "at": self.at,
                "holds": self.holds, "why": self.why, "replayed": list(self.replayed)}


def claim(ledger: Ledger, a: str, b: str, at: str | None = None, *, replay_output: IO[bytes] | None = None
          ) -> ClaimCheck:
    """The claim the comparison of ``a`` and ``b`` supports; with ``at`` (``DIM=V`` or ``DIM=xK``), every run
    of both sides' evidence replayed at that scale under `ledger record` (linked as replicates of its run)
    and whether the claim holds there. ``replay_output``: where the replays' output goes (default: stdout).
    A replay that does not finish raises :class:`ledger.errors.LedgerError`."""
    from ledger.analyses.compare import CompareOptions, Ref, compare, to_json
    from ledger.errors import LedgerError
    from ledger.record.wrapper import RecordOptions, record
    from ledger.replay.rerun import rebuild_command
    from ledger.replay.scale import parse_scale
    from ledger.store import index
    from ledger.store.agreement import check_involved
    from ledger.store.integrity import check_intact

    change = parse_scale(at) if at else None
    with index.reader(ledger) as con:
        comparison = compare(con, Ref(ref=a), Ref(ref=b), CompareOptions(plugins=False))
        check_involved(ledger, con, [r.id for r in comparison.runs_a + comparison.runs_b])  # files and index agree
        first = to_json(comparison)
    original = state(first, a, b)
    if change is None or not original.supported:
        return ClaimCheck(original)
    replayed: dict[str, list[str]] = {}
    for side, ref in ((first["a"], a), (first["b"], b)):
        for rid in side["ids"]:  # every run of the evidence, each with its own seed, at the other scale
            receipt = check_intact(ledger, rid)
            result = record(ledger, RecordOptions(
                command=rebuild_command(receipt, scale=[change]), name=f"{receipt.name or ref}@{change}",
                replicates=receipt.id, tags=dict(receipt.tags) | {"claim_scale": str(change)}, stdout=replay_output))
            if result.receipt is None or result.exit_code:
                raise LedgerError(f"the replay of {ref} at {change} did not finish (exit {result.exit_code})")
            replayed.setdefault(ref, []).append(result.receipt.id)
    with index.reader(ledger) as con:
        comparison = compare(con, Ref(ref=replayed[a][0]), Ref(ref=replayed[b][0]), CompareOptions(plugins=False))
        check_involved(ledger, con, [r.id for r in comparison.runs_a + comparison.runs_b])
        second = to_json(comparison)
    scaled = state(second, f"{a}@{change}", f"{b}@{change}")
    ok, why = holds(original, scaled)
    return ClaimCheck(original, str(change), scaled, ok, why, tuple(i for ids in replayed.values() for i in ids))
