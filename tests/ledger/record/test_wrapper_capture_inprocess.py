"""What `ledger record`'s wrapper gathers around a launch, in this process (mutation testing cannot run the `ledger`
CLI): a Megatron log's notes as problems of the receipt, a TensorBoard folder named with ``--tensorboard``, the ranks'
runtime facts merged into the stack, the live trail written while the output pauses, processes the launch left
behind, a staging directory the launch broke, and what a record that ends its process does to it (its imports frozen,
Arrow on the system allocator). Every launch is a small shell script; expected values are what the script printed or
wrote."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from ledger.record.wrapper import RecordOptions, RecordResult, record
from ledger.store.receipts import Ledger


def _record(tmp: Path, script: str, **options: object) -> tuple[Ledger, RecordResult, str]:
    lg = Ledger(tmp / "receipts")
    err = io.BytesIO()
    opts = RecordOptions(command=["sh", "-c", script], cwd=tmp, telemetry_interval=0, stdout=io.BytesIO(), stderr=err,
                         env={"PATH": os.environ["PATH"]}, **options)  # type: ignore[arg-type]
    return lg, record(lg, opts), err.getvalue().decode()


def _receipt(lg: Ledger, result: RecordResult) -> dict:
    assert result.receipt is not None
    return json.loads((lg.path(result.receipt.id) / "receipt.json").read_bytes())


def _iteration(i: int, loss: str) -> str:
    return (f" [2025-03-01 10:00:1{i}] iteration        {i}/     500 | consumed samples:          {128 * i} | "
            "elapsed time per iteration (ms): 2210.7 | learning rate: 3.000000E-06 | global batch size:   128 | "
            f"lm loss: {loss} | loss scale: 1.0 | grad norm: 11.874 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |")


def test_a_megatron_log_is_read_and_its_notes_are_problems_of_the_receipt(tmp_path: Path) -> None:
    """Three Megatron iteration lines: the wrapper reads the log as Megatron's, and says so in the receipt's problems,
    under the source "megatron log"."""
    (tmp_path / "m.log").write_text("\n".join(_iteration(i, loss) for i, loss in
                                             [(1, "1.082416E+01"), (2, "1.079902E+01"), (3, "1.074120E+01")]) + "\n")
    lg, result, _ = _record(tmp_path, f"cat {tmp_path}/m.log")
    data = _receipt(lg, result)
    assert (data["summary"]["steps"], data["summary"]["final_loss"]) == (3, 10.7412)
    problems = data["problems"]
    assert problems[0]["source"] == "megatron log"
    assert problems[0]["message"].startswith("Megatron log: 3 iteration line(s) parsed")
    assert {p["source"] for p in problems} == {"megatron log"}


def test_a_tensorboard_folder_outside_the_launchs_directory_is_read_when_named(tmp_path: Path) -> None:
    """The launch's directory holds no event file; the folder given with ``--tensorboard`` holds one of three steps:
    its steps are the receipt's; without the option nothing is captured."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "tb"))
    for step, loss in [(10, 3.0), (20, 2.5), (30, 2.0)]:  # exact in float32
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss)
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0e9 + step, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    work = tmp_path / "work"
    work.mkdir()
    lg = Ledger(tmp_path / "receipts")
    for tensorboard, expected in [(tmp_path / "tb", (3, 2.0)), (None, (0, None))]:
        result = record(lg, RecordOptions(command=["sh", "-c", "true"], cwd=work, telemetry_interval=0,
                                          stdout=io.BytesIO(), stderr=io.BytesIO(), tensorboard=tensorboard))
        summary = _receipt(lg, result)["summary"]
        assert (summary["steps"] or 0, summary["final_loss"]) == expected


def test_the_ranks_runtime_facts_are_merged_into_the_stack(tmp_path: Path) -> None:
    """Rank 0 writes its runtime facts (as the SDK does): its NCCL version and host are the receipt's."""
    script = ('mkdir -p "$LEDGER_RUN_DIR/rank-00000"; '
              """echo '{"host": "train-host-b", "nccl": "2.21.5"}' > "$LEDGER_RUN_DIR/rank-00000/runtime.json\"""")
    lg, result, _ = _record(tmp_path, script)
    data = _receipt(lg, result)
    assert data["stack"]["drivers"]["nccl"] == "2.21.5"
    assert data["stack"]["hardware"]["nodes_observed"] == sorted({"train-host-b", socket.gethostname()})
    assert data["problems"] == []


