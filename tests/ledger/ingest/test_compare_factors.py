"""The issue's compare checks between imported receipts, on the factor diff itself (schemas.flatten and
factor_of), so they do not depend on the `ledger compare` command."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.ingest.api import ingest_golden, ingest_mlperf
from ledger.store.receipts import Ledger
from schemas import Factor, Receipt, factor_of, flatten

NVIDIA = "llama2_70b_lora__NVIDIA__eos_n8_ngc24.04_nemo__result_{}.txt"
DELL = "llama2_70b_lora__Dell__XE9680x8H100-SXM-80GB__result_0.txt"
GOLDEN = "8experts2parallel_dist_optimizer__golden_values_dev_dgx_{}.json"
CONFIG = "8experts2parallel_dist_optimizer__model_config.yaml"


def changed(a: Receipt, b: Receipt, prefix: str = "") -> dict[Factor, list[str]]:
    """Causal factors whose fields differ between two receipts, with the differing paths."""
    fa, fb = flatten(a), flatten(b)
    out: dict[Factor, list[str]] = {}
    for path in sorted(set(fa) | set(fb)):
        if not path.startswith(prefix) or fa.get(path) == fb.get(path):
            continue
        factor = factor_of(path)
        if factor is not Factor.RECORD:
            out.setdefault(factor, []).append(path)
    return out


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "receipts")


def test_nvidia_run_0_vs_run_1_no_stack_factor_changed(ledger: Ledger, mlperf_dir: Path) -> None:
    rules = [mlperf_dir / "rules"]
    r0 = ingest_mlperf(ledger, mlperf_dir / NVIDIA.format(0), rules=rules).receipt
    r1 = ingest_mlperf(ledger, mlperf_dir / NVIDIA.format(1), rules=rules).receipt
    assert r0.status == r1.status == "imported"
    assert changed(r0, r1, "stack.") == {}
    assert changed(r0, r1) == {Factor.SEED: ["workload.seed"]}  # replicates: only the seed differs


def test_nvidia_vs_dell_hardware_software_scale_confounded(ledger: Ledger, mlperf_dir: Path) -> None:
    rules = [mlperf_dir / "rules"]
    nvidia = ingest_mlperf(ledger, mlperf_dir / NVIDIA.format(0), rules=rules).receipt
    dell = ingest_mlperf(ledger, mlperf_dir / DELL, mlperf_dir / "systems" / "Dell__XE9680x8H100-SXM-80GB.json",
                         rules=rules).receipt
    diff = changed(nvidia, dell, "stack.")
    assert {Factor.HARDWARE, Factor.SOFTWARE, Factor.SCALE} <= set(diff)
    assert len(diff) > 1  # several factors changed at once: confounded
    assert diff[Factor.SCALE] == ["stack.launcher.nodes"]
    assert "stack.hardware.cpu_model" in diff[Factor.HARDWARE] and "stack.software.framework" in diff[Factor.SOFTWARE]
    assert nvidia.stack.hardware.gpu_model == dell.stack.hardware.gpu_model  # same accelerator


def test_golden_a100_vs_h100_hardware_changed(ledger: Ledger, golden_dir: Path) -> None:
    a100 = ingest_golden(ledger, golden_dir / GOLDEN.format("a100"), golden_dir / CONFIG).receipt
    h100 = ingest_golden(ledger, golden_dir / GOLDEN.format("h100"), golden_dir / CONFIG).receipt
    assert changed(a100, h100) == {Factor.HARDWARE: ["stack.hardware.gpu_model"]}


def _compare(ledger: Ledger, a: Receipt, b: Receipt) -> dict[str, object]:
    """What `ledger compare A B --json` says about two imported receipts."""
    from ledger.analyses.compare import Ref, compare, to_json
    from ledger.store import index

    with index.reader(ledger) as con:
        return to_json(compare(con, Ref(ref=a.id), Ref(ref=b.id)))


def _factors(result: dict[str, object]) -> set[str]:
    return {c["factor"] for c in result["changed_factors"]}  # type: ignore[index, union-attr]


def test_ledger_compare_on_imported_mlperf_and_golden(ledger: Ledger, mlperf_dir: Path, golden_dir: Path) -> None:
    rules = [mlperf_dir / "rules"]
    r0 = ingest_mlperf(ledger, mlperf_dir / NVIDIA.format(0), rules=rules).receipt
    r1 = ingest_mlperf(ledger, mlperf_dir / NVIDIA.format(1), rules=rules).receipt
    dell = ingest_mlperf(ledger, mlperf_dir / DELL, mlperf_dir / "systems" / "Dell__XE9680x8H100-SXM-80GB.json",
                         rules=rules).receipt
    same = _compare(ledger, r0, r1)
    assert same["comparable"] is True and _factors(same) == {"seed"}  # no stack factor changed
    vendors = _compare(ledger, r0, dell)
    assert {"hardware", "software", "scale"} <= _factors(vendors)
    confounded = {f for c in vendors["confounded"] for f in c["factors"]}  # type: ignore[union-attr, index]
    assert {"hardware", "software", "scale"} <= confounded
    a100 = ingest_golden(ledger, golden_dir / GOLDEN.format("a100"), golden_dir / CONFIG).receipt
    h100 = ingest_golden(ledger, golden_dir / GOLDEN.format("h100"), golden_dir / CONFIG).receipt
    gpus = _compare(ledger, a100, h100)
    assert _factors(gpus) == {"hardware"}


def test_imported_runs_that_differ_in_hardware_and_parallelism_are_confounded(ledger: Ledger, golden_dir: Path,
                                                                             tmp_path: Path) -> None:
    # the same golden values' model config with another tensor-parallel size, on another GPU: two causal
    # factors changed at once and no receipt splits them, whatever metrics the receipts hold
    config = tmp_path / CONFIG
    config.write_text((golden_dir / CONFIG).read_text().replace("--tensor-model-parallel-size: 2",
                                                                "--tensor-model-parallel-size: 4"))
    a100 = ingest_golden(ledger, golden_dir / GOLDEN.format("a100"), golden_dir / CONFIG).receipt
    h100 = ingest_golden(ledger, golden_dir / GOLDEN.format("h100"), config).receipt
    result = _compare(ledger, a100, h100)
    assert _factors(result) == {"hardware", "parallelism"}
    assert [c["factors"] for c in result["confounded"]] == [["hardware", "parallelism"]]  # type: ignore[index]
    assert result["confounded"][0]["message"] == "confounded: hardware, parallelism changed together"  # type: ignore[index]
    assert {m["adds"] for m in result["missing_ablations"]} == {"hardware", "parallelism"}  # type: ignore[union-attr]
