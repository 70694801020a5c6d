"""The receipt: one immutable record of one run (or one imported claim).

Every leaf field carries its factor in ``json_schema_extra["factor"]`` (see :mod:`schemas.factors`);
:func:`schemas.flatten.factor_of` reads it back. Every field is optional where evidence may be missing:
what a probe or an imported file does not say stays ``None``, never a guess.

Schema history: see :mod:`schemas.migrations`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.factors import Factor
from schemas.version import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported


def F(factor: Factor, default: Any = None, **kwargs: Any) -> Any:
    """A field tagged with its factor."""
    extra = dict(kwargs.pop("json_schema_extra", {}) or {})
    extra["factor"] = factor.value
    if "default_factory" in kwargs:
        return Field(json_schema_extra=extra, **kwargs)
    return Field(default, json_schema_extra=extra, **kwargs)


DOCUMENTED = __name__ == "schemas.documented_receipt"
"""Whether this copy of the module reads each field's docstring into its description. The runtime models
(``schemas.receipt``) do not: pydantic reads them from the module's source with inspect and tokenize, about a
third of this module's import time, which every `ledger record` paid; the JSON Schema files and anything that
shows field descriptions use the documented copy (:mod:`schemas.documented`). Both validate alike."""


class Model(BaseModel):
    """Base of every receipt model: strict, immutable, documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=DOCUMENTED)


# ---------------------------------------------------------------------------------------------- stack
class Code(Model):
    """The source tree the launch ran from."""

    is_repo: bool = F(Factor.CODE, False)
    """True when the working directory is inside a git repository."""
    path: str | None = F(Factor.RECORD)
    """Working directory of the launch."""
    commit: str | None = F(Factor.CODE)
    """HEAD commit sha."""
    branch: str | None = F(Factor.CODE)
    """Checked-out branch; None when detached."""
    dirty: bool | None = F(Factor.CODE)
    """True when tracked files differ from HEAD or untracked files exist."""
    diff_digest: str | None = F(Factor.CODE)
    """sha256 of the diff against HEAD plus the contents of untracked files; None when clean."""
    remote: str | None = F(Factor.RECORD)
    """URL of the `origin` remote (or the first remote) with any credentials removed."""
    error: str | None = F(Factor.RECORD)
    """Why the code probe failed, if it did."""


class Container(Model):
    """The container the launch ran in, as the environment reveals it."""

    runtime: str | None = F(Factor.CONTAINER)
    """docker, podman, enroot, apptainer, kubernetes, or None outside a container."""
    image: str | None = F(Factor.CONTAINER)
    """Image name or path, when the environment gives it."""
    digest: str | None = F(Factor.CONTAINER)
    """Image content digest (sha256:...), when the environment gives it."""
    ngc: dict[str, str] = F(Factor.CONTAINER, default_factory=dict)
    """NGC version variables (NVIDIA_PYTORCH_VERSION, CUDA_VERSION, NCCL_VERSION, ...)."""
    error: str | None = F(Factor.RECORD)
    """Why the container probe failed, if it did."""


class Package(Model):
    """One installed distribution."""

    name: str = F(Factor.SOFTWARE)
    """Normalised distribution name."""
    version: str = F(Factor.SOFTWARE)
    """Installed version."""


class Software(Model):
    """The Python environment and the ML libraries that matter most."""

    framework: str | None = F(Factor.SOFTWARE)
    """Training framework as a submission names it, e.g. 'NeMo NVIDIA Release 24.04' (imported evidence)."""

    python: str | None = F(Factor.SOFTWARE)
    """Python version (major.minor.micro)."""
    python_executable: str | None = F(Factor.RECORD)
    """Interpreter path the versions were read from."""
    torch: str | None = F(Factor.SOFTWARE)
    """torch version, when installed."""
    transformer_engine: str | None = F(Factor.SOFTWARE)
    """transformer-engine version, when installed."""
    megatron_core: str | None = F(Factor.SOFTWARE)
    """megatron-core version, when installed."""
    nvidia: dict[str, str] = F(Factor.SOFTWARE, default_factory=dict)
    """Versions of installed nvidia-* distributions (cuBLAS, NCCL, cuDNN wheels...)."""
    packages: tuple[Package, ...] = F(Factor.SOFTWARE, default=())
    """Every installed distribution, sorted by name."""
    packages_digest: str | None = F(Factor.SOFTWARE)
    """sha256 over the sorted `name==version` list: equal digests mean equal environments."""
    source: Literal["wrapper", "process"] | None = F(Factor.RECORD)
    """Who listed the packages: the wrapper's interpreter, or the training process itself (SDK)."""
    error: str | None = F(Factor.RECORD)
    """Why the software probe failed, if it did."""


