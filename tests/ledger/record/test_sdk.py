from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import child_env

import ledger.sdk as sdk
from ledger.store.merge import read_table
from schemas import Workload


def test_null_run_when_not_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_RUN_DIR", raising=False)
    sdk._reset_for_tests()
    run = sdk.current()
    assert isinstance(run, sdk.NullRun) and not run.active
    run.log_step(1, loss=1.0)
    run.set_workload({"seed": 1})
    sdk._reset_for_tests()


def test_rows_round_trip_through_the_streams(tmp_path: Path) -> None:
    run = sdk.Run(tmp_path, rank=3, background=False)
    run.log_step(1, loss=2.5, tokens=100, lr=0.1, my_metric=7)
    run.log_step(2, loss=float("nan"), skipped=True)
    run.log_eval(2, 1.5, source="rare")
    run.log_routing(2, 1, [3, 4, 5], dropped=[0, 1, 0], capacity=4, entropy=0.75)
    run.log_timing(2, "attention", 0.01)
    run.event("checkpoint_save_end", step=2, path="/ckpt")
    run.log_telemetry("gpu0", power_w=300.0, energy_j=10.0)
    run.close()
    steps, problems = read_table(tmp_path, "steps")
    assert not problems
    rows = steps.to_pylist()
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["rank"] == 3
    assert rows[0]["extra"] == [("my_metric", 7.0)] and rows[1]["extra"] is None
    assert rows[1]["skipped"] is True and rows[1]["loss"] != rows[1]["loss"]
    routing = read_table(tmp_path, "routing")[0].to_pylist()
    assert [(r["layer"], r["tokens"], r["dropped"]) for r in routing] == [(1, [3, 4, 5], [0, 1, 0])]
    assert routing[0]["capacity"] == 4 and routing[0]["entropy"] == 0.75
    events = read_table(tmp_path, "events")[0].to_pylist()
    assert events[0]["kind"] == "checkpoint_save_end" and '"/ckpt"' in events[0]["detail"]
    assert read_table(tmp_path, "telemetry")[0].num_rows == 1


@pytest.mark.parametrize("known", [{}, {"loss": 0.5, "tokens": 8}], ids=["custom-only", "with-known"])
def test_custom_names_keep_every_value_in_each_rows_order(tmp_path: Path, known: dict[str, float]) -> None:
    """One flush of rows with the same custom names (the columnar path), then rows that differ in order,
    hold None or a string number (the general path): every value arrives under its name, in its row's
    order, exactly as the dicts said (the expected maps are the dicts themselves)."""
    import numpy as np

    same = [{**known, "a/x": i + 0.25, "b": np.float32(i), "c": i} for i in range(50)]
    odd = [{"b": 1.0, "a/x": 2.0}, {"a/x": None, "b": 3.0}, {"a/x": "1.5", "b": float("nan")}, {"q": 1}]
    swapped = [{**known, "a/x": 1.0, "b": 2.0}, {"b": 3.0, "a/x": 4.0, **known}, {**known, "a/x": 5.0, "b": 6.0}]
    for rows in (same, odd, swapped):  # swapped: as many names in every row, one row in another order
        run = sdk.Run(tmp_path / str(len(rows)), rank=0, background=False)
        for step, metrics in enumerate(rows, 1):
            run.log_step(step, **metrics)
        run.close()
        table, problems = read_table(tmp_path / str(len(rows)), "steps")
        assert not problems and table.num_rows == len(rows)
        for row, metrics in zip(table.to_pylist(), rows, strict=True):
            custom = [(k, v) for k, v in metrics.items() if k not in known]
            got = row["extra"]
            assert [k for k, _ in got] == [k for k, _ in custom]
            for (_, value), (_, want) in zip(got, custom, strict=True):
                assert value == (None if want is None else float(want)) or (value != value and want != want)
            assert all(row[k] == metrics[k] for k in known if k in metrics)


def test_numpy_and_torch_scalars_are_accepted(tmp_path: Path) -> None:
    import numpy as np
    torch = pytest.importorskip("torch", reason="torch (the torch extra) is not installed; `make test` installs it")
    run = sdk.Run(tmp_path, rank=0, background=False)
    run.log_step(np.int64(1), loss=torch.tensor(1.5), tokens=np.int64(10), grad=np.float32(0.5))
    run.log_routing(1, 0, torch.tensor([1, 2]), dropped=np.array([0, 1]))
    run.close()
    row = read_table(tmp_path, "steps")[0].to_pylist()[0]
    assert row["loss"] == 1.5 and row["tokens"] == 10 and row["extra"] == [("grad", 0.5)]


def test_workload_is_validated(tmp_path: Path) -> None:
    run = sdk.Run(tmp_path, rank=0, background=False)
    with pytest.raises(Exception, match="extra"):
        run.set_workload({"sneaky": 1})
    run.set_workload(Workload(seed=5))
    assert '"seed": 5' in (tmp_path / "rank-00000" / "workload.json").read_text()
    run.close()


