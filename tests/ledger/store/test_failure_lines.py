"""Why a run failed (ledger.store.failure.failure_of) in every shape a log ends in: what Python prints for a
chained, multi-line or interrupted exception, what comes after it (wandb's and NCCL's goodbyes), the prefixes of
srun, mpirun, torchrun and Accelerate, colours and redrawn progress bars, Windows line ends, bytes that are not
UTF-8, tracebacks deeper than the lines kept, lines longer than kept, logs longer than the tail read, and no
traceback at all. Every expected line and line number is written by hand from the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.store.failure import LAST_LINES, MAX_CHARS, MAX_LINES, TAIL_BYTES, failure_of
from schemas.receipt import Failure


def fail(tmp_path: Path, text: str | bytes) -> Failure | None:
    log = tmp_path / "output.log"
    log.write_bytes(text.encode() if isinstance(text, str) else text)
    return failure_of(log)


TB = "Traceback (most recent call last):"


def test_the_constants() -> None:
    assert (TAIL_BYTES, MAX_LINES, LAST_LINES, MAX_CHARS) == (256 * 1024, 40, 20, 500)


def test_output_printed_after_the_traceback_is_not_its_exception(tmp_path: Path) -> None:
    """wandb's lines after a crash read like ``Name: message`` too; the exception is the line after the frames."""
    f = fail(tmp_path, f"step 1 loss 2.0\n{TB}\n  File \"train.py\", line 9, in <module>\n    main()\n"
                       "ValueError: bad shape (3, 4)\nwandb: Synced 5 files\nwandb: Find logs at: ./wandb/run-1/logs\n")
    assert f == Failure(exception="ValueError: bad shape (3, 4)",
                        lines=(TB, '  File "train.py", line 9, in <module>', "    main()",
                               "ValueError: bad shape (3, 4)"), first_line=2, log="output.log")


def test_a_chained_exception_keeps_the_last_traceback(tmp_path: Path) -> None:
    text = (f"step 1 loss 2.0\n{TB}\n  File \"train.py\", line 3, in load\n    return d[\"lr\"]\nKeyError: 'lr'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            f"{TB}\n  File \"train.py\", line 5, in <module>\n    raise ValueError(\"no learning rate\")\n"
            "ValueError: no learning rate\n")
    f = fail(tmp_path, text)
    assert f is not None and f.exception == "ValueError: no learning rate" and f.first_line == 9
    assert f.lines == (TB, '  File "train.py", line 5, in <module>', '    raise ValueError("no learning rate")',
                       "ValueError: no learning rate")


def test_a_multi_line_message_and_the_lines_after_it(tmp_path: Path) -> None:
    text = (f"{TB}\n  File \"t.py\", line 2, in <module>\n    x = torch.empty(n, device=\"cuda\")\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "  Of the allocated memory 70.10 GiB is allocated by PyTorch\n"
            "[W1204 socket.cpp:464] [c10d] The server socket has failed to listen\n")
    f = fail(tmp_path, text)
    assert f is not None and f.exception == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert f.lines[-1] == "  Of the allocated memory 70.10 GiB is allocated by PyTorch" and len(f.lines) == 5
    assert f.first_line == 1


@pytest.mark.parametrize("last", ["KeyboardInterrupt", "SystemExit: 3", "AssertionError",
                                  "torch.distributed.DistBackendError: NCCL error", "mymodule.Custom: gone wrong"])
def test_exception_lines_of_every_kind(tmp_path: Path, last: str) -> None:
    f = fail(tmp_path, f"step 5 loss 1.5\n{TB}\n  File \"train.py\", line 20, in <module>\n    step()\n{last}\n")
    assert f is not None and f.exception == last and f.lines[-1] == last and f.first_line == 2 and len(f.lines) == 4


