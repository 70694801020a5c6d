"""Why a run failed, read from the end of its log (ledger.store.failure), and shown where a user looks: the
end-of-record line, `ledger show` (with the log's path) and the receipt. Logs in the shapes Python, torchrun and
a shell print them; every expected line is written by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import BIN, child_env

from ledger.store.failure import LAST_LINES, TAIL_BYTES, failure_of

PYTHON_FAILURE = """\
step 1 loss 2.0
step 2 loss 1.9
Traceback (most recent call last):
  File "train.py", line 12, in <module>
    main()
  File "train.py", line 9, in main
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB
"""


def test_a_python_traceback_with_its_exception_and_line(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(PYTHON_FAILURE)
    f = failure_of(log)
    assert f is not None
    assert f.exception == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert f.lines[0] == "Traceback (most recent call last):" and f.lines[-1] == f.exception and len(f.lines) == 6
    assert f.first_line == 3 and f.log == "output.log"


def test_torchrun_keeps_the_ranks_traceback_not_the_launchers(tmp_path: Path) -> None:
    """Each rank prints its traceback behind its prefix; torchrun then prints its own ChildFailedError: the rank's
    is the cause. Prefixes and colours are removed."""
    log = tmp_path / "output.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/w/train.py", line 40, in <module>\n'
        "[rank1]:     loss.backward()\n"
        "[rank1]: \x1b[31mValueError: expected a finite loss, got nan\x1b[0m\n"
        "E1204 10:00:00.000 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n")
    f = failure_of(log)
    assert f is not None and f.exception == "ValueError: expected a finite loss, got nan"
    assert f.lines == ("Traceback (most recent call last):", '  File "/w/train.py", line 40, in <module>',
                       "    loss.backward()", "ValueError: expected a finite loss, got nan")
    assert f.first_line == 1


def test_without_a_traceback_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 31)) + "terminate called after throwing\nAborted\n\n\n")
    f = failure_of(log)
    assert f is not None and f.exception is None and len(f.lines) == LAST_LINES
    assert f.lines[-1] == "Aborted" and f.lines[0] == "line 13" and f.first_line == 13


def test_the_line_number_counts_the_log_before_its_tail(tmp_path: Path) -> None:
    """A long log: only its end is read, and the traceback's line number still counts every line before."""
    log = tmp_path / "output.log"
    filler = "x" * 99 + "\n"
    n = TAIL_BYTES // len(filler) + 500
    log.write_text(filler * n + PYTHON_FAILURE)
    f = failure_of(log)
    assert f is not None and f.first_line == n + 3 and f.exception and f.exception.startswith("RuntimeError")


def test_a_missing_or_empty_log_has_no_failure(tmp_path: Path) -> None:
    assert failure_of(tmp_path / "nothing.log") is None
    (tmp_path / "empty.log").write_text("\n\n")
    assert failure_of(tmp_path / "empty.log") is None


def test_a_failed_wrapped_run_says_why_in_its_receipt_its_last_line_and_show(tmp_path: Path) -> None:
    """`ledger record` of a script that fails: the receipt's failure (its secret redacted), the end-of-record line
    names the exception and the log, `ledger show` prints the log's path and the traceback."""
    script = tmp_path / "train.py"
    script.write_text("print('step 1 loss 2.0', flush=True)\n"
                      "def main():\n"
                      "    raise KeyError('token hf_abcdefghijklmnopqrstuvwxyzABCDEFGH was refused')\n"
                      "main()\n")
    env = child_env(LEDGER_DIR=str(tmp_path / "receipts"))
    rec = subprocess.run([str(BIN / "ledger"), "record", "--name", "boom", "--", sys.executable, str(script)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert rec.returncode == 1
    shown = subprocess.run([str(BIN / "ledger"), "show", "boom", "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=True)
    rid = json.loads(shown.stdout)["id"]
    log = tmp_path / "receipts" / rid[:2] / rid / "output.log"
    # the traceback went to stderr, the step line to stdout: which the log has first is the pumps' order
    line = log.read_text().splitlines().index("Traceback (most recent call last):") + 1
    assert f"ledger: failed: KeyError: 'token <redacted> was refused' (line {line} of {log})" in rec.stderr
    failure = json.loads(shown.stdout)["failure"]
    assert failure["exception"] == "KeyError: 'token <redacted> was refused'" and failure["first_line"] == line
    assert failure["lines"][0] == "Traceback (most recent call last):" and "hf_abc" not in shown.stdout
    text = subprocess.run([str(BIN / "ledger"), "show", "boom"], cwd=tmp_path, env=env | {"COLUMNS": "300"},
                          capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"output: {log}" in text and f"(from output.log, line {line})" in text
    assert "why it failed: failed: KeyError: 'token <redacted> was refused' (exit code 1)" in text
    assert "  Traceback (most recent call last):" in text
