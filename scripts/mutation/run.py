"""Mutation testing of the modules whose bugs mislead or lose data, with mutmut (the ``mutation`` extra).

Each module is mutated in its own throw-away copy of the tree and its mutants run against a small set of
targeted tests (mutmut runs, for each mutant, only the tests that reach the mutated function). Prints one
bench-style JSON line per module::

    {"figure": "mutation_kill_rate:stats", "value": 0.91, "target": 0.85, "met": true, "killed": ...,
     "mutants": ..., "sampled": "1 in 4", ...}

A mutant is *killed* when a test fails (or times out, or crashes) with it; one that no targeted test reaches
counts as surviving. Mutants are sampled by the last digit of their mutmut number: a module's *first sample* is
the K tenths its tests were aimed at (the first K digits of ``DIGITS``, a fixed choice, so runs are comparable),
and its *second sample* is the next digit (or the next few, for a small module: ``Module.second``), mutants that
no test was written against, printed beside the first (``second``): how far the tests carry beyond the mutants
they were aimed at. A module meets the target when both samples do. ``--sample K`` sets K for every module (10:
all mutants, no second sample); ``--first-only`` skips the second sample. Survivors are listed with
``--survivors`` (each with its sample), and ``docs/mutation.md`` holds the review of those that remain
(equivalent mutants, with the reason).

Usage: ``python scripts/mutation/run.py [--only NAME ...] [--sample K] [--first-only] [--max-children N]
[--survivors] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree import ROOT, copy_tree  # noqa: E402

TARGET = 0.85


@dataclass(frozen=True)
class Module:
    """A module (or a few) and the targeted tests its mutants run against."""

    name: str
    paths: tuple[str, ...]
    tests: tuple[str, ...]
    """Test files, or pytest node ids (``file::test``) where only some of a file's tests run in-process and fast."""
    sample: int = 1
    """The first sample, in tenths: the mutants whose number ends in one of the first ``sample`` digits of
    ``DIGITS`` (10: all)."""
    second: int = 1
    """The second sample, in tenths: the next ``second`` digits of ``DIGITS`` (a small module takes a larger share
    of its mutants into both samples, or a handful of mutants would decide its figure)."""


A = "tests/ledger/analyses/"
ING = "tests/ledger/ingest/"
S = "tests/ledger/store/"
RC = "tests/ledger/record/"
RP = "tests/ledger/replay/"
SCALE_IN_PROCESS = (
    "test_receipts_go_into_shards_and_the_journal", "test_an_old_flat_ledger_is_read_in_place_then_migrated",
    "test_sync_lists_only_the_shards_that_changed", "test_a_torn_journal_line_loses_nothing_after_it",
    "test_a_batch_names_a_receipt_whose_rows_disagree_and_indexes_the_others",
    "test_a_publisher_gives_way_to_a_waiting_reader",
    "test_publishers_leave_the_index_alone_while_another_publish_is_under_way",
    "test_a_reader_among_publishers_answers_from_the_index_as_it_is", "test_a_round_the_journal_fills_lists_no_shard",
    "test_a_publishers_sync_is_bounded_and_the_next_one_finds_the_rest",
    "test_publish_many_publishes_a_group_as_publish_does_and_all_or_nothing",
    "test_the_index_takes_a_receipt_by_its_seal_and_refuses_a_forged_one",
    "test_a_reader_catches_up_in_rounds_and_a_quiet_ledger_fully",
    "test_threads_index_many_receipts_by_chunks_and_name_the_damaged")
