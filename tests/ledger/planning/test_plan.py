"""`ledger plan`: the frontier is the law's support, what moves the optimum, uncertainty and sensitivity,
the JSON and the plot, bad input. Behaviour, not the default law's numbers: expected sparsities come from
the search grid by hand (S = 1 - top_k / experts)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from ledger.planning.api import PlanRequest, plan
from ledger.planning.errors import NoFeasiblePlan
from ledger.planning.hardware import BUILTIN
from ledger.planning.law import DEFAULT, DEFAULT_LAW, PARAMS, LawSpec
from ledger.planning.plan import Space, search

SVG = "{http://www.w3.org/2000/svg}"
SMALL = dict(widths="2048,4096", micro_batch="1")
"""A smaller search grid (two widths, one micro-batch) for speed; the sparsity grid is the default one."""
GRID_S = sorted({1 - k / e for e in (8, 16, 32, 64, 128, 256, 512) for k in (1, 2, 4, 8) if k < e} | {0.0})
"""Every sparsity of the default grid (and dense), by hand."""


def _req(**kw: object) -> PlanRequest:
    args: dict[str, object] = {"hardware": "B200", "nodes": 32, "days": 20, "draws": 0} | SMALL | kw
    return PlanRequest(**args)  # type: ignore[arg-type]


def test_the_frontier_is_the_support_and_moves_with_max_sparsity() -> None:
    seen = []
    for cap in (0.9, 0.97, None, 0.995):
        r = plan(_req(max_sparsity=cap))
        limit = 63 / 64 if cap is None else cap
        top = max(s for s in GRID_S if s <= limit + 1e-12)
        assert r.verdict["frontier"] == pytest.approx(top)
        # under a fixed model-FLOP budget the default law's only sparsity effect is more total parameters at the
        # same active ones: the compute-optimal choice sits at the frontier, wherever it is put
        assert r.verdict["compute_optimal_sparsity"] == pytest.approx(top), cap
        assert r.verdict["compute_optimal_at_frontier"]
        seen.append(r.verdict["compute_optimal_sparsity"])
        over = [x for x in r.support["extrapolation"] if "'s S = " in x]
        assert bool(over) == (top > 63 / 64), (cap, over)
    assert seen == sorted(seen) and len(set(seen)) == 4
    assert "the law's support: S <= 0.984375" in plan(_req()).support["frontier_source"]
    assert "beyond the law's support" in plan(_req(max_sparsity=0.995)).support["frontier_source"]


def _spec(**params: float) -> LawSpec:
    return LawSpec(law=DEFAULT_LAW.with_(**params), name="test law", sources={p: "test" for p in PARAMS})


def test_a_law_without_sparsity_and_granularity_terms_has_no_interior_optimum(ledger_cli, tmp_path) -> None:
    law = tmp_path / "cj0.json"
    law.write_text(json.dumps(DEFAULT_LAW.with_(c=0.0, j=0.0).to_dict()))
    v = plan(_req(law=str(law))).verdict
    assert not v["interior_optimum"] and not v["cluster_optimal_interior"]
    assert v["finding"].startswith("no interior optimum")
    text = ledger_cli("plan", "--hardware", "B200", "--nodes", "32", "--days", "20", "--law-from", str(law),
                      "--widths", "2048,4096", "--micro-batch", "1", "--draws", "0", check=True).stdout
    assert "no interior optimum" in text


def test_a_sparsity_penalty_moves_the_optimum_inside_monotonically() -> None:
    space = Space(max_sparsity=63 / 64, widths=(2048, 4096), micro_batch=(1,))
    optima = []
    for c in (0.0, 0.01, 0.03, 0.1):
        r = search(space, BUILTIN["B200"], 32, 20, 0.9, _spec(c=c, lam=0.5), draws=0)
        optima.append((r.verdict["compute_optimal_sparsity"], r.verdict["cluster_optimal_sparsity"]))
    assert all(a >= b for a, b in zip(optima, optima[1:], strict=False)), optima
    assert optima[0][0] == pytest.approx(63 / 64) and optima[-1][0] < 63 / 64
    # more granularity benefit never lowers the chosen granularity
    gran = [search(space, BUILTIN["B200"], 32, 20, 0.9, _spec(j=j), draws=0).compute_optimal.geometry["granularity"]
            for j in (0.0, 2.1, 20.0)]
    assert gran == sorted(gran), gran


def test_default_law_terms_are_the_published_formulas() -> None:
    """The point law against the published formulas written out by hand (Besiroglu et al.'s dense terms,
    Krajewski et al.'s granularity term with N_act = (1 - S) N_tot)."""
    n, d, s, g = 2e9, 4e10, 0.75, 4.0
    dense = 1.8172 + 482.01 / n**0.3478 + 2085.43 / d**0.3658
    granular = 2.1 / (g**0.58 * ((1 - s) * n) ** 0.115)
    assert DEFAULT_LAW.predict(n, d, s, g)[0] == pytest.approx(dense + granular, rel=1e-12)
    # monotone: more parameters, more tokens, finer experts lower the loss; at equal active parameters a
    # sparser model (more total parameters) is lower
    assert DEFAULT_LAW.predict(2 * n, d, s, g)[0] < DEFAULT_LAW.predict(n, d, s, g)[0]
    assert DEFAULT_LAW.predict(n, 2 * d, s, g)[0] < DEFAULT_LAW.predict(n, d, s, g)[0]
    assert DEFAULT_LAW.predict(n, d, s, 2 * g)[0] < DEFAULT_LAW.predict(n, d, s, g)[0]
    assert DEFAULT_LAW.predict(2 * n, d, 1 - (1 - s) / 2, g)[0] < DEFAULT_LAW.predict(n, d, s, g)[0]
    for p in PARAMS:
        assert DEFAULT.sources[p], p


def test_plan_json_carries_sources_probability_and_gap_interval(ledger_cli, tmp_path) -> None:
    svg = tmp_path / "plan.svg"
    out = ledger_cli("plan", "--hardware", "B200", "--nodes", "32", "--days", "20", "--widths", "2048,4096",
                     "--micro-batch", "1", "--draws", "60", "--json", "--plot", str(svg), check=True)
    data = json.loads(out.stdout)
    params = data["law"]["parameters"]
    assert "Besiroglu et al. 2024" in params["a"]["source"] and params["a"]["ci95"][0] < 482.01 < params["a"]["ci95"][1]
    assert "Krajewski et al. 2024" in params["eta"]["source"] and params["eta"]["ci95"] is None
    assert params["c"]["value"] == 0 and "no published value" in params["c"]["source"]
    u = data["uncertainty"]
    assert u["draws"] == 60 and set(u["resampled"]) == {"a", "alpha", "b", "beta", "e"}
    assert 0.0 <= u["p_cluster_optimal_beats_compute_optimal"] <= 1.0
    lo, hi = u["loss_gap"]["ci95"]
    assert lo <= u["loss_gap"]["median"] <= hi
    assert u["loss_gap"]["point"] == data["verdict"]["loss_gain_over_compute_optimal"]
    assert data["support"]["frontier"] == pytest.approx(63 / 64) and data["support"]["extrapolates"]
    assert data["inputs"]["goodput"] == 0.9 and "default 0.9" in data["inputs"]["goodput_source"]
    root = ET.fromstring(svg.read_text())
    assert "B200" in root.find(f"{SVG}title").text
    assert len(root.findall(f"{SVG}polyline")) == 2
    help_text = ledger_cli("plan", "--help", check=True).stdout
    assert "Besiroglu" in help_text and "Krajewski" in help_text and "support" in help_text


def test_sensitivity_names_the_coefficient_whose_interval_straddles_the_switch() -> None:
    space = Space(max_sparsity=63 / 64, widths=(2048, 4096), micro_batch=(1,))
    spec = LawSpec(law=DEFAULT_LAW.with_(c=0.005, lam=0.5), name="test", sources={},
                   se={"c": 0.005, "e": 0.03})
    r = search(space, BUILTIN["B200"], 32, 20, 0.9, spec, draws=100, sensitivity=True)
    rows = {row["parameter"]: row for row in r.sensitivity}
    assert rows["c"]["decides"] and rows["c"]["cluster_optimal_interior"] == [False, True]
    assert not rows["e"]["decides"]  # a constant shift moves no choice
    assert rows["j"]["kind"].startswith("no interval")
    # resampling c across the switch: the optimum is interior in some draws and not in others
    assert 0.0 < r.uncertainty["p_cluster_optimal_interior"] < 1.0


def test_plan_with_a_fitted_law_a_profile_file_and_fixed_tokens(ledger_cli, tmp_path) -> None:
    law = tmp_path / "law.json"
    law.write_text(json.dumps({"law": {p: {"value": v} for p, v in DEFAULT_LAW.to_dict().items()}, "receipts": 9,
                               "support": {"S": [0.0, 0.9375], "G": [1, 8]},
                               "samples": [DEFAULT_LAW.vector().tolist()] * 3}))
    profile = tmp_path / "gb200.toml"
    profile.write_text('name = "GB200"\npeak_flops = { bf16 = 2.5e15, fp8 = 5e15 }\nhbm_bytes = 186e9\n'
                       "hbm_bw = 8e12\nnvlink_bw = 900e9\nnetwork_bw = 50e9\ndevices_per_node = 4\n")
    out = ledger_cli("plan", "--hardware", str(profile), "--nodes", "16", "--days", "5", "--law-from", str(law),
                     "--tokens", "2e12", "--goodput", "0.95", "--widths", "2048,4096", "--json", check=True)
    data = json.loads(out.stdout)
    assert data["inputs"]["hardware"] == "GB200" and data["inputs"]["devices"] == 64
    assert data["inputs"]["law_source"].startswith("fitted law from")
    assert data["law"]["parameters"]["a"]["source"].startswith("fitted on 9 receipts")
    assert data["support"]["frontier"] <= 0.9375 and "fitted on" in data["support"]["frontier_source"]
    assert data["cluster_optimal"]["tokens"] == 2e12
    assert data["cluster_optimal"]["model_flops"] <= data["budgets"]["deliverable_model_flops_of_cluster_optimal"]


def test_bad_input(ledger_cli, tmp_path) -> None:
    from ledger.errors import BadInput

    out = ledger_cli("plan", "--hardware", "TPUv9", "--nodes", "1", "--days", "1")
    assert out.returncode == 2
    assert "unknown hardware profile 'TPUv9'; known: B200, CPU, H100, H200; or give a JSON or TOML" in out.stderr
    out = ledger_cli("plan", "--hardware", "H100", "--nodes", "1", "--days", "1", "--draws", "0",
                     "--geometry", "layers=64,hidden=8192,experts=256,top_k=8,granularity=2")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "no parallel plan fits layers=64, hidden=8192, experts=256" in out.stderr
    assert "in the 80 GB of a H100 on 1 node(s) x 8 (8 devices): the smallest plan (tp=8" in out.stderr
    with pytest.raises(BadInput, match="not both"):
        plan(_req(goodput=0.5, goodput_from="x"))
    with pytest.raises(BadInput, match="cannot read --law-from .*hoffmann2022"):
        plan(_req(law=str(tmp_path / "no")))
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(DEFAULT_LAW.with_(a=-1.0).to_dict()))
    with pytest.raises(BadInput, match="a must be finite and >= 0"):
        plan(_req(law=str(bad)))


def test_smallest_memory_is_reported_for_a_pinned_plan() -> None:
    from ledger.planning.geometry import Geometry

    g = Geometry.of(layers=32, hidden=4096, ffn_hidden=16384, experts=64, top_k=8, granularity=4, seq_len=4096,
                    vocab=128000)
    with pytest.raises(NoFeasiblePlan, match=r"smallest plan \(tp=1, pp=1, ep=1, dp=8, micro_batch=1, "
                                             r"recompute=full\) needs \d+\.\d GB per device"):
        search(Space(), BUILTIN["H100"], 1, 1, 0.9, DEFAULT, geometry=g, plan={"tp": 1, "pp": 1, "ep": 1})
