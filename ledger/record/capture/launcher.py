"""The launcher probe: how the processes were started, and at what scale.

Two sources. The environment says what launched *this* process (a wrapper inside an ``sbatch`` script sees
SLURM_*; a wrapper inside torchrun sees TORCHELASTIC_*/WORLD_SIZE; MPI sets OMPI_*/PMI_*). The command says
what the wrapper is about to launch: ``ledger record -- torchrun --nnodes 2 --nproc-per-node 8 train.py``
runs *outside* torchrun, so its scale is read from the torchrun (or ``python -m torch.distributed.run``),
``srun`` and ``mpirun`` options in front of the training script.

Precedence: a torchrun launch (environment first, then command) gives kind ``torchrun``, or
``slurm+torchrun`` inside a Slurm job; else MPI gives ``mpi``; else Slurm gives ``slurm``; else None (one
process). Counts that are not fixed (``--nnodes 1:4``, ``-N 2-4``, ``--nproc-per-node gpu``) stay None.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from schemas.receipt import Launcher

Facts = dict[str, int | str | None]

TORCH_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})


class _Spec:
    """Options of one launcher command: which ones we read (name -> field) and which take no value."""

    def __init__(self, read: Mapping[str, str], switches: str) -> None:
        self.read = dict(read)
        self.switches = frozenset(switches.split())


_TORCHRUN = _Spec(
    {"nnodes": "nodes", "nproc-per-node": "ranks_per_node", "standalone": "standalone"},
    "standalone m module no-python run-path use-env virtual-local-rank",
)
_SRUN = _Spec(
    {"N": "nodes", "nodes": "nodes", "n": "world_size", "ntasks": "world_size",
     "ntasks-per-node": "ranks_per_node"},
    "exclusive overlap l label u unbuffered K kill-on-bad-exit Q quiet v verbose X pty no-kill k overcommit "
    "O contiguous multi-prog disable-status",
)
_MPIRUN = _Spec(
    {"np": "world_size", "n": "world_size", "c": "world_size", "N": "ranks_per_node",
     "npernode": "ranks_per_node", "ppn": "ranks_per_node"},
    "oversubscribe allow-run-as-root tag-output report-bindings display-map display-allocation v q quiet "
    "verbose timestamp-output merge-stderr-to-stdout noprefix nolocal no-oversubscribe",
)
_COMMANDS = {"srun": ("slurm", _SRUN), "mpirun": ("mpi", _MPIRUN), "mpiexec": ("mpi", _MPIRUN),
             "orterun": ("mpi", _MPIRUN)}


def capture_launcher(env: Mapping[str, str], argv: Sequence[str] = ()) -> Launcher:
    """Kind, nodes, world size and ranks per node of the launch, from the environment and the command."""
    try:
        return _launcher(env, list(argv))
    except Exception:  # a probe never fails the run; what cannot be parsed is simply not known
        return Launcher()


def _launcher(env: Mapping[str, str], argv: list[str]) -> Launcher:
    cmd_torchrun, cmd_outer = _from_command(argv)
    slurm = _merge(_slurm_env(env), cmd_outer.get("slurm"))
    mpi = _merge(_mpi_env(env), cmd_outer.get("mpi"))
    torchrun = _merge(cmd_torchrun, _torchrun_env(env))
    job = {"job_id": slurm.get("job_id"), "node_list": slurm.get("node_list")} if slurm else {}
    if torchrun:
        kind, facts = ("slurm+torchrun" if slurm else "torchrun"), torchrun
        if facts.get("nodes") is None:
            facts["nodes"] = slurm.get("nodes")
    elif mpi:
        kind, facts = "mpi", mpi
        if facts.get("nodes") is None:
            facts["nodes"] = slurm.get("nodes")
    elif slurm:
        kind, facts = "slurm", slurm
    else:
        return Launcher()
    nodes, rpn, world = (_int(facts.get(k)) for k in ("nodes", "ranks_per_node", "world_size"))
    if world is None and nodes is not None and rpn is not None:
        world = nodes * rpn
    if nodes is None and world is not None and rpn and kind != "slurm" and world % rpn == 0:
        nodes = world // rpn  # torchrun and MPI place the same number of ranks on every node
    return Launcher(kind=kind, nodes=nodes, world_size=world, ranks_per_node=rpn,
                    node_list=_str(job.get("node_list")), job_id=_str(job.get("job_id")))


# ------------------------------------------------------------------------------------- environment
def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def _slurm_env(env: Mapping[str, str]) -> Facts:
    if not env.get("SLURM_JOB_ID"):
        return {}
    return {
        "job_id": env["SLURM_JOB_ID"],
        "nodes": _first(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        "world_size": _first(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
        "ranks_per_node": _per_node(_first(env, "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE")),
        "node_list": _first(env, "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST"),
    }


def _torchrun_env(env: Mapping[str, str]) -> Facts:
    if not any(env.get(k) for k in ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                                     "GROUP_WORLD_SIZE")):
        return {}
    return {"world_size": env.get("WORLD_SIZE"), "ranks_per_node": env.get("LOCAL_WORLD_SIZE"),
            "nodes": env.get("GROUP_WORLD_SIZE")}


def _mpi_env(env: Mapping[str, str]) -> Facts:
    if env.get("OMPI_COMM_WORLD_SIZE"):
        return {"world_size": env["OMPI_COMM_WORLD_SIZE"],
                "ranks_per_node": env.get("OMPI_COMM_WORLD_LOCAL_SIZE")}
    if env.get("PMI_SIZE") and not env.get("SLURM_JOB_ID"):  # srun sets PMI_* too: that is Slurm, not MPI
        return {"world_size": env["PMI_SIZE"], "ranks_per_node": env.get("MPI_LOCALNRANKS")}
    return {}


# ----------------------------------------------------------------------------------------- command
def _from_command(argv: list[str]) -> tuple[Facts, dict[str, Facts]]:
    """(torchrun facts, {'slurm'|'mpi': facts of srun/mpirun in front of it}) read from the command."""
    end = next((i for i, a in enumerate(argv) if a.endswith(".py")), len(argv))
    start = None
    for i, arg in enumerate(argv[:end]):
        if os.path.basename(arg) == "torchrun":
            start = i + 1
        elif arg == "-m" and i + 1 < len(argv) and argv[i + 1] in TORCH_MODULES:
            start = i + 2
        elif arg.startswith("-m") and arg[2:] in TORCH_MODULES:
            start = i + 1
        if start is not None:
            end = i
            break
    torchrun = _options(argv, start, _TORCHRUN) if start is not None else {}
    if torchrun.pop("standalone", None) is not None:
        torchrun["nodes"] = torchrun.get("nodes") or "1"
    if "nodes" in torchrun:
        torchrun["nodes"] = _range(torchrun["nodes"], ":")
    if start is not None:
        torchrun.setdefault("nodes", "1")  # torchrun's default --nnodes
    outer: dict[str, Facts] = {}
    for i, arg in enumerate(argv[:end]):
        kind_spec = _COMMANDS.get(os.path.basename(arg))
        if kind_spec and kind_spec[0] not in outer:
            facts = _options(argv[:end], i + 1, kind_spec[1])
            if "nodes" in facts:
                facts["nodes"] = _range(facts["nodes"], "-")
            outer[kind_spec[0]] = facts
    return torchrun, outer


def _options(args: Sequence[str], start: int, spec: _Spec) -> Facts:
    """The options ``spec`` reads, from args[start:] up to the first positional argument. Accepts
    ``--name value``, ``--name=value``, ``-n value``, ``-n4`` and single-dash long names (``-np 16``);
    underscores in long names count as dashes (``--nproc_per_node``)."""
    found: Facts = {}
    i = start
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name, eq, value = arg.lstrip("-").partition("=")
        name = name.replace("_", "-") if arg.startswith("--") else name
        if not eq and arg[1] != "-" and name not in spec.read and name not in spec.switches and len(name) > 1:
            name, eq, value = name[0], "=", name[1:]  # -N2
        if not eq and name not in spec.switches and i + 1 < len(args) and not args[i + 1].startswith("-"):
            value = args[i + 1]
            i += 1
        if name in spec.read:
            found[spec.read[name]] = value
        i += 1
    return found


# ----------------------------------------------------------------------------------------- values
def _merge(base: Facts, override: Facts | None) -> Facts:
    """base updated with the non-empty values of override."""
    merged = dict(base)
    merged.update({k: v for k, v in (override or {}).items() if v not in (None, "")})
    return merged


def _range(value: int | str | None, sep: str) -> str | None:
    """'2' -> '2', '2:2' -> '2', '1:4' -> None (an elastic range is not a count)."""
    low, _, high = str(value).partition(sep)
    return low if not high or high == low else None


_PER_NODE = re.compile(r"(\d+)(?:\(x\d+\))?")


def _per_node(value: str | None) -> str | None:
    """Slurm's tasks per node: '8' or '8(x2)' -> '8'; a varying list ('8(x2),4') -> None."""
    m = _PER_NODE.fullmatch(value or "")
    return m.group(1) if m else None


def _int(value: int | str | None) -> int | None:
    if isinstance(value, int):
        return value
    return int(value) if value and value.strip().isdigit() else None


def _str(value: int | str | None) -> str | None:
    return None if value is None else str(value)


__all__ = ["capture_launcher"]
