"""The library calls behind `ledger fit law`, `ledger fit perf` and `ledger plan`: each takes what the
command parsed and returns a typed result that `ledger.report.plan` renders."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.store.receipts import Ledger

from ledger.errors import BadInput
from ledger.planning.calibrate import PerfFit, held_out_phrase
from ledger.planning.errors import TooFewReceipts
from ledger.planning.fitting import LawFit
from ledger.planning.observations import Skipped
from ledger.planning.perf import Calibration
from ledger.planning.plan import PlanResult

DEFAULT_GOODPUT = 0.9


# ------------------------------------------------------------------------------------------------ fits
@dataclass
class LawReport:
    """`ledger fit law`: the fit and what it was fitted on."""

    fit: LawFit
    loss: str
    at_tokens: list[float] | None
    receipts_used: list[str]
    skipped: list[Skipped] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.fit.to_dict() | {"loss": self.loss, "at_tokens": self.at_tokens,
                                     "receipts_used": self.receipts_used,
                                     "skipped": [{"receipt": s.label, "reason": s.reason} for s in self.skipped]}


@dataclass
class PerfReport:
    """`ledger fit perf`: one calibration per hardware profile."""

    fits: list[PerfFit]
    skipped: list[Skipped] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"profiles": [f.to_dict() for f in self.fits],
                "skipped": [{"receipt": s.label, "reason": s.reason} for s in self.skipped]}


def _with_skipped(exc: BadInput, matched: int, skipped: list[Skipped]) -> BadInput:
    if not skipped:
        return exc
    reasons = sorted({s.reason for s in skipped})
    return type(exc)(f"{exc} ({matched} matched; {len(skipped)} skipped: {'; '.join(reasons[:3])})")


def fit_law(ledger: Ledger, where: str | None = None, loss: str = "train", at_tokens: list[float] | None = None,
            *, bootstrap: int = 200, inits: int = 24, huber_delta: float | None = None, seed: int = 0) -> LawReport:
    """Fit the law on the receipts of ``ledger`` matching ``where``."""
    from ledger.planning.fitting import fit_law as run
    from ledger.planning.observations import law_data, select
    from ledger.store import index

    with index.reader(ledger) as con:
        receipts = select(con, where)
        data, labels, ids, skipped = law_data(con, receipts, loss, at_tokens)
    try:
        fit = run(data, inits=inits, bootstrap=bootstrap, huber_delta=huber_delta, seed=seed,
                  ref=ids[0][:12] if ids else "REF")
    except TooFewReceipts as exc:
        raise _with_skipped(exc, len(receipts), skipped) from None
    return LawReport(fit, loss, list(at_tokens) if at_tokens else None, labels, skipped)


def fit_perf(ledger: Ledger, where: str | None = None, hardware: str | None = None) -> PerfReport:
    """Calibrate the performance model on the receipts of ``ledger`` matching ``where``."""
    from ledger.planning import hardware as hwmod
    from ledger.planning.calibrate import fit_perf as run
    from ledger.planning.observations import perf_obs, select
    from ledger.store import index

    hw = hwmod.resolve(hardware) if hardware else None
    with index.reader(ledger) as con:
        receipts = select(con, where)
    obs, skipped = perf_obs(receipts, hw)
    try:
        fits = run(obs)
    except TooFewReceipts as exc:
        raise _with_skipped(exc, len(receipts), skipped) from None
    return PerfReport(fits, skipped)


# ------------------------------------------------------------------------------------------------ plan
@dataclass(frozen=True)
class PlanRequest:
    """What `ledger plan` was asked (the strings of list options as given)."""

    hardware: str
    nodes: int
    days: float
    goodput: float | None = None
    goodput_from: str | None = None
    law: str | None = None
    """A built-in law name or a file of `ledger fit law --json` (None: the default law)."""
    perf_from: Path | None = None
    tokens: float | None = None
    budget_flops: float | None = None
    geometry: str | None = None
    parallel: str | None = None
    experts: str = "8,16,32,64,128,256,512"
    top_k: str = "1,2,4,8"
    granularity: str = "1,2,4,8"
    widths: str = "1024,1536,2048,3072,4096,5120,6144,7168,8192"
    micro_batch: str = "1,2"
    aspect: float = 128.0
    max_sparsity: float | None = None
    """None: the law's support."""
    seq_len: int = 4096
    vocab: int = 128000
    batch_tokens: float = 4 * 2**20
    precision: str = "bf16"
    draws: int = 200
    seed: int = 0
    sensitivity: bool = False


def calibration(path: Path | None, hw_name: str) -> tuple[Calibration, str]:
    """The calibration for ``hw_name`` from a file of `ledger fit perf --json`, and where it came from."""
    from ledger.planning.perf import NOMINAL

    if path is None:
        return NOMINAL, f"nominal {hw_name} profile (no --perf-from)"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"--perf-from {path}: not readable JSON of `ledger fit perf --json` ({exc})") from exc
    profiles = data.get("profiles", []) if isinstance(data, dict) else []
    for p in profiles:
        if isinstance(p, dict) and str(p.get("hardware", "")).lower() == hw_name.lower():
            try:
                m = p["metrics"]
                return Calibration(**{k: float(v) for k, v in p["calibration"].items()}), \
                    (f"calibrated on {int(m['receipts'])} {hw_name} receipts ({path}); held-out MAPE of step time "
                     f"{float(m['mape_held_out_pct']):.1f}% ({held_out_phrase(m)})")
            except (KeyError, TypeError, ValueError) as exc:
                raise BadInput(f"--perf-from {path}: malformed calibration ({exc})") from exc
    names = ", ".join(str(p.get("hardware")) for p in profiles if isinstance(p, dict)) or "none"
    return NOMINAL, f"nominal {hw_name} profile ({path} holds calibrations for {names} only)"


