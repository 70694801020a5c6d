"""`ledger compare` on a terminal at the widths people have (80 columns is what a pipe gets): never a word broken
inside a cell, nothing past the edge; an interval too wide to mean anything says "too few runs" and how many;
for SDK runs and for wrapped runs that only print lines."""

from __future__ import annotations

import json
import math
import re
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import BIN, child_env

import ledger
import ledger.sdk
from ledger.report import fmt, intervals

WRAPPED = """
import sys
speed = float(sys.argv[1])
for step in range(1, 41):
    print(f"step {step} loss {4.0 / step + speed / 1e5:.5f}", flush=True)
"""


@pytest.fixture(scope="module")
def ledger_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base and its replicate base-s1 (2 runs), against bf16 (1 run): the interval of 2 runs against 1."""
    root = tmp_path_factory.mktemp("terminal") / "receipts"
    lg = ledger.open(root)
    for name, precision, seed, speed in (("base", "fp32", 0, 1000.0), ("base-s1", "fp32", 1, 1180.0),
                                         ("bf16", "bf16", 0, 1500.0)):
        with lg.recording(name=name):
            run = ledger.sdk.current()
            run.set_workload({"model": {"num_experts": 8, "top_k": 2}, "precision": {"compute": precision},
                              "seed": seed})
            for step in range(1, 61):
                wobble = 1 + 0.03 * math.sin(step * (1.3 + seed))
                run.log_step(step, loss=4 * math.exp(-step / 30), tokens=1024 * step,
                             step_time_s=1024 / (speed * wobble), tokens_per_s=speed * wobble)
    return root


def _metrics_section(text: str) -> list[str]:
    return text.split(" metrics ", 1)[1].split("\n[1] ", 1)[0].splitlines()


def _compare(root: Path, width: int, *args: str) -> str:
    return subprocess.run([str(BIN / "ledger"), "--ledger", str(root), "compare", "base", "bf16", *args],
                          env=child_env(COLUMNS=str(width)), capture_output=True, text=True, check=True,
                          timeout=120).stdout


@pytest.fixture(scope="module")
def data(ledger_root: Path) -> dict[str, Any]:
    """The comparison as `ledger compare --json` gives it (what each rendering must show whole)."""
    found: dict[str, Any] = json.loads(_compare(ledger_root, 200, "--json"))
    return found


@pytest.mark.parametrize("width", [80, 100, 200])
def test_compare_reads_cleanly_at_any_width(ledger_root: Path, data: dict[str, Any], width: int) -> None:
    text = _compare(ledger_root, width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    words = set(text.split())
    for m in data["metrics"]:  # every word of every name and verdict whole somewhere (a broken one is two pieces)
        assert set(m["name"].split()) <= words and set(m["verdict"].split()) <= words, (width, m["name"])
    assert "throughp" not in words and "ut" not in words
    speed = next(m for m in data["metrics"] if m["name"] == "tokens/s per device")
    assert speed["n"] == [2, 1] and speed["ci"][0] <= 0.5 and speed["ci"][1] >= 2  # as wide as the issue's
    said = re.search(r"too few runs \(~(\d+) per side\)", text)
    assert said and int(said.group(1)) > 2
    assert "x1,039" not in text and not re.search(r"\[x0\.\d+, x\d{2,}", text)
    if width <= 100:  # the whole table does not fit: each metric a block, its name and verdict on one line
        lines = _metrics_section(text)
        for m in data["metrics"]:
            assert any(re.match(rf"^[* ] {re.escape(m['name'])} +{re.escape(m['verdict'])}( \[\d+\])?$", line)
                       for line in lines), m["name"]


def test_wrapped_runs_compare_at_80_columns(ledger_cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(WRAPPED))
    for name, speed in (("w-a", "1000"), ("w-b", "2000")):
        ledger_cli("record", "--name", name, "--", "python", "train.py", speed, "--lr", "1e-3", check=True)
    text = ledger_cli("compare", "w-a", "w-b", env={"COLUMNS": "80"}).stdout
    data = json.loads(ledger_cli("compare", "w-a", "w-b", "--json").stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "workload.arguments: {arg1: 1000 -> 2000}" in text  # what changed: the launch's own argument
    lines = _metrics_section(text)
    for m in data["metrics"]:  # a block per metric, whatever the run could give (a reason for what it could not)
        assert any(re.match(rf"^[* ] {re.escape(m['name'])} +{re.escape(m['verdict'])}( \[\d+\])?$", line)
                   for line in lines), m["name"]


def _row(ci: tuple[float, float], n: tuple[int, int], df: int, a: float = 1.0, threshold: float = 0.05,
         ci_of: str = "ratio") -> SimpleNamespace:
    return SimpleNamespace(ci=ci, n=n, df=df, a=a, threshold=threshold, ci_of=ci_of)


def test_too_wide_and_the_runs_it_would_take() -> None:
    # a between-run SD (log) chosen so that the 5% change is d = 0.5 SDs: the published answer is 64 per side
    sd = math.log(1.05) / 0.5
    half = 12.7062047 * sd * math.sqrt(1 / 2 + 1 / 1)  # t(0.975, 1 df) x SE of 2 runs against 1
    row = _row((math.exp(-half), math.exp(half)), (2, 1), 1)
    assert intervals.too_wide(row)  # type: ignore[arg-type]
    assert fmt.ci(row) == "too few runs (~64 per side)"  # type: ignore[arg-type]
    narrow = _row((0.8, 1.25), (3, 3), 4)
    assert not intervals.too_wide(narrow) and fmt.ci(narrow) == "[x0.800, x1.250]"  # type: ignore[arg-type]
    assert not intervals.too_wide(_row((0.45, 1.9), (2, 1), 1))  # type: ignore[arg-type]  # no doubling in it
    delta = _row((-2.0, 3.0), (2, 1), 1, a=2.0, threshold=0.1, ci_of="delta")  # -|A|/2 and +|A| both inside
    assert intervals.too_wide(delta) and fmt.ci(delta).startswith("too few runs")  # type: ignore[arg-type]
    assert not intervals.too_wide(_row((-0.5, 1.5), (2, 1), 1, a=2.0, ci_of="delta"))  # type: ignore[arg-type]
    assert fmt.interval((math.log(0.3), math.log(3.0))) == "(too few runs)"
    assert fmt.interval((math.log(0.9), math.log(1.1))) == "[x0.900, x1.100]"
