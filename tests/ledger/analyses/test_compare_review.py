"""`compare()` as a reviewer reads it, in this process, on a real ledger of imported runs (Megatron golden values and
their model_config.yaml: the seed, the NCCL algorithm, the GPU and the number of experts set by hand): which runs
each side takes (replicates from the ledger joined, or not), the factor diff and bookkeeping in the JSON, the
notes (identical, replicates of one configuration, a finding about the runs, a task change), the throughput row
and its attribution against scipy's t interval on the runs' log throughputs, confounded factors, and the options
that turn parts off. Expected values are written by hand from the inputs."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from helpers import golden_run
from scipy import stats

from ledger.analyses.compare import CompareOptions, Ref, compare, to_json
from ledger.analyses.diff import TaskMismatch
from ledger.analyses.groups import SameReceipt
from ledger.ingest.api import ingest_golden
from ledger.store import index
from ledger.store.receipts import Ledger

SLOW = (1.0, 1.1, 0.95)
"""The replicates' step-time factors (seconds per step before the per-step pattern)."""
THROUGHPUT = "tokens/s per device"
TOKENS_PER_STEP = 128 * 4


def _compare(ledger: Ledger, a: Ref, b: Ref, **options: object) -> tuple[object, dict]:
    with index.reader(ledger) as con:
        result = compare(con, a, b, CompareOptions(**options))  # type: ignore[arg-type]
    return result, to_json(result)


def _row(data: dict, name: str) -> dict:
    return next(m for m in data["metrics"] if m["name"] == name)


def _t_interval(log_a: np.ndarray, log_b: np.ndarray) -> tuple[float, float, float, float]:
    """The pooled two-sample t interval of mean(log b) - mean(log a), exponentiated, and the p-value."""
    diff = float(np.mean(log_b) - np.mean(log_a))
    df = log_a.size + log_b.size - 2
    pooled = ((log_a.size - 1) * np.var(log_a, ddof=1) + (log_b.size - 1) * np.var(log_b, ddof=1)) / df
    se = math.sqrt(pooled * (1 / log_a.size + 1 / log_b.size))
    t = stats.t.ppf(0.975, df)
    return math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se), float(stats.ttest_ind(log_b, log_a).pvalue)