def test_runtime_facts_list_packages_and_torch(tmp_path: Path) -> None:
    facts = sdk.runtime_facts()
    names = {p["name"] for p in facts["packages"]}
    assert "pyarrow" in names and facts["python"].count(".") == 2
    assert facts["torch"] and facts["devices"] == []


def test_a_crash_loses_at_most_the_last_second(tmp_path: Path) -> None:
    """A training process killed with SIGKILL keeps every row logged more than a flush interval ago."""
    script = tmp_path / "t.py"
    script.write_text(
        "import time, ledger.sdk\n"
        "run = ledger.sdk.current()\n"
        "for i in range(1, 1000000):\n"
        "    run.log_step(i, loss=1.0)\n"
        "    open('progress', 'w').write(str(i)) if i % 50 == 0 else None\n"
        "    time.sleep(0.002)\n"
    )
    env = child_env(LEDGER_RUN_DIR=str(tmp_path / "run"))  # the tree under test, not the editable install
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    progress = tmp_path / "progress"
    deadline = time.monotonic() + 120  # the child's start-up is slow on a loaded machine: wait for its first rows
    while not (progress.exists() and progress.read_text()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    logged_before = int(progress.read_text())
    time.sleep(1.6)  # more than one flush interval
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps, _ = read_table(tmp_path / "run", "steps")
    assert steps.num_rows >= logged_before
    assert steps.column("step").to_pylist() == list(range(1, steps.num_rows + 1))


def test_truncated_stream_keeps_complete_batches(tmp_path: Path) -> None:
    run = sdk.Run(tmp_path, rank=0, background=False)
    for i in range(1, 4):
        run.log_step(i, loss=1.0)
        run.flush()
    run.close()
    path = tmp_path / "rank-00000" / "steps.arrows"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])  # cut into the last batch
    steps, problems = read_table(tmp_path, "steps")
    assert steps.num_rows == 2
    assert problems and "rank-00000/steps.arrows" in problems[0].source and "kept the 2 rows" in problems[0].message


def test_the_steps_stream_is_compressed_and_follows_an_uncompressed_one(tmp_path: Path) -> None:
    """An SDK from before the compression (and the coded names) left an uncompressed stream of STEPS in the
    rank file; this one appends its compressed stream of STEPS_STREAM: both read, every value in place, and the
    new stream is smaller than the same rows uncompressed, its names held once, in the batch's dictionary."""
    import pyarrow as pa

    from schemas.tables import STEPS, STEPS_STREAM

    path = tmp_path / "rank-00000" / "steps.arrows"
    path.parent.mkdir(parents=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, STEPS) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist([{"rank": 0, "step": 1, "loss": 9.0}], schema=STEPS))
    before = path.stat().st_size
    rows = [{f"moe/layer{k}_load_cv": step + k / 10 for k in range(10)} for step in range(2, 2002)]
    run = sdk.Run(tmp_path, rank=0, background=False)
    for step, metrics in enumerate(rows, 2):
        run.log_step(step, **metrics)
    run.close()
    table, problems = read_table(tmp_path, "steps")
    assert not problems and table.column("step").to_pylist() == list(range(1, 2002))
    assert table.column("loss").to_pylist()[0] == 9.0
    assert [dict(m) for m in table.column("extra").to_pylist()[1:]] == rows
    as_published, problems = read_table(tmp_path, "steps", coded=True)  # one file, both kinds: all decoded
    assert not problems and as_published.equals(table)
    plain = pa.BufferOutputStream()
    with pa.ipc.new_stream(plain, STEPS) as writer:
        writer.write_table(table.slice(1))
    assert path.stat().st_size - before < plain.getvalue().size / 2
    with pa.OSFile(str(path), "rb") as f:  # the SDK's stream, after the older one: the names dictionary-coded
        f.seek(before)
        written = pa.ipc.open_stream(f).read_all().column("extra").combine_chunks()
    assert written.type == STEPS_STREAM.field("extra").type and written.keys.dictionary.to_pylist() == list(rows[0])


def test_two_processes_appending_to_one_rank_file(tmp_path: Path) -> None:
    for start in (1, 3):
        run = sdk.Run(tmp_path, rank=0, background=False)
        run.log_step(start, loss=1.0)
        run.log_step(start + 1, loss=1.0)
        run.close()
    steps, problems = read_table(tmp_path, "steps")
    assert not problems and steps.column("step").to_pylist() == [1, 2, 3, 4]
    assert isinstance(steps, pa.Table)


def test_a_full_steps_buffer_is_written_before_close(tmp_path: Path) -> None:
    """log_step (the run's closure) flushes by itself once ``flush_rows`` rows are buffered, with no flush
    thread: the rows are in the rank file while the run is still open."""
    run = sdk.Run(tmp_path, rank=0, background=False, flush_rows=4)
    for step in range(1, 6):
        run.log_step(step, loss=1.0, custom=float(step))
    written, problems = read_table(tmp_path, "steps")
    assert not problems and written.column("step").to_pylist() == [1, 2, 3, 4]
    run.close()
    assert read_table(tmp_path, "steps")[0].column("extra").to_pylist()[4] == [("custom", 5.0)]