"""test_scale_layout.py's tests that start no Python child (those that do import ledger there)."""
MODULES: tuple[Module, ...] = (
    Module("stats", ("ledger/analyses/stats.py",), (A + "test_stats.py", A + "test_exact_stats.py"), 10),
    Module("verdicts", ("ledger/analyses/metrics.py", "ledger/analyses/builtin_metrics.py",
                        "ledger/analyses/evidence.py"),
           (A + "test_evidence.py", A + "test_compare_units.py", A + "test_metrics_mutants.py",
            A + "test_evidence_mutants.py", A + "test_builtin_metric_rows.py", A + "test_metrics_rules.py"), 3),
    Module("attribution", ("ledger/analyses/attribution.py",),
           (A + "test_attribution.py", A + "test_exact_attribution.py", A + "test_attribution_mutants.py"), 5),
    Module("goodput", ("ledger/analyses/goodput.py",),
           (A + "test_goodput.py", A + "test_exact_goodput.py", A + "test_goodput_mutants.py"), 3),
    Module("gates", ("ledger/analyses/gates.py", "ledger/analyses/km.py"),
           (A + "test_gates.py", A + "test_km.py", A + "test_exact_goodput.py", A + "test_gates_mutants.py"), 3),
    # in-process tests only: a `ledger` CLI started by a test would import mutmut's trampolines outside its
    # runner and fail (test_secrets.py and test_integrity.py start the CLI)
    Module("redaction", ("ledger/redact.py",),
           ("tests/ledger/record/test_redact.py", "tests/ledger/record/test_redact_exact.py",
            "tests/ledger/record/test_redact_mutants.py", "tests/ledger/record/test_redact_stream.py"), 5),
    Module("publish", ("ledger/store/publish.py", "ledger/store/receipts.py"),
           ("tests/ledger/store/test_stored_columns.py", "tests/ledger/store/test_publish_mutants.py",
            "tests/ledger/store/test_receipts_mutants.py", "tests/ledger/store/test_publish_tables.py"), 5),
    Module("mlperf", ("ledger/ingest/mlperf.py",),
           ("tests/ledger/ingest/test_mlperf.py", "tests/ledger/ingest/test_mlperf_exact.py",
            "tests/ledger/ingest/test_mlperf_mutants.py"), 3),
    Module("megatron", ("ledger/ingest/megatron.py",),
           ("tests/ledger/ingest/test_megatron_parser.py", "tests/ledger/ingest/test_megatron_mutants.py"), 3),
    Module("template", ("ledger/ingest/formats/template.py",),
           (ING + "test_formats.py", ING + "test_template_lines.py"), 5),
    Module("tee", ("ledger/record/tee.py",),
           ("tests/ledger/record/test_tee.py", "tests/ledger/record/test_tee_parts.py"), 5),
    # issue 38: every module a user's figures pass through; first sample 1 in 10 (numbers ending in 0), second
    # the numbers ending in 5
    Module("identity", ("ledger/ingest/formats/identity.py",),
           ("tests/ledger/ingest/test_identity.py", "tests/ledger/ingest/test_identity_reference.py")),
    Module("filters", ("ledger/store/filters.py",),
           ("tests/ledger/store/test_filters.py", "tests/ledger/store/test_where_as_typed.py")),
    # test_history.py's calibration (hundreds of simulated histories) and its CLI test stay out: slow, and a CLI
    # child cannot import a mutated module
    Module("history", ("ledger/analyses/history.py", "ledger/analyses/changepoints.py"),
           (A + "test_history_figures.py",
            A + "test_history.py::test_the_best_split_maximises_the_divergence_over_every_split_and_end",
            A + "test_history.py::test_planted_shifts_are_found_and_flat_series_give_none",
            A + "test_history.py::test_history_finds_the_regression_and_names_the_commit")),
    Module("sequential", ("ledger/analyses/sequential.py", "ledger/replay/until_verdict.py"),
           (A + "test_sequential_figures.py", "tests/ledger/replay/test_ab_until_verdict.py",
            A + "test_sequential.py::test_the_confidence_sequence_is_the_inverted_test",
            A + "test_sequential.py::test_decisions_and_their_rules",
            A + "test_sequential.py::test_the_cap_and_the_result",
            A + "test_sequential.py::test_runs_without_token_counts_are_judged_by_their_step_times")),
    # small modules: half their mutants in each sample
    Module("clock", ("ledger/store/clock.py",), ("tests/ledger/store/test_output_clock.py",), 5, 5),
    Module("failure", ("ledger/store/failure.py",),
           ("tests/ledger/store/test_failure_lines.py",
            "tests/ledger/store/test_failure.py::test_a_python_traceback_with_its_exception_and_line",
            "tests/ledger/store/test_failure.py::test_torchrun_keeps_the_ranks_traceback_not_the_launchers",
            "tests/ledger/store/test_failure.py::test_without_a_traceback_the_last_lines",
            "tests/ledger/store/test_failure.py::test_the_line_number_counts_the_log_before_its_tail",
            "tests/ledger/store/test_failure.py::test_a_missing_or_empty_log_has_no_failure"), 5, 5),
    Module("merge", ("ledger/store/merge.py", "ledger/store/summary.py"),
           ("tests/ledger/store/test_merge.py", "tests/ledger/store/test_merge_rows.py",
            "tests/ledger/store/test_rank_files.py",
            "tests/ledger/store/test_summary.py", "tests/ledger/store/test_stored_columns.py",
            "tests/ledger/store/test_publish_parquet.py", "tests/ledger/store/test_publish_group.py")),
    # unaimed samples fell short three times (numbers ending in 5: 83.3%, in 1: 79.0%, in 6: 83.3%; most survivors
    # equivalent, docs/mutation.md) and were aimed at in turn: the second sample is the numbers ending in 2
    Module("series", ("ledger/analyses/series.py", "ledger/analyses/matched.py"),
           (A + "test_matched_series.py", A + "test_series.py"), 4),
    # the compiled column reader is not in the mutation tree (a build output git ignores): the Python reader runs
    Module("scan", ("ledger/ingest/formats/scan.py",),
           (ING + "test_formats.py", ING + "test_format_shapes.py", ING + "test_identity.py",
            ING + "test_capture_chunks.py", ING + "test_scan_times.py", ING + "test_scan_lines.py")),
    # its second sample fell short (83.5%) by equivalent mutants and two in the compiled reader's branch, which the
    # mutation tree cannot reach (no extension there; test_native_columns.py covers it where it is built)
    Module("columns", ("ledger/ingest/formats/columns.py",),
           (ING + "test_columns_reading.py", ING + "test_formats.py", ING + "test_capture_chunks.py")),
    # small modules: half their mutants in each sample
    Module("keyvalue", ("ledger/ingest/formats/keyvalue.py",),
           (ING + "test_keyvalue_lines.py", ING + "test_formats.py", ING + "test_format_shapes.py"), 5, 5),
    Module("hf", ("ledger/ingest/formats/hf.py",),
           (ING + "test_hf_dicts.py", ING + "test_formats.py", ING + "test_format_shapes.py"), 5, 5),
    Module("tensorboard", ("ledger/ingest/formats/tensorboard.py",),
           (ING + "test_tensorboard_events.py",
            ING + "test_ingest_log.py::test_every_format_record_reads_is_imported_by_ingest_log"), 5, 5),
    # issue 38, the report side and issues 35/36's modules: in-process tests only (their other tests start the
    # `ledger` CLI or `ledger serve`). console has ~715 mutants and fast tests: 2 in 10 in each sample
    Module("console", ("ledger/report/console.py",), ("tests/ledger/report/test_console_rendering.py",), 2, 2),
    # the pages through Starlette's test client (~820 mutants, slower tests: the default samples)
    Module("web", ("ledger/report/web/views.py", "ledger/report/web/pages.py"),
           ("tests/ledger/report/test_web_views.py",)),
    # small modules: half their mutants in each sample
    Module("runs", ("ledger/store/runs.py",), ("tests/ledger/store/test_runs_columns.py",), 5, 5),
    Module("notes", ("ledger/report/notes.py", "ledger/store/annotation.py"),
           ("tests/ledger/store/test_annotation_records.py", "tests/ledger/report/test_notes_render.py"), 5, 5),
    # issue 38, analyses and replay (small modules: half their mutants in each sample)
    Module("diff", ("ledger/analyses/diff.py",), (A + "test_compare_units.py", A + "test_diff_changes.py"), 5, 5),
    Module("groups", ("ledger/analyses/groups.py",), (A + "test_groups.py", A + "test_groups_sides.py"), 5, 5),
    # every in-process test that calls compare(); 1 in 10 a sample (its tests read a ledger of imported runs)
    Module("compare", ("ledger/analyses/compare.py",),
           (A + "test_compare_review.py", A + "test_evidence.py", ING + "test_compare_factors.py",
            A + "test_verdict_words.py::test_banners_agree_with_the_rows_they_sum_up")),
    # claims' tests that read a ledger take seconds each (and a replay starts the runner): 2 in 10 a sample
    Module("claims", ("ledger/replay/claims.py",),
           (RP + "test_claims.py::test_claim_sentences", RP + "test_claims.py::test_the_words_match_the_numbers",
            RP + "test_claims.py::test_no_claim_without_between_run_evidence", RP + "test_claims_figures.py"), 2, 2),
    # store and record (issue 38): in-process tests only (a `ledger` CLI or a `python -c` importing ledger, started
    # by a test, cannot import a mutated module)
    Module("integrity", ("ledger/store/integrity.py",),
           (S + "test_integrity_mutants.py", S + "test_publish_group.py"), 5, 5),
    Module("index", ("ledger/store/index.py",),
           (S + "test_index_mutants.py", S + "test_publish_group.py", S + "test_refs.py",
            S + "test_index_reader.py::test_an_up_to_date_index_is_read_without_writing_it",
            S + "test_index_reader.py::test_an_index_behind_the_files_or_of_another_version_is_synced",
            *(S + "test_scale_layout.py::" + t for t in SCALE_IN_PROCESS))),
    # test_streams.py's first test runs a real `ledger record` at a pseudo-terminal: left out
    Module("streams", ("ledger/record/streams.py",),
           (RC + "test_streams_inprocess.py",
            RC + "test_streams.py::test_a_launch_whose_outputs_are_not_terminals_gets_pipes",
            RC + "test_streams.py::test_a_terminals_stream_writes_the_launchs_bytes_unchanged"), 5, 5),
    Module("recover", ("ledger/record/recover.py",), (RC + "test_recover_inprocess.py",), 5, 5),
    Module("wrapper", ("ledger/record/wrapper.py",),
           (RC + "test_wrapper_inprocess.py", RC + "test_wrapper_capture_inprocess.py")),
    Module("job", ("ledger/record/job.py",), (RC + "test_job_inprocess.py",)),
    # replay's export and share (issue 38): in-process tests only (test_export.py and most of test_share.py start
    # the `ledger` CLI); 2 in 10 a sample
    Module("export", ("ledger/replay/export.py",), (RP + "test_export_round_trip.py",), 2, 2),
    Module("share", ("ledger/replay/share.py",),
           (RP + "test_share.py::test_pull_leaves_out_a_damaged_remote_receipt",
            RP + "test_share.py::test_notes_and_archive_flags_travel_with_push_and_pull", RP + "test_share_remote.py"),
           2, 2),
)

