"""The GPU proof (issue 21, and issue 20's GPU sweep) as one command: every step under `ledger record`, each with
its own timeout, within one time budget; receipts, a summary (JSON and Markdown) and a log in an output folder.

    scripts/gpu_proof.sh OUT [--budget-s 300]       on the GPU machine (installs carried wheels first)
    scripts/gpu_proof.sh OUT --dry-run              the same steps on CPU at toy size (CI runs this)

Steps, in order of priority (a step that no longer fits the budget is skipped, with the reason):

1. ``env``        what the machine is: torch, CUDA device, NVML, Transformer Engine, Megatron-Core, whether
                  torch._scaled_mm (fp8) and torch._grouped_mm (grouped GEMM) work here.
2. ``precision``  `runners.moe` (``small`` on a GPU, ``tiny`` in a dry run) in fp32, bf16 and fp8 (fp8_backend
                  torch: torch._scaled_mm), grouped GEMM on where the precision allows it.
3. ``dense``      the dense baseline at equal active parameters (bf16); MoE / dense tokens/s (target >= 0.8).
4. ``mfu``        MFU of each precision run against the peak of the one hardware table (ledger.mfu).
5. ``telemetry``  which NVML readings the receipts hold (power, energy counter, memory, clocks, utilisation,
                  temperature, ECC), the sampling interval, and how energy was obtained (counter or integral).
6. ``gate``       `ledger gate` of the bf16 run, with its measured energy.
7. ``compare``    replicates of bf16 and fp8 (other seeds), then `ledger compare` bf16 vs fp8: verdicts.
8. ``lattice``    bf16 and fp8 with grouped GEMM off: `ledger compare` of the 2x2 lattice's corners, and the
                  attribution of the gain to precision and kernels.
9. ``perf``       a sweep of geometries (experts, top-k, granularity, batch), `ledger fit perf`: held-out MAPE.
10. ``megatron``  Megatron-Core's MoELayer forward and backward on the device, recorded (skipped, with the
                  reason, where megatron-core does not import).

Nothing here invents a figure: a step that cannot run says so in the summary; every figure comes from a receipt
or from the ledger's own commands. The ledger itself is written to a scratch folder and packed into
``OUT/receipts.tar.gz`` (the device returns at most 8 files, two folders deep).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages (runners, ledger) come from here
    sys.path.insert(0, str(ROOT))


@dataclass
class StepResult:
    """One step of the proof as the summary reports it."""

    name: str
    status: str = "ok"
    """ok, failed, skipped or timeout."""
    reason: str = ""
    seconds: float = 0.0
    receipts: dict[str, str] = field(default_factory=dict)
    """Run name -> receipt id."""
    figures: dict[str, Any] = field(default_factory=dict)


class StepError(Exception):
    """A step that could not finish; the message is the summary's reason."""


class Skip(Exception):
    """A step that cannot run here; the message says why."""


@dataclass(frozen=True)
class Scale:
    """What differs between the GPU proof and its dry run."""

    config: str
    dense_config: str
    device: str
    sets: tuple[str, ...]
    replicates: int
    sweep: tuple[tuple[int, int, float, int], ...]
    """Extra (experts, top_k, granularity, batch) points of the perf sweep (the bf16 and dense runs are two more)."""
    run_timeout_s: float
    megatron_args: tuple[str, ...]


GPU = Scale(
    config="small", dense_config="small_dense", device="cuda",
    sets=("steps=50", "log_every=1", "eval_every=10", "data.train_sequences=2048", "checkpoint_every=0"),
    replicates=3,
    sweep=((8, 2, 2, 32), (32, 4, 8, 32), (64, 8, 16, 32), (16, 1, 2, 32), (32, 2, 4, 16), (8, 1, 1, 64)),
    run_timeout_s=120,
    megatron_args=("--device", "cuda", "--steps", "20", "--experts", "8", "--topk", "2", "--hidden", "512",
                   "--seq", "512", "--batch", "8"),
)
DRY = Scale(
    config="tiny", dense_config="tiny_dense", device="cpu",
    sets=("steps=4", "log_every=1", "eval_every=2", "data.train_sequences=64", "data.val_sequences=2"),
    replicates=2,
    sweep=((4, 2, 1, 16), (16, 4, 4, 16), (8, 1, 1, 8)),
    run_timeout_s=240,
    megatron_args=("--device", "cpu", "--steps", "2"),
)


