"""The software probe: this interpreter's packages, and the same model from the SDK's runtime facts."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import child_env

from ledger.record.capture.software import capture_software, normalise, software_from_runtime


def test_capture_lists_every_distribution_normalised_sorted_and_digested() -> None:
    sw = capture_software()
    assert sw.source == "wrapper" and sw.error is None
    assert sw.python == platform.python_version()
    assert sw.python_executable == sys.executable
    names = [p.name for p in sw.packages]
    assert names == sorted(names) and len(names) == len(set(names))
    assert all(name == normalise(name) for name in names)
    installed = {normalise(d.metadata["Name"]) for d in metadata.distributions()}
    assert set(names) == installed
    versions = {p.name: p.version for p in sw.packages}
    assert versions["pydantic"] == metadata.version("pydantic")
    lines = "".join(f"{p.name}=={p.version}\n" for p in sw.packages)
    assert sw.packages_digest == hashlib.sha256(lines.encode()).hexdigest()
    assert sw.torch == metadata.version("torch")
    assert sw.nvidia == {n: v for n, v in versions.items() if n.startswith("nvidia-")}


def test_capture_names_nvidia_ml_py_when_installed() -> None:
    try:
        installed = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        pytest.skip("nvidia-ml-py is not installed (the gpu extra; `make test` installs it)")
    assert capture_software().nvidia.get("nvidia-ml-py") == installed


def test_capture_imports_no_ml_library() -> None:
    code = ("import sys; from ledger.record.capture.software import capture_software; sw = capture_software(); "
            "assert sw.torch; print(sorted(m for m in ('torch', 'transformer_engine', 'megatron') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=child_env()).stdout
    assert out.strip() == "[]"


def test_normalise() -> None:
    assert normalise("Transformer_Engine") == "transformer-engine"
    assert normalise("zope.interface") == "zope-interface"
    assert normalise("a__b--c..d") == "a-b-c-d"


def test_runtime_facts_of_the_same_interpreter_give_the_same_digest() -> None:
    """The SDK's runtime.json, written by a real process, lists the same environment as the wrapper."""
    code = "import json; from ledger.sdk import runtime_facts; print(json.dumps(runtime_facts()))"
    facts = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                      text=True, env=child_env()).stdout)
    sw = software_from_runtime(facts)
    wrapper = capture_software()
    assert sw.source == "process" and sw.error is None
    assert sw.packages_digest == wrapper.packages_digest
    assert sw.packages == wrapper.packages
    assert sw.torch == facts["torch"] and sw.python == platform.python_version()


def test_runtime_facts_by_hand() -> None:
    facts = {
        "host": "n1", "python": "3.11.9", "executable": "/usr/bin/python",
        "packages": [{"name": "Megatron_Core", "version": "0.12.0"}, {"name": "torch", "version": "2.7.0"},
                     {"name": "nvidia-nccl-cu12", "version": "2.26.2"},
                     {"name": "transformer_engine", "version": "2.3.0"}],
        "transformer_engine": "2.3.0", "megatron_core": None, "torch": "2.7.0a0+nv25.04",
        "errors": {"nccl": "RuntimeError: no NCCL"},
    }
    sw = software_from_runtime(facts)
    names = [p.name for p in sw.packages]
    assert names == ["megatron-core", "nvidia-nccl-cu12", "torch", "transformer-engine"]
    assert sw.torch == "2.7.0a0+nv25.04"  # what the process imported wins over the package list
    assert sw.megatron_core == "0.12.0" and sw.transformer_engine == "2.3.0"
    assert sw.nvidia == {"nvidia-nccl-cu12": "2.26.2"}
    assert sw.error == "nccl: RuntimeError: no NCCL"
    assert sw.python_executable == "/usr/bin/python"


def test_runtime_facts_without_torch_are_not_an_error() -> None:
    missing = {"torch": "ModuleNotFoundError: No module named 'torch'"}
    sw = software_from_runtime({"packages": [], "errors": missing})
    assert sw.error is None and sw.torch is None and sw.packages == ()


def test_malformed_runtime_facts_are_recorded_not_raised() -> None:
    sw = software_from_runtime({"packages": [{"name": "x"}]})
    assert sw.source == "process" and sw.error is not None and "malformed" in sw.error