class Drivers(Model):
    """Driver and runtime library versions."""

    gpu_driver: str | None = F(Factor.DRIVERS)
    """NVIDIA kernel driver version (NVML)."""
    cuda_driver: str | None = F(Factor.DRIVERS)
    """CUDA driver: the highest CUDA version the driver supports (NVML, e.g. 12.8), or, where the evidence gives it
    (an MLPerf system description's cuda_driver_version), the user-mode CUDA driver's version, e.g. 550.54.15."""
    cuda_runtime: str | None = F(Factor.DRIVERS)
    """CUDA runtime torch was built with (torch.version.cuda, from inside the process)."""
    nccl: str | None = F(Factor.DRIVERS)
    """NCCL version torch loads (from inside the process)."""
    cudnn: str | None = F(Factor.DRIVERS)
    """cuDNN version torch loads (from inside the process)."""
    error: str | None = F(Factor.RECORD)
    """Why the driver probe failed, if it did."""


class Gpu(Model):
    """One GPU as NVML or torch reports it."""

    index: int = F(Factor.HARDWARE)
    """Device index on its node."""
    name: str | None = F(Factor.HARDWARE)
    """Marketing name, e.g. NVIDIA H200."""
    uuid: str | None = F(Factor.RECORD)
    """Device UUID (identifies the physical card; not a cause)."""
    memory_bytes: int | None = F(Factor.HARDWARE)
    """Total device memory."""
    compute_capability: str | None = F(Factor.HARDWARE)
    """e.g. 9.0."""
    power_limit_w: float | None = F(Factor.HARDWARE)
    """Enforced power limit."""
    sm_clock_max_mhz: int | None = F(Factor.HARDWARE)
    """Highest SM clock the GPU supports (NVML max clock)."""
    sm_clock_app_mhz: int | None = F(Factor.HARDWARE)
    """SM applications clock: the clock set for compute work (``nvidia-smi -ac``); None when unavailable."""
    mem_clock_app_mhz: int | None = F(Factor.HARDWARE)
    """Memory applications clock."""
    ecc_enabled: bool | None = F(Factor.HARDWARE)
    """Whether ECC is on (the current mode); None when the GPU or NVML does not say."""
    ecc_uncorrected: int | None = F(Factor.RECORD)
    """Uncorrected ECC errors since the driver loaded (volatile count): a health fact, not a setting."""
    pci_bus_id: str | None = F(Factor.RECORD)
    """PCI bus id, which NVLink peers name."""


class Link(Model):
    """One active NVLink between a GPU and a peer."""

    gpu: int = F(Factor.HARDWARE)
    """Local GPU index."""
    link: int = F(Factor.HARDWARE)
    """NVLink index on that GPU."""
    peer: str | None = F(Factor.HARDWARE)
    """PCI bus id of the remote end."""


class Hardware(Model):
    """The machine the launch ran on (the launching node; other nodes through the SDK)."""

    hostname: str | None = F(Factor.RECORD)
    """Launching host."""
    system: str | None = F(Factor.RECORD)
    """System name as a vendor or submission gives it, e.g. 'XE9680x8H100-SXM-80GB'."""
    interconnect: str | None = F(Factor.HARDWARE)
    """Inter-node and intra-node interconnect, as described (e.g. 'NVLink 4 + 8x InfiniBand NDR')."""
    cpu_model: str | None = F(Factor.HARDWARE)
    """CPU model name."""
    cpu_cores: int | None = F(Factor.HARDWARE)
    """Logical CPUs usable by this process."""
    memory_bytes: int | None = F(Factor.HARDWARE)
    """Host memory."""
    gpu_model: str | None = F(Factor.HARDWARE)
    """Model of the GPUs (None without GPUs; 'mixed: A, B' when they differ)."""
    gpu_count: int = F(Factor.HARDWARE, 0)
    """GPUs visible on the launching node."""
    gpus: tuple[Gpu, ...] = F(Factor.HARDWARE, default=())
    """Per-GPU facts."""
    nvlinks: tuple[Link, ...] = F(Factor.HARDWARE, default=())
    """Active NVLinks (the intra-node topology)."""
    gpu_topology: tuple[str, ...] = F(Factor.HARDWARE, default=())
    """How each pair of GPUs is connected, as ``nvidia-smi topo -m`` names it: ``"0-1 NV18"`` (NVLinks,
    direct or through NVSwitch), else the nearest common PCIe ancestor (PIX, PXB, PHB, NODE, SYS)."""
    cpu_sockets: int | None = F(Factor.HARDWARE)
    """CPU packages (sockets), from /sys."""
    numa_nodes: int | None = F(Factor.HARDWARE)
    """NUMA nodes, from /sys."""
    threads_per_core: int | None = F(Factor.HARDWARE)
    """Hardware threads per core (2 with SMT on)."""
    cpu_governor: str | None = F(Factor.HARDWARE)
    """CPU frequency scaling governor (e.g. performance; 'mixed: a, b' when cores differ); None where the
    kernel exposes no cpufreq (many VMs and containers)."""
    cpu_max_mhz: int | None = F(Factor.HARDWARE)
    """Highest CPU frequency the cores allow (cpufreq's cpuinfo_max_freq)."""
    nvml: str | None = F(Factor.RECORD)
    """'ok', or why NVML was unavailable (a clean 'no GPU' record)."""
    nodes_observed: tuple[str, ...] = F(Factor.RECORD, default=())
    """Hosts whose facts or telemetry this receipt holds."""
    error: str | None = F(Factor.RECORD)
    """Why the hardware probe failed, if it did."""