DIGITS = "0516273849"
"""The last digits a sample of K tenths takes: the first K of these (spread over the numbers)."""


def config(module: Module) -> str:
    """The ``[tool.mutmut]`` table for one module's run."""
    def toml_list(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["ledger/"]',
        f"only_mutate = {toml_list(module.paths)}",
        'also_copy = ["schemas/", "tests/", "runners/", "pyproject.toml"]',
        f"pytest_add_cli_args_test_selection = {toml_list(module.tests)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]',
        "",
    ])


def digits(sample: int, second: int) -> tuple[str, str]:
    """The last digits of the first sample (``sample`` tenths) and of the second (the next ``second`` digits, as
    many as are left)."""
    first = DIGITS[:max(1, min(10, sample))]
    return first, DIGITS[len(first):len(first) + max(0, second)]


def pattern(first: str, second: str = "") -> list[str]:
    """mutmut name patterns selecting the mutants whose number ends in one of these digits (none: all)."""
    chosen = first + second
    return [] if len(chosen) >= 10 else [f"*__mutmut_*[{chosen}]"]


def figure(statuses: dict[str, str], ends: str) -> dict[str, object]:
    """Kill rate of the mutants (by name: status) whose number ends in one of ``ends``."""
    chosen = {k: s for k, s in statuses.items() if k[-1] in ends and s not in ("not checked", "skipped")}
    # a mutant that crashes the test process (mutmut's "segfault": SIGSEGV or SIGKILL) is caught like a timeout
    killed = sum(s in ("killed", "timeout", "caught by type check", "segfault") for s in chosen.values())
    n = len(chosen)
    rate = killed / n if n else 0.0
    return {"value": round(rate, 4), "met": bool(n) and rate >= TARGET, "killed": killed, "mutants": n,
            "no_tests": sum(s == "no tests" for s in chosen.values()),
            # killed by the timeout: a mutant that loops, or a test that hangs in mutmut's forked runner (as a
            # publisher's thread pool inherited by the fork once did): many of them call for a look
            "timeouts": sum(s == "timeout" for s in chosen.values()),
            "sampled": "all" if len(ends) >= 10 else f"{len(ends)} in 10 (mutant numbers ending in {ends})",
            "survivors": sorted(k for k, s in chosen.items() if s in ("survived", "no tests", "suspicious"))}


