"""The pipeline's last stage: compare two recorded runs and export the loss curves of all runs.

Writes OUT/compare.json (`ledger compare --json`), OUT/metrics.json (its metrics as flat keys such as
``tokens_per_s_per_device.a``: the DVC metric), OUT/compare.md (`--markdown`) and OUT/loss.csv (run, tokens,
loss of every run: a DVC plot, one line per run), then prints the markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

LEDGER_DIR: str | None = None


def ledger(*args: str) -> str:
    where = ["--ledger", LEDGER_DIR] if LEDGER_DIR else []
    proc = subprocess.run(["ledger", *where, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ledger {' '.join(args[:2])} failed: {proc.stderr.strip()}")
    return proc.stdout


def slug(name: str) -> str:
    """A metric name as a DVC-friendly key: 'tokens/s per device' -> 'tokens_per_s_per_device'."""
    name = name.replace("/", " per ").replace("@", " at ").replace("%", " pct ")
    return "_".join(re.findall(r"[a-z0-9]+", name.lower()))


def flat_metrics(report: dict[str, object]) -> dict[str, float]:
    """Every metric with a value as ``<slug>.a``, ``<slug>.b`` and ``<slug>.ratio`` (B/A)."""
    out: dict[str, float] = {}
    for m in report["metrics"]:  # type: ignore[attr-defined]
        key = slug(m["name"])
        for side in ("a", "b", "ratio"):
            if isinstance(m.get(side), int | float) and not isinstance(m.get(side), bool):
                out[f"{key}.{side}"] = m[side]
    return out


def main() -> None:
    global LEDGER_DIR
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=Path, required=True, help="directory of <run>.id files")
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ledger", help="ledger directory the runs were recorded into")
    args = parser.parse_args()
    LEDGER_DIR = args.ledger
    ids = {p.stem: p.read_text().strip() for p in sorted(args.runs.glob("*.id"))}
    for name, rid in ids.items():
        if not re.fullmatch(r"[0-9a-f]{64}", rid):
            sys.exit(f"{args.runs / name}.id does not hold a receipt id")
    for name in (args.a, args.b):
        if name not in ids:
            sys.exit(f"no recorded run named {name!r} in {args.runs} (have: {', '.join(ids)})")
    args.out.mkdir(parents=True, exist_ok=True)
    report = ledger("compare", ids[args.a], ids[args.b], "--json")
    (args.out / "compare.json").write_text(report)
    (args.out / "metrics.json").write_text(json.dumps(flat_metrics(json.loads(report)), indent=2) + "\n")
    markdown = ledger("compare", ids[args.a], ids[args.b], "--markdown")
    (args.out / "compare.md").write_text(markdown)
    quoted = ", ".join(f"'{i}'" for i in ids.values())
    sql = ("SELECT r.name AS run, s.tokens, s.loss FROM steps s JOIN receipts r ON r.id = s.receipt_id "
           f"WHERE r.id IN ({quoted}) ORDER BY r.name, s.step")
    rows = json.loads(ledger("query", "--json", sql))
    with open(args.out / "loss.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run", "tokens", "loss"])
        writer.writeheader()
        writer.writerows(rows)
    print(markdown)


if __name__ == "__main__":
    main()