class Launcher(Model):
    """How the processes were started."""

    kind: str | None = F(Factor.SCALE)
    """torchrun, slurm, slurm+torchrun, mpi, or None for a single process."""
    nodes: int | None = F(Factor.SCALE)
    """Number of nodes."""
    world_size: int | None = F(Factor.SCALE)
    """Total ranks."""
    ranks_per_node: int | None = F(Factor.SCALE)
    """Ranks per node."""
    node_list: str | None = F(Factor.RECORD)
    """Slurm node list, as given."""
    job_id: str | None = F(Factor.RECORD)
    """Scheduler job id."""


class NodeStack(Model):
    """The stack of one node of a multi-node job (one entry per node that was expected or observed).

    The job's own ``stack`` is node 0's; these entries say what every node ran, so that differences
    between nodes (another driver, NCCL, package set, container or code) are visible."""

    node_rank: int | None = F(Factor.RECORD)
    """Node rank (SLURM_NODEID, torchrun's GROUP_RANK or ``--node-rank``); None when unknown."""
    hostname: str | None = F(Factor.RECORD)
    """Node name (SLURMD_NODENAME when Slurm gives it, else the host name)."""
    status: Literal["ended", "lost"] = F(Factor.RECORD, "ended")
    """ended: its wrapper reported the node's end; lost: it never reported, died or did not end in time
    (whatever it had written is kept)."""
    detail: str | None = F(Factor.RECORD)
    """Why a node is lost, or how its facts were obtained."""
    ranks: tuple[int, ...] = F(Factor.RECORD, default=())
    """Global ranks that wrote files from this node."""
    exit_code: int | None = F(Factor.RECORD)
    """Exit status of the node's launch (None when unknown)."""
    drivers: Drivers = F(Factor.DRIVERS, default_factory=Drivers)
    """Driver and runtime library versions on this node."""
    python: str | None = F(Factor.SOFTWARE)
    """Python version of the training processes on this node."""
    torch: str | None = F(Factor.SOFTWARE)
    """torch version on this node."""
    packages_digest: str | None = F(Factor.SOFTWARE)
    """Digest of the node's package list (see :attr:`Software.packages_digest`)."""
    packages: dict[str, str] = F(Factor.SOFTWARE, default_factory=dict)
    """Packages whose version differs from the job's ``stack.software`` (name -> version on this node;
    empty string: absent on this node). Empty when the node's packages equal the job's."""
    container_image: str | None = F(Factor.CONTAINER)
    """Container image on this node."""
    container_digest: str | None = F(Factor.CONTAINER)
    """Container image digest on this node."""
    code_commit: str | None = F(Factor.CODE)
    """Commit of the source tree the node launched from."""
    code_digest: str | None = F(Factor.CODE)
    """Diff digest of that tree (None when clean)."""
    gpu_model: str | None = F(Factor.HARDWARE)
    """GPU model on this node."""
    gpu_count: int | None = F(Factor.HARDWARE)
    """GPUs visible on this node."""
    cpu_model: str | None = F(Factor.HARDWARE)
    """CPU model of this node."""
    gpu_clocks: str | None = F(Factor.HARDWARE)
    """The node's GPU clocks, e.g. 'SM 1980 MHz (max 1980), memory 2619 MHz' ('mixed: ...' when its GPUs
    differ); None when not available (no NVML on the node, or not probed there)."""
    ecc: str | None = F(Factor.HARDWARE)
    """ECC mode of the node's GPUs: 'on', 'off' or 'mixed: ...'; None when not available."""
    ecc_errors: int | None = F(Factor.RECORD)
    """Uncorrected ECC errors (volatile) summed over the node's GPUs; None when not available."""
    gpu_topology: str | None = F(Factor.HARDWARE)
    """How the node's GPU pairs are connected, counted: e.g. 'NV18 (28 pairs)'; None when not available."""
    cpu_topology: str | None = F(Factor.HARDWARE)
    """e.g. '2 sockets, 2 NUMA nodes, 2 threads per core'; None when not available."""
    cpu_governor: str | None = F(Factor.HARDWARE)
    """CPU frequency governor; None when the node exposes none."""
    cpu_max_mhz: int | None = F(Factor.HARDWARE)
    """Highest CPU frequency."""