def test_a_traceback_cut_short_has_no_exception(tmp_path: Path) -> None:
    """The process killed while printing: the traceback's lines, no exception line."""
    f = fail(tmp_path, f"step 5\n{TB}\n  File \"train.py\", line 20, in <module>\n    step()\n\n\n")
    assert f is not None and f.exception is None
    assert f.lines == (TB, '  File "train.py", line 20, in <module>', "    step()") and f.first_line == 2


@pytest.mark.parametrize(("prefix", "out"), [("0: ", "0: "), ("[1,0]<stderr>:", "[1,0]<stdout>:"),
                                             ("[rank3]: ", "[rank3]: ")])
def test_launcher_prefixes_are_removed(tmp_path: Path, prefix: str, out: str) -> None:
    """srun --label (``0: ``), mpirun --tag-output (``[1,0]<stderr>:``, no space after it) and torchrun
    (``[rank3]: ``) prefix each line with the rank; the frames keep their own indentation."""
    text = (f"{out}step 1 loss 2.0\n{prefix}{TB}\n{prefix}  File \"train.py\", line 7, in <module>\n"
            f"{prefix}    step()\n"
            f"{prefix}RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1521, unhandled system error\n")
    f = fail(tmp_path, text)
    assert f == Failure(exception="RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1521, unhandled system error",
                        lines=(TB, '  File "train.py", line 7, in <module>', "    step()",
                               "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1521, unhandled system error"),
                        first_line=2, log="output.log")


def test_colours_redrawn_bars_and_windows_line_ends(tmp_path: Path) -> None:
    text = (b"epoch 1:  50%|#####     | 5/10\repoch 1:  60%|######    | 6/10\r\n"
            b"\x1b[31m" + TB.encode() + b"\x1b[0m\r\n  File \"t.py\", line 1, in <module>\r\n"
            b"\x1b[1;31mValueError\x1b[0m: x\r\n")
    f = fail(tmp_path, text)
    assert f == Failure(exception="ValueError: x", lines=(TB, '  File "t.py", line 1, in <module>', "ValueError: x"),
                        first_line=2, log="output.log")
    bar = fail(tmp_path, b"epoch 1:  50%|#####     | 5/10\repoch 1: 100%|##########| 10/10\r\nKilled\r\n")
    assert bar is not None and bar.exception is None
    assert bar.lines == ("epoch 1: 100%|##########| 10/10", "Killed") and bar.first_line == 1


def test_bytes_that_are_not_utf8_are_replaced(tmp_path: Path) -> None:
    f = fail(tmp_path, b"step 1\n" + TB.encode() + b"\n  File \"t\xe9.py\", line 1\nValueError: caf\xe9\n")
    assert f is not None and f.exception == "ValueError: caf\ufffd" and f.lines[1] == '  File "t\ufffd.py", line 1'


def test_a_deep_traceback_keeps_its_last_lines_and_says_where_they_start(tmp_path: Path) -> None:
    """Thirty frames (60 lines) and the exception: the last 40 of the 62 lines, starting 22 lines after the
    traceback's first (log line 2): line 24."""
    frames = "".join(f"  File \"train.py\", line {k}, in f\n    return f(n - 1)\n" for k in range(30))
    f = fail(tmp_path, f"step 1\n{TB}\n{frames}RecursionError: maximum recursion depth exceeded\n")
    assert f is not None and len(f.lines) == 40 and f.first_line == 24
    assert f.lines[:2] == ("    return f(n - 1)", '  File "train.py", line 11, in f') and f.exception == f.lines[-1]
    assert f.exception == "RecursionError: maximum recursion depth exceeded"


def test_long_lines_are_cut_to_500_characters(tmp_path: Path) -> None:
    message = "ValueError: " + "x" * 600
    f = fail(tmp_path, f"{TB}\n  File \"t.py\", line 1, in <module>\n{message}\n")
    assert f is not None and f.exception == message[:497] + "..." and len(f.exception) == 500
    exact = "ValueError: " + "y" * 488  # 500 characters: kept whole
    g = fail(tmp_path, f"{TB}\n  File \"t.py\", line 1, in <module>\n{exact}\n")
    assert g is not None and g.exception == exact


