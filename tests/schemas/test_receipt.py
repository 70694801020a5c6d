from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas import Factor, Receipt, Workload, content_id, factor_of, flatten, is_sealed, leaves, seal
from schemas.documented import model as documented_model
from schemas.receipt import Model


def _all_models(model: type[Model] = Receipt) -> set[type[Model]]:
    out = {model}
    for info in model.model_fields.values():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, Model):
            out |= _all_models(ann)
    return out


def test_every_leaf_has_a_factor_and_a_docstring() -> None:
    paths = dict(leaves())
    assert len(paths) > 100
    for model in _all_models():
        assert model.model_config.get("extra") == "forbid" and model.model_config.get("frozen")
        documented = documented_model(model.__name__)
        assert set(documented.model_fields) == set(model.model_fields)
        for name, info in documented.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"


def _without_field_descriptions(schema: object) -> object:
    """A JSON Schema less the description of each property (a model's own description stays)."""
    if isinstance(schema, list):
        return [_without_field_descriptions(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _without_field_descriptions(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: {k: v for k, v in prop.items() if k != "description"}
                             for name, prop in out["properties"].items()}
    return out


def test_runtime_models_are_the_documented_ones_less_field_descriptions() -> None:
    runtime = Receipt.model_json_schema(mode="serialization")
    documented = documented_model("Receipt").model_json_schema(mode="serialization")
    assert documented != runtime  # the documented copy has the field docstrings, the runtime one not
    assert _without_field_descriptions(documented) == runtime
    r = seal(Receipt(run_uuid="u", status="failed", name="x", workload=Workload(seed=3)))
    data = r.model_dump(mode="json")
    assert documented_model("Receipt").model_validate(data).model_dump(mode="json") == data
    with pytest.raises(ValidationError, match="extra"):
        documented_model("Workload").model_validate({"seed": 1, "sneaky": True})


def test_task_fields_are_the_frozen_task() -> None:
    for path in ("workload.task.dataset_fingerprint", "workload.task.tokenizer", "workload.task.objective",
                 "workload.model.num_experts", "workload.model.top_k", "workload.task.quality_gates"):
        assert factor_of(path) is Factor.TASK
    assert factor_of("workload.router.capacity_factor") is Factor.ROUTER
    assert factor_of("workload.precision.compute") is Factor.PRECISION
    assert factor_of("stack.hardware.gpu_model") is Factor.HARDWARE
    with pytest.raises(KeyError):
        factor_of("workload.router")
    with pytest.raises(KeyError):
        factor_of("workload.nope")


def test_extra_fields_are_refused_and_models_are_frozen() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Workload.model_validate({"seed": 1, "sneaky": True})
    r = Receipt(run_uuid="u", status="succeeded")
    with pytest.raises(ValidationError):
        r.status = "failed"  # type: ignore[misc]


def test_id_is_a_stable_content_digest() -> None:
    a = seal(Receipt(run_uuid="u", status="succeeded", name="x", tags={"b": "2", "a": "1"}))
    b = seal(Receipt(run_uuid="u", status="succeeded", name="x", tags={"a": "1", "b": "2"}))
    assert a.id == b.id and len(a.id) == 64 and is_sealed(a)
    c = seal(a.model_copy(update={"name": "y"}))
    assert c.id != a.id
    assert content_id(a) == a.id  # sealing does not change the digest
    assert not is_sealed(a.model_copy(update={"name": "tampered"}))


def test_flatten_round_trips_every_leaf() -> None:
    r = Receipt(run_uuid="u", status="failed", workload=Workload(seed=3))
    flat = flatten(r)
    assert set(flat) == {p for p, _ in leaves()}
    assert flat["workload.seed"] == 3 and flat["status"] == "failed"
