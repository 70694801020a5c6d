"""The project's dvc.yaml/params.yaml, run for real with `dvc repro` in a temporary git repository on the
tiny config: the first repro records every run and the comparison, a second one skips every stage, and
changing one run's parameters reruns that run and the comparison only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, ROOT, child_env


def _sh(args: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run(args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "scripts/pipeline_report.py", ".gitignore", ".dvcignore"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "runners", repo / "runners", ignore=shutil.ignore_patterns("__pycache__"))
    params = (ROOT / "params.yaml").read_text()
    params = re.sub(r"steps: \d+", "steps: 8", params)  # the tiny config, shortened
    (repo / "params.yaml").write_text(params)
    _sh(["git", "init", "-q"], repo)
    _sh([str(BIN / "dvc"), "init", "-q"], repo)
    _sh(["git", "add", "-A"], repo)
    _sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pipeline"], repo)
    return repo


def _ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


def test_repro_runs_skips_and_reruns_one_stage(repo: Path) -> None:
    first = _sh([str(BIN / "dvc"), "repro"], repo)
    assert _ran(first) == {"run@baseline", "run@bf16", "run@capacity", "run@bf16-capacity", "compare"}
    ids = {p.stem: p.read_text().strip() for p in (repo / "pipeline" / "runs").glob("*.id")}
    assert len(ids) == 4 and all(re.fullmatch(r"[0-9a-f]{64}", i) for i in ids.values())
    assert all((repo / "receipts" / i / "receipt.json").is_file() for i in ids.values())
    report = json.loads((repo / "pipeline" / "compare.json").read_text())
    assert {c["factor"] for c in report["changed_factors"]} == {"precision", "router"}
    assert (repo / "pipeline" / "compare.md").read_text().strip()
    header = (repo / "pipeline" / "loss.csv").read_text().splitlines()[0]
    assert header == "run,tokens,loss"
    metrics = _sh([str(BIN / "dvc"), "metrics", "show"], repo)
    assert "compare.json" in metrics

    second = _sh([str(BIN / "dvc"), "repro"], repo)
    assert _ran(second) == set() and "didn't change, skipping" in second

    params = (repo / "params.yaml").read_text().replace('args: "--set precision=bf16"\n',
                                                       'args: "--set precision=bf16 --set seed=1"\n')
    (repo / "params.yaml").write_text(params)
    third = _sh([str(BIN / "dvc"), "repro"], repo)
    assert _ran(third) == {"run@bf16", "compare"}
    new = (repo / "pipeline" / "runs" / "bf16.id").read_text().strip()
    assert new != ids["bf16"]
    receipt = json.loads((repo / "receipts" / new / "receipt.json").read_text())
    assert receipt["workload"]["seed"] == 1
