"""The project's dvc.yaml/params.yaml, run for real with `dvc repro` in a temporary git repository on the
tiny config: the first repro records every run and the comparison, a second one skips every stage, and
changing one run's parameters reruns that run and the comparison only. Then the README Quickstart, command
by command, in the same repository (the demo's runs live in their own ledger, so its names do not collide)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from chromium import Browser, find_chromium
from conftest import BIN, ROOT, child_env
from helpers import receipt_dir


def _sh(args: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run(args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "scripts/pipeline_report.py", "scripts/plots/runs.json", "scripts/demo.sh", ".gitignore",
                 ".dvcignore"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "runners", repo / "runners", ignore=shutil.ignore_patterns("__pycache__"))
    params = (ROOT / "params.yaml").read_text()
    params = re.sub(r"steps: \d+", "steps: 8", params)  # the tiny config, shortened
    (repo / "params.yaml").write_text(params)
    _sh(["git", "init", "-q"], repo)
    _sh([str(BIN / "dvc"), "init", "-q"], repo)
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the project's: plots' offline page
    _sh(["git", "add", "-A"], repo)
    _sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pipeline"], repo)
    return repo


def _ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


@pytest.fixture(scope="module")
def first_repro(repo: Path) -> str:
    return _sh([str(BIN / "dvc"), "repro"], repo)


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_repro_runs_skips_and_reruns_one_stage(repo: Path, first_repro: str) -> None:
    assert _ran(first_repro) == {"run@baseline", "run@bf16", "run@capacity", "run@bf16-capacity", "run@baseline-s1",
                                 "run@bf16-capacity-s1", "compare"}
    ids = {p.stem: p.read_text().strip() for p in (repo / "pipeline" / "runs").glob("*.id")}
    assert len(ids) == 6 and all(re.fullmatch(r"[0-9a-f]{64}", i) for i in ids.values())
    assert all((receipt_dir(repo / "demo" / "receipts", i) / "receipt.json").is_file() for i in ids.values())
    assert not (repo / "receipts").exists()  # the demo's own ledger: the Quickstart's ./receipts starts empty
    report = json.loads((repo / "pipeline" / "compare.json").read_text())
    assert {c["factor"] for c in report["changed_factors"]} == {"precision", "router"}
    # each compared run's replicate (another seed) joined its side: the verdict rests on 2 vs 2 runs
    assert next(m for m in report["metrics"] if m["name"] == "tokens/s per device")["n"] == [2, 2]
    assert (repo / "pipeline" / "compare.md").read_text().strip()
    header = (repo / "pipeline" / "loss.csv").read_text().splitlines()[0]
    assert header == "run,tokens,loss"

    # `dvc metrics show`: throughput and loss of both sides, as flat keys, with the values of compare.json
    metrics = _sh([str(BIN / "dvc"), "metrics", "show", "--json"], repo)
    shown = json.loads(metrics)
    flat = next(iter(shown.values()))["data"]["pipeline/metrics.json"]["data"]
    by_name = {m["name"]: m for m in report["metrics"]}
    for key, name in (("tokens_per_s_per_device", "tokens/s per device"), ("loss_at_matched_tokens",
                                                                            "loss @ matched tokens")):
        for side in ("a", "b"):
            assert flat[f"{key}.{side}"] == pytest.approx(by_name[name][side])
    table = _sh([str(BIN / "dvc"), "metrics", "show"], repo)
    for key in ("tokens_per_s_per_device.a", "tokens_per_s_per_device.b", "loss_at_matched_tokens.a",
                "loss_at_matched_tokens.b"):
        assert key in table

    # `dvc plots`: the repository's template colours by the csv's run column, so each run is its own line
    plots = json.loads(_sh([str(BIN / "dvc"), "plots", "show", "--json"], repo))
    (spec,) = [p for p in plots["data"]["pipeline/loss.csv"] if p.get("type") == "vega"]
    content = spec["content"]
    assert content["encoding"]["color"]["field"] == "run"
    assert {d["run"] for d in content["data"]["values"]} == set(ids)

    second = _sh([str(BIN / "dvc"), "repro"], repo)
    assert _ran(second) == set() and "didn't change, skipping" in second

    params = (repo / "params.yaml").read_text().replace('args: "--set precision=bf16"\n',
                                                       'args: "--set precision=bf16 --set seed=1"\n')
    (repo / "params.yaml").write_text(params)
    third = _sh([str(BIN / "dvc"), "repro"], repo)
    assert _ran(third) == {"run@bf16", "compare"}
    new = (repo / "pipeline" / "runs" / "bf16.id").read_text().strip()
    assert new != ids["bf16"]
    receipt = json.loads((receipt_dir(repo / "demo" / "receipts", new) / "receipt.json").read_text())
    assert receipt["workload"]["seed"] == 1


@pytest.mark.slow
def test_demo_prints_the_comparison_once_as_terminal_text(repo: Path, first_repro: str) -> None:
    """`make demo` (scripts/demo.sh, after the pipeline ran: its repro skips every stage) prints the comparison
    once, as `ledger compare`'s terminal text: not the pipeline's Markdown with its escapes (``\\(298fce70\\)``), and
    not twice (the compare stage says what it wrote in one line)."""
    assert "what changed, by factor" not in first_repro and "compared baseline and bf16-capacity: pipeline/" in \
        first_repro
    out = _sh(["bash", "scripts/demo.sh"], repo)
    assert out.count("what changed, by factor") == 1 and out.count(" metrics ") == 1
    assert "\\(" not in out and "## `ledger compare`" not in out and "|---" not in out
    assert re.search(r"A baseline: baseline \([0-9a-f]{8}\), baseline-s1 \([0-9a-f]{8}\)", out)


def _quickstart() -> list[str]:
    """The README Quickstart's `ledger` commands, in order (the cluster launch and comments left out)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        line = line.split("  #", 1)[0].strip()
        if line.startswith("ledger ") and "torchrun" not in line:
            commands.append(line)
    return commands


