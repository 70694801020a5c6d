"""Run configurations as Python functions, with one-field variants, and `--set key=value` overrides.

    cfg = get_config("tiny_cf1", ["steps=50", "moe.top_k=1"])

Every config is a frozen :class:`RunConfig`; every invalid value raises :class:`ConfigError` (a ValueError)
at construction, naming the key and what would be valid. Cross-field checks build the router, dispatcher and
experts configs, so those modules' own validation runs before anything trains.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from runners.moe.dispatcher import DispatcherConfig
from runners.moe.experts import ExpertsConfig
from runners.moe.router import RouterConfig


class ConfigError(ValueError):
    """A config name, override or value that cannot run; the message says what would be valid."""


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer geometry."""

    layers: int = 2
    """Transformer blocks."""
    hidden: int = 64
    """Model width D."""
    heads: int = 4
    """Attention heads (hidden must be divisible by heads)."""
    ffn_hidden: int = 256
    """Dense FFN width; one routed expert has ffn_hidden / granularity."""
    seq_len: int = 64
    """Tokens per training sequence (and the positional table's size)."""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn_hidden", "seq_len"):
            _positive(f"model.{name}", getattr(self, name))
        if self.hidden % self.heads:
            raise ConfigError(f"model.hidden ({self.hidden}) must be divisible by model.heads ({self.heads})")


@dataclass(frozen=True)
class MoEConfig:
    """The MoE feed-forward layers; num_experts=1, top_k=1 is the dense baseline."""

    num_experts: int = 8
    """Routed experts per MoE layer."""
    top_k: int = 2
    """Experts per token."""
    granularity: float = 2.0
    """G: expert width = ffn_hidden / G."""
    layer_freq: int = 1
    """Every layer_freq-th layer is MoE (1: all); the others use a dense ffn_hidden FFN."""
    shared_experts: int = 0
    """Always-on shared expert of width shared_experts * expert width (0: none)."""
    score_function: Literal["softmax", "sigmoid"] = "softmax"
    """Router scores."""
    norm_topk: bool = True
    """Renormalise the top-k softmax weights."""
    aux_loss_coeff: float = 1e-2
    """Weight of the load-balancing loss (mean over MoE layers)."""
    z_loss_coeff: float = 1e-3
    """Weight of the router z-loss (mean over MoE layers)."""
    expert_bias: bool = False
    """Aux-loss-free expert bias (DeepSeek-V3)."""
    bias_update_rate: float = 1e-3
    """Step of the expert-bias update."""
    capacity_factor: float | None = None
    """None: dropless; else C = ceil(cf * T * k / E) per rank."""
    drop_policy: Literal["probs", "position"] = "probs"
    """What to keep over capacity."""
    pad_to_capacity: bool = False
    """Pad every expert to C rows (batched matmul)."""
    grouped_gemm: Literal["auto", "on", "off"] = "auto"
    """auto: torch._grouped_mm on CUDA when it works, else a loop over experts."""

    def __post_init__(self) -> None:
        _positive("moe.num_experts", self.num_experts)
        _positive("moe.top_k", self.top_k)
        _positive("moe.layer_freq", self.layer_freq)
        if self.top_k > self.num_experts:
            raise ConfigError(f"moe.top_k ({self.top_k}) must be <= moe.num_experts ({self.num_experts})")
        if not self.granularity > 0:
            raise ConfigError(f"moe.granularity must be > 0, got {self.granularity}")
        if self.shared_experts < 0:
            raise ConfigError(f"moe.shared_experts must be >= 0, got {self.shared_experts}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ConfigError(
                f"moe.capacity_factor must be > 0 (or none for dropless), got {self.capacity_factor}"
            )
        _choice("moe.grouped_gemm", self.grouped_gemm, ("auto", "on", "off"))
        for name in ("aux_loss_coeff", "z_loss_coeff"):
            if getattr(self, name) < 0:
                raise ConfigError(f"moe.{name} must be >= 0, got {getattr(self, name)}")

    @property
    def dense(self) -> bool:
        return self.num_experts == 1


