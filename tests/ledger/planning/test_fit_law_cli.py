"""`ledger fit law` succeeding through the CLI: receipts whose training losses follow a planted law (computed
here by hand from the law's formula, not by the code under test) are recorded in this process, then fitted by
the real command. What is checked: exit 0; the support is the design's range (known from how the receipts
were made); the held-out error is k-fold over receipts with its n; the planted noise-free curve is fitted
closely; `--json` is what `ledger plan --law-from` reads, and the text output says the same."""

from __future__ import annotations

import json

import pytest
from helpers import LedgerAt

import ledger

pytestmark = pytest.mark.slow  # 8 in-process recordings, two fits through the CLI: 15 s CPU (99 s wall at load 15)

# The planted law L = a/N^alpha + b/D^beta + c/(1-S)^lam + e (no granularity term: j = 0).
A, ALPHA, B, BETA, C, LAM, E = 400.0, 0.34, 600.0, 0.28, 0.05, 0.3, 1.7
DESIGN = [  # (total parameters, experts, top_k, granularity)
    (1e6, 8, 2, 1.0), (4e6, 8, 2, 2.0), (1.6e7, 8, 2, 4.0), (6.4e7, 8, 2, 1.0),
    (1e6, 32, 2, 2.0), (4e6, 32, 2, 4.0), (1.6e7, 4, 2, 1.0), (6.4e7, 16, 1, 2.0),
]
TOKENS = [2_000_000 * i for i in range(1, 21)]
"""Logged steps at 2M .. 40M tokens: D spans x20 within each receipt."""
AT = "4000000,12000000,40000000"


def planted(n: float, s: float, d: float) -> float:
    return A / n**ALPHA + B / d**BETA + C / (1 - s) ** LAM + E


@pytest.fixture(scope="module")
def led(tmp_path_factory: pytest.TempPathFactory) -> LedgerAt:
    root = tmp_path_factory.mktemp("law")
    lg = ledger.open(root / "receipts")
    for n, experts, top_k, g in DESIGN:
        s = 1 - top_k / experts
        with lg.recording(name=f"N{n:.0e}-E{experts}k{top_k}G{g:g}", tags={"sweep": "law"}) as rec:
            rec.run.set_workload({"model": {"total_params": int(n), "num_experts": experts, "top_k": top_k,
                                            "granularity": g}})
            for step, d in enumerate(TOKENS, start=1):
                rec.run.log_step(step, loss=planted(n, s, d), tokens=d)
    return LedgerAt(root, timeout=300)


def test_fit_law_succeeds_and_reports_support_and_held_out_error(led: LedgerAt) -> None:
    out = led.json("fit", "law", "--where", "tag.sweep=law", "--at-tokens", AT, "--bootstrap", "20", "--inits", "8")
    assert out["receipts"] == len(DESIGN) and out["observations"] == 3 * len(DESIGN)
    assert len(out["receipts_used"]) == len(DESIGN) and out["skipped"] == []
    sparsity = [1 - k / e for _, e, k, _ in DESIGN]
    support = out["support"]
    assert support["N_tot"] == pytest.approx([1e6, 6.4e7])
    assert support["S"] == pytest.approx([min(sparsity), max(sparsity)])
    assert support["G"] == pytest.approx([1.0, 4.0])
    assert support["D"] == pytest.approx([4e6, 4e7])
    held = out["held_out"]
    # k-fold over receipts, with its n: every observation predicted once by a fit that did not see its receipt
    assert held["n"] == 3 * len(DESIGN) and held["receipts"] == len(DESIGN) and 2 <= held["folds"] <= len(DESIGN)
    assert held["mape_pct"] >= 0 and held["max_ape_pct"] >= held["mape_pct"]
    # noise-free data of the law's own form: the fit reproduces the planted losses closely
    law = {p: v["value"] for p, v in out["law"].items()}
    for n, experts, top_k, g in DESIGN:
        s = 1 - top_k / experts
        for d in (4e6, 1.2e7, 4e7):
            fitted = (law["a"] / n ** law["alpha"] + law["b"] / d ** law["beta"]
                      + law["c"] / (1 - s) ** law["lam"]
                      + law["j"] / ((1 - s) ** law["delta"] * n ** law["gamma"] * g ** law["eta"]) + law["e"])
            assert fitted == pytest.approx(planted(n, s, d), rel=0.01)
    assert out["samples"] and len(out["samples"]) <= 20  # the bootstrap vectors `plan --law-from` resamples
    text = led("fit", "law", "--where", "tag.sweep=law", "--at-tokens", AT, "--bootstrap", "0", "--inits", "8").stdout
    assert "N_tot" in text and "held-out" in text.lower()


def test_the_python_api_fits_what_the_command_fits(led: LedgerAt) -> None:
    """``ledger.open(dir).fit_law(...)`` is the call `ledger fit law` makes: the same fit, the same JSON."""
    from ledger.jsonsafe import json_safe

    fit = ledger.open(led.dir).fit_law(where="tag.sweep=law", at_tokens=[float(t) for t in AT.split(",")],
                                       bootstrap=0, inits=8)
    assert fit.report.fit.n_receipts == len(DESIGN)
    cli = led.json("fit", "law", "--where", "tag.sweep=law", "--at-tokens", AT, "--bootstrap", "0", "--inits", "8")
    assert json.loads(json.dumps(json_safe(fit.to_json()), default=str)) == cli