class Stack(Model):
    """Everything about how a run was executed, as opposed to what it computed."""

    code: Code = Field(default_factory=Code)
    """Source tree."""
    container: Container = Field(default_factory=Container)
    """Container."""
    software: Software = Field(default_factory=Software)
    """Python environment."""
    drivers: Drivers = Field(default_factory=Drivers)
    """Drivers and runtime libraries."""
    hardware: Hardware = Field(default_factory=Hardware)
    """Machine."""
    launcher: Launcher = Field(default_factory=Launcher)
    """Launcher."""
    environment: dict[str, str] = F(Factor.SOFTWARE, default_factory=dict)
    """Allow-listed environment variables (CUDA_*, NCCL_*, ...), secrets redacted."""
    nodes: tuple[NodeStack, ...] = F(Factor.RECORD, default=())
    """Every node of a multi-node job, node 0 first (empty for a single-node run). Differences between
    nodes are reported as problems and by :func:`ledger.analyses.nodes.node_differences`."""


# ------------------------------------------------------------------------------------------- workload
class QualityGate(Model):
    """A quality target: the first eval that meets it ends the time-to-gate clock."""

    name: str = F(Factor.TASK)
    """Gate name, unique within the task."""
    metric: str = F(Factor.TASK)
    """Eval metric, e.g. loss."""
    threshold: float = F(Factor.TASK)
    """Value to reach."""
    direction: Literal["min", "max"] = F(Factor.TASK, "min")
    """min: reached when value <= threshold; max: when value >= threshold."""
    split: str | None = F(Factor.TASK)
    """Eval split, e.g. val."""
    source: str | None = F(Factor.TASK)
    """Data source the eval is restricted to (e.g. the rare source); None for the whole split."""


class Task(Model):
    """The frozen task: two runs with different tasks are not comparable unless the user says so."""

    dataset: str | None = F(Factor.TASK)
    """Dataset name or path."""
    dataset_fingerprint: str | None = F(Factor.TASK)
    """Content digest of the data plus its generator parameters."""
    tokenizer: str | None = F(Factor.TASK)
    """Tokenizer name."""
    vocab_size: int | None = F(Factor.TASK)
    """Vocabulary size."""
    objective: str | None = F(Factor.TASK)
    """Training objective, e.g. causal-lm."""
    sources: tuple[str, ...] = F(Factor.TASK, default=())
    """Named data sources evaluated separately."""
    quality_gates: tuple[QualityGate, ...] = F(Factor.TASK, default=())
    """Quality targets."""


class Data(Model):
    """How the task's data is fed (not what it is)."""

    sequence_length: int | None = F(Factor.DATA)
    """Tokens per sequence."""
    paths: tuple[str, ...] = F(Factor.DATA, default=())
    """Data files or prefixes."""
    generator: dict[str, Any] = F(Factor.DATA, default_factory=dict)
    """Parameters of a synthetic data generator, if any."""


class Architecture(Model):
    """Model geometry. Number of experts and top-k belong to the task (DESIGN.md)."""

    layers: int | None = F(Factor.ARCHITECTURE)
    """Transformer layers."""
    hidden: int | None = F(Factor.ARCHITECTURE)
    """Model width."""
    heads: int | None = F(Factor.ARCHITECTURE)
    """Attention heads."""
    ffn_hidden: int | None = F(Factor.ARCHITECTURE)
    """Dense FFN width (the width one expert would have at granularity 1)."""
    num_experts: int | None = F(Factor.TASK)
    """Routed experts per MoE layer (1 or None: dense)."""
    top_k: int | None = F(Factor.TASK)
    """Experts each token is routed to."""
    expert_hidden: int | None = F(Factor.ARCHITECTURE)
    """FFN width of one routed expert."""
    granularity: float | None = F(Factor.ARCHITECTURE)
    """G = ffn_hidden / expert_hidden."""
    shared_experts: int | None = F(Factor.ARCHITECTURE)
    """Shared (always-on) experts per MoE layer."""
    shared_expert_hidden: int | None = F(Factor.ARCHITECTURE)
    """FFN width of the shared expert(s)."""
    moe_layer_freq: int | None = F(Factor.ARCHITECTURE)
    """Every k-th layer is MoE (1: all)."""
    moe_layers: int | None = F(Factor.ARCHITECTURE)
    """Number of MoE layers."""
    total_params: int | None = F(Factor.ARCHITECTURE)
    """All parameters."""
    active_params: int | None = F(Factor.ARCHITECTURE)
    """Parameters one token passes through (shared layers, router, k experts, shared experts)."""


