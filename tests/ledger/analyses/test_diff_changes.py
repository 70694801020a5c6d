"""The factor diff as a reviewer reads it: which fields changed, under which factor, in which order, what is
bookkeeping, how the launch's own environment variables (a Slurm job id, a rank, the rendezvous address) are
told apart from settings, and the words of ``path: a -> b`` (package lists, maps, long values). Every expected
value is written by hand from the two receipts."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers import CAUSAL
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.analyses.diff import (
    ENVIRONMENT,
    Change,
    FactorDiff,
    TaskMismatch,
    causal_value,
    check_task,
    diff_leaves,
    factor_diff,
    launch_instance,
    summarize_change,
)
from schemas.receipt import Receipt

LAUNCH = [
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "SLURM_HET_JOB_ID", "SLURM_JOB_NAME", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
    "SLURM_NODEID", "SLURM_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID", "SLURM_TOPOLOGY_ADDR",
    "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
    "SLURM_JOB_UID", "SLURM_JOB_USER", "SLURM_JOB_GID", "SLURM_PRIO_PROCESS", "SLURMD_NODENAME",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "MASTER_ADDR", "MASTER_PORT",
    "RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "ROLE_RANK",
]
"""Variables that name one launch, as the Slurm and torchrun manuals spell them."""

SETTINGS = ["SLURM_NNODES", "SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NCCL_ALGO",
            "NCCL_IB_HCA", "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "RANKS", "MY_RANK", "RANK_",
            "SLURM_JOB_IDS", "XMASTER_ADDR", "MASTER_ADDRESS", "slurm_job_id", "rank", "SLURM_JOB", "SLURM_STEP",
            "TORCHELASTIC_MAX_RESTARTS", "SLURM_JOB_PARTITION", "SLURM_NODELISTS"]
"""Variables that set how a run runs (or only look like a launch's name): causal, a software change."""


def receipt(**paths: Any) -> Receipt:
    """A small receipt with the dotted ``paths`` set (``stack__environment=...`` for ``stack.environment``)."""
    data: dict[str, Any] = Receipt(run_uuid="u", status="succeeded", name="r").model_dump(mode="json")
    data["workload"]["task"].update(dataset="mix", objective="causal-lm")
    data["workload"]["model"].update(layers=2, num_experts=8, top_k=2)
    data["workload"]["seed"] = 0
    for dotted, value in paths.items():
        *parents, leaf = dotted.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = copy.deepcopy(value)
    return Receipt.model_validate(data)


# ------------------------------------------------------------------------------------- launch instance
def test_the_launch_variables_are_bookkeeping_and_the_settings_are_causal() -> None:
    env = {name: f"v-{i}" for i, name in enumerate(LAUNCH + SETTINGS)}
    assert launch_instance(env) == {name: env[name] for name in LAUNCH}
    assert causal_value(ENVIRONMENT, env) == {name: env[name] for name in SETTINGS}
    # any other leaf, and an environment that is not a map, is kept as it is
    assert causal_value("workload.arguments", env) is env
    assert causal_value(ENVIRONMENT, None) is None
    assert causal_value(ENVIRONMENT, ["RANK=0"]) == ["RANK=0"]
    assert launch_instance(None) == {} and launch_instance(["RANK=0"]) == {} and launch_instance({}) == {}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(LAUNCH + SETTINGS), st.text(max_size=8), max_size=12))
def test_an_environment_splits_into_its_launch_and_its_settings(env: dict[str, str]) -> None:
    launch, causal = launch_instance(env), causal_value(ENVIRONMENT, env)
    assert set(launch) == set(env) & set(LAUNCH) and set(causal) == set(env) & set(SETTINGS)
    assert launch | causal == env


def test_two_replicates_under_slurm_differ_only_in_bookkeeping() -> None:
    a = receipt(stack__environment={"SLURM_JOB_ID": "101", "RANK": "0", "MASTER_PORT": "29500", "NCCL_ALGO": "Ring"})
    b = receipt(stack__environment={"SLURM_JOB_ID": "102", "RANK": "0", "MASTER_ADDR": "n7", "NCCL_ALGO": "Ring"})
    diff = factor_diff(a, b)
    assert diff.changed == {} and diff.factors == [] and diff.unchanged == CAUSAL
    assert diff.record == [Change("stack.environment (launch instance)",
                                  {"SLURM_JOB_ID": "101", "RANK": "0", "MASTER_PORT": "29500"},
                                  {"SLURM_JOB_ID": "102", "RANK": "0", "MASTER_ADDR": "n7"})]
    # the same launch variables on both sides: nothing to show
    c = receipt(stack__environment={"SLURM_JOB_ID": "101", "RANK": "0", "MASTER_PORT": "29500", "NCCL_ALGO": "Tree"})
    diff = factor_diff(a, c)
    assert diff.record == []
    assert diff.changed == {"software": [Change(ENVIRONMENT, {"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Tree"})]}
    assert diff.unchanged == [f for f in CAUSAL if f != "software"]


