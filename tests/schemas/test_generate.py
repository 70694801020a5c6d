"""The JSON Schema files beside the models must match what the models generate."""

from __future__ import annotations

import json

from schemas import generate


def test_generated_json_schema_files_have_not_drifted() -> None:
    for name, text in generate.render().items():
        path = generate.OUT / name
        assert path.exists(), f"{path} missing: run `python -m schemas.generate`"
        assert path.read_text() == text, f"{path} drifted from the models: run `python -m schemas.generate`"


def test_receipt_schema_carries_factors() -> None:
    schema = json.loads((generate.OUT / "receipt.schema.json").read_text())
    capacity = schema["$defs"]["Router"]["properties"]["capacity_factor"]
    assert capacity["factor"] == "router" and capacity["description"]


def test_check_mode_reports_drift(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(generate, "OUT", tmp_path)
    assert generate.main(["--check"]) == 1
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