def dense_moe(moe: MoEConfig) -> MoEConfig:
    """The dense baseline with the same active FFN width: one expert as wide as top_k (+shared) experts."""
    return MoEConfig(
        num_experts=1,
        top_k=1,
        granularity=moe.granularity / (moe.top_k + moe.shared_experts),
        aux_loss_coeff=0.0,
        z_loss_coeff=0.0,
        layer_freq=moe.layer_freq,
    )


@dataclass(frozen=True)
class DataConfig:
    """The task's data: the bundled mixture-of-sources generator, or a local text file read as bytes."""

    path: str | None = None
    """A local text file to train on byte by byte (vocab 256); None: the synthetic mixture."""
    seed: int = 1234
    """Generator seed (part of the task, independent of the training seed)."""
    train_sequences: int = 4096
    """Synthetic training sequences generated (the epoch)."""
    val_sequences: int = 32
    """Validation sequences per source (synthetic) or in all (file)."""
    rare_fraction: float = 0.02
    """Share of the rare source's tokens in the synthetic mixture."""
    gate_loss: float | None = 2.6
    """Quality gate: overall val loss to reach."""
    gate_rare_loss: float | None = 2.2
    """Quality gate: val loss on the rare source to reach (synthetic only)."""

    def __post_init__(self) -> None:
        _positive("data.train_sequences", self.train_sequences)
        _positive("data.val_sequences", self.val_sequences)
        if not 0 < self.rare_fraction < 0.5:
            raise ConfigError(f"data.rare_fraction must be in (0, 0.5), got {self.rare_fraction}")


@dataclass(frozen=True)
class ParallelConfig:
    """Parallelism: every rank is data-parallel; experts are sharded over groups of ep ranks."""

    ep: int = 1
    """Expert-parallel size (divides the world size and the number of experts)."""

    def __post_init__(self) -> None:
        _positive("parallel.ep", self.ep)


