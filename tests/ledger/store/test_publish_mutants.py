"""Publishing a staging directory, in this process (mutation testing cannot run the `ledger` CLI): a staging
directory written by hand, file by file, with every kind of damaged or partial input the wrapper and the SDK can
leave, published with :func:`ledger.store.publish.publish`; every field of the receipt and every problem it
carries checked against values written here (hashes by hashlib, rows by hand), and the publish protocol
(the lock and the id it is marked with, the journal, the temporary directory) checked on the files it leaves."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger.redact import REDACTED, Redactor
from ledger.store.journal import read_from
from ledger.store.layout import JOURNAL, STAGING
from ledger.store.publish import PUBLISHED_MARK, build, publish, published_as, sha256_file
from ledger.store.receipts import Ledger
from ledger.store.staging import (
    Outcome,
    StagingBusy,
    add_problems,
    staging_lock,
    write_json_atomic,
    write_wrapper_facts,
)
from schemas import Receipt, Stack
from schemas.tables import TABLES

SECRET = "s3cr3t-Value-77"
ENDED = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)


def redact(text: str) -> str:
    return Redactor({"MY_SECRET": SECRET}).text(text)


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    _write(path, "".join(json.dumps(r) + "\n" for r in rows))


def staging(lg: Ledger, name: str = "run1", **wrapper: Any) -> Path:
    run = lg.staging / name
    run.mkdir(parents=True)
    facts = {"run_uuid": "u-" + name, "started_at": "2026-12-01T10:00:00+00:00", "name": "known",
             "tags": {"team": "a"}, "command": ["python", "train.py"], "attempt": 3,
             "links": {"attempt_of": None, "replicates": None, "baseline": None}} | wrapper
    write_wrapper_facts(run, facts)
    return run


def full_staging(lg: Ledger) -> Path:
    run = staging(lg)
    _write(run / "stack.json", {"hardware": {"gpu_count": 8, "gpu_model": "H200"}})
    r0, r1 = run / "rank-00000", run / "rank-00001"
    _write(r0 / "workload.json", {"seed": 7})
    _write(r1 / "workload.json", {"seed": 8})
    _jsonl(r0 / "steps.jsonl", [
        {"step": 1, "loss": 4.5, "tokens": 100, "step_time_s": 1.0, "extra": {f"key {SECRET}": 1.0}},
        {"step": 2, "loss": 4.0, "tokens": 200, "step_time_s": 3.0, "mine": 2.5},
    ])
    _jsonl(r1 / "steps.jsonl", [{"step": 1, "loss": 9.0, "tokens": 1}])
    _jsonl(r0 / "evals.jsonl", [{"step": 2, "split": "val", "source": f"from {SECRET}", "metric": "loss",
                                 "value": 3.5},
                                {"step": 2, "split": "val", "source": None, "metric": "loss", "value": 3.25}])
    _jsonl(r0 / "events.jsonl", [{"time": 1.0, "kind": "init", "step": None, "attempt": 1, "detail": None},
                                 {"time": 2.0, "kind": "checkpoint_save_start", "step": 2, "detail": SECRET}])
    _jsonl(r0 / "telemetry.jsonl", [{"time": 1.0, "node": "n", "device": "gpu0", "energy_j": 100.0},
                                     {"time": 2.0, "node": "n", "device": "gpu0", "energy_j": 350.0}])
    _write(r0 / "sdk_errors.log", "".join(f"error {i} {SECRET if i == 2 else ''}\n" for i in range(1, 8)))
    with open(r0 / "sdk_errors.log", "ab") as f:
        f.write(b"bad byte \xff\n")  # line 8: never shown (the first five lines are)
    _write(run / "output.log", f"hello\nMY_SECRET={SECRET}\n")
    add_problems(run, [("telemetry", f"no NVML {SECRET}"), ("log", "cut")])
    with open(run / "problems.jsonl", "ab") as f:
        f.write(b'{"source": "x"}\n' + b"not json\n" + b'{"source": "y", "message": "caf\xff"}\n')
    add_problems(run, [])  # nothing to add: no line written
    _write(run / "capture.json", {"tables": [], "config_keys": "many"})
    _write(r0 / "runtime.json", {"torch": "2.13", "token_key": SECRET})
    _write(run / "wrapper" / "runtime.json", {"ignored": True})  # the wrapper's own rank: not a training rank
    return run


@pytest.fixture
def published(tmp_path: Path) -> tuple[Ledger, Path, Receipt, list[Any]]:
    # function scope: mutmut runs, for each mutant, only the tests that reached the mutated function, and a
    # module-scoped fixture reaches it in the first test only, so the others' assertions would never count
    lg = Ledger(tmp_path)
    run = full_staging(lg)
    log_bytes = (run / "output.log").read_bytes()
    facts: list[Any] = []

    def merge(stack: Stack, ranks: dict[int, dict[str, Any]]) -> tuple[Stack, list[str]]:
        facts.append(ranks)
        return stack.model_copy(update={"environment": {"MERGED": "yes"}}), ["ranks 0: torch 2.13"]

    receipt = publish(lg, run, Outcome("failed", exit_code=3, signal="SIGTERM", ended_at=ENDED), redact=redact,
                      runtime=merge)
    return lg, run, receipt, [facts, log_bytes]


def test_the_receipt_fields_come_from_the_wrapper_and_the_outcome(published: Any) -> None:
    lg, run, r, _ = published
    assert not run.exists()  # the staging directory is gone once published
    assert (r.run_uuid, r.name, r.tags, r.status, r.exit_code, r.signal) == (
        "u-run1", "known", {"team": "a"}, "failed", 3, "SIGTERM")
    assert r.started_at == datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC) and r.ended_at == ENDED
    assert r.duration_s == 30.0 and r.command == ("python", "train.py") and r.attempt == 3
    assert (r.links.attempt_of, r.links.replicates, r.links.baseline) == (None, None, None)
    assert r.stack.hardware.gpu_count == 8 and r.stack.hardware.gpu_model == "H200"
    assert r.stack.environment == {"MERGED": "yes"}
    assert r.workload.seed == 7  # the lowest rank's
    assert r.capture is None  # capture.json was invalid
    on_disk = json.loads((lg.path(r.id) / "receipt.json").read_text())
    assert on_disk["id"] == r.id and Receipt.model_validate(on_disk) == r
    assert lg.path(r.id) == lg.root / r.id[:2] / r.id


def test_every_problem_is_carried_redacted_with_its_source(published: Any) -> None:
    _, _, r, _ = published
    got = [(p.source, p.message) for p in r.problems]
    # the first five lines of sdk_errors.log, joined, the secret on line 2 redacted
    sdk = f"error 1 ; error 2 {REDACTED}; error 3 ; error 4 ; error 5 "
    expected = [
        ("rank-00000/sdk_errors.log", sdk),
        ("telemetry", f"no NVML {REDACTED}"),
        ("log", "cut"),
        ("problems.jsonl", 'unreadable note: {"source": "x"}'),
        ("problems.jsonl", "unreadable note: not json"),
        ("y", "caf\ufffd"),  # an invalid byte is replaced, the note kept
        ("capture.json", "invalid: Input should be a valid integer, unable to parse string as an integer"),
        ("runtime.json", "ranks 0: torch 2.13"),
        ("workload.json", "ranks reported different workloads; kept rank 0's"),
    ]
    assert got == expected


def test_runtime_facts_of_the_training_ranks_are_redacted_before_merging(published: Any) -> None:
    _, _, _, (facts, _) = published
    assert facts == [{0: {"torch": "2.13", "token_key": REDACTED}}]


def test_every_table_is_written_hashed_and_counted(published: Any) -> None:
    lg, _, r, (_, log_bytes) = published
    d = lg.path(r.id)
    artifacts = {a.path: a for a in r.artifacts}
    assert sorted(artifacts) == sorted([f"{n}.parquet" for n in TABLES] + ["output.log"])
    rows = {"steps": 3, "evals": 2, "events": 2, "telemetry": 2}
    for name in TABLES:
        a = artifacts[f"{name}.parquet"]
        data = (d / a.path).read_bytes()
        assert (a.kind, a.sha256, a.bytes) == ("table", hashlib.sha256(data).hexdigest(), len(data))
        assert a.rows == rows.get(name, 0) == pq.read_metadata(d / a.path).num_rows
        assert pq.read_schema(d / a.path).names == TABLES[name].names
    log = artifacts["output.log"]
    assert (d / "output.log").read_bytes() == log_bytes  # the log is copied as the tee wrote it
    assert (log.kind, log.sha256, log.bytes, log.rows) == (
        "log", hashlib.sha256(log_bytes).hexdigest(), len(log_bytes), None)
    assert sha256_file(d / "output.log") == hashlib.sha256(log_bytes).hexdigest()


def test_strings_and_extra_keys_in_tables_are_redacted(published: Any) -> None:
    lg, _, r, _ = published
    d = lg.path(r.id)
    steps = sorted(pq.read_table(d / "steps.parquet").to_pylist(), key=lambda s: (s["rank"], s["step"]))
    assert [(s["rank"], s["step"], s["loss"]) for s in steps] == [(0, 1, 4.5), (0, 2, 4.0), (1, 1, 9.0)]
    assert [s["extra"] for s in steps] == [[(f"key {REDACTED}", 1.0)], [("mine", 2.5)], None]
    evals = pq.read_table(d / "evals.parquet").to_pylist()
    assert [e["source"] for e in evals] == [f"from {REDACTED}", None]
    events = pq.read_table(d / "events.parquet").to_pylist()
    assert [(e["kind"], e["detail"], e["attempt"]) for e in events] == [
        ("init", None, 3), ("checkpoint_save_start", REDACTED, 3)]
    assert pq.read_schema(d / "events.parquet").field("attempt").type == pa.int32()


def test_the_summary_is_of_the_lowest_rank(published: Any) -> None:
    _, _, r, _ = published
    s = r.summary
    assert (s.steps, s.last_step, s.tokens, s.final_loss) == (2, 2, 200, 4.0)
    assert s.final_eval == {"val/all/loss": 3.25, f"val/from {REDACTED}/loss": 3.5}
    assert s.energy_j == 350.0 - 100.0 and s.energy_method == "counter"  # the counter's last - first


def test_the_journal_lists_the_published_id(published: Any) -> None:
    lg, _, r, _ = published
    assert (lg.root / JOURNAL).read_text() == r.id + "\n"
    assert read_from(lg.root, 0) == ([r.id], len(r.id) + 1)
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]


# ------------------------------------------------------------------------------------------ the inputs
def test_a_bare_staging_directory(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = lg.staging / "bare"
    run.mkdir(parents=True)
    before = datetime.now(UTC)
    r = publish(lg, run, Outcome("succeeded"), redact=redact)
    after = datetime.now(UTC)
    assert (r.run_uuid, r.name, r.tags, r.command, r.attempt, r.started_at, r.duration_s) == (
        "bare", None, {}, (), 1, None, None)
    assert before <= r.ended_at <= after and r.exit_code is None and r.signal is None
    assert [(p.source, p.message) for p in r.problems] == [
        ("stack.json", "the stack was not captured (the wrapper ended first)")]
    assert [a.path for a in r.artifacts] == [f"{n}.parquet" for n in TABLES]  # no log: no log artifact
    assert all(a.rows == 0 for a in r.artifacts)
    assert r.summary.energy_j is None and r.summary.energy_method == "not measured"


def test_unreadable_wrapper_stack_and_arguments(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = lg.staging / "broken"
    run.mkdir(parents=True)
    _write(run / "wrapper.json", "{not json")
    _write(run / "stack.json", [1, 2])
    _write(run / "arguments.json", "[")
    _write(run / "capture.json", '"text"')
    _write(run / "rank-00000" / "runtime.json", {"a": 1})
    _write(run / "rank-00000" / "workload.json", "]")
    _write(run / "rank-00001" / "runtime.json", "{")
    r = publish(lg, run, Outcome("interrupted"), redact=redact)
    got = [(p.source, p.message.split(":")[0]) for p in r.problems]
    assert got == [("wrapper.json", "unreadable"), ("capture.json", "expected a JSON object"),
                   ("stack.json", "expected a JSON object"),
                   # (a damaged stack.json also reads as not captured: read_json gives no data for it)
                   ("stack.json", "the stack was not captured (the wrapper ended first)"),
                   ("runtime.json", "unreadable"), ("runtime.json", "runtime facts of the ranks were not merged"),
                   ("rank-00000/workload.json", "unreadable"), ("arguments.json", "unreadable")]
    assert r.capture is None and r.stack == Stack() and r.status == "interrupted"


def test_an_invalid_stack_and_workload_are_problems_not_crashes(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg, attempt=None, started_at="not a time")
    _write(run / "stack.json", {"hardware": {"gpu_count": "eight"}})
    _write(run / "rank-00002" / "workload.json", {"seed": "x"})
    _write(run / "capture.json", {"config_keys": 4, "line": "took 4 keys"})
    r = publish(lg, run, Outcome("succeeded"), redact=redact)
    assert r.attempt == 1 and r.stack == Stack() and r.workload.seed is None
    assert r.started_at is None and r.duration_s is None
    assert r.capture is not None and (r.capture.config_keys, r.capture.line) == (4, "took 4 keys")
    assert [(p.source, p.message) for p in r.problems] == [
        ("stack.json", "invalid: Input should be a valid integer, unable to parse string as an integer"),
        ("rank-00002/workload.json", "field seed: Input should be a valid integer, unable to parse string as an "
                                     "integer; workload not recorded")]


def test_the_launch_arguments_stand_in_for_an_unreported_workload(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg, links={"attempt_of": "a" * 64, "replicates": "b" * 64, "baseline": None, "other": "x"})
    _write(run / "stack.json", {})
    _write(run / "arguments.json", {"lr": 0.1, "hf_token": SECRET, "note": f"uses {SECRET}", "n": 4})
    r = publish(lg, run, Outcome("succeeded"), redact=redact)
    assert r.workload.arguments == {"lr": "0.1", "hf_token": REDACTED, "note": f"uses {REDACTED}", "n": "4"}
    assert (r.links.attempt_of, r.links.replicates, r.links.baseline) == ("a" * 64, "b" * 64, None)
    assert r.problems == ()


def test_an_empty_arguments_file_and_a_reported_workload(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    _write(run / "stack.json", {})
    _write(run / "arguments.json", {})
    assert publish(lg, run, Outcome("succeeded"), redact=redact).workload.arguments == {}
    run = staging(lg, name="run2")
    _write(run / "stack.json", {})
    _write(run / "arguments.json", {"lr": 1})
    _write(run / "rank-00000" / "workload.json", {"seed": 5})
    r = publish(lg, run, Outcome("succeeded"), redact=redact)
    assert r.workload.seed == 5 and r.workload.arguments == {}  # the reported workload wins


# ------------------------------------------------------------------------------------------ the protocol
def test_amend_sees_the_tables_and_may_not_change_the_artifacts(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    _write(run / "stack.json", {})
    _jsonl(run / "rank-00000" / "steps.jsonl", [{"step": 1, "loss": 1.0}])
    seen: dict[str, int] = {}

    def amend(receipt: Receipt, tables: dict[str, pa.Table]) -> Receipt:
        seen.update({k: t.num_rows for k, t in tables.items()})
        return receipt.model_copy(update={"name": "amended"})

    r = publish(lg, run, Outcome("succeeded"), redact=redact, amend=amend)
    assert r.name == "amended" and seen == {n: int(n == "steps") for n in TABLES}

    run = staging(lg, name="run2")
    _write(run / "stack.json", {})

    def bad(receipt: Receipt, tables: dict[str, pa.Table]) -> Receipt:
        return receipt.model_copy(update={"artifacts": receipt.artifacts[1:]})

    with pytest.raises(ValueError, match="^amend must not change the artifacts$"):
        publish(lg, run, Outcome("succeeded"), redact=redact, amend=bad)
    assert run.is_dir() and published_as(run) is None  # nothing lost, nothing half-published
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]
    assert lg.ids() == [r.id] and (lg.root / JOURNAL).read_text() == r.id + "\n"


def test_an_amend_that_makes_the_receipt_invalid_is_refused(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)

    def invalid(receipt: Receipt, tables: dict[str, pa.Table]) -> Receipt:
        return receipt.model_copy(update={"status": "exploded"})

    with pytest.raises(ValueError, match="status"):
        publish(lg, run, Outcome("succeeded"), redact=redact, amend=invalid)
    assert run.is_dir() and lg.ids() == []


def test_the_same_content_published_twice_is_one_receipt(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    first = publish(lg, staging(lg, name="a", run_uuid="same"), Outcome("succeeded", ended_at=ENDED), redact=redact)
    second = publish(lg, staging(lg, name="b", run_uuid="same"), Outcome("succeeded", ended_at=ENDED), redact=redact)
    assert first.id == second.id and lg.ids() == [first.id]
    assert (lg.root / JOURNAL).read_text() == f"{first.id}\n{first.id}\n"
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]
    assert not (lg.staging / "a").exists() and not (lg.staging / "b").exists()


def test_identical_content_in_the_old_flat_layout_is_not_published_again(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    first = publish(lg, staging(lg, name="a", run_uuid="same"), Outcome("succeeded", ended_at=ENDED), redact=redact)
    os.rename(lg.path(first.id), lg.root / first.id)  # as an old ledger holds it
    second = publish(lg, staging(lg, name="b", run_uuid="same"), Outcome("succeeded", ended_at=ENDED), redact=redact)
    assert second.id == first.id and not (lg.root / first.id[:2] / first.id).exists()
    assert lg.path(first.id) == lg.root / first.id and lg.ids() == [first.id]
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("mark", ["lock", PUBLISHED_MARK])  # the lock's file; the file of publishers before
def test_a_staging_directory_already_published_is_only_cleaned_up(tmp_path: Path, mark: str) -> None:
    lg = Ledger(tmp_path)
    first = publish(lg, staging(lg, name="a"), Outcome("succeeded"), redact=redact)
    again = staging(lg, name="b")  # a publisher killed after its rename: the mark names the receipt
    (again / mark).write_text(first.id + "\n")
    assert published_as(again) == first.id
    got = publish(lg, again, Outcome("failed"), redact=redact)
    assert got == first and not again.exists()
    assert (lg.root / JOURNAL).read_text() == f"{first.id}\n{first.id}\n"
    stale = staging(lg, name="c")  # a mark naming a receipt that is not there: published anew
    (stale / mark).write_text("f" * 64)
    third = publish(lg, stale, Outcome("failed"), redact=redact)
    assert third.id != first.id and third.status == "failed" and sorted(lg.ids()) == sorted([first.id, third.id])


def test_the_published_mark_is_written_before_the_rename(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    seen: list[str] = []
    real = os.rename

    def rename(src: Any, dst: Any) -> None:
        seen.append((run / "lock").read_text())
        real(src, dst)

    os.rename = rename  # type: ignore[assignment]
    try:
        r = publish(lg, run, Outcome("succeeded"), redact=redact)
    finally:
        os.rename = real
    assert seen == [r.id]


def test_a_locked_staging_directory_is_busy(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    with staging_lock(run):
        with pytest.raises(StagingBusy, match=str(run)):
            publish(lg, run, Outcome("succeeded"), redact=redact)
        assert run.is_dir()
        r = publish(lg, run, Outcome("succeeded"), redact=redact, locked=True)  # the holder publishes
    assert not run.exists() and lg.ids() == [r.id]


def test_the_default_redactor_is_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STACKRECEIPT_TEST_SECRET", "env-only-value-123")
    lg = Ledger(tmp_path)
    run = staging(lg)
    add_problems(run, [("x", "saw env-only-value-123 and ghp_" + "a1" * 18)])
    r = publish(lg, run, Outcome("succeeded"))
    assert [p.message for p in r.problems if p.source == "x"] == [f"saw {REDACTED} and {REDACTED}"]


def test_build_writes_into_the_temporary_directory_only(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "l")
    run = staging(lg)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = build(lg, run, Outcome("succeeded"), tmp, redact)
    assert sorted(p.name for p in tmp.iterdir()) == sorted([f"{n}.parquet" for n in TABLES] + ["receipt.json"])
    assert json.loads((tmp / "receipt.json").read_text())["id"] == r.id and run.is_dir() and lg.ids() == []


def test_small_json_files_are_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "wrapper.json"
    write_json_atomic(path, {"b": 1, "a": datetime(2026, 1, 2, tzinfo=UTC)})
    assert path.read_text() == '{\n "a": "2026-01-02 00:00:00+00:00",\n "b": 1\n}'
    write_wrapper_facts(tmp_path, {"x": [1]})
    assert json.loads(path.read_text()) == {"x": [1]} and sorted(p.name for p in tmp_path.iterdir()) == [
        "wrapper.json"]


def test_problem_notes_are_appended_one_json_line_each(tmp_path: Path) -> None:
    add_problems(tmp_path, [("a", "one"), ("b", 'two "quoted"')])
    add_problems(tmp_path, [("c", "three")])
    assert (tmp_path / "problems.jsonl").read_text().splitlines() == [
        '{"source": "a", "message": "one"}', '{"source": "b", "message": "two \\"quoted\\""}',
        '{"source": "c", "message": "three"}']


def test_the_staging_lock_is_released_after_the_block(tmp_path: Path) -> None:
    with staging_lock(tmp_path):
        with pytest.raises(StagingBusy):
            with staging_lock(tmp_path):
                pass
    with staging_lock(tmp_path):  # free again
        pass
    assert (tmp_path / "lock").stat().st_mode & 0o777 == 0o644 & ~_umask() and STAGING == ".staging"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------------------ killed publishers
def _killed_at(phase: str, lg: Ledger, run: Path) -> None:
    """Publish in a forked child that SIGKILLs itself at ``phase`` (the crash matrix's fault points)."""
    import signal
    import time

    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.environ["LEDGER_FAULT_AT"] = phase
            publish(lg, run, Outcome("succeeded", ended_at=ENDED), redact=redact)
        finally:
            os._exit(3)
    deadline = time.monotonic() + 120
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the publisher did not reach {phase!r}")
    assert os.WIFSIGNALED(done[1]) and os.WTERMSIG(done[1]) == signal.SIGKILL


def test_a_publisher_killed_before_the_rename_leaves_nothing_visible(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    _killed_at("publishing", lg, run)
    assert lg.ids() == [] and published_as(run) is None and not (lg.root / JOURNAL).exists()
    assert len([p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]) == 1  # invisible, left behind
    r = publish(lg, run, Outcome("succeeded", ended_at=ENDED), redact=redact)  # what `ledger recover` does
    assert lg.ids() == [r.id] and not run.exists()


def test_a_publisher_killed_after_the_rename_is_completed_by_the_next(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = staging(lg)
    _killed_at("published", lg, run)
    rid = (run / "lock").read_text()  # the mark, in the lock's file: no file of its own
    assert published_as(run) == rid and not (run / PUBLISHED_MARK).exists()
    assert lg.ids() == [rid] and not (lg.root / JOURNAL).exists() and run.is_dir()
    again = publish(lg, run, Outcome("failed"), redact=redact)  # only the journal and the clean-up are left
    assert again.id == rid and again.status == "succeeded" and (lg.root / JOURNAL).read_text() == rid + "\n"
    assert not run.exists()
