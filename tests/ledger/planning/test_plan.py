"""`ledger plan`: MOSAIC's qualitative result on B200s, the plot, and bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from ledger.planning.errors import NoFeasiblePlan
from ledger.planning.fitting import LawFit
from ledger.planning.hardware import BUILTIN
from ledger.planning.law import DEFAULT_LAW, PARAMS
from ledger.planning.plan import Space, search

SVG = "{http://www.w3.org/2000/svg}"


def test_frontier_under_fixed_flops_interior_under_deliverable_compute_on_b200() -> None:
    r = search(Space(), BUILTIN["B200"], nodes=32, days=20, goodput=0.9, law=DEFAULT_LAW)
    v = r.verdict
    assert v["compute_optimal_at_frontier"] and v["compute_optimal_sparsity"] == pytest.approx(0.984375)
    assert v["cluster_optimal_interior"] and v["cluster_optimal_sparsity"] == pytest.approx(0.96875)
    # the cluster-optimal choice wins on this cluster; the compute-optimal one wins only on paper
    assert r.compute_optimal_deliverable_loss > r.cluster_optimal.loss
    assert r.compute_optimal.loss < r.cluster_optimal.loss
    assert r.compute_optimal.mfu < r.cluster_optimal.mfu
    assert r.cluster_optimal.memory_bytes <= BUILTIN["B200"].hbm_bytes
    # the curves: the fixed budget falls all the way to the frontier, the deliverable one turns up before it
    fixed = [c["loss_fixed_budget"] for c in r.curves]
    deliv = [c["loss_deliverable"] for c in r.curves]
    assert all(a > b for a, b in zip(fixed, fixed[1:], strict=False))
    assert min(deliv) < deliv[-1]
    assert r.search["seconds"] < 10


@pytest.mark.parametrize(("nodes", "days"), [(32, 10), (64, 20), (128, 20)])
def test_the_result_holds_around_the_reference_cluster(nodes: int, days: float) -> None:
    r = search(Space(), BUILTIN["B200"], nodes=nodes, days=days, goodput=0.9, law=DEFAULT_LAW)
    assert r.verdict["compute_optimal_at_frontier"] and r.verdict["cluster_optimal_interior"]


def test_plan_cli_json_and_plot(ledger_cli, tmp_path) -> None:
    svg = tmp_path / "plan.svg"
    out = ledger_cli("plan", "--hardware", "B200", "--nodes", "32", "--days", "20", "--json", "--plot", str(svg),
                     check=True)
    data = json.loads(out.stdout)
    assert data["verdict"]["compute_optimal_at_frontier"] and data["verdict"]["cluster_optimal_interior"]
    assert data["inputs"]["goodput"] == 0.9 and "default 0.9" in data["inputs"]["goodput_source"]
    assert "Chinchilla" in data["inputs"]["law_source"] and data["inputs"]["peak"] == "bf16 dense"
    assert data["cluster_optimal"]["geometry"]["experts"] >= 8 and data["plot"] == str(svg)
    root = ET.fromstring(svg.read_text())
    assert "B200" in root.find(f"{SVG}title").text
    assert len(root.findall(f"{SVG}polyline")) == 2
    text = ledger_cli("plan", "--hardware", "B200", "--nodes", "32", "--days", "20", check=True).stdout
    assert "cluster-optimal" in text and "(the frontier of the search)" in text and "(interior)" in text


def test_plan_with_a_fitted_law_a_profile_file_and_fixed_tokens(ledger_cli, tmp_path) -> None:
    fit = LawFit(law=DEFAULT_LAW, free=list(PARAMS), fixed={}, ci={p: (0.0, 0.0) for p in PARAMS},
                 in_sample={}, held_out={}, n_observations=0, n_receipts=0, variation="", huber_delta=0.0,
                 inits=0, bootstrap=0)
    law = tmp_path / "law.json"
    law.write_text(json.dumps(fit.to_dict()))
    profile = tmp_path / "gb200.toml"
    profile.write_text('name = "GB200"\npeak_flops = { bf16 = 2.5e15, fp8 = 5e15 }\nhbm_bytes = 186e9\n'
                       "hbm_bw = 8e12\nnvlink_bw = 900e9\nnetwork_bw = 50e9\ndevices_per_node = 4\n")
    out = ledger_cli("plan", "--hardware", str(profile), "--nodes", "16", "--days", "5", "--law-from", str(law),
                     "--tokens", "2e12", "--goodput", "0.95", "--json", check=True)
    data = json.loads(out.stdout)
    assert data["inputs"]["hardware"] == "GB200" and data["inputs"]["devices"] == 64
    assert data["inputs"]["law_source"].startswith("fitted law from")
    assert data["cluster_optimal"]["tokens"] == 2e12
    assert data["cluster_optimal"]["model_flops"] <= data["budgets"]["deliverable_model_flops_of_cluster_optimal"]


def test_bad_input(ledger_cli) -> None:
    out = ledger_cli("plan", "--hardware", "TPUv9", "--nodes", "1", "--days", "1")
    assert out.returncode == 2
    assert "unknown hardware profile 'TPUv9'; known: B200, CPU, H100, H200; or give a JSON or TOML" in out.stderr
    out = ledger_cli("plan", "--hardware", "H100", "--nodes", "1", "--days", "1",
                     "--geometry", "layers=64,hidden=8192,experts=256,top_k=8,granularity=2")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "no parallel plan fits layers=64, hidden=8192, experts=256" in out.stderr
    assert "in the 80 GB of a H100 on 1 node(s) x 8 (8 devices): the smallest plan (tp=8" in out.stderr
    assert "GB per device" in out.stderr
    out = ledger_cli("plan", "--hardware", "B200", "--nodes", "1", "--days", "1", "--goodput", "0.5",
                     "--goodput-from", "x")
    assert out.returncode == 2 and "not both" in out.stderr
    out = ledger_cli("plan", "--hardware", "B200", "--nodes", "1", "--days", "1", "--goodput", "1.5")
    assert out.returncode == 2


def test_smallest_memory_is_reported_for_a_pinned_plan() -> None:
    from ledger.planning.geometry import Geometry

    g = Geometry.of(layers=32, hidden=4096, ffn_hidden=16384, experts=64, top_k=8, granularity=4, seq_len=4096,
                    vocab=128000)
    with pytest.raises(NoFeasiblePlan, match=r"smallest plan \(tp=1, pp=1, ep=1, dp=8, micro_batch=1, "
                                             r"recompute=full\) needs \d+\.\d GB per device"):
        search(Space(), BUILTIN["H100"], 1, 1, 0.9, DEFAULT_LAW, geometry=g, plan={"tp": 1, "pp": 1, "ep": 1})