@dataclass(frozen=True)
class RunConfig:
    """One training run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Transformer geometry (overrides: model.*)."""
    moe: MoEConfig = field(default_factory=MoEConfig)
    """MoE layers (overrides: moe.*)."""
    data: DataConfig = field(default_factory=DataConfig)
    """The task's data (overrides: data.*)."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """Parallelism (overrides: parallel.*)."""
    steps: int = 200
    """Optimizer steps."""
    batch_size: int = 16
    """Global batch in sequences (split evenly over ranks)."""
    lr: float = 3e-3
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """Cosine floor as a fraction of lr."""
    warmup_steps: int = 20
    """Linear warm-up steps."""
    weight_decay: float = 0.1
    """AdamW weight decay (matrices only)."""
    grad_clip: float = 1.0
    """Gradient-norm clip (0: off)."""
    precision: Literal["fp32", "bf16", "fp8"] = "fp32"
    """fp32, bf16 (autocast) or fp8 (float8 linear layers inside bf16 autocast; see fp8_backend)."""
    fp8_backend: Literal["torch", "te"] = "torch"
    """Under precision=fp8: torch (torch._scaled_mm, per-tensor scales; CUDA fp8 tensor cores, or CPU's
    reference kernel) or te (Transformer Engine, delayed scaling; CUDA only)."""
    seed: int = 0
    """Training seed (init and data order)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available."""
    threads: int = 0
    """CPU threads per rank (0: cores / local ranks, at most 8); pin it to get the same curve on any host."""
    log_every: int = 1
    """Log steps and routing every n steps."""
    eval_every: int = 50
    """Evaluate every n steps (and at the last step)."""
    eval_batch: int = 64
    """Sequences per eval forward."""
    checkpoint_every: int = 0
    """Save a checkpoint every n steps when --checkpoint-dir is given (0: at the end only)."""
    timing: bool = True
    """Per-phase timers (CUDA events on GPU; synchronises once per step)."""
    delay_s: float = 0.0
    """Sleep this long in every step (tests plant a known slowdown with it)."""
    delay_rank: int = -1
    """Only this global rank sleeps ``delay_s`` (a planted straggler); -1: every rank."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_every", "eval_every", "eval_batch"):
            _positive(name, getattr(self, name))
        for name in ("warmup_steps", "checkpoint_every", "threads"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.delay_rank < -1:
            raise ConfigError(f"delay_rank must be a rank or -1 (every rank), got {self.delay_rank}")
        for name in ("lr", "weight_decay", "grad_clip", "delay_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        _choice("precision", self.precision, ("fp32", "bf16", "fp8"))
        _choice("fp8_backend", self.fp8_backend, ("torch", "te"))
        _choice("device", self.device, ("auto", "cpu", "cuda"))
        if self.moe.num_experts % self.parallel.ep:
            raise ConfigError(
                f"moe.num_experts ({self.moe.num_experts}) must be divisible by parallel.ep "
                f"({self.parallel.ep})"
            )
        fe = self.model.ffn_hidden / self.moe.granularity
        if abs(fe - round(fe)) > 1e-9 or round(fe) < 1:
            raise ConfigError(
                f"model.ffn_hidden ({self.model.ffn_hidden}) / moe.granularity "
                f"({self.moe.granularity}) must be a whole number of at least 1"
            )
        try:  # the components' own validation, before anything is built
            router_config(self)
            dispatcher_config(self)
            experts_config(self)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def expert_hidden(self) -> int:
        return round(self.model.ffn_hidden / self.moe.granularity)

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        """Indices of the MoE layers: every layer_freq-th, counting from the last of each group."""
        f = self.moe.layer_freq
        return tuple(i for i in range(self.model.layers) if (i + 1) % f == 0)


def router_config(cfg: RunConfig) -> RouterConfig:
    m = cfg.moe
    return RouterConfig(
        m.num_experts, m.top_k, m.score_function, m.norm_topk, m.expert_bias, m.bias_update_rate
    )


def dispatcher_config(cfg: RunConfig) -> DispatcherConfig:
    m = cfg.moe
    return DispatcherConfig(
        m.num_experts, m.top_k, m.capacity_factor, m.drop_policy, m.pad_to_capacity, cfg.parallel.ep
    )


def experts_config(cfg: RunConfig, backend: str = "loop") -> ExpertsConfig:
    if cfg.moe.pad_to_capacity:
        backend = "padded"
    return ExpertsConfig(cfg.moe.num_experts // cfg.parallel.ep, cfg.model.hidden, cfg.expert_hidden, backend)  # type: ignore[arg-type]


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be >= 1, got {value}")


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{name} must be one of {', '.join(valid)}; got {value!r}")


# -------------------------------------------------------------------------------------------- the configs
def tiny() -> RunConfig:
    """Trains in ~10 s on CPU and visibly learns (val loss 4.16 -> ~2.47 in 200 steps). One thread: at this
    size threads buy little, and a pinned count gives the same curve on any host."""
    return RunConfig(
        model=ModelConfig(layers=2, hidden=64, heads=4, ffn_hidden=256, seq_len=64),
        moe=MoEConfig(num_experts=8, top_k=2, granularity=2.0),
        steps=200,
        batch_size=16,
        lr=3e-3,
        warmup_steps=20,
        eval_every=50,
        threads=1,
    )


def tiny_dense() -> RunConfig:
    """tiny's dense baseline: one expert with the same active FFN width."""
    return replace(tiny(), moe=dense_moe(tiny().moe))


def tiny_bf16() -> RunConfig:
    return replace(tiny(), precision="bf16")


def tiny_cf1() -> RunConfig:
    """Capacity factor 1: tokens over capacity are dropped."""
    return replace(tiny(), moe=replace(tiny().moe, capacity_factor=1.0))


def tiny_sigmoid() -> RunConfig:
    return replace(tiny(), moe=replace(tiny().moe, score_function="sigmoid"))


def tiny_auxfree() -> RunConfig:
    """Aux-loss-free balancing with the DeepSeek-V3 expert bias instead of the aux loss."""
    return replace(tiny(), moe=replace(tiny().moe, expert_bias=True, aux_loss_coeff=0.0))


def tiny_shared() -> RunConfig:
    return replace(tiny(), moe=replace(tiny().moe, shared_experts=1))


def tiny_g4() -> RunConfig:
    """Finer-grained experts: twice as many, half as wide, twice the top-k (same active parameters)."""
    return replace(tiny(), moe=replace(tiny().moe, num_experts=16, top_k=4, granularity=4.0))


def small() -> RunConfig:
    """One GPU, minutes: ~0.1B total parameters, bf16."""
    return RunConfig(
        model=ModelConfig(layers=6, hidden=512, heads=8, ffn_hidden=2048, seq_len=512),
        moe=MoEConfig(num_experts=16, top_k=2, granularity=4.0),
        data=DataConfig(train_sequences=16384, val_sequences=64, gate_loss=1.6, gate_rare_loss=2.0),
        steps=2000,
        batch_size=32,
        lr=1e-3,
        warmup_steps=100,
        precision="bf16",
        log_every=10,
        eval_every=250,
        checkpoint_every=500,
    )


def small_dense() -> RunConfig:
    return replace(small(), moe=dense_moe(small().moe))


def small_fp8() -> RunConfig:
    return replace(small(), precision="fp8")


def medium() -> RunConfig:
    """One GPU, an hour: ~1.2B total / ~0.3B active parameters, bf16."""
    return RunConfig(
        model=ModelConfig(layers=12, hidden=1024, heads=16, ffn_hidden=4096, seq_len=1024),
        moe=MoEConfig(num_experts=32, top_k=4, granularity=4.0, shared_experts=1),
        data=DataConfig(train_sequences=32768, val_sequences=64, gate_loss=1.5, gate_rare_loss=1.8),
        steps=5000,
        batch_size=32,
        lr=6e-4,
        warmup_steps=200,
        precision="bf16",
        log_every=10,
        eval_every=500,
        checkpoint_every=1000,
    )


def medium_dense() -> RunConfig:
    return replace(medium(), moe=dense_moe(medium().moe))


CONFIGS: dict[str, Callable[[], RunConfig]] = {
    f.__name__: f
    for f in (
        tiny,
        tiny_dense,
        tiny_bf16,
        tiny_cf1,
        tiny_sigmoid,
        tiny_auxfree,
        tiny_shared,
        tiny_g4,
        small,
        small_dense,
        small_fp8,
        medium,
        medium_dense,
    )
}
"""Config name -> function building it."""


# ------------------------------------------------------------------------------------------- overrides
def override_keys() -> dict[str, Any]:
    """Every valid override key (dotted for nested sections) and its type."""
    keys: dict[str, Any] = {}
    _walk(RunConfig, "", keys)
    return keys


def _walk(cls: type, prefix: str, out: dict[str, Any]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            _walk(tp, f"{prefix}{f.name}.", out)  # type: ignore[arg-type]
        else:
            out[prefix + f.name] = tp


def _parse(key: str, text: str, tp: Any) -> Any:
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null", ""):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _parse(key, text, inner[0])
    if origin is Literal:
        if text not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}; got {text!r}")
        return text
    if tp is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key} must be true or false; got {text!r}")
    try:
        if tp is int:
            return int(text)
        if tp is float:
            return float(text)
    except ValueError:
        raise ConfigError(
            f"{key} must be {'an integer' if tp is int else 'a number'}; got {text!r}"
        ) from None
    return text


def apply_overrides(cfg: RunConfig, overrides: Iterable[str]) -> RunConfig:
    """Apply ``key=value`` strings all at once (so their order never matters), then validate."""
    keys = override_keys()
    values: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value; valid keys: {', '.join(keys)}")
        if key not in keys:
            raise ConfigError(f"unknown override key {key!r}; valid keys: {', '.join(keys)}")
        values[key] = _parse(key, text.strip(), keys[key])
    if not values:
        return cfg
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in values.items():
        section, _, name = key.rpartition(".")
        (sections.setdefault(section, {}) if section else top)[name] = value
    try:
        for section, changes in sections.items():
            top[section] = replace(getattr(cfg, section), **changes)
        return replace(cfg, **top)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


def get_config(name: str, overrides: Iterable[str] = ()) -> RunConfig:
    """The named config with overrides applied."""
    if name not in CONFIGS:
        raise ConfigError(f"unknown config {name!r}; valid configs: {', '.join(CONFIGS)}")
    return apply_overrides(CONFIGS[name](), overrides)


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