@pytest.mark.slow
def test_readme_quickstart_after_the_demo(repo: Path, first_repro: str) -> None:
    import shlex

    commands = _quickstart()
    assert [c.split()[1] for c in commands] == ["record", "record", "ls", "ls", "show", "compare", "report",
                                                 "query"]
    for command in commands:
        args = shlex.split(command)
        if args[1] == "record":  # the tiny config, shortened as in the pipeline above
            args += ["--set", "steps=8"]
        out = _sh([str(BIN / args[0]), *args[1:]], repo)
        if args[1] == "ls":  # both runs: the tag, and the runner's learning rate (a hyperparameter), as columns
            assert "baseline" in out and "bf16" in out and "2 receipt(s)" in out
            if "--columns" in args:
                assert re.search(r"baseline\s+fp32\s+0\.00\d+", out) and re.search(r"bf16\s+bf16\s+0\.00\d+", out)
        if args[1] == "compare":
            assert "precision" in out
    assert (repo / "report.html").read_text().count("<svg") >= 3


@pytest.mark.slow
def test_dvc_plots_page_renders_offline(repo: Path, first_repro: str) -> None:
    """The page `dvc plots show` writes carries Vega inline (the project's .dvc/config points DVC at the
    template the pipeline writes): headless Chromium draws the loss plot from the file alone."""
    find_chromium()
    _sh([str(BIN / "dvc"), "plots", "show", "-o", "plots-page"], repo)
    page = repo / "plots-page" / "index.html"
    text = page.read_text()
    assert "cdn.jsdelivr" not in text and "<script src" not in text
    runs = {p.stem for p in (repo / "pipeline" / "runs").glob("*.id")}
    b = Browser(repo / ".chromium")
    try:
        b.goto(page.as_uri())
        lines = b.wait_for("document.querySelectorAll('.vega-embed svg.marks g.mark-line path').length")
        assert lines == len(runs) == 6  # one line per run, drawn by the inline Vega
        labels = b.evaluate("Array.from(document.querySelectorAll('.vega-embed svg.marks .role-legend-label text'))"
                            ".map(function(t){return t.textContent;})")
        assert runs <= set(labels)
        assert not b.problems(), b.problems()
        outside = [u for u in b.requested() if not u.startswith(("file:", "about:", "data:"))]
        assert not outside, outside
    finally:
        b.close()