def parse_parallel(text: str) -> dict[str, int]:
    """'tp=2,pp=4' -> {'tp': 2, 'pp': 4}, with a one-line error naming the bad item."""
    from ledger.kv import listed

    return listed(text, "--parallel", ("tp", "pp", "ep", "dp", "micro_batch", "recompute"), convert=int,
                  example="--parallel tp=2,pp=4")


def plan(req: PlanRequest, ledger: Callable[[], Ledger] | None = None) -> PlanResult:
    """Run `ledger plan`; ``ledger`` gives the ledger when the goodput is measured on its receipts."""
    from ledger.planning import hardware as hwmod
    from ledger.planning import law as lawmod
    from ledger.planning.geometry import Geometry, parse_spec
    from ledger.planning.plan import Space, parse_list, search

    if req.goodput is not None and req.goodput_from is not None:
        raise BadInput("give --goodput X or --goodput-from REF|TAG=VALUE, not both")
    hw = hwmod.resolve(req.hardware)
    if req.goodput_from is not None:
        from ledger.planning.observations import goodput_from as measure

        if ledger is None:
            raise BadInput("--goodput-from needs a ledger (--ledger DIR)")
        goodput, goodput_source = measure(ledger(), req.goodput_from)
        if not goodput > 0:
            raise BadInput(f"--goodput-from {req.goodput_from}: measured goodput is 0; no productive time to plan with")
    elif req.goodput is not None:
        goodput, goodput_source = req.goodput, f"given: {req.goodput:g}"
    else:
        goodput = DEFAULT_GOODPUT
        goodput_source = "default 0.9 (Meta reports >90% effective training time for Llama 3; measure yours " \
                         "with --goodput-from)"
    spec = lawmod.resolve(req.law)
    cal, cal_source = calibration(req.perf_from, hw.name)
    support_s = spec.support.get("S")
    if req.max_sparsity is not None:
        max_s: float | None = req.max_sparsity
        frontier_source = f"--max-sparsity {req.max_sparsity:g}"
        if support_s is not None and req.max_sparsity > support_s[1] + 1e-12:
            frontier_source += f", beyond the law's support (S <= {support_s[1]:.6g}): choices above it extrapolate"
    elif support_s is not None:
        max_s = support_s[1]
        frontier_source = f"the law's support: S <= {support_s[1]:.6g} ({spec.support_source})"
    else:
        max_s = None
        frontier_source = "the search grid (the law gives no support)"
    space = Space(
        widths=parse_list(req.widths, "--widths"), experts=parse_list(req.experts, "--experts"),
        top_k=parse_list(req.top_k, "--top-k"), granularity=parse_list(req.granularity, "--granularity", float),
        micro_batch=parse_list(req.micro_batch, "--micro-batch"), aspect=req.aspect, max_sparsity=max_s,
        seq_len=req.seq_len, vocab=req.vocab, batch_tokens=req.batch_tokens, precision=req.precision,
    )
    geo = None
    if req.geometry:
        hidden = parse_spec(req.geometry, {}).get("hidden", 4096.0)
        gspec = parse_spec(req.geometry, {
            "hidden": hidden, "layers": max(1.0, round(hidden / space.aspect)), "heads": max(1.0, hidden // 128),
            "ffn_hidden": space.ffn_mult * hidden, "experts": 1.0, "top_k": 1.0, "granularity": 1.0,
            "seq_len": float(req.seq_len), "vocab": float(req.vocab), "shared_experts": 0.0})
        gspec.setdefault("moe_layers", gspec["layers"] if gspec["experts"] > 1 else 0.0)
        if gspec["top_k"] > gspec["experts"]:
            raise BadInput(f"--geometry: top_k ({gspec['top_k']:g}) must be <= experts ({gspec['experts']:g})")
        geo = Geometry.of(**gspec)
    elif not space.geometries().experts.size:
        raise BadInput("no geometry of the search grid lies within the frontier; widen --max-sparsity or the grid")
    inputs = {"hardware": hw.name, "hardware_source": hw.source, "nodes": req.nodes, "days": req.days,
              "goodput_source": goodput_source, "law_source": spec.name,
              "calibration": cal.to_dict(), "calibration_source": cal_source, "precision": req.precision}
    return search(space, hw, req.nodes, req.days, goodput, spec, cal, tokens=req.tokens,
                  budget_flops=req.budget_flops, geometry=geo,
                  plan=parse_parallel(req.parallel) if req.parallel else None, inputs=inputs, draws=req.draws,
                  seed=req.seed, sensitivity=req.sensitivity, frontier_source=frontier_source)