# -------------------------------------------------------------------------------------------- factors
def test_changes_are_grouped_by_factor_in_the_factor_order_and_bookkeeping_is_apart() -> None:
    a = receipt()
    b = receipt(workload__seed=7, workload__precision__compute="bf16", stack__code__commit="abc",
                workload__optimizer__lr=0.001, name="other", tags={"sweep": "x"}, id="f" * 64, run_uuid="v",
                started_at="2026-01-02T03:04:05Z", ended_at="2026-01-02T04:04:05Z", duration_s=3600.0,
                summary__steps=10, summary__final_loss=2.5, problems=[{"source": "x", "message": "a problem"}],
                exit_code=3,
                workload__launch__overrides=["lr=0.001"])
    diff = factor_diff(a, b)
    assert diff.factors == ["code", "precision", "hyperparameters", "seed"]
    assert diff.changed == {
        "code": [Change("stack.code.commit", None, "abc")],
        "precision": [Change("workload.precision.compute", None, "bf16")],
        "hyperparameters": [Change("workload.optimizer.lr", None, 0.001)],
        "seed": [Change("workload.seed", 0, 7)],
    }
    assert diff.unchanged == [f for f in CAUSAL if f not in diff.factors]
    # ids, times, summaries and problems differ between any two runs: not shown; the rest of the record is
    assert diff.record == [Change("name", "r", "other"), Change("tags", {}, {"sweep": "x"}),
                           Change("exit_code", None, 3), Change("workload.launch.overrides", [], ["lr=0.001"])]
    assert diff.task_changes == []
    # an ignored factor is neither changed nor unchanged
    ignored = factor_diff(a, b, ignore=("seed", "code"))
    assert ignored.factors == ["precision", "hyperparameters"]
    assert ignored.unchanged == [f for f in CAUSAL if f not in ("code", "precision", "hyperparameters", "seed")]
    assert ignored.record == diff.record
    # the same receipt: nothing changed, every factor unchanged
    same = factor_diff(a, receipt())
    assert same == FactorDiff({}, CAUSAL, [])


def test_a_task_change_is_refused_with_the_first_six_fields_and_allowed_on_request() -> None:
    a = receipt()
    b = receipt(workload__task__dataset="web", workload__task__tokenizer="gpt2", workload__task__vocab_size=50257,
                workload__task__objective="mlm", workload__task__dataset_fingerprint="sha:1",
                workload__model__num_experts=16, workload__model__top_k=4)
    diff = factor_diff(a, b)
    assert [c.path for c in diff.task_changes] == [
        "workload.task.dataset", "workload.task.dataset_fingerprint", "workload.task.tokenizer",
        "workload.task.vocab_size", "workload.task.objective", "workload.model.num_experts", "workload.model.top_k"]
    with pytest.raises(TaskMismatch) as info:
        check_task(diff, allow=False)
    assert str(info.value) == (
        "the runs have different tasks (workload.task.dataset: mix -> web; workload.task.dataset_fingerprint: - -> "
        "sha:1; workload.task.tokenizer: - -> gpt2; workload.task.vocab_size: - -> 50257; workload.task.objective: "
        "causal-lm -> mlm; workload.model.num_experts: 8 -> 16 and 1 more): they are not comparable; pass "
        "--allow-task-change to compare them anyway")
    assert check_task(diff, allow=True) is False
    six = factor_diff(a, receipt(workload__task__dataset="web", workload__task__tokenizer="gpt2",
                                 workload__task__vocab_size=50257, workload__task__objective="mlm",
                                 workload__task__dataset_fingerprint="sha:1", workload__model__num_experts=16))
    with pytest.raises(TaskMismatch) as info:
        check_task(six, allow=False)
    assert "num_experts: 8 -> 16): they are not comparable" in str(info.value)
    assert check_task(factor_diff(a, receipt(workload__seed=3)), allow=False) is True