class Router(Model):
    """How tokens are assigned to experts."""

    score_function: str | None = F(Factor.ROUTER)
    """softmax or sigmoid."""
    load_balancing: str | None = F(Factor.ROUTER)
    """aux_loss, seq_aux_loss, aux_free, sinkhorn, or none."""
    aux_loss_coeff: float | None = F(Factor.ROUTER)
    """Weight of the load-balancing loss."""
    z_loss_coeff: float | None = F(Factor.ROUTER)
    """Weight of the router z-loss."""
    expert_bias: bool | None = F(Factor.ROUTER)
    """Aux-loss-free expert bias enabled."""
    capacity_factor: float | None = F(Factor.ROUTER)
    """Expert capacity factor; None is dropless."""
    drop_policy: str | None = F(Factor.ROUTER)
    """probs or position, when capacity is enforced."""
    pad_to_capacity: bool | None = F(Factor.ROUTER)
    """Pad each expert's slice to its capacity."""


class Kernels(Model):
    """Implementation choices that change speed, not the mathematics."""

    grouped_gemm: bool | None = F(Factor.KERNELS)
    """Experts computed with one grouped GEMM rather than a loop."""
    dispatcher: str | None = F(Factor.KERNELS)
    """Token dispatcher: alltoall, allgather, flex (DeepEP), local."""
    attention: str | None = F(Factor.KERNELS)
    """Attention backend, e.g. sdpa, flash, fused."""
    fused: tuple[str, ...] = F(Factor.KERNELS, default=())
    """Other fused kernels enabled."""


class Parallelism(Model):
    """How the model and the batch are split over ranks."""

    tp: int | None = F(Factor.PARALLELISM)
    """Tensor parallel size."""
    pp: int | None = F(Factor.PARALLELISM)
    """Pipeline parallel size."""
    ep: int | None = F(Factor.PARALLELISM)
    """Expert parallel size."""
    etp: int | None = F(Factor.PARALLELISM)
    """Expert tensor parallel size."""
    cp: int | None = F(Factor.PARALLELISM)
    """Context parallel size."""
    dp: int | None = F(Factor.PARALLELISM)
    """Data parallel size."""
    world_size: int | None = F(Factor.SCALE)
    """Total ranks."""
    expert_placement: tuple[int, ...] = F(Factor.PARALLELISM, default=())
    """expert_placement[e] is the rank (within the EP group) that holds expert e."""


class Precision(Model):
    """The precision policy, an independent variable."""

    params: str | None = F(Factor.PRECISION)
    """Parameter storage dtype, e.g. fp32."""
    compute: str | None = F(Factor.PRECISION)
    """Policy name: fp32, bf16, fp16, fp8, mxfp8."""
    autocast: str | None = F(Factor.PRECISION)
    """Autocast dtype, if autocast is used."""
    fp8_format: str | None = F(Factor.PRECISION)
    """e4m3 or hybrid (e4m3 forward, e5m2 backward)."""
    fp8_recipe: str | None = F(Factor.PRECISION)
    """delayed, tensorwise, rowwise, blockwise, mxfp8."""
    fp8_backend: str | None = F(Factor.PRECISION)
    """transformer_engine or torch."""
    bf16_layers: tuple[str, ...] = F(Factor.PRECISION, default=())
    """Layers kept in bf16 under an fp8 policy (e.g. first, last)."""


class Batch(Model):
    """Batch sizes (``hyperparameters``) and training length (``scale``)."""

    global_batch: int | None = F(Factor.HYPERPARAMETERS)
    """Sequences per optimizer step, over all ranks."""
    micro_batch: int | None = F(Factor.HYPERPARAMETERS)
    """Sequences per rank per forward pass."""
    tokens_per_step: int | None = F(Factor.HYPERPARAMETERS)
    """Tokens per optimizer step."""
    steps: int | None = F(Factor.SCALE)
    """Planned optimizer steps."""


