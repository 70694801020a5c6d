"""The entry script under the real `ledger record`: runtime reported, workload set, the script run by runpy."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from helpers import ids_in, load_receipt

from runners.megatron.config import tiny_moe
from runners.megatron.flags import WORKLOAD_ENV, build_flags, workload


def test_entry_runs_the_script_and_reports(ledger_cli, ledger_dir: Path, tmp_path: Path) -> None:
    megatron = tmp_path / "Megatron-LM"
    (megatron / "megatron").mkdir(parents=True)
    (megatron / "megatron" / "__init__.py").write_text("VERSION = 'checkout'\n")
    script = megatron / "pretrain_gpt.py"
    script.write_text(textwrap.dedent("""
        import sys
        import megatron  # importable: the entry puts the script's folder on sys.path
        assert __name__ == "__main__"
        print("argv", sys.argv[1:3], megatron.VERSION, flush=True)
    """))
    cfg = tiny_moe()
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(workload(cfg, "tiny_moe").model_dump(mode="json")))
    proc = ledger_cli("record", "--name", "entry", "--", "python", "-m", "runners.megatron.entry", str(script),
                      *build_flags(cfg), env={WORKLOAD_ENV: str(wl)}, cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr
    assert "argv ['--num-layers', '2'] checkout" in proc.stdout
    (rid,) = ids_in(ledger_dir)
    r = load_receipt(ledger_dir, rid)
    assert r["workload"]["model"]["num_experts"] == 8 and r["workload"]["launch"]["runner"] == "runners.megatron"
    assert r["stack"]["software"]["source"] == "process"  # report_runtime() ran in the training process


def test_entry_refuses_a_missing_script(ledger_cli, tmp_path: Path) -> None:
    proc = ledger_cli("record", "--", "python", "-m", "runners.megatron.entry", str(tmp_path / "pretrain_gpt.py"),
                      cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 1 and "does not exist" in proc.stderr
