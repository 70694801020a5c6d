"""The pipeline's last stage: compare two recorded runs and export the loss curves of all runs.

Writes OUT/compare.json (`ledger compare --json`), OUT/metrics.json (its metrics as flat keys such as
``tokens_per_s_per_device.a``: the DVC metric), OUT/compare.md (`--markdown`) and OUT/loss.csv (run, tokens,
loss of every run: a DVC plot, one line per run) and, once, OUT/plots.html (the page `dvc plots show` fills:
Vega bundled, so it renders offline), then says so in one line (`make demo` prints the comparison once, as
`ledger compare`'s terminal text). One process and one comparison
for all of it: the JSON and the Markdown are `ledger compare`'s own renderings of the same result (the
command's default options; its check that files and index agree runs first).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

LEDGER_DIR: str | None = None


def compare_both(a: str, b: str) -> tuple[str, str]:
    """What `ledger compare A B --json` and `ledger compare A B --markdown` print, from one comparison."""
    import contextlib
    import io

    from ledger.analyses.compare import CompareOptions, Ref, compare, to_json
    from ledger.cli.kit import echo_json
    from ledger.report.markdown import render
    from ledger.store import index
    from ledger.store.agreement import check_involved
    from ledger.store.layout import ledger_dir
    from ledger.store.receipts import Ledger

    store = Ledger(ledger_dir(LEDGER_DIR))
    with index.reader(store) as con:
        result = compare(con, Ref(ref=a), Ref(ref=b), CompareOptions())
        check_involved(store, con, [r.id for r in result.runs_a + result.runs_b])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        echo_json(to_json(result))
    return printed.getvalue(), render(result)


def query(sql: str) -> list[dict[str, object]]:
    """What `ledger query --json SQL` prints, parsed."""
    import ledger
    from ledger.jsonsafe import json_safe

    rows: list[dict[str, object]] = json_safe(ledger.open(LEDGER_DIR).query(sql).to_pylist())
    return rows


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


PLOTS_PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <title>DVC Plot</title>
    @SCRIPTS@
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""
"""The page `dvc plots show` writes (.dvc/config's plots.html_template points here): DVC's own page with
Vega, Vega-Lite and Vega-Embed inline instead of its CDN script tags (no {scripts} placeholder)."""
VEGA_LITE = "5.21"
"""The Vega-Lite of DVC's templates and of scripts/plots/runs.json (their $schema is v5)."""


def plots_page(path: Path) -> None:
    """Write DVC's HTML template with the Vega libraries bundled by vl-convert-python (the `dvc` extra), so
    the page `dvc plots show` writes renders offline; once (the bundle takes seconds to build). Without
    vl-convert the page loads the libraries from DVC's CDN and says so."""
    if path.exists():
        return
    try:
        import vl_convert
    except ImportError:
        from dvc_render.vega import VegaRenderer

        scripts = ("<!-- vl-convert-python is not installed (pip install 'stackreceipt[dvc]'): Vega comes from "
                   f"DVC's CDN -->{VegaRenderer.SCRIPTS}")
    else:
        bundle = re.sub(r"</(script)", r"<\\/\1", vl_convert.javascript_bundle(vl_version=VEGA_LITE), flags=re.I)
        scripts = (f"<script>/* Vega {vl_convert.get_vega_version()}, Vega-Lite {VEGA_LITE}, Vega-Embed "
                   f"{vl_convert.get_vega_embed_version()}, bundled by vl-convert-python: no network needed */\n"
                   f"{bundle}\n</script>")
    path.write_text(PLOTS_PAGE.replace("@SCRIPTS@", scripts, 1))


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
    try:
        report, markdown = compare_both(ids[args.a], ids[args.b])
    except Exception as exc:  # the ledger's one-line errors, as the command would print them
        sys.exit(f"ledger compare failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    (args.out / "compare.json").write_text(report)
    (args.out / "metrics.json").write_text(json.dumps(flat_metrics(json.loads(report)), indent=2) + "\n")
    (args.out / "compare.md").write_text(markdown)
    quoted = ", ".join(f"'{i}'" for i in ids.values())
    sql = ("SELECT r.name AS run, s.tokens, s.loss FROM steps s JOIN receipts r ON r.id = s.receipt_id "
           f"WHERE r.id IN ({quoted}) ORDER BY r.name, s.step")
    rows = query(sql)
    with open(args.out / "loss.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run", "tokens", "loss"])
        writer.writeheader()
        writer.writerows(rows)
    plots_page(args.out / "plots.html")
    # one line: the comparison itself is printed once, by `make demo` (`ledger compare`, terminal text), not here
    print(f"compared {args.a} and {args.b}: {args.out}/compare.md, compare.json, metrics.json, loss.csv")


if __name__ == "__main__":
    main()