# --------------------------------------------------------------------------------------------- leaves
def test_leaves_keep_the_first_sides_order_then_the_seconds_and_a_missing_leaf_is_none() -> None:
    a = {"z": 1, "b": 2, "m": None, "same": [1]}
    b = {"b": 3, "y": 4, "z": 1, "m": None, "x": None, "same": [1]}
    assert diff_leaves(a, b) == [Change("b", 2, 3), Change("y", None, 4)]
    assert diff_leaves({"k": 0, "j": 1}, {"q": 2, "j": 5, "p": 3}) == [
        Change("k", 0, None), Change("j", 1, 5), Change("q", None, 2), Change("p", None, 3)]
    assert diff_leaves({}, {}) == []


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 2) | st.none()),
       st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 2) | st.none()))
def test_the_changed_leaves_are_those_that_differ(a: dict[str, Any], b: dict[str, Any]) -> None:
    changes = diff_leaves(a, b)
    order = list(a) + [k for k in b if k not in a]
    assert [c.path for c in changes] == [k for k in order if a.get(k) != b.get(k)]
    assert all(c.a == a.get(c.path) and c.b == b.get(c.path) for c in changes)


# ---------------------------------------------------------------------------------------------- words
def test_a_change_in_words() -> None:
    assert Change("workload.seed", 0, 7).describe() == "workload.seed: 0 -> 7"
    assert Change("x", None, "bf16").describe() == "x: - -> bf16"
    assert summarize_change("x", "a" * 80, "b" * 81) == "a" * 80 + " -> " + "b" * 77 + "..."
    assert summarize_change("x", "a" * 10, "b" * 11, limit=10) == "a" * 10 + " -> " + "b" * 7 + "..."
    assert summarize_change("x", [1, 2], None) == "[1, 2] -> -"


def test_maps_show_the_keys_that_changed_first_four_in_order() -> None:
    a = {"e": 1, "a": 1, "c": "same", "d": None}
    b = {"a": 2, "c": "same", "d": 4, "b": "x" * 25, "f": "y" * 24}
    # sorted keys, unchanged ones left out, each side shortened to 24 characters
    assert summarize_change("workload.arguments", a, b) == (
        "{a: 1 -> 2, b: - -> " + "x" * 21 + "..., d: - -> 4, e: 1 -> -, +1 more}")
    assert summarize_change("x", {"a": 1, "b": 1, "c": 1, "d": 1}, {}) == (
        "{a: 1 -> -, b: 1 -> -, c: 1 -> -, d: 1 -> -}")
    assert summarize_change("x", {}, {}) == "{}"
    assert summarize_change("x", {"k": "a" * 25}, {"k": "b" * 24}) == "{k: " + "a" * 21 + "... -> " + "b" * 24 + "}"
    # a map on one side only is a plain value
    assert summarize_change("x", {"a": 1}, None) == "{'a': 1} -> -"


def test_package_lists_say_how_many_differ_and_name_the_first_five() -> None:
    a = [{"name": n, "version": "1"} for n in "abcdefg"] + ["not a package"]
    b = [{"name": n, "version": "2"} for n in "gfedcb"] + [{"name": "h", "version": None}, {"name": "z"}]
    # a: 1 -> -, b..g: 1 -> 2; h and z have no version on either side: not a change
    assert summarize_change("stack.software.packages", a, b) == (
        "7 package(s) differ: a 1 -> -, b 1 -> 2, c 1 -> 2, d 1 -> 2, e 1 -> 2, +2 more")
    five = [{"name": n, "version": "1"} for n in "abcde"]
    assert summarize_change("stack.software.packages", five, []) == (
        "5 package(s) differ: a 1 -> -, b 1 -> -, c 1 -> -, d 1 -> -, e 1 -> -")
    assert summarize_change("stack.software.packages", [], []) == "0 package(s) differ: "
    assert summarize_change("stack.software.packages", five + [{"name": "f", "version": "1"}], []) == (
        "6 package(s) differ: a 1 -> -, b 1 -> -, c 1 -> -, d 1 -> -, e 1 -> -, +1 more")
    # a change of the package list in words, as the compare report shows it
    assert Change("stack.software.packages", [{"name": "torch", "version": "2.3"}],
                  [{"name": "torch", "version": "2.4"}]).describe() == (
        "stack.software.packages: 1 package(s) differ: torch 2.3 -> 2.4")
    # the same lists under another path are plain values
    assert summarize_change("stack.software.nvidia", [], [{"name": "a"}]) == "[] -> [{'name': 'a'}]"