class Optimizer(Model):
    """The training recipe: optimizer, schedule and regularisation (the ``hyperparameters`` factor)."""

    name: str | None = F(Factor.HYPERPARAMETERS)
    """e.g. adamw."""
    lr: float | None = F(Factor.HYPERPARAMETERS)
    """Peak learning rate."""
    warmup_steps: int | None = F(Factor.HYPERPARAMETERS)
    """Linear warm-up steps."""
    schedule: str | None = F(Factor.HYPERPARAMETERS)
    """e.g. cosine."""
    weight_decay: float | None = F(Factor.HYPERPARAMETERS)
    """Weight decay."""
    grad_clip: float | None = F(Factor.HYPERPARAMETERS)
    """Gradient-norm clip."""
    dropout: float | None = F(Factor.HYPERPARAMETERS)
    """Dropout probability."""
    min_lr: float | None = F(Factor.HYPERPARAMETERS)
    """Final learning rate of the schedule."""


class Launch(Model):
    """How to rebuild the launch for a rerun (runner receipts)."""

    runner: str | None = F(Factor.RECORD)
    """Runner module, e.g. runners.moe."""
    config: str | None = F(Factor.RECORD)
    """Runner config name."""
    overrides: tuple[str, ...] = F(Factor.RECORD, default=())
    """key=value overrides applied to the config."""


class Workload(Model):
    """What the run computed: task, model, router, parallelism, precision, batch, seed."""

    task: Task = Field(default_factory=Task)
    """The frozen task."""
    data: Data = Field(default_factory=Data)
    """Data feeding."""
    model: Architecture = Field(default_factory=Architecture)
    """Model geometry."""
    router: Router = Field(default_factory=Router)
    """Router."""
    kernels: Kernels = Field(default_factory=Kernels)
    """Kernels."""
    parallelism: Parallelism = Field(default_factory=Parallelism)
    """Parallelism."""
    precision: Precision = Field(default_factory=Precision)
    """Precision policy."""
    batch: Batch = Field(default_factory=Batch)
    """Batch and length."""
    optimizer: Optimizer = Field(default_factory=Optimizer)
    """Optimizer."""
    seed: int | None = F(Factor.SEED)
    """Random seed."""
    arguments: dict[str, str] = F(Factor.ARGUMENTS, default_factory=dict)
    """The launch's own command-line arguments and config-file keys, flat (``lr`` -> ``3e-3``), recorded when
    the training process did not describe its workload: the ledger does not know what they mean, so each is
    a potential cause of a difference. Empty for launches that describe themselves (SDK, Megatron)."""
    device: str | None = F(Factor.HARDWARE)
    """Device type the training ran on: cpu or cuda."""
    launch: Launch = Field(default_factory=Launch)
    """How to rebuild the launch."""


# ------------------------------------------------------------------------------------------ the rest
class Links(Model):
    """Relations to other receipts (ids)."""

    attempt_of: str | None = F(Factor.RECORD)
    """This run is a restart (a later attempt) of that receipt's logical run."""
    replicates: str | None = F(Factor.RECORD)
    """This run replays that receipt."""
    baseline: str | None = F(Factor.RECORD)
    """The receipt this run should be compared against."""


class Artifact(Model):
    """A file of the receipt, with its digest."""

    path: str = F(Factor.RECORD)
    """Path relative to the receipt directory."""
    kind: Literal["table", "log", "file"] = F(Factor.RECORD)
    """table: a metric table in Parquet; log: captured output; file: anything else."""
    sha256: str = F(Factor.RECORD)
    """sha256 of the file's bytes."""
    bytes: int = F(Factor.RECORD)
    """File size."""
    rows: int | None = F(Factor.RECORD)
    """Rows, for tables."""


class Problem(Model):
    """Something that went wrong while capturing or merging; recorded, never fatal."""

    source: str = F(Factor.RECORD)
    """File (and line) or probe the problem is about."""
    message: str = F(Factor.RECORD)
    """What went wrong."""


class ImportSource(Model):
    """Where an imported receipt's evidence came from."""

    kind: str = F(Factor.RECORD)
    """megatron-log, mlperf, megatron-golden, profiler-trace..."""
    path: str = F(Factor.RECORD)
    """The file as given on import (its name; never its contents)."""
    sha256: str = F(Factor.RECORD)
    """sha256 of the imported file."""
    submitter: str | None = F(Factor.RECORD)
    """Organisation that produced the evidence (MLPerf submitter, vendor)."""
    division: str | None = F(Factor.RECORD)
    """MLPerf division (closed, open)."""
    benchmark: str | None = F(Factor.RECORD)
    """Benchmark name, e.g. llama2_70b_lora."""
    lines: int | None = F(Factor.RECORD)
    """Lines read."""
    unparsed_lines: int = F(Factor.RECORD, 0)
    """Lines that looked like evidence but did not parse (listed in problems)."""


