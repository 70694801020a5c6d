"""The planted-bug check of `make mutation` stays true to the code: every bug's text to replace is still in
its module exactly once, and its targeted tests exist (the check itself, slow, is `make mutation`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    path = ROOT / "scripts" / "mutation" / f"{name}.py"
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"_mutation_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def test_every_plant_still_applies_to_the_tree() -> None:
    plants = load("plants")
    assert len(plants.PLANTS) == 13 and len({p.name for p in plants.PLANTS}) == 13
    for plant in plants.PLANTS:
        assert plants.check_anchor(plant, ROOT) is None, plant.name
        assert plant.old != plant.new
        assert all((ROOT / t.split("::")[0]).is_file() for t in plant.tests), plant.name


def test_every_mutated_module_and_its_tests_exist() -> None:
    run = load("run")
    for module in run.MODULES:
        assert all((ROOT / p).is_file() for p in module.paths), module.name
        assert all((ROOT / t.split("::")[0]).is_file() for t in module.tests), module.name
        for node in (t for t in module.tests if "::" in t):  # a node id names a test of its file
            path, name = node.split("::")
            assert f"\ndef {name}(" in (ROOT / path).read_text(), node
    assert run.pattern("0516273849") == [] and run.pattern("05", "1") == ["*__mutmut_*[051]"]
    # the first sample is the module's K tenths, the second one digit more that no test was aimed at
    assert run.digits(1, 1) == ("0", "5") and run.digits(3, 1) == ("051", "6")
    assert run.digits(3, 0) == ("051", "") and run.digits(10, 1) == ("0516273849", "")
    assert run.digits(5, 5) == ("05162", "73849") and run.digits(8, 5) == ("05162738", "49")
    statuses = {"m.x_f__mutmut_10": "killed", "m.x_f__mutmut_20": "survived", "m.x_f__mutmut_5": "timeout",
                "m.x_f__mutmut_15": "no tests", "m.x_f__mutmut_30": "not checked", "m.x_f__mutmut_40": "segfault"}
    one, two = run.figure(statuses, "0"), run.figure(statuses, "5")
    assert (one["killed"], one["mutants"], one["value"], one["met"]) == (2, 3, 0.6667, False)
    assert one["survivors"] == ["m.x_f__mutmut_20"]
    assert (two["killed"], two["mutants"], two["no_tests"], two["timeouts"]) == (1, 2, 1, 1)
    assert one["timeouts"] == 0
