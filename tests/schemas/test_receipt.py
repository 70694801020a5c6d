from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas import Factor, Receipt, Workload, content_id, factor_of, flatten, is_sealed, leaves, seal
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
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"


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