class CapturedTable(Model):
    """Where one metric table of a recorded launch came from."""

    table: str = F(Factor.RECORD)
    """steps or evals."""
    rows: int = F(Factor.RECORD, 0)
    """Rows the source gave."""
    source: str = F(Factor.RECORD)
    """sdk (the training process), output (its stdout/stderr), trainer_state.json, metrics.csv, tensorboard."""
    format: str | None = F(Factor.RECORD)
    """The format of the source: hf-trainer, nanogpt, torchtitan, deepspeed, open-instruct, key-value,
    pattern (``--parse``), megatron, lightning-csv, tensorboard."""
    path: str | None = F(Factor.RECORD)
    """The file read, relative to the launch's directory where it lies under it."""
    metrics: tuple[str, ...] = F(Factor.RECORD, default=())
    """Names of the metrics it gave (step columns and extra keys; for evals, split/metric)."""
    ordinal_steps: bool = F(Factor.RECORD, False)
    """The source prints no step numbers: its rows are numbered 1, 2, ... in the order printed."""
    lines: int = F(Factor.RECORD, 0)
    """Step lines (or records) read from the source; with ``merged``, how many rows they became."""
    merged: int = F(Factor.RECORD, 0)
    """Lines that gave a step already read and were merged into it: the same step printed in another shape, by
    another rank, or again."""
    differing: int = F(Factor.RECORD, 0)
    """Of the merged lines, those whose values differed from the step's first reading (per-rank figures): the
    first reading is kept."""
    segments: int = F(Factor.RECORD, 1)
    """Stretches of the printed step counter: a counter that goes back starts a new one (a new epoch, or a restart
    from a checkpoint), never a repeat to drop. 1 when it never went back."""
    restarts: int = F(Factor.RECORD, 0)
    """Of the segments after the first, those that went back to steps already computed, with other values: a
    restart from a checkpoint. Their steps are kept as rows of their own, later in time (goodput counts the
    earlier computation as progress lost)."""
    planned_steps: int | None = F(Factor.RECORD)
    """The total the source printed beside its step counter (``20/1352``, ``global_step/max_steps``)."""
    derived: dict[str, str] = F(Factor.RECORD, default_factory=dict)
    """Columns the source did not print but the capture derived, each with how: ``time`` from when each line
    arrived (output timing), ``step_time_s`` from the time between lines divided by the steps between them,
    ``tokens`` from the configuration's batch and sequence length or a printed rate."""


class Capture(Model):
    """What `ledger record` captured of a launch without help from its code, and from where."""

    tables: tuple[CapturedTable, ...] = F(Factor.RECORD, default=())
    """The source of each metric table that has rows."""
    also_found: tuple[CapturedTable, ...] = F(Factor.RECORD, default=())
    """Other sources that held metrics but were not used (a table comes from one source only)."""
    config_keys: int = F(Factor.RECORD, 0)
    """Keys of ``workload.arguments`` captured from the command line and config files."""
    config_sources: tuple[str, ...] = F(Factor.RECORD, default=())
    """argv and each config file read, as named on the command line."""
    unparsed_lines: int = F(Factor.RECORD, 0)
    """Output lines that looked like steps of the chosen format but did not parse (listed in problems)."""
    line: str = F(Factor.RECORD, "")
    """The sentence `ledger record` printed about it."""


