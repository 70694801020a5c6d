"""`ledger record` starts the launch before it loads what only publishing needs, and the launch gets the
environment the user gave, not the settings the `ledger` process made for itself (ledger.process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import child_env

HEAVY = ("pyarrow", "numpy", "pydantic", "schemas.receipt", "duckdb")
"""What a launch must not wait for: loaded while it runs, for publishing."""


def test_the_launch_starts_before_pyarrow_numpy_and_the_receipt_models_load(tmp_path: Path) -> None:
    """The real `ledger` entry point in a process that notes, when the launch is started, which of
    :data:`HEAVY` it has loaded; and, at its end, that it published (the heavy modules did load, later)."""
    script = textwrap.dedent(f"""
        import json, subprocess, sys
        seen = []
        original = subprocess.Popen.__init__
        def spy(self, args, *a, **k):
            if list(args)[:1] == [sys.executable] and not seen:
                seen.append(sorted(m for m in {HEAVY!r} if m in sys.modules))
            original(self, args, *a, **k)
        subprocess.Popen.__init__ = spy
        sys.argv = ["ledger", "record", "--", sys.executable, "-c", "print('step 1 loss 2.5')"]
        from ledger.cli import main
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        print(json.dumps({{"at_launch": seen, "after": sorted(m for m in {HEAVY!r} if m in sys.modules),
                          "code": code}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(LEDGER_DIR=str(tmp_path / "receipts")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["code"] == 0 and "ledger: recorded " in proc.stderr
    assert facts["at_launch"] == [[]]
    assert {"pyarrow", "numpy", "pydantic", "schemas.receipt"} <= set(facts["after"])


OWN = {"PYDANTIC_DISABLE_PLUGINS": "__all__", "OPENBLAS_NUM_THREADS": "1"}
"""What the `ledger` process sets for itself (written out here, not read from ledger.process)."""


def _printed_env(tmp_path: Path, **env: str) -> dict[str, str]:
    code = f"import json, os; print('ENV=' + json.dumps({{n: os.environ.get(n) for n in {sorted(OWN)!r}}}))"
    base = child_env(LEDGER_DIR=str(tmp_path / "receipts"))
    for name in OWN:
        base.pop(name, None)
    proc = subprocess.run([str(Path(sys.executable).with_name("ledger")), "record", "--", sys.executable, "-c", code],
                          env=base | env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ENV="))[4:])


def test_the_launch_does_not_inherit_what_ledger_set_for_itself(tmp_path: Path) -> None:
    assert _printed_env(tmp_path) == {name: None for name in OWN}


def test_a_users_own_setting_reaches_the_launch(tmp_path: Path) -> None:
    assert _printed_env(tmp_path, PYDANTIC_DISABLE_PLUGINS="logfire", OPENBLAS_NUM_THREADS="7") == {
        "PYDANTIC_DISABLE_PLUGINS": "logfire", "OPENBLAS_NUM_THREADS": "7"}


def test_the_ledger_process_runs_numpy_with_one_blas_thread(tmp_path: Path) -> None:
    """What the setting is for: after :func:`ledger.process.configure` (the first thing `ledger` does), numpy's
    OpenBLAS loads with one thread; a process with the same environment but without it gets the library's
    default, a thread per core."""
    probe = ("import json, numpy, threadpoolctl; print(json.dumps("
             "[p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas']))")
    script = f"from ledger.process import configure; configure(); exec({probe!r})"
    env = child_env()
    for name in OWN:
        env.pop(name, None)
    inside = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    outside = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert inside.returncode == 0 and outside.returncode == 0, inside.stderr + outside.stderr
    assert json.loads(inside.stdout) == [1]
    assert json.loads(outside.stdout) == [os.cpu_count()]


GC_PROBE = textwrap.dedent("""
    import gc, json, sys
    from pathlib import Path
    from ledger.record.wrapper import RecordOptions, record
    from ledger.store.receipts import Ledger
    ledger = Ledger(Path(sys.argv[1]))
    seen = []
    for ends in (False, True):
        result = record(ledger, RecordOptions(command=[sys.executable, "-c", "print('step 1 loss 2.5')"],
                                              telemetry_interval=0, process_ends=ends))
        seen.append({"published": result.receipt is not None, "enabled": gc.isenabled(),
                     "frozen": gc.get_freeze_count()})
    print(json.dumps(seen))
""")


def test_the_imports_are_frozen_out_of_the_collector_only_in_a_process_that_ends_with_the_record(
        tmp_path: Path) -> None:
    """The Python API (a process that goes on) gets its collector back as it was, nothing frozen (frozen objects
    are never collected); `ledger record`'s process (``process_ends``) freezes what the imports made."""
    proc = subprocess.run([sys.executable, "-c", GC_PROBE, str(tmp_path / "receipts")], env=child_env(),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    goes_on, ends = json.loads(proc.stdout.strip().splitlines()[-1])
    assert goes_on == {"published": True, "enabled": True, "frozen": 0}
    assert ends["published"] and ends["enabled"]
    assert ends["frozen"] > 10_000  # every object alive then (pyarrow, numpy, pydantic, the models): tens of thousands


def test_a_record_that_read_the_index_first_exits_cleanly(tmp_path: Path) -> None:
    """``--baseline`` reads the index (DuckDB) before the launch; its objects must not be frozen, or DuckDB's
    bindings print a leak report on the launch's stderr at exit."""
    ledger = [str(Path(sys.executable).with_name("ledger")), "record"]
    env = child_env(LEDGER_DIR=str(tmp_path / "receipts"))
    first = subprocess.run([*ledger, "--name", "base", "--", sys.executable, "-c", "pass"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([*ledger, "--baseline", "base", "--", sys.executable, "-c", "pass"], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "ledger: recorded " in second.stderr
    assert "leak" not in second.stderr.lower(), second.stderr