def test_one_run_each_joined_by_its_replicates(tmp_path: Path) -> None:
    """a1..a3 (ring) and b1..b3 (tree) are replicates of two configurations; b_i takes half a_i's time."""
    ledger = Ledger(tmp_path / "receipts")
    a = [golden_run(ledger, tmp_path, f"a{i}", i, "Ring", s) for i, s in enumerate(SLOW, 1)]
    b = [golden_run(ledger, tmp_path, f"b{i}", i, "Tree", s / 2) for i, s in enumerate(SLOW, 1)]
    result, data = _compare(ledger, Ref("a1"), Ref("b1"))
    assert data["a"] == {"spec": "a1", "group": False, "ids": [a[0], *sorted(a[1:])], "names":
                         ["a1", *(["a2", "a3"] if a[1] < a[2] else ["a3", "a2"])]}
    assert data["b"]["ids"] == [b[0], *sorted(b[1:])] and data["b"]["spec"] == "b1"
    assert data["replicates"] == {"A": sorted(a[1:]), "B": sorted(b[1:])}
    assert (data["comparable"], data["same_config"], data["identical"]) == (True, False, False)
    assert data["changed_factors"] == [{"factor": "software", "changes": [
        {"path": "stack.environment", "a": {"NCCL_ALGO": "Ring"}, "b": {"NCCL_ALGO": "Tree"}}]}]
    assert "software" not in data["unchanged_factors"] and "seed" in data["unchanged_factors"]
    assert len(data["unchanged_factors"]) == 15
    assert [c["path"] for c in data["record_changes"]] == ["name", "source"]
    assert data["notes"][:2] == ["A includes 2 replicate(s) from the ledger (identical but for the seed)",
                                 "B includes 2 replicate(s) from the ledger (identical but for the seed)"]
    # the throughput row against the t interval by hand: per run, log throughput = c - log(slow) (A) and
    # c + log 2 - log(slow) (B)
    ratio, low, high, p = _t_interval(-np.log(SLOW), math.log(2) - np.log(SLOW))
    row = _row(data, THROUGHPUT)
    assert row["verdict"] == "better" and row["ratio"] == pytest.approx(ratio, rel=1e-9)
    assert row["ci"] == pytest.approx([low, high], rel=1e-9) and row["p_value"] == pytest.approx(p, rel=1e-6)
    assert row["n"] == [3, 3] and row["df"] == 4
    assert [len(result.runs_a), len(result.runs_b)] == [3, 3]
    assert [r.id for r in result.runs_a] == data["a"]["ids"] and [r.id for r in result.runs_b] == data["b"]["ids"]
    # the whole gain is the software factor's, in log space
    (total,) = [t for t in data["attribution_totals"] if t["row"] == THROUGHPUT]
    assert total["total"] == pytest.approx(math.log(2), rel=1e-9) and total["unexplained"] == pytest.approx(0.0)
    shares = [s for s in data["attribution"] if s["metric"] == total["metric"]]
    assert [(s["factor"], s["fraction"]) for s in shares] == [("software", 1.0)]
    assert shares[0]["share"] == pytest.approx(math.log(2), rel=1e-9)
    assert data["lattice"] == {"factors": ["software"], "nodes": [
        {"factors": [], "ids": data["a"]["ids"]}, {"factors": ["software"], "ids": data["b"]["ids"]}], "edges": 1}
    assert data["confounded"] == [] and data["missing_ablations"] == [] and data["problems"] == []
    # every row decided by 3 vs 3 runs, every factor's run there: nothing to do next
    assert data["next_steps"] == []
    assert data["settings"] == json.loads(json.dumps(asdict(result.settings)))
    # without the ledger's replicates: one run a side, nothing decided, the commands that get replicates
    alone, data = _compare(ledger, Ref("a1"), Ref("b1"), replicates=False)
    assert data["replicates"] == {} and data["a"]["ids"] == [a[0]] and data["b"]["ids"] == [b[0]]
    assert _row(data, THROUGHPUT)["verdict"] in ("inconclusive", "better")
    assert data["next_steps"][:2] == ["ledger ab a1 b1 --rounds 3",
                                      "ledger rerun a1 --times 2 && ledger rerun b1 --times 2"]
    # without attribution: no shares, no lattice walk
    _, data = _compare(ledger, Ref("a1"), Ref("b1"), attribution=False)
    assert data["attribution"] == [] and data["attribution_totals"] == [] and data["missing_ablations"] == []