def test_a_log_longer_than_the_tail_counts_its_lines_from_the_start(tmp_path: Path) -> None:
    """30,000 step lines (about 600 KiB, more than the 256 KiB read), then the traceback at line 30,001."""
    steps = "".join(f"step {k:6d} loss {1 + 1 / (k + 1):.6f}\n" for k in range(1, 30001))
    assert len(steps) > TAIL_BYTES
    f = fail(tmp_path, f"{steps}{TB}\n  File \"train.py\", line 1, in <module>\nValueError: late\n")
    assert f is not None and f.first_line == 30001 and f.exception == "ValueError: late"
    quiet = fail(tmp_path, steps + "exit 1\n")  # no traceback: the last 20 lines, numbered from the start
    assert quiet is not None and quiet.first_line == 29982 and quiet.lines[-1] == "exit 1"
    assert quiet.lines[0] == f"step  29982 loss {1 + 1 / 29983:.6f}" and len(quiet.lines) == 20


def test_without_a_traceback_the_last_twenty_lines_with_blank_lines_between(tmp_path: Path) -> None:
    lines = [f"line {k}" for k in range(1, 26)]
    lines.insert(22, "")  # a blank line between line 22 and line 23 (log line 23)
    f = fail(tmp_path, "\n".join(lines) + "\n\n   \n")
    # the 20 last non-empty: line 6 .. line 25 (log lines 6 .. 26 with the blank), blanks at the end dropped
    assert f is not None and f.exception is None and f.first_line == 6
    assert f.lines == tuple([f"line {k}" for k in range(6, 23)] + ["", "line 23", "line 24", "line 25"])


def test_the_launchers_traceback_only_when_there_is_no_other(tmp_path: Path) -> None:
    launcher = (f"{TB}\n  File \"/usr/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n"
                "  File \"/usr/lib/python3/site-packages/torch/distributed/elastic/multiprocessing/errors/"
                "__init__.py\", line 355, in wrapper\n    return f(*args, **kwargs)\n"
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                "============================================================\ntrain.py FAILED\n")
    f = fail(tmp_path, "step 1\n" + launcher)
    assert f is not None and f.first_line == 2
    assert f.exception == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    rank = (f"[rank1]: {TB}\n[rank1]:   File \"train.py\", line 4, in <module>\n"
            "[rank1]: IndexError: list index out of range\n")
    g = fail(tmp_path, "step 1\n" + rank + launcher)
    assert g is not None and g.exception == "IndexError: list index out of range" and g.first_line == 2


def test_nothing_to_show(tmp_path: Path) -> None:
    assert failure_of(tmp_path / "missing.log") is None
    (tmp_path / "dir.log").mkdir()
    assert failure_of(tmp_path / "dir.log") is None
    assert fail(tmp_path, "") is None and fail(tmp_path, "\n\n  \n\x1b[0m\n") is None
    one = fail(tmp_path, "segmentation fault")  # no newline at the end
    assert one == Failure(exception=None, lines=("segmentation fault",), first_line=1, log="output.log")


def test_code_lines_of_the_frames_never_end_the_traceback(tmp_path: Path) -> None:
    """A frame's code line ``    lr: float = args.lr`` reads like ``Name: message`` once stripped, and a line of one
    character (another process's progress dot) sits among the frames: neither is the exception."""
    text = (f"{TB}\n  File \"train.py\", line 4, in <module>\n    lr: float = args.lr\n.\n"
            "AttributeError: 'Namespace' object has no attribute 'lr'\n")
    f = fail(tmp_path, text)
    assert f is not None and f.exception == "AttributeError: 'Namespace' object has no attribute 'lr'"
    assert f.lines == (TB, '  File "train.py", line 4, in <module>', "    lr: float = args.lr", ".",
                       "AttributeError: 'Namespace' object has no attribute 'lr'")


