"""Megatron-LM CI golden values -> an imported receipt.

A golden-values file (``tests/functional_tests/test_cases/<model>/<test>/golden_values_<env>_<platform>.json``)
maps each metric to ``{"start_step", "end_step", "step_interval", "values"}``, where ``values`` is either
``{"<step>": value}`` or a list (step = start_step + i x step_interval); values may be ``"nan"``. Metrics:
``lm loss`` -> loss, ``iteration-time`` (seconds) -> step_time_s, ``mem-max-allocated-bytes`` ->
memory_bytes; every other metric (``num-zeros``, ``mem-allocated-bytes``...) -> ``extra`` under its name.

The test's ``model_config.yaml`` (``--config``) gives the workload (its ``MODEL_ARGS`` are the complete launch
flags: parallelism, batch, model...) and ``ENV_VARS`` the environment; its sequence length x global batch gives
the tokens of each step, hence ``tokens``, ``tokens_per_s`` (tokens per step / iteration-time) and
``global_batch``, so that two golden receipts have throughput to compare. The platform in the file name
(Megatron-LM's convention, e.g. ``dgx_h100``) gives ``hardware.system`` and the GPU model (``H100``); nothing else
about the machine is known.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ledger.ingest.common import Evidence, Issues, WrongKind, check_file, describe, sha256_of, table
from ledger.ingest.megatron_args import YamlError, args_from_mapping, load_yaml, workload_from_args
from schemas import Hardware, Stack, Workload

COLUMNS = {"lm loss": ("loss", float), "iteration-time": ("step_time_s", float),
           "mem-max-allocated-bytes": ("memory_bytes", int)}
_PLATFORM = re.compile(r"golden_values_(?:(?P<env>dev|lts)_)?(?P<platform>[a-z0-9]+_(?P<gpu>[a-z0-9]+))\.json$", re.I)


def _value(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def read_values(path: Path, issues: Issues) -> dict[str, dict[int, float]]:
    """metric -> {step: value} of a golden-values file."""
    check_file(path)
    try:
        data = json.loads(path.read_text(errors="replace"))
    except ValueError as exc:
        raise WrongKind(f"{path}: expected Megatron-LM golden values (JSON: metric -> start_step, end_step, "
                        f"step_interval, values), found {describe(path)}") from exc
    if not isinstance(data, dict) or not data or not any(
            isinstance(v, dict) and "values" in v for v in data.values()):
        raise WrongKind(f"{path}: expected Megatron-LM golden values (JSON: metric -> start_step, end_step, "
                        f"step_interval, values), found {describe(path)}")
    out: dict[str, dict[int, float]] = {}
    for metric, spec in data.items():
        if not isinstance(spec, dict) or "values" not in spec:
            issues.note(f"{metric!r} is not a golden-values series: skipped")
            continue
        values = spec["values"]
        series: dict[int, float] = {}
        if isinstance(values, dict):
            items = list(values.items())
        elif isinstance(values, list):
            start, interval = spec.get("start_step", 0), spec.get("step_interval", 1)
            if not isinstance(start, int) or not isinstance(interval, int) or interval <= 0:
                issues.note(f"{metric!r}: a list of values needs integer start_step and step_interval: skipped")
                continue
            items = [(start + i * interval, v) for i, v in enumerate(values)]
        else:
            issues.note(f"{metric!r}: values are neither an object nor a list: skipped")
            continue
        for step, v in items:
            number = _value(v)
            try:
                step_no = int(step)
            except (TypeError, ValueError):
                issues.note(f"{metric!r}: step {step!r} is not an integer: skipped")
                continue
            if number is None:
                issues.note(f"{metric!r} at step {step_no}: {v!r} is not a number: skipped")
                continue
            series[step_no] = number
        out[str(metric)] = series
    return out


def read_config(path: Path, issues: Issues) -> tuple[Workload, dict[str, str]]:
    """Workload and environment of a model_config.yaml."""
    args, env = read_config_args(path)
    return workload_from_args(args, complete=True), env


def read_config_args(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Launch arguments (argparse destinations) and environment of a model_config.yaml."""
    check_file(path)
    try:
        data = load_yaml(path.read_text(errors="replace"), str(path))
    except YamlError as exc:
        raise WrongKind(f"{path}: expected a Megatron-LM model_config.yaml, found YAML it cannot read ({exc})") \
            from exc
    model_args = data.get("MODEL_ARGS")
    if not isinstance(model_args, dict):
        raise WrongKind(f"{path}: expected a Megatron-LM model_config.yaml with MODEL_ARGS, found {describe(path)}")
    env = data.get("ENV_VARS") or {}
    env = {str(k): "" if v is None else str(v) for k, v in env.items()} if isinstance(env, dict) else {}
    return args_from_mapping(model_args), env


def _tokens(cols: dict[str, list[Any]], workload: Workload | None, args: dict[str, Any], issues: Issues) -> None:
    """tokens (seen after each step), tokens_per_s and global_batch from the config's sequence length x global
    batch: golden values carry no throughput of their own, and without these no headline metric compares two
    golden receipts. Not with a batch-size ramp-up (the batch changes from step to step), nor without a config."""
    if workload is None:
        issues.note("no --config (model_config.yaml): tokens and throughput unknown")
        return
    per_step, gbs = workload.batch.tokens_per_step, workload.batch.global_batch
    if args.get("rampup_batch_size") not in (None, "", False):
        issues.note("the config ramps the batch size up: tokens per step vary, tokens and throughput not computed")
        return
    if not per_step:
        issues.note("the config gives no sequence length x global batch: tokens and throughput unknown")
        return
    steps, times = cols["step"], cols["step_time_s"]
    cols["tokens"] = [step * per_step if step >= 0 else None for step in steps]
    cols["tokens_per_s"] = [per_step / t if t is not None and math.isfinite(t) and t > 0 else None for t in times]
    cols["global_batch"] = [gbs] * len(steps)
    if workload.parallelism.world_size is None:
        issues.note("the config does not give the number of GPUs: per-device throughput is the whole run's")


def evidence(path: Path, config: Path | None = None) -> Evidence:
    """Golden values (and their model_config.yaml) as :class:`Evidence`."""
    issues = Issues(path.name)
    series = read_values(path, issues)
    steps = sorted({s for values in series.values() for s in values})
    cols: dict[str, list[Any]] = {"rank": [0] * len(steps), "step": steps, "loss": [], "step_time_s": [],
                                  "memory_bytes": [], "extra": []}
    for step in steps:
        extra = []
        for metric, values in series.items():
            if step not in values:
                continue
            column = COLUMNS.get(metric)
            if column is None:
                extra.append((metric, values[step]))
        cols["extra"].append(extra or None)
        for metric, (name, kind) in COLUMNS.items():
            v = series.get(metric, {}).get(step)
            if kind is int:
                cols[name].append(int(v) if v is not None and math.isfinite(v) else None)
            else:
                cols[name].append(v)
    args, env = read_config_args(config) if config else ({}, {})
    workload = workload_from_args(args, complete=True) if config else None
    _tokens(cols, workload, args, issues)
    m = _PLATFORM.search(path.name)
    hardware = Hardware(system=m.group("platform"), gpu_model=m.group("gpu").upper()) if m else Hardware()
    if not m:
        issues.note("the file name does not follow golden_values_<env>_<platform>.json: hardware unknown")
    return Evidence(kind="megatron-golden", path=path, sha256=sha256_of(path), tables={"steps": table("steps", cols)},
                    workload=workload, stack=Stack(hardware=hardware, environment=env), issues=issues)


__all__ = ["evidence", "read_config", "read_config_args", "read_values"]