def test_replicates_of_one_configuration_identical_or_not_and_a_finding(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    r1 = golden_run(ledger, tmp_path, "r1", 1)
    r2 = golden_run(ledger, tmp_path, "r2", 2, seconds=1.1)
    r3 = golden_run(ledger, tmp_path, "r3", 3, loss=0.01)
    r4 = golden_run(ledger, tmp_path, "r4", 1, seconds=0.9, loss=0.02)  # the same seed too
    golden_run(ledger, tmp_path, "other", 1, "Tree")
    result, data = _compare(ledger, Ref("r1"), Ref("r2"))
    assert (data["same_config"], data["identical"]) == (True, True)
    assert data["replicates"] == {} and data["b"]["ids"] == [r2]  # no replicate joins either side
    assert data["changed_factors"] == [{"factor": "seed", "changes": [{"path": "workload.seed", "a": 1, "b": 2}]}]
    assert data["notes"][0] == (
        "identical: one configuration and bit-identical loss curves; the speed is still tested against the run-to-run "
        "noise: a difference beyond it is a finding about the runs (record fields that differ: name, source)")
    assert data["attribution"] == [] and data["missing_ablations"] == []
    # one run a side, no floor (r3 and r4 give 1 df): the speed headline is inconclusive, the loss headline
    # (identical curves) judged, and of the rows outside the headlines only the step times (the loss spikes and
    # non-finite counts are identical)
    assert data["notes"][1:] == [
        "inconclusive: tokens/s per device had one run per side and no noise floor on this hardware and drivers; a "
        "verdict between two configurations needs between-run variance (see next steps)",
        "2 row(s) outside the headlines are inconclusive (step time (median), step time (p90)): no noise floor for "
        "them on this hardware and drivers; the headline rows (loss @ matched tokens) were judged"]
    _, data = _compare(ledger, Ref("r1"), Ref("r3"))
    assert (data["same_config"], data["identical"]) == (True, False)
    assert data["notes"][0] == (
        "A and B differ only in the seed: they are replicates of one configuration. They are still tested: a "
        "difference beyond the run-to-run noise is a finding about the runs (a node, a driver, a noisy neighbour), "
        "not about the configuration (record fields that differ: name, source)")
    _, data = _compare(ledger, Ref("r1"), Ref("r4"))
    assert data["changed_factors"] == [] and data["same_config"] and not data["identical"]
    assert data["notes"][0].startswith("A and B differ in no causal factor: they are replicates of one configuration.")
    with pytest.raises(SameReceipt):
        _compare(ledger, Ref("r1"), Ref(r1[:10]))
    assert r3 and r4


def _two_nodes(tmp_path: Path) -> Ledger:
    """Three runs of one configuration on node n1 (tagged node=n1) and three on n2 taking half their time."""
    ledger = Ledger(tmp_path / "receipts")
    for i, s in enumerate(SLOW, 1):
        golden_run(ledger, tmp_path, f"slow{i}", i, seconds=s, tags={"node": "n1"})
        golden_run(ledger, tmp_path, f"fast{i}", i + 3, seconds=s / 2, tags={"node": "n2"})
    return ledger


def test_two_groups_of_one_configuration_that_differ_are_a_finding(tmp_path: Path) -> None:
    ledger = _two_nodes(tmp_path)
    result, data = _compare(ledger, Ref(group="node=n1"), Ref(group="node=n2"))
    assert data["same_config"] and not data["identical"] and data["changed_factors"] == []  # the seed is ignored
    assert data["a"]["group"] and data["a"]["spec"] == "--group node=n1" and len(data["a"]["ids"]) == 3
    found = [r["name"] for r in data["metrics"] if r["verdict"] in ("better", "worse", "higher", "lower")]
    assert THROUGHPUT in found
    assert ("finding: A and B are one configuration and differ in " + ", ".join(found) + ": compare what differed "
            "between their runs (host, load, drivers, the time they ran: `ledger history` finds when) before trusting "
            "either") in data["notes"]
    assert data["notes"][0].startswith("A and B differ in no causal factor: they are replicates")
    assert "(record fields that differ: name, source, tags)" in data["notes"][0]
    ratio, low, high, _ = _t_interval(-np.log(SLOW), math.log(2) - np.log(SLOW))
    assert _row(data, THROUGHPUT)["ci"] == pytest.approx([low, high], rel=1e-9)
    assert data["attribution"] == [] and result.lattice is not None


def test_a_task_change_is_refused_unless_allowed_and_confounded_factors_are_named(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    golden_run(ledger, tmp_path, "base", 1)
    golden_run(ledger, tmp_path, "more", 1, experts=16)
    golden_run(ledger, tmp_path, "both", 1, "Tree", 0.5, gpu="h100")
    with pytest.raises(TaskMismatch, match=r"workload\.model\.num_experts: 8 -> 16"):
        _compare(ledger, Ref("base"), Ref("more"))
    _, data = _compare(ledger, Ref("base"), Ref("more"), allow_task_change=True)
    assert data["comparable"] is False
    assert data["notes"][0] == ("the tasks differ (compared because --allow-task-change was given): metrics of "
                                "different tasks are not evidence that either stack is better")
    assert [f["factor"] for f in data["changed_factors"]] == ["task"]
    # software and hardware changed together, and no run has one without the other
    _, data = _compare(ledger, Ref("base"), Ref("both"))
    assert [f["factor"] for f in data["changed_factors"]] == ["software", "hardware"]
    (confounded,) = data["confounded"]
    assert confounded["factors"] == ["software", "hardware"]
    assert confounded["message"] == "confounded: software, hardware changed together"
    # the headlines with a value on both sides (no quality gate is set: no time to gate)
    assert sorted(confounded["shares"]) == ["loss at matched tokens", "throughput"]
    for metric, share in confounded["shares"].items():
        (total,) = [t for t in data["attribution_totals"] if t["metric"] == metric]
        assert share["share"] == pytest.approx(total["total"])
    # the runs that would split them: each factor alone on the base; imported runs have no launch to rebuild, so
    # no command joins the next steps (those are the replicates' commands only)
    assert sorted(m["adds"] for m in data["missing_ablations"]) == ["hardware", "software"]
    assert [m["command"] for m in data["missing_ablations"]] == [None, None]
    assert data["next_steps"] == ["ledger ab base both --rounds 3",
                                  "ledger rerun base --times 2 && ledger rerun both --times 2",
                                  "ledger ab base both --until-verdict"]


class _Shown:
    """A progress listener (the protocol the CLI's progress bar implements) that keeps what it was told."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, float | None, str]] = []
        self.done: dict[int, list[tuple[float, float | None]]] = {}

    def begin(self, label: str, total: float | None, unit: str) -> int:
        self.tasks.append((label, total, unit))
        self.done[len(self.tasks) - 1] = []
        return len(self.tasks) - 1

    def update(self, handle: int, done: float, total: float | None) -> None:
        self.done[handle].append((done, total))

    def end(self, handle: int) -> None:
        pass


def test_the_json_keys_the_progress_and_a_noise_floor_from_other_replicate_groups(tmp_path: Path) -> None:
    """JSON keys are stable (the module docstring): every key by hand. With one run a side, the other replicates
    of each configuration are replicate groups of the same hardware and drivers: the noise floor of the headlines'
    attribution, its SD the pooled SD of their log throughputs by hand."""
    from ledger import progress

    ledger = Ledger(tmp_path / "receipts")
    slow = (*SLOW, 1.05)
    for i, s in enumerate(slow, 1):
        golden_run(ledger, tmp_path, f"a{i}", i, "Ring", s)
        golden_run(ledger, tmp_path, f"b{i}", i, "Tree", s / 2)
    shown = _Shown()
    with progress.listening(shown):
        result, data = _compare(ledger, Ref("a1"), Ref("b1"), replicates=False)
    assert [t[0] for t in shown.tasks] == ["reading the runs' tables", "comparing the metrics",
                                           "reading the ablation lattice's runs"]
    assert shown.tasks[0] == ("reading the runs' tables", 2, "runs") and shown.done[0] == [(1, 2), (2, 2)]
    assert list(data) == ["a", "b", "comparable", "same_config", "identical", "next_steps", "changed_factors",
                          "unchanged_factors", "record_changes", "metrics", "attribution", "attribution_totals",
                          "confounded", "missing_ablations", "lattice", "replicates", "settings", "problems", "notes"]
    assert data["record_changes"] == [{"path": c.path, "a": c.a, "b": c.b} for c in result.diff.record]
    assert data["record_changes"][0] == {"path": "name", "a": "a1", "b": "b1"}
    (total,) = [t for t in data["attribution_totals"] if t["row"] == THROUGHPUT]
    assert list(total) == ["metric", "row", "direction", "total", "ci", "unexplained", "unexplained_ci", "orders",
                           "orders_possible", "shapley", "paths", "confounded", "noise", "total_verdict", "reason",
                           "note"]
    assert (total["orders"], total["orders_possible"], total["shapley"], total["paths"]) == (1, 1, True,
                                                                                            [[["software"]]])
    assert total["confounded"] == [] and total["reason"] is None and total["ci"] is not None
    # the floor: groups {a2, a3, a4} and {b2, b3, b4}, each log throughput c - log(slow) (+ log 2 for b): both
    # have the spread of log(slow[1:]), pooled over 2 + 2 df
    spread = float(np.std(np.log(slow[1:]), ddof=1))
    assert total["noise"]["sd"] == pytest.approx(spread, rel=1e-9) and total["noise"]["df"] == 4
    assert total["total"] == pytest.approx(math.log(2), rel=1e-9)
    share = next(s for s in data["attribution"] if s["metric"] == total["metric"])
    assert list(share) == ["metric", "factor", "share", "ci", "spread", "fraction", "verdict"]
    assert list(_row(data, THROUGHPUT))[:4] == ["name", "family", "unit", "direction"]


def test_a_confounded_set_in_the_json(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    for i, s in enumerate(SLOW, 1):
        golden_run(ledger, tmp_path, f"base{i}", i, seconds=s)
        golden_run(ledger, tmp_path, f"both{i}", i, "Tree", s / 2, gpu="h100")
    _, data = _compare(ledger, Ref("base1"), Ref("both1"))
    (confounded,) = data["confounded"]
    assert list(confounded) == ["factors", "message", "shares"]
    (total,) = [t for t in data["attribution_totals"] if t["row"] == THROUGHPUT]
    share = confounded["shares"][total["metric"]]
    assert list(share) == ["share", "ci", "verdict"]
    (inside,) = total["confounded"]
    assert share == {"share": inside["share"], "ci": inside["ci"], "verdict": inside["verdict"]}
    assert share["share"] == pytest.approx(math.log(2), rel=1e-9) and share["ci"] is not None
    assert share["verdict"] in ("significant", "credited")


def test_two_runs_of_one_configuration_with_nothing_else_apart(tmp_path: Path) -> None:
    """Two imports of the same golden values file under one name, one with seed 1 and one with seed 2: no record
    field differs, so the note names none; a run with more steps is never bit-identical, however its shared
    steps agree; the finding reads in both directions."""
    ledger = Ledger(tmp_path / "receipts")
    for folder, seed in (("one", 1), ("two", 2)):
        (tmp_path / folder).mkdir()
        golden_run(ledger, tmp_path / folder, "same", seed)
    ids = ledger.ids()
    assert len(ids) == 2
    _, data = _compare(ledger, Ref(ids[0]), Ref(ids[1]))
    assert data["identical"] and data["record_changes"] == []
    assert data["notes"][0] == (
        "identical: one configuration and bit-identical loss curves; the speed is still tested against the run-to-run "
        "noise: a difference beyond it is a finding about the runs")
    assert data["notes"][1:] == []  # the same file: every row identical, nothing inconclusive
    # the same losses over 30 steps and over 31
    longer = tmp_path / "three"
    longer.mkdir()
    rid = golden_run(ledger, longer, "longer", 3)
    values = longer / "longer" / "golden_values_dev_dgx_a100.json"
    extended = json.loads(values.read_text())
    for series in extended.values():
        series["end_step"] = 31
        series["values"]["31"] = series["values"]["30"]
    (tmp_path / "four").mkdir()
    (tmp_path / "four" / "x").mkdir()
    (tmp_path / "four" / "x" / "golden_values_dev_dgx_a100.json").write_text(json.dumps(extended))
    (tmp_path / "four" / "x" / "model_config.yaml").write_text((longer / "longer" / "model_config.yaml").read_text())
    more = ingest_golden(ledger, tmp_path / "four" / "x" / "golden_values_dev_dgx_a100.json",
                         tmp_path / "four" / "x" / "model_config.yaml", name="more").receipt
    assert more is not None
    _, data = _compare(ledger, Ref(rid[:12]), Ref(more.id[:12]))
    assert data["same_config"] and not data["identical"]
    _, data = _compare(ledger, Ref(more.id[:12]), Ref(rid[:12]))
    assert data["same_config"] and not data["identical"]


def test_a_finding_when_the_first_group_is_the_faster(tmp_path: Path) -> None:
    ledger = _two_nodes(tmp_path)
    _, data = _compare(ledger, Ref(group="node=n2"), Ref(group="node=n1"))
    assert _row(data, THROUGHPUT)["verdict"] == "worse"
    found = [r["name"] for r in data["metrics"] if r["verdict"] in ("better", "worse", "higher", "lower")]
    assert THROUGHPUT in found
    assert any(n.startswith("finding: A and B are one configuration and differ in " + ", ".join(found) + ":")
               for n in data["notes"])