def test_a_traceback_without_frames(tmp_path: Path) -> None:
    f = fail(tmp_path, f"step 1\n{TB}\nValueError: x\nwandb: bye\n")
    assert f is not None and f.exception == "ValueError: x" and f.lines == (TB, "ValueError: x")


def test_a_ranks_traceback_cut_short_before_the_launchers(tmp_path: Path) -> None:
    """A rank killed while printing its traceback (no exception line), a blank line, then torchrun's own: the rank's
    lines are kept, without the blank line and without the launcher's."""
    launcher = (f"{TB}\n  File \"/usr/bin/torchrun\", line 8, in <module>\n"
                "  File \"/site-packages/torch/distributed/elastic/agent/server/api.py\", line 5, in run\n"
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    cut = f"[rank0]: {TB}\n[rank0]:   File \"train.py\", line 9, in <module>\n[rank0]:     step()\n\n"
    f = fail(tmp_path, "step 1\n" + cut + launcher)
    assert f == Failure(exception=None, lines=(TB, '  File "train.py", line 9, in <module>', "    step()"),
                        first_line=2, log="output.log")
    header_only = fail(tmp_path, f"step 1\n[rank0]: {TB}\n\n\n" + launcher)
    assert header_only == Failure(exception=None, lines=(TB,), first_line=2, log="output.log")


def test_a_bar_cleared_with_spaces_is_a_blank_line(tmp_path: Path) -> None:
    """tqdm clears its bar by writing spaces over it: the terminal shows a blank line, not the bar."""
    f = fail(tmp_path, "loading\n 10%|#         | 1/10\r                    \nKilled\n")
    assert f is not None and f.lines == ("loading", "", "Killed") and f.first_line == 1


def test_line_numbers_of_a_log_of_several_megabytes(tmp_path: Path) -> None:
    """1.5 MB of step lines (the count before the tail read spans two 1 MiB blocks), then a traceback."""
    steps = "".join(f"step {k:8d} loss {1 + 1 / k:.8f}\n" for k in range(1, 50001))
    assert len(steps) > (1 << 20) + TAIL_BYTES
    f = fail(tmp_path, f"{steps}{TB}\n  File \"train.py\", line 1, in <module>\nValueError: late\n")
    assert f is not None and f.first_line == 50001


def test_a_log_one_byte_longer_than_the_tail_that_starts_with_a_blank_line(tmp_path: Path) -> None:
    """The read starts at byte 1, just after the first line (an empty one): numbering still counts it."""
    tail = f"{TB}\n  File \"train.py\", line 1, in <module>\nValueError: edge\n"
    body = "\n" + "x" * 99 + "\n"  # lines 1 (empty) and 2 (100 characters)
    filler_lines = (TAIL_BYTES + 1 - len(body) - len(tail)) // 100
    filler = "".join("y" * 99 + "\n" for _ in range(filler_lines))
    text = body + filler
    text = text + "z" * (TAIL_BYTES + 1 - len(text) - len(tail) - 1) + "\n" + tail
    assert len(text.encode()) == TAIL_BYTES + 1
    f = fail(tmp_path, text)
    assert f is not None and f.exception == "ValueError: edge" and f.first_line == 2 + filler_lines + 2


def test_a_message_continued_on_tab_indented_lines(tmp_path: Path) -> None:
    f = fail(tmp_path, f"{TB}\n  File \"t.py\", line 3, in <module>\nRuntimeError: shapes differ:\n\tgot (3, 4)\n"
                       "\texpected (4, 3)\nwandb: bye\n")
    assert f is not None and f.exception == "RuntimeError: shapes differ:"
    assert f.lines[-2:] == ("\tgot (3, 4)", "\texpected (4, 3)")


def test_a_last_line_ending_in_a_capital_x_keeps_it(tmp_path: Path) -> None:
    f = fail(tmp_path, "step 3\nkilled by signal 9 on node-X\n")
    assert f is not None and f.lines == ("step 3", "killed by signal 9 on node-X")