class Proof:
    def __init__(self, out: Path, scale: Scale, budget_s: float, dry_run: bool) -> None:
        self.out = out
        self.scale = scale
        self.dry_run = dry_run
        self.deadline = time.monotonic() + budget_s
        self.work = Path(tempfile.mkdtemp(prefix="gpu-proof-"))
        self.ledger_dir = self.work / "receipts"
        self.ids: dict[str, str] = {}
        self.env_facts: dict[str, Any] = {}
        self.log = open(out / "proof.log", "a", encoding="utf-8")  # noqa: SIM115 (open for the whole proof)
        self.child_env = os.environ | {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        }

    # ------------------------------------------------------------------------------------------ plumbing
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def call(self, cmd: list[str], timeout: float, label: str = "") -> subprocess.CompletedProcess[str]:
        timeout = min(timeout, self.left())
        if timeout < 5:
            raise StepError("the time budget ran out")
        self.say("$ " + (label or " ".join(cmd)))
        with subprocess.Popen(cmd, cwd=ROOT, env=self.child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                # SIGTERM: `ledger record` forwards it to the launch and publishes the run as interrupted, so
                # no training process outlives its step holding the GPU; SIGKILL if it does not end in 30 s
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    out, err = proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    out, err = proc.communicate()
                self.log.write(out[-4000:] + err[-4000:] + "\n")
                raise TimeoutError(f"{label or ' '.join(cmd[:8])} ... ran past {timeout:.0f} s") from None
        self.log.write(out[-4000:] + err[-4000:] + "\n")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def ledger(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.call([sys.executable, "-m", "ledger.cli", "--ledger", str(self.ledger_dir), *args], timeout)

    def ledger_json(self, *args: str, timeout: float = 120) -> Any:
        proc = self.ledger(*args, "--json", timeout=timeout)
        if proc.returncode != 0:
            raise StepError(f"ledger {' '.join(args[:2])} exited {proc.returncode}: {_last_line(proc.stderr)}")
        return json.loads(proc.stdout)

    def record(self, name: str, sets: list[str], *, config: str | None = None, tags: tuple[str, ...] = (),
               command: list[str] | None = None) -> str:
        """Record one run under `ledger record`; its receipt id (StepError when it failed)."""
        id_file = self.work / f"{name}.id"
        cmd = command or [sys.executable, "-m", "runners.moe", "--config", config or self.scale.config,
                          *(a for s in (*self.scale.sets, f"device={self.scale.device}", *sets)
                            for a in ("--set", s))]
        tag_args = [a for t in ("proof=1", *tags) for a in ("--tag", t)]
        proc = self.ledger("record", "--name", name, *tag_args, "--telemetry-interval", "0.5", "--id-file",
                           str(id_file), "--", *cmd, timeout=self.scale.run_timeout_s)
        if proc.returncode != 0 or not id_file.exists():
            raise StepError(f"{name}: exit {proc.returncode}: {_last_line(proc.stderr)}")
        self.ids[name] = id_file.read_text().strip()
        return self.ids[name]

    def receipt(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.ledger_dir / self.ids[name] / "receipt.json").read_text())
        return data

    def need(self, *names: str) -> None:
        missing = [n for n in names if n not in self.ids]
        if missing:
            raise Skip(f"needs the runs {', '.join(missing)}, which an earlier step did not record")

    # --------------------------------------------------------------------------------------------- steps
    def step_env(self, res: StepResult) -> None:
        proc = self.call([sys.executable, str(Path(__file__).resolve()), "--probe"], timeout=120)
        if proc.returncode != 0:
            raise StepError(f"probe failed: {_last_line(proc.stderr)}")
        self.env_facts = json.loads(proc.stdout.strip().splitlines()[-1])
        res.figures = dict(self.env_facts)
        if not self.dry_run and self.env_facts["device"] == "cpu":
            raise StepError("no CUDA device visible: this is not a GPU proof (use --dry-run on a CPU)")

    def step_precision(self, res: StepResult) -> None:
        failures = []
        for precision, grouped in (("bf16", "on"), ("fp8", "on"), ("fp32", "auto")):
            name = f"moe-{precision}"
            sets = [f"precision={precision}", f"moe.grouped_gemm={grouped}"]
            if precision == "fp8":
                sets.append("fp8_backend=torch")
            tags = ("perf=sweep",) if precision == "bf16" else ()
            try:
                res.receipts[name] = self.record(name, sets, tags=tags)
            except StepError as exc:
                failures.append(str(exc))
                continue
            r = self.receipt(name)
            w = r["workload"]
            res.figures[name] = {
                "tokens_per_s": r["summary"]["tokens_per_s"], "step_time_s": r["summary"]["step_time_s"],
                "final_loss": r["summary"]["final_loss"], "grouped_gemm": (w.get("kernels") or {}).get("grouped_gemm"),
                "precision": {k: v for k, v in w["precision"].items() if v not in (None, [], ())},
                "peak_memory_bytes": r["summary"]["peak_memory_bytes"],
            }
        if failures:
            raise StepError("; ".join(failures))

    def step_dense(self, res: StepResult) -> None:
        self.need("moe-bf16")
        res.receipts["dense-bf16"] = self.record("dense-bf16", ["precision=bf16", "moe.grouped_gemm=on"],
                                                 config=self.scale.dense_config, tags=("perf=sweep",))
        moe, dense = self.receipt("moe-bf16"), self.receipt("dense-bf16")
        ratio = moe["summary"]["tokens_per_s"] / dense["summary"]["tokens_per_s"]
        res.figures = {"moe_tokens_per_s": moe["summary"]["tokens_per_s"],
                       "dense_tokens_per_s": dense["summary"]["tokens_per_s"],
                       "moe_over_dense": round(ratio, 4), "target": 0.8, "met": ratio >= 0.8,
                       "note": "median tokens/s after warm-up (receipt summary), bf16, equal active parameters"}

    def step_mfu(self, res: StepResult) -> None:
        from ledger.mfu import Peak, peak_flops

        names = [n for n in ("moe-fp32", "moe-bf16", "moe-fp8", "dense-bf16") if n in self.ids]
        if not names:
            raise Skip("no precision run was recorded")
        for name in names:
            r = self.receipt(name)
            rows = self.ledger_json("query", f"SELECT median(flops_per_s / tokens_per_s) AS fpt FROM steps "
                                             f"WHERE receipt_id = '{self.ids[name]}' AND tokens_per_s > 0")
            fpt = rows[0]["fpt"] if rows else None
            tps = r["summary"]["tokens_per_s"]
            compute = r["workload"]["precision"]["compute"]
            peak = peak_flops(r["stack"]["hardware"].get("gpu_model"), compute)
            entry: dict[str, Any] = {"tokens_per_s": tps, "model_flops_per_token": fpt}
            if isinstance(peak, Peak) and fpt and tps:
                entry |= {"mfu": round(tps * fpt / peak.flops, 5), "peak": peak.label}
                if compute == "fp8":
                    bf16 = peak_flops(r["stack"]["hardware"].get("gpu_model"), "bf16")
                    if isinstance(bf16, Peak):
                        entry["mfu_against_bf16_peak"] = round(tps * fpt / bf16.flops, 5)
                    entry["note"] = ("only the attention projections and dense FFNs run in fp8; experts, router, "
                                     "embeddings and LM head stay bf16")
            else:
                entry["mfu"] = None
                entry["reason"] = peak if isinstance(peak, str) else "no FLOPs per token or tokens/s recorded"
            res.figures[name] = entry

    def step_telemetry(self, res: StepResult) -> None:
        import pyarrow.parquet as pq

        self.need("moe-bf16")
        r = self.receipt("moe-bf16")
        path = self.ledger_dir / self.ids["moe-bf16"] / "telemetry.parquet"
        table = pq.read_table(path) if path.exists() else None
        per_device: dict[str, Any] = {}
        if table is not None:
            rows = table.to_pylist()
            for device in sorted({row["device"] for row in rows}):
                mine = [row for row in rows if row["device"] == device]
                times = sorted(row["time"] for row in mine)
                gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
                per_device[device] = {
                    "samples": len(mine),
                    "median_interval_s": round(gaps[len(gaps) // 2], 3) if gaps else None,
                    "readings": {c: sum(row[c] is not None for row in mine) for c in table.column_names
                                 if c not in ("rank", "time", "node", "device")},
                    "max": {c: max((row[c] for row in mine if row[c] is not None), default=None)
                            for c in ("power_w", "sm_clock_mhz", "memory_clock_mhz", "temperature_c",
                                      "ecc_corrected", "ecc_uncorrected", "memory_bytes", "utilization")},
                }
        gpus = [d for d in per_device if d.startswith("gpu")]
        res.figures = {"sampling_interval_s": 0.5, "energy_j": r["summary"]["energy_j"],
                       "energy_method": r["summary"]["energy_method"], "devices": per_device}
        if not gpus:
            res.status = "skipped" if self.dry_run else "failed"
            res.reason = f"no NVML GPU readings in the receipt (NVML: {self.env_facts.get('nvml', 'not probed')})"

    def step_gate(self, res: StepResult) -> None:
        self.need("moe-bf16")
        out = self.ledger_json("gate", self.ids["moe-bf16"])
        res.figures = {"gate": out}

    def step_compare(self, res: StepResult) -> None:
        self.need("moe-bf16", "moe-fp8")
        for seed in range(1, self.scale.replicates):
            for precision in ("bf16", "fp8"):
                sets = [f"precision={precision}", "moe.grouped_gemm=on", f"seed={seed}"]
                if precision == "fp8":
                    sets.append("fp8_backend=torch")
                name = f"moe-{precision}-s{seed}"
                res.receipts[name] = self.record(name, sets)
        out = self.ledger_json("compare", self.ids["moe-bf16"], self.ids["moe-fp8"])
        res.figures = _compare_figures(out)

    def step_lattice(self, res: StepResult) -> None:
        self.need("moe-bf16", "moe-fp8")
        for precision in ("bf16", "fp8"):
            sets = [f"precision={precision}", "moe.grouped_gemm=off"]
            if precision == "fp8":
                sets.append("fp8_backend=torch")
            res.receipts[f"moe-{precision}-loop"] = self.record(f"moe-{precision}-loop", sets)
        out = self.ledger_json("compare", self.ids["moe-bf16-loop"], self.ids["moe-fp8"])
        res.figures = _compare_figures(out)

    def step_perf(self, res: StepResult) -> None:
        self.need("moe-bf16")
        for e, k, g, b in self.scale.sweep:
            name = f"sweep-E{e}k{k}G{g:g}b{b}"
            sets = ["precision=bf16", "moe.grouped_gemm=on", f"moe.num_experts={e}", f"moe.top_k={k}",
                    f"moe.granularity={g}", f"batch_size={b}"]
            res.receipts[name] = self.record(name, sets, tags=("perf=sweep",))
        out = self.ledger_json("fit", "perf", "--where", "tag.perf=sweep")
        profiles = out.get("profiles") or []
        if not profiles:
            raise StepError(f"fit perf calibrated nothing: {out.get('skipped')}")
        res.figures = {p["hardware"]: {"metrics": p["metrics"], "calibration": p.get("calibration"),
                                       "design": p.get("design"), "fixed": p.get("fixed")} for p in profiles}

    def step_megatron(self, res: StepResult) -> None:
        mcore = str(self.env_facts.get("megatron_core", "not probed"))
        if mcore.startswith("unavailable") or mcore == "not probed":
            raise Skip(f"megatron-core does not import here: {mcore}")
        cmd = [sys.executable, "-m", "runners.megatron.mcore_cpu", *self.scale.megatron_args]
        res.receipts["mcore-moe"] = self.record("mcore-moe", [], command=cmd)
        r = self.receipt("mcore-moe")
        res.figures = {"steps": r["summary"]["steps"], "tokens_per_s": r["summary"]["tokens_per_s"],
                       "final_loss": r["summary"]["final_loss"], "megatron_core": mcore,
                       "device": r["workload"].get("device")}

    # ----------------------------------------------------------------------------------------------- run
    STEPS = ("env", "precision", "dense", "mfu", "telemetry", "gate", "compare", "lattice", "perf", "megatron")

    def run(self, only: set[str] | None) -> list[StepResult]:
        results = []
        for name in self.STEPS:
            res = StepResult(name)
            if only is not None and name not in only:
                res.status, res.reason = "skipped", "not selected (--only)"
                results.append(res)
                continue
            if self.left() < 10:
                res.status, res.reason = "skipped", "the time budget ran out before this step"
                results.append(res)
                continue
            step: Callable[[StepResult], None] = getattr(self, f"step_{name}")
            t0 = time.monotonic()
            self.say(f"step {name}")
            try:
                step(res)
            except Skip as exc:
                res.status, res.reason = "skipped", str(exc)
            except TimeoutError as exc:
                res.status, res.reason = "timeout", str(exc)
            except StepError as exc:
                res.status, res.reason = "failed", str(exc)
            except Exception as exc:  # a bug in one step never loses the others
                res.status, res.reason = "failed", f"{type(exc).__name__}: {exc}"
            res.seconds = round(time.monotonic() - t0, 1)
            self.say(f"step {name}: {res.status} {res.reason}")
            results.append(res)
        return results

    def finish(self, results: list[StepResult], started: str, wall: float) -> dict[str, Any]:
        summary = {
            "kind": "dry-run (CPU, toy size)" if self.dry_run else "GPU proof",
            "started_at": started, "wall_s": round(wall, 1), "environment": self.env_facts,
            "receipts": dict(sorted(self.ids.items())),
            "steps": [asdict(r) for r in results],
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        (self.out / "summary.md").write_text(markdown(summary))
        if self.ledger_dir.exists():
            with tarfile.open(self.out / "receipts.tar.gz", "w:gz") as tar:
                tar.add(self.ledger_dir, arcname="receipts",
                        filter=lambda info: None if info.name.endswith((".duckdb", ".duckdb.wal", ".lock"))
                        else info)
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return summary


def probe() -> dict[str, Any]:
    """What this machine can run (``--probe``, in a child: the proof's own process never initialises CUDA)."""
    import importlib.metadata
    import importlib.util

    import torch

    from runners.moe.experts import grouped_mm_works
    from runners.moe.float8 import scaled_mm_works
    from runners.moe.precision import transformer_engine

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    try:
        import pynvml

        pynvml.nvmlInit()
        nvml = f"{pynvml.nvmlDeviceGetCount()} device(s), driver {pynvml.nvmlSystemGetDriverVersion()}"
        pynvml.nvmlShutdown()
    except Exception as exc:
        nvml = f"unavailable ({type(exc).__name__}: {exc})"
    try:  # the version only: importing Megatron-Core is the megatron step's work
        mcore = (importlib.metadata.version("megatron-core") if importlib.util.find_spec("megatron.core")
                 else "unavailable (no module megatron.core)")
    except Exception as exc:
        mcore = f"unavailable ({type(exc).__name__}: {exc})"
    te, why = transformer_engine()
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "nvml": nvml, "transformer_engine": "importable" if te is not None else f"unavailable ({why[:160]})",
        "megatron_core": mcore, "fp8_scaled_mm": scaled_mm_works(dev) or "works",
        "grouped_mm_bf16": grouped_mm_works(dev, torch.bfloat16),
        "grouped_mm_fp32": grouped_mm_works(dev, torch.float32),
    }


def _compare_figures(out: dict[str, Any]) -> dict[str, Any]:
    """The headline of a `ledger compare --json`: changed factors (paths only: a package list is long), every
    metric's sides, ratio, interval and verdict, the attribution and the confounded sets."""
    factors = {f.get("factor"): [c.get("path") for c in f.get("changes", [])] for f in out.get("changed_factors", [])}
    metrics = {m["name"]: {k: m.get(k) for k in ("a", "b", "ratio", "ci", "verdict", "evidence", "reason")}
               for m in out.get("metrics", []) if "name" in m}
    return {"changed_factors": factors, "metrics": metrics, "replicates": out.get("replicates"),
            "attribution": out.get("attribution"), "attribution_totals": out.get("attribution_totals"),
            "lattice": out.get("lattice"), "confounded": out.get("confounded"),
            "missing_ablations": out.get("missing_ablations"), "next_steps": out.get("next_steps")}


def markdown(summary: dict[str, Any]) -> str:
    lines = [f"# stackreceipt GPU proof: {summary['kind']}", "",
             f"Started {summary['started_at']}, {summary['wall_s']} s wall.", ""]
    env = summary["environment"]
    if env:
        lines += ["| fact | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in env.items()] + [""]
    lines += headline(summary["steps"])
    lines += ["| step | status | seconds | reason |", "|---|---|---|---|"]
    for s in summary["steps"]:
        reason = str(s["reason"]).replace("|", "\\|")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {reason} |")
    lines.append("")
    for s in summary["steps"]:
        if s["figures"] and s["name"] != "env":
            lines += [f"## {s['name']}", "", "```json", json.dumps(s["figures"], indent=1, default=str)[:6000],
                      "```", ""]
    return "\n".join(lines)


def headline(steps: list[dict[str, Any]]) -> list[str]:
    """The figures the README wants, one row each, read from the steps' figures (absent ones are left out)."""
    fig = {s["name"]: s["figures"] for s in steps if s["status"] == "ok"}
    rows: list[tuple[str, str]] = []
    for name, run in fig.get("precision", {}).items():
        rows.append((f"{name} tokens/s", f"{run['tokens_per_s']:.6g} (grouped GEMM: {run['grouped_gemm']})"))
    if "dense" in fig:
        d = fig["dense"]
        rows.append(("MoE / dense tokens/s, bf16, equal active parameters",
                     f"{d['moe_over_dense']:.3f} (target >= 0.8: {'met' if d['met'] else 'missed'})"))
    for name, m in fig.get("mfu", {}).items():
        rows.append((f"MFU {name}", f"{100 * m['mfu']:.2f}% of the {m['peak']}" if m.get("mfu") is not None
                     else f"unavailable: {m.get('reason')}"))
    if "telemetry" in fig:
        t = fig["telemetry"]
        rows.append(("energy of moe-bf16", f"{t['energy_j']} J ({t['energy_method']}), sampled every "
                                           f"{t['sampling_interval_s']} s"))
    for step in ("compare", "lattice"):
        metric = (fig.get(step, {}).get("metrics") or {}).get("tokens/s per device")
        if metric:
            rows.append((f"{step}: tokens/s B/A", f"{metric['ratio']} ({metric['verdict']})"))
        for share in fig.get(step, {}).get("attribution") or []:
            rows.append((f"{step}: share of {share['metric']} to {share['factor']}",
                         f"{share['share']} ({share['verdict']})"))
    for hw, p in fig.get("perf", {}).items():
        m = p["metrics"]
        rows.append((f"fit perf on {hw}: held-out MAPE of step time",
                     f"{m['mape_held_out_pct']:.1f}% (leave-one-out, n = {int(m['held_out_n'])}; MFU rank "
                     f"Spearman {m['spearman_held_out']:.2f})"))
    if not rows:
        return []
    return ["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder (summary.json, summary.md, receipts.tar.gz, "
                    "proof.log)")
    ap.add_argument("--probe", action="store_true", help="print what this machine can run, as JSON, and exit")
    ap.add_argument("--dry-run", action="store_true", help="the same steps on CPU at toy size")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="time budget of all steps (default: 300 on a GPU, 900 in a dry run)")
    ap.add_argument("--only", help="comma-separated steps to run (the others are reported skipped)")
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    if args.out is None:
        ap.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    scale = DRY if args.dry_run else GPU
    budget = args.budget_s if args.budget_s is not None else (900.0 if args.dry_run else 300.0)
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(Proof.STEPS):
        ap.error(f"unknown steps {sorted(only - set(Proof.STEPS))}; steps: "
                 f"{', '.join(Proof.STEPS)}")
    proof = Proof(args.out, scale, budget, args.dry_run)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    results = proof.run(only)
    summary = proof.finish(results, started, time.monotonic() - t0)
    bad = [s["name"] for s in summary["steps"] if s["status"] in ("failed", "timeout")]
    print(f"summary: {args.out / 'summary.md'}; " + (f"failed: {', '.join(bad)}" if bad else "no step failed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
