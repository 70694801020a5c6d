"""`ledger ls`, `show` and `compare` at the widths people use: whole short ids, wrapped names, whole
verdicts, human units, and `--sort`, `--limit`, `--columns`; `--json` keeps every field."""

from __future__ import annotations

import json
import re

import pytest

LONG = "a-rather-long-experiment-name-" + "x" * 40 + "-end"


@pytest.fixture
def runs(ledger_cli, workload):
    """Two runs: 20 steps (final loss 4/20 = 0.2) under a long name, and 40 steps (0.1) named short."""
    ledger_cli("record", "--name", LONG, "--", "python", str(workload(steps=20)), check=True)
    ledger_cli("record", "--name", "short", "--", "python", str(workload(steps=40, name="t40.py")), check=True)
    return json.loads(ledger_cli("ls", "--json").stdout)


@pytest.mark.slow
def test_ls_fits_the_terminal_sorts_and_shows_units(runs, ledger_cli) -> None:
    for columns in (80, 100):
        out = ledger_cli("ls", env={"COLUMNS": str(columns)}).stdout
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= columns
        for r in runs:  # every short id whole
            assert re.search(rf"(?<![0-9a-f]){r['id'][:8]}(?![0-9a-f])", out), (columns, r["id"][:8], out)
        # the long name is wrapped over several lines, never cut with an ellipsis
        assert "…" not in out
        assert len([line for line in lines if "a-rather" in line or "xxxxx" in line or "-end" in line]) >= 2
    out = ledger_cli("ls", "--columns", "name", env={"COLUMNS": "30"}).stdout
    body = [line.strip() for line in out.splitlines()[2:] if line.strip() and "receipt(s)" not in line]
    assert LONG in "".join(body)

    best = json.loads(ledger_cli("ls", "--sort", "loss", "--limit", "1", "--json").stdout)
    assert [r["name"] for r in best] == ["short"] and set(best[0]) == set(runs[0])  # --json keeps every field
    assert best[0]["tokens_per_s"] == 25600.0 and best[0]["final_loss"] == pytest.approx(4 / 40)  # raw, not 25.6k
    worst = json.loads(ledger_cli("ls", "--sort", "loss", "--desc", "--json").stdout)
    assert [r["name"] for r in worst] == [LONG, "short"]
    out = ledger_cli("ls", "--columns", "id,tok/s,loss", env={"COLUMNS": "100"}).stdout
    header = out.splitlines()[1].split()
    assert header == ["id", "tok/s", "loss"]
    assert "25.6k" in out  # the workload logs 25,600 tokens/s
    # compare at 100 and 80 columns: every metric name and verdict whole, in order (never cut to `inconclusi…`,
    # never a word folded, nothing past the edge): too narrow for the whole table, a block per metric
    metrics = json.loads(ledger_cli("compare", LONG, "short", "--json").stdout)["metrics"]
    for width in (100, 80):
        text = ledger_cli("compare", LONG, "short", env={"COLUMNS": str(width)}).stdout
        assert "…" not in text
        lines = text.split(" metrics ", 1)[1].split("\n[1] ", 1)[0].splitlines()
        assert max(len(line) for line in lines) <= width
        at = 0
        for m in metrics:
            pattern = rf"^[* ] {re.escape(m['name'])} +{re.escape(m['verdict'])}( \[\d+\])?$"
            at = next(i for i in range(at, len(lines)) if re.match(pattern, lines[i]))  # raises when cut or missing
    shown = ledger_cli("show", "short", env={"COLUMNS": "100"}).stdout
    assert "25.6k tok/s" in shown and re.search(r"\d(\.\d+)? [KMG]iB", shown)
    # no raw byte counts but the exact one in parentheses (the files' 16-hex sha256 prefixes left out first: one
    # made of digits alone, about 1 file in 2,000, is a digest, not a count)
    assert not re.search(r"\b\d{7,}\b(?! B\))", re.sub(r"\b[0-9a-f]{16}\b", "", shown))


@pytest.mark.parametrize(("args", "message"), [
    (["--columns", "id,bogus"], "unknown column(s) 'bogus'"),
    (["--sort", "bogus"], "cannot sort by 'bogus'"),
])
def test_bad_columns_and_sort_are_one_line(ledger_cli, args, message) -> None:
    proc = ledger_cli("ls", *args)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and message in proc.stderr