def run_module(module: Module, sample: int, second: int, max_children: int, keep: bool) -> dict[str, object]:
    """Run one module's mutants; the figure as a dict (the second sample's under ``second``)."""
    from mutmut.stats import status_by_exit_code

    first_digits, second_digits = digits(sample, second)
    tree = copy_tree()
    start = time.monotonic()
    try:
        with (tree / "pyproject.toml").open("a") as f:
            f.write(config(module))
        subprocess.run(["git", "init", "-q", str(tree)], check=True)  # mutmut reads git for change detection
        env = dict(os.environ)
        env.setdefault("STACKRECEIPT_SHARED", str(ROOT.parent / "shared"))
        env.pop("LEDGER_DIR", None)
        mutmut = Path(sys.executable).with_name("mutmut")
        proc = subprocess.run([str(mutmut), "run", "--max-children", str(max_children),
                               *pattern(first_digits, second_digits)],
                              cwd=tree, env=env, capture_output=True, text=True)
        statuses: dict[str, str] = {}
        for path in module.paths:
            meta = tree / "mutants" / f"{path}.meta"
            if meta.exists():
                for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
                    statuses[key] = status_by_exit_code[code]
        one = figure(statuses, first_digits)
        out: dict[str, object] = {"figure": f"mutation_kill_rate:{module.name}", "unit": "mutants killed",
                                  "target": TARGET, **one}
        if second_digits:
            two = figure(statuses, second_digits)
            out["second"] = two
            out["met"] = bool(one["met"]) and bool(two["met"])
        out.update({"modules": list(module.paths), "seconds": round(time.monotonic() - start)})
        if not one["mutants"]:
            out["error"] = (proc.stdout + proc.stderr)[-2000:]
        if keep:
            out["tree"] = str(tree)
        return out
    finally:
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ", ".join(m.name for m in MODULES)
    parser.add_argument("--only", nargs="*", default=None, help=f"modules by name: {names}")
    parser.add_argument("--sample", type=int, default=None,
                        help="the first sample: K tenths of each module's mutants (1-10; default: the module's)")
    parser.add_argument("--first-only", action="store_true", help="skip the second sample")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants of each module")
    parser.add_argument("--keep", action="store_true", help="keep each module's tree (for `mutmut show NAME` there)")
    args = parser.parse_args()
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("mutation testing needs the mutation extra: pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    chosen = [m for m in MODULES if args.only is None or m.name in args.only]
    if args.only and len(chosen) != len(args.only):
        print(f"unknown module; known: {', '.join(m.name for m in MODULES)}", file=sys.stderr)
        return 2
    all_met = True
    for module in chosen:
        sample = module.sample if args.sample is None else args.sample
        result = run_module(module, sample, 0 if args.first_only else module.second, args.max_children, args.keep)
        survivors = [(name, "first") for name in result.pop("survivors")]  # type: ignore[attr-defined]
        second = result.get("second")
        if isinstance(second, dict):
            survivors += [(name, "second") for name in second.pop("survivors")]
        all_met &= bool(result["met"])
        print(json.dumps(result), flush=True)
        if args.survivors:
            for name, which in survivors:
                print(f"  survived ({which} sample): {name}", flush=True)
    return 0 if all_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
