"""Generate the JSON Schema files beside the models: ``python -m schemas.generate [--check]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa

from schemas.documented import model
from schemas.tables import TABLES

OUT = Path(__file__).parent / "json"


def _table_schema(name: str, schema: pa.Schema) -> dict[str, object]:
    return {
        "title": name,
        "columns": [
            {
                "name": f.name,
                "type": str(f.type),
                "nullable": f.nullable,
                "doc": (f.metadata or {}).get(b"doc", b"").decode(),
            }
            for f in schema
        ],
    }


def render() -> dict[str, str]:
    """File name -> text of every generated schema file."""
    files = {"receipt.schema.json": model("Receipt").model_json_schema(mode="serialization")}
    files["tables.schema.json"] = {name: _table_schema(name, s) for name, s in TABLES.items()}
    return {name: json.dumps(body, indent=2, sort_keys=True) + "\n" for name, body in files.items()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        path = OUT / name
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m schemas.generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