def test_the_live_trail_is_written_when_the_output_pauses(tmp_path: Path) -> None:
    """The launch prints a step line, waits until live.json (what `ledger watch` reads) has it, keeps that copy,
    prints a second one and waits until live.json changes again: each line is in the trail while the launch still
    runs, though no more output came after it."""
    wait = ('i=0; while [ $i -lt 600 ] && {}; do sleep 0.05; i=$((i+1)); done; '
            f'cp "$LEDGER_RUN_DIR/live.json" {tmp_path}/seen{{}}.json; ')
    script = ("echo 'step 1 loss 2.5'; " + wait.format('[ ! -s "$LEDGER_RUN_DIR/live.json" ]', 1)
              + "echo 'step 2 loss 1.5'; "
              + wait.format(f'cmp -s "$LEDGER_RUN_DIR/live.json" {tmp_path}/seen1.json', 2))
    lg, result, _ = _record(tmp_path, script)
    first = json.loads((tmp_path / "seen1.json").read_text())
    second = json.loads((tmp_path / "seen2.json").read_text())
    assert first["fields"][:3] == ["line", "step", "loss"]
    assert [row[:3] for row in first["recent"]] == [[1, 1, 2.5]]
    assert [row[:3] for row in second["recent"]] == [[1, 1, 2.5], [2, 2, 1.5]]
    assert _receipt(lg, result)["summary"]["steps"] == 2


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_processes_the_launch_left_in_its_group_are_ended_and_named(tmp_path: Path) -> None:
    """The launch starts a sleep in its own process group, its output elsewhere, and exits: the wrapper ends the sleep
    and the receipt says so."""
    lg, result, _ = _record(tmp_path, f"sleep 60 > /dev/null 2>&1 & echo $! > {tmp_path}/pid; echo step 1 loss 2")
    pid = int((tmp_path / "pid").read_text())
    try:
        data = _receipt(lg, result)
        assert {"source": "output.log",
                "message": "processes of the launch's group still ran 2 s after it exited; terminated"} \
            in data["problems"]
        deadline = time.monotonic() + 30  # it was sent SIGTERM (then SIGKILL): until the signal is delivered
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _running(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_staging_directory_the_launch_broke_neither_stops_the_wrapper_nor_loses_the_run(tmp_path: Path) -> None:
    """The launch puts folders where the wrapper writes its outcome (exit.json) and the receipt's notes
    (problems.jsonl), and leaves a process behind (a note to write): the wrapper carries on past both writes and
    publishes the run, its printed step kept, with a note that its notes could not be read."""
    script = ('rm "$LEDGER_RUN_DIR/exit.json"; mkdir "$LEDGER_RUN_DIR/exit.json" "$LEDGER_RUN_DIR/problems.jsonl"; '
              f"sleep 60 > /dev/null 2>&1 & echo $! > {tmp_path}/pid; echo step 1 loss 2")
    try:
        lg, result, err = _record(tmp_path, script)
    finally:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
    assert result.receipt is not None and result.exit_code == 0, err
    assert result.receipt.summary.steps == 1 and result.receipt.summary.final_loss == 2.0
    assert (lg.path(result.receipt.id) / "output.log").read_bytes() == b"step 1 loss 2\n"
    notes = [p.message for p in result.receipt.problems if p.source == "problems.jsonl"]
    assert notes == ["the notes could not be read (Is a directory)"]
    assert list(lg.staging.iterdir()) == []


@pytest.fixture
def own_process_settings() -> object:
    """This process's collector freeze, Arrow pool and priority, put back after a record that ends its process."""
    import pyarrow as pa

    pool, priority = pa.default_memory_pool(), os.getpriority(os.PRIO_PROCESS, 0)
    if pool.backend_name == "system":  # another one, so that the record's change shows
        other = next(b for b in pa.supported_memory_backends() if b != "system")
        pa.set_memory_pool(getattr(pa, f"{other}_memory_pool")())
    try:
        yield
    finally:
        gc.unfreeze()
        pa.set_memory_pool(pool)
        with contextlib.suppress(OSError):  # lowered by the record; only a privileged process may raise it again
            os.setpriority(os.PRIO_PROCESS, 0, priority)


@pytest.mark.usefixtures("own_process_settings")
def test_a_record_that_ends_its_process_freezes_its_imports_and_gives_arrow_the_system_allocator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    monkeypatch.delitem(sys.modules, "duckdb", raising=False)  # a record that read no index before its launch
    gc.unfreeze()
    _, result, _ = _record(tmp_path, "echo step 1 loss 2", process_ends=True)
    assert result.receipt is not None
    assert gc.get_freeze_count() > 0
    assert pa.default_memory_pool().backend_name == "system"


@pytest.mark.usefixtures("own_process_settings")
def test_a_record_that_ends_its_process_freezes_nothing_once_duckdb_is_loaded(tmp_path: Path) -> None:
    import duckdb  # noqa: F401

    gc.unfreeze()
    _, result, _ = _record(tmp_path, "echo step 1 loss 2", process_ends=True)
    assert result.receipt is not None and gc.get_freeze_count() == 0


def test_a_record_in_a_process_that_goes_on_freezes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "duckdb", raising=False)
    gc.unfreeze()
    _, result, _ = _record(tmp_path, "echo step 1 loss 2")
    assert result.receipt is not None and gc.get_freeze_count() == 0