class Summary(Model):
    """Headline figures derived from the metric tables at publish time."""

    steps: int = F(Factor.RECORD, 0)
    """Step rows recorded."""
    last_step: int | None = F(Factor.RECORD)
    """Highest step number recorded."""
    tokens: int | None = F(Factor.RECORD)
    """Tokens seen at the last recorded step."""
    final_loss: float | None = F(Factor.RECORD)
    """Training loss at the last recorded step."""
    final_eval: dict[str, float] = F(Factor.RECORD, default_factory=dict)
    """Last value of each eval series, keyed split/source/metric."""
    tokens_per_s: float | None = F(Factor.RECORD)
    """Median tokens/s over steps after warm-up (the first 10% of steps, at least 1, are dropped)."""
    step_time_s: float | None = F(Factor.RECORD)
    """Median step time after warm-up."""
    peak_memory_bytes: int | None = F(Factor.RECORD)
    """The run's own peak memory: the largest the steps reported (device memory, as the training process or its
    log gave it), else the largest GPU memory its processes held (NVML), else the largest memory of its process
    tree (host). Never the whole machine's memory in use (other processes count there)."""
    peak_memory_source: str | None = F(Factor.RECORD)
    """Where ``peak_memory_bytes`` came from: steps, gpu processes, or process tree."""
    peak_host_memory_bytes: int | None = F(Factor.RECORD)
    """The largest host memory of the launch's process tree (proportional set size where the kernel gives it, else
    resident), sampled by the wrapper; None when not sampled."""
    energy_j: float | None = F(Factor.RECORD)
    """Energy measured over the run; None when not measured (never estimated from nothing)."""
    energy_method: str = F(Factor.RECORD, "not measured")
    """How energy_j was obtained: counter (device energy counters), power-integral, or not measured."""
    nonfinite_steps: int = F(Factor.RECORD, 0)
    """Steps whose loss was NaN or infinite."""
    evals: int = F(Factor.RECORD, 0)
    """Eval rows recorded."""
    routing_rows: int = F(Factor.RECORD, 0)
    """Routing rows recorded."""
    outcome: str | None = F(Factor.RECORD)
    """Result status the evidence itself states (MLPerf run_stop status: success, aborted), if any."""
    time_to_train_s: float | None = F(Factor.RECORD)
    """MLPerf time to train: run_stop - run_start, when the evidence gives both."""


class Failure(Model):
    """Why a run failed, as its output said: the last lines of its traceback (redacted)."""

    exception: str | None = F(Factor.RECORD)
    """The line naming the exception (``RuntimeError: CUDA out of memory ...``), when the output holds a Python
    traceback; None otherwise."""
    lines: tuple[str, ...] = F(Factor.RECORD, default=())
    """The traceback's last lines (at most 40, each at most 500 characters), or the output's last lines when it
    holds no traceback; secrets redacted, escape sequences removed."""
    first_line: int | None = F(Factor.RECORD)
    """Line number in the log where ``lines`` start."""
    log: str | None = F(Factor.RECORD)
    """The receipt's file the lines come from (``output.log``)."""


class Receipt(Model):
    """One immutable record of one run. The id is the sha256 of the canonical JSON of everything else."""

    schema_version: int = F(Factor.RECORD, SCHEMA_VERSION)
    """Version of this schema the receipt was written with."""
    id: str = F(Factor.RECORD, "")
    """Content digest (64 hex characters); empty until sealed."""
    run_uuid: str = F(Factor.RECORD)
    """Random id of the run's staging directory; publishing is exactly-once per run_uuid."""
    name: str | None = F(Factor.RECORD)
    """Human name (need not be unique)."""
    tags: dict[str, str] = F(Factor.RECORD, default_factory=dict)
    """Free-form labels (k=v)."""
    status: Literal["succeeded", "failed", "interrupted", "imported"] = F(Factor.RECORD)
    """succeeded: exit code 0; failed: non-zero exit or killed; interrupted: stopped by a forwarded signal or
    published by `ledger recover` after its wrapper died; imported: built from external evidence."""
    started_at: datetime | None = F(Factor.RECORD)
    """Launch time (UTC)."""
    ended_at: datetime | None = F(Factor.RECORD)
    """End time (UTC)."""
    duration_s: float | None = F(Factor.RECORD)
    """Wall time of the launch."""
    exit_code: int | None = F(Factor.RECORD)
    """Child exit code; for a signal, 128 + signal number."""
    signal: str | None = F(Factor.RECORD)
    """Signal that ended the child, e.g. SIGKILL."""
    command: tuple[str, ...] = F(Factor.RECORD, default=())
    """The launch command, secrets redacted."""
    attempt: int = F(Factor.RECORD, 1)
    """1 for a first attempt; n for the n-th attempt of a logical run."""
    links: Links = Field(default_factory=Links)
    """Relations to other receipts."""
    source: ImportSource | None = F(Factor.RECORD)
    """For imported receipts: the evidence file."""
    stack: Stack = Field(default_factory=Stack)
    """How it ran."""
    workload: Workload = Field(default_factory=Workload)
    """What it computed."""
    artifacts: tuple[Artifact, ...] = F(Factor.RECORD, default=())
    """Files of the receipt with their digests."""
    summary: Summary = Field(default_factory=Summary)
    """Headline figures."""
    problems: tuple[Problem, ...] = F(Factor.RECORD, default=())
    """What went wrong while capturing (probes, malformed metric lines)."""
    capture: Capture | None = F(Factor.RECORD)
    """For launches recorded by `ledger record`: where each metric table and the configuration came from."""
    failure: Failure | None = F(Factor.RECORD)
    """For a failed or interrupted run: why, as its output said (None when it succeeded or printed nothing)."""
