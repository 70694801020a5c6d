"""The pipeline's last stage: compare two recorded runs and export the loss curves of all runs.

Writes OUT/compare.json (`ledger compare --json`, a DVC metric), OUT/compare.md (`--markdown`) and
OUT/loss.csv (run, tokens, loss of every run: a DVC plot), then prints the markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path


def ledger(*args: str) -> str:
    proc = subprocess.run(["ledger", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ledger {' '.join(args[:2])} failed: {proc.stderr.strip()}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=Path, required=True, help="directory of <run>.id files")
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ids = {p.stem: p.read_text().strip() for p in sorted(args.runs.glob("*.id"))}
    for name, rid in ids.items():
        if not re.fullmatch(r"[0-9a-f]{64}", rid):
            sys.exit(f"{args.runs / name}.id does not hold a receipt id")
    for name in (args.a, args.b):
        if name not in ids:
            sys.exit(f"no recorded run named {name!r} in {args.runs} (have: {', '.join(ids)})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.json").write_text(ledger("compare", ids[args.a], ids[args.b], "--json"))
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
