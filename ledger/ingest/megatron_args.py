"""Megatron-LM arguments -> :class:`schemas.Workload`, from the three places they are written down.

- the argument dump Megatron prints at start-up (``---- arguments ----`` ... ``---- end of arguments ----``,
  one ``  name ........ value`` line each; fragments without the header are accepted);
- the launch command (``torchrun ... pretrain_gpt.py --num-experts 8 ...``), including torchrun's own
  ``--nproc-per-node`` / ``--nnodes`` for the world size;
- Megatron-LM CI ``model_config.yaml`` files (``MODEL_ARGS:`` maps flag to value).

All three become one dict of argparse destinations (``num_experts``, ``fp8``, ...) to Python values, and
:func:`workload_from_args` maps that dict to the receipt. What the arguments do not say stays ``None``.
One exception, stated here because it is a reading of Megatron's semantics rather than of the text: a
*complete* launch command (one that names the training script) is read the way Megatron's argparse reads
it, so a boolean flag it omits (``--moe-grouped-gemm``, ``--bf16``, ``--sequence-parallel``...) is off, and
the parameter dtype follows ``--bf16``/``--fp16`` as in ``megatron/training/arguments.py``. Argument
dumps and fragments only say what they print.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from ledger.errors import BadInput
from schemas import (
    Architecture,
    Batch,
    Data,
    Kernels,
    Optimizer,
    Parallelism,
    Precision,
    Router,
    Task,
    Workload,
)

ARG_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+\.{3,}\s?(.*?)\s*$")
"""One line of Megatron's argument dump: ``  num_layers ...................... 24``."""

WORLD_LINE = "using world size:"
"""How the line Megatron prints once the parallel sizes are settled begins (``validate_args`` in
``megatron/training/arguments.py``, rank 0)."""
_WORLD_SIZES = re.compile(r"(?<!encoder-)(world|data-parallel|context-parallel|tensor-model-parallel|"
                          r"pipeline-model-parallel)[ -]size:\s*(\d+)")
_WORLD_DESTS = {"world": "world_size", "data-parallel": "data_parallel_size",
                "context-parallel": "context_parallel_size", "tensor-model-parallel": "tensor_model_parallel_size",
                "pipeline-model-parallel": "pipeline_model_parallel_size"}


def args_from_world_line(text: str) -> dict[str, int]:
    """The parallel sizes of Megatron's ``using world size: 8, data-parallel size: 2, context-parallel size: 1,
    hierarchical context-parallel sizes: None, tensor-model-parallel size: 2, pipeline-model-parallel size: 2`` line
    as argparse destinations (``world_size``, ``data_parallel_size``, ``context_parallel_size``,
    ``tensor_model_parallel_size``, ``pipeline_model_parallel_size``). Its versions differ in which sizes they print
    and in the separators between them (older ones print ``data-parallel-size``, some run two together: ``sizes:
    Nonetensor-model-parallel size: 1``); each size is found by its name. The encoder's sizes (``encoder-tensor-model-
    parallel size``) and Megatron-DeepSpeed's ``deepspeed sequence-parallel size`` are not the model's and are left
    out."""
    return {_WORLD_DESTS[name]: int(value) for name, value in _WORLD_SIZES.findall(text)}


ALIASES = {"fp8_format": "fp8"}
"""Flags whose argparse destination differs from their name."""

BOOLEAN_FLAGS = frozenset({
    "bf16", "fp16", "moe_grouped_gemm", "sequence_parallel", "moe_router_enable_expert_bias",
    "moe_pad_expert_input_to_capacity", "first_last_layers_bf16", "moe_shared_expert_overlap", "mock_data",
    "moe_enable_deepep",
})
"""store_true flags read from a complete launch command: absent means off."""

FUSED_FLAGS = ("moe_shared_expert_overlap", "moe_permute_fusion", "moe_router_fusion",
               "overlap_moe_expert_parallel_comm")
"""Boolean MoE implementation flags recorded in kernels.fused when on (speed, not mathematics)."""

SCRIPTS = ("pretrain_gpt.py", "pretrain_mamba.py", "pretrain_bert.py", "pretrain_t5.py", "pretrain_retro.py",
           "pretrain_vlm.py", "pretrain_ict.py")
"""Megatron-LM training entry points."""

TORCHRUN_NPROC = ("--nproc_per_node", "--nproc-per-node")
TORCHRUN_NNODES = ("--nnodes",)


def parse_value(text: str) -> Any:
    """A value as Megatron prints it or a launch gives it: None/True/False, numbers, lists, else text."""
    t = text.strip()
    if t in ("None", "none", "null", "~"):
        return None
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if t[:1] in "[(" and t[-1:] in "])":
        try:
            value = ast.literal_eval(t)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return t
        return list(value) if isinstance(value, list | tuple) else t
    return t


def dest_of(flag: str) -> str:
    """argparse destination of a ``--flag-name``."""
    name = flag.lstrip("-").replace("-", "_")
    return ALIASES.get(name, name)


def args_from_dump_lines(lines: Iterable[str]) -> dict[str, Any]:
    """The ``name ...... value`` lines of an argument dump (or a fragment of one)."""
    out: dict[str, Any] = {}
    for line in lines:
        m = ARG_LINE.match(line)
        if m:
            out[m.group(1)] = parse_value(m.group(2))
    return out


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str], str | None]:
    """(launcher args, training-script args, script) of a launch command. The script is the first
    ``*.py`` argument (``pretrain_gpt.py``); without one, everything is read as training flags."""
    for i, token in enumerate(argv):
        if token.endswith(".py") and not token.startswith("-"):
            return list(argv[:i]), list(argv[i + 1:]), token
    return [], list(argv), None


def _is_option(token: str) -> bool:
    """``--name`` or ``-m`` (not a negative number such as ``-1`` or ``-1e-3``)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def args_from_flags(tokens: Sequence[str]) -> dict[str, Any]:
    """``--name value`` / ``--flag`` / ``--name v1 v2`` / ``--name=value`` -> {dest: value}."""
    out: dict[str, Any] = {}
    i = 0
    n = len(tokens)
    while i < n:
        token = tokens[i]
        i += 1
        if not token.startswith("--") or token == "--":
            continue
        if "=" in token:
            flag, _, value = token.partition("=")
            out[dest_of(flag)] = parse_value(value)
            continue
        values = []
        while i < n and not _is_option(tokens[i]):
            values.append(tokens[i])
            i += 1
        if not values:
            out[dest_of(token)] = True
        elif len(values) == 1:
            out[dest_of(token)] = parse_value(values[0])
        else:
            out[dest_of(token)] = [parse_value(v) for v in values]
    return out


def is_megatron_command(argv: Sequence[str]) -> bool:
    """True when a command launches Megatron-LM (a pretrain_*.py script, or megatron in a path)."""
    for token in argv:
        base = PurePath(token).name
        if base in SCRIPTS or ("megatron" in token.lower() and not token.startswith("-")):
            return True
    return False


def args_from_command(argv: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """Arguments of a launch command and whether the command is complete (names the script). torchrun's
    ``--nproc-per-node`` x ``--nnodes`` gives ``world_size`` when both are numbers."""
    launcher, script_args, script = split_command(argv)
    args = args_from_flags(script_args)
    if script is not None:
        args["_script"] = PurePath(script).name
        flags = args_from_flags(launcher)
        nproc = next((flags[dest_of(f)] for f in TORCHRUN_NPROC if dest_of(f) in flags), None)
        nnodes = flags.get("nnodes", 1 if nproc is not None else None)
        if isinstance(nnodes, str) and re.fullmatch(r"\d+:\d+", nnodes):
            lo, hi = nnodes.split(":")
            nnodes = int(lo) if lo == hi else None
        if isinstance(nproc, int) and isinstance(nnodes, int) and "world_size" not in args:
            args["world_size"] = nproc * nnodes
    return args, script is not None


def args_from_text(text: str) -> dict[str, Any]:
    """Arguments from a file a user points at (``--args-from``): an argument dump, a model_config.yaml
    (``MODEL_ARGS:``), or a shell launch script / list of flags."""
    lines = text.splitlines()
    dump = args_from_dump_lines(lines)
    if dump:
        return dump
    if re.search(r"^\s*MODEL_ARGS\s*:", text, re.M):
        data = load_yaml(text)
        model_args = data.get("MODEL_ARGS") or {}
        return args_from_mapping(model_args if isinstance(model_args, dict) else {})
    joined = re.sub(r"\\\r?\n", " ", text)
    tokens: list[str] = []
    for line in joined.splitlines():
        try:
            tokens.extend(shlex.split(line, comments=True))
        except ValueError:
            tokens.extend(line.split())
    args, _ = args_from_command(tokens)
    return args


class YamlError(BadInput):
    """A YAML file that does not parse; the message names the line and column."""


@functools.cache
def _text_loader() -> Any:
    """PyYAML's safe loader (the C one when built) that resolves only booleans, nulls and merge keys: numbers and
    dates stay text, as launch flags are (``1e-2`` and ``.01`` alike; ``parse_value`` reads them later)."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    keep = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:merge"}
    loader: Any = type("TextLoader", (base,), {})
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag in keep]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    return loader


def load_yaml(text: str, source: str = "the YAML") -> dict[str, Any]:
    """A YAML mapping (Megatron-LM CI ``model_config.yaml``): PyYAML's safe loader, anchors and merge keys
    resolved, multi-line plain scalars joined; scalars other than true/false/null stay text. Raises
    :class:`YamlError` naming the line for text that is not YAML, or a document that is not a mapping."""
    import yaml

    try:
        data = yaml.load(text, Loader=_text_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(f"{source}: {where}{problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise YamlError(f"{source}: the document is a {type(data).__name__}, not a mapping of keys to values")
    return data


def args_from_mapping(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``{--flag: value}`` as in a model_config.yaml: ``true`` means the flag is given, ``false`` absent."""
    out: dict[str, Any] = {}
    for flag, value in mapping.items():
        if value is False:
            continue
        if isinstance(value, str):
            parts = value.split()
            value = parse_value(value) if len(parts) <= 1 else [parse_value(p) for p in parts]
        out[dest_of(str(flag))] = value
    return out


# ------------------------------------------------------------------------------ Megatron-DeepSpeed
DEEPSPEED_MOE_KEYS = frozenset({"moe_expert_parallel_size", "ep_size", "ep_world_size", "mlp_type", "expert_interval",
                                "moe_min_capacity", "moe_train_capacity_factor", "moe_loss_coeff", "topk",
                                "moe_top_k", "moe_token_dropping", "disable_moe_token_dropping"})
"""Argument names of DeepSpeed-MoE (Megatron-DeepSpeed, DeepSpeedExamples) that Megatron-LM does not have."""


def deepspeed_moe(args: Mapping[str, Any]) -> dict[str, Any]:
    """Megatron-DeepSpeed's MoE arguments rewritten as the Megatron-LM names :func:`workload_from_args` reads
    (a name Megatron-LM itself gives wins). The readings, from Megatron-DeepSpeed's ``arguments.py`` and
    ``megatron/model/transformer.py``:

    - ``moe_expert_parallel_size`` (also ``ep_size``, ``ep_world_size`` of DeepSpeed examples) -> expert parallelism;
    - ``num_experts`` is a list, one count per MoE layer (``[1]``: dense; a pyramid ``[64, ..., 128]`` records the
      largest); ``topk`` / ``moe_top_k`` -> top-k; ``moe_loss_coeff`` -> the aux-loss weight;
    - every routed expert is a copy of the dense MLP: expert width = ``ffn_hidden_size``; ``mlp_type residual``
      (Residual-MoE) adds one always-on dense MLP, recorded as one shared expert of that width;
    - MoE layers are the ``expert_interval``-th, ``2 x expert_interval``-th... (layers // interval of them);
    - ``moe_train_capacity_factor`` is a capacity only while tokens are dropped (``moe_token_dropping``, the
      default; ``disable_moe_token_dropping`` turns it off); ``moe_min_capacity`` has no receipt field and stays
      with the other launch arguments.
    """
    if not DEEPSPEED_MOE_KEYS & set(args):
        return dict(args)
    out = dict(args)

    def put(name: str, value: Any) -> None:
        if value is not None and out.get(name) is None:
            out[name] = value

    put("expert_model_parallel_size", next((args[k] for k in ("moe_expert_parallel_size", "ep_size", "ep_world_size")
                                            if args.get(k) is not None), None))
    put("moe_router_topk", next((args[k] for k in ("topk", "moe_top_k") if args.get(k) is not None), None))
    put("moe_aux_loss_coeff", args.get("moe_loss_coeff"))
    counts = args.get("num_experts")
    values = [_int(c) for c in counts] if isinstance(counts, list) else [_int(counts)]
    experts = max((v for v in values if v is not None), default=None)
    if experts is not None and experts <= 1:
        out["num_experts"] = None  # DeepSpeed's [1]: a dense model
        return out
    out["num_experts"] = experts
    if experts is None:
        return out
    out["_deepspeed_moe"] = True
    put("moe_ffn_hidden_size", args.get("ffn_hidden_size"))
    if args.get("mlp_type") == "residual":
        put("_shared_experts", 1)
        put("moe_shared_expert_intermediate_size", args.get("ffn_hidden_size"))
    if args.get("moe_token_dropping") is not False and args.get("disable_moe_token_dropping") is not True:
        put("moe_expert_capacity_factor", args.get("moe_train_capacity_factor"))
    return out


# ---------------------------------------------------------------------------------------- workload
def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    if isinstance(v, list) and len(v) == 1:
        return _int(v[0])
    return None


def layer_pattern(v: Any) -> list[int] | None:
    """Megatron-LM's ``--moe-layer-freq`` given as a per-layer pattern, 1 for an MoE layer: a list
    (``[0, 1, 1]``) or the Python expression its argparse type evaluates (``([0]*3+[1]*11)``): lists of 0/1
    joined by ``+`` and repeated by ``*``. Read with :mod:`ast`, never evaluated; None for anything else."""
    if isinstance(v, list):
        return [int(x) for x in v] if all(isinstance(x, int) and x in (0, 1) for x in v) else None
    if not isinstance(v, str) or len(v) > 1000:
        return None
    try:
        tree = ast.parse(v.strip(), mode="eval").body
    except SyntaxError:
        return None

    def value(node: ast.AST) -> list[int] | int:
        if isinstance(node, ast.List | ast.Tuple):
            items = [value(e) for e in node.elts]
            flags = [x for x in items if isinstance(x, int) and x in (0, 1)]
            if len(flags) != len(items):
                raise ValueError("a layer pattern holds 0 and 1")
            return flags
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and right < 10_000:
                return left * right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list) and left < 10_000:
                return right * left
        raise ValueError("not a layer pattern")

    try:
        result = value(tree)
    except ValueError:
        return None
    return result if isinstance(result, list) else None


def _float(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float) and math.isfinite(float(v)):
        return float(v)
    if isinstance(v, list) and len(v) == 1:
        return _float(v[0])
    return None


def _str(v: Any) -> str | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, list):
        return " ".join(str(x) for x in v) if v else None
    return str(v)


def _bool(args: Mapping[str, Any], name: str, complete: bool) -> bool | None:
    v = args.get(name)
    if isinstance(v, bool):
        return v
    if v is None and complete and name in BOOLEAN_FLAGS:
        return False
    return None


def _dtype(v: Any) -> str | None:
    text = _str(v)
    if text is None:
        return None
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16", "torch.float32": "fp32",
            "torch.float": "fp32"}.get(text, text)


def workload_from_args(args: Mapping[str, Any], complete: bool = False) -> Workload:
    """The workload Megatron arguments describe (see the module docstring for ``complete``); Megatron-DeepSpeed's
    MoE arguments are read too (:func:`deepspeed_moe`)."""
    args = deepspeed_moe(args)
    g = args.get
    deepspeed = g("_deepspeed_moe") is True
    num_experts = _int(g("num_experts"))
    layers = _int(g("num_layers"))
    ffn = _int(g("ffn_hidden_size"))
    expert_hidden = _int(g("moe_ffn_hidden_size"))
    freq = _int(g("expert_interval") if deepspeed else g("moe_layer_freq"))
    moe_layers = None
    if num_experts and layers and freq:
        moe_layers = layers // freq if deepspeed else sum(1 for i in range(layers) if i % freq == 0)
    elif num_experts and not deepspeed and freq is None:
        pattern = layer_pattern(g("moe_layer_freq"))
        if pattern is not None and (layers is None or len(pattern) == layers):
            moe_layers = sum(pattern)
    model = Architecture(
        layers=layers,
        hidden=_int(g("hidden_size")),
        heads=_int(g("num_attention_heads")),
        ffn_hidden=ffn,
        num_experts=num_experts,
        top_k=_int(g("moe_router_topk")),
        expert_hidden=expert_hidden,
        granularity=(ffn / expert_hidden) if ffn and expert_hidden else None,
        shared_experts=_int(g("_shared_experts")),
        shared_expert_hidden=_int(g("moe_shared_expert_intermediate_size")),
        moe_layer_freq=freq if num_experts else None,
        moe_layers=moe_layers,
    )
    capacity = _float(g("moe_expert_capacity_factor"))
    router = Router(
        score_function=_str(g("moe_router_score_function")),
        load_balancing=_str(g("moe_router_load_balancing_type")),
        aux_loss_coeff=_float(g("moe_aux_loss_coeff")),
        z_loss_coeff=_float(g("moe_z_loss_coeff")),
        expert_bias=_bool(args, "moe_router_enable_expert_bias", complete and bool(num_experts)),
        capacity_factor=capacity,
        drop_policy=_str(g("moe_token_drop_policy")) if capacity is not None else None,
        pad_to_capacity=_bool(args, "moe_pad_expert_input_to_capacity", complete and capacity is not None),
    )
    dispatcher = _str(g("moe_token_dispatcher_type"))
    backend = _str(g("moe_flex_dispatcher_backend")) or ("deepep" if g("moe_enable_deepep") is True else None)
    if dispatcher == "flex" and backend:
        dispatcher = f"flex:{backend}"
    fused = tuple(name for name in FUSED_FLAGS if g(name) is True)
    kernels = Kernels(
        grouped_gemm=_bool(args, "moe_grouped_gemm", complete and bool(num_experts)),
        dispatcher=dispatcher,
        attention=_str(g("attention_backend")),
        fused=fused,
    )
    tp, pp, cp = _int(g("tensor_model_parallel_size")), _int(g("pipeline_model_parallel_size")), \
        _int(g("context_parallel_size"))
    world = _int(g("world_size"))
    dp = _int(g("data_parallel_size"))
    if dp is None and world and complete:
        denominator = (tp or 1) * (pp or 1) * (cp or 1)
        dp = world // denominator if world % denominator == 0 else None
    if world is None and dp and tp and pp:  # an argument dump states all three: world = tp x pp x cp x dp
        world = dp * tp * pp * (cp or 1)
    parallelism = Parallelism(tp=tp, pp=pp, cp=cp, ep=_int(g("expert_model_parallel_size")),
                              etp=_int(g("expert_tensor_parallel_size")), dp=dp, world_size=world)
    precision = _precision(args, complete)
    seq = _int(g("seq_length"))
    gbs = _int(g("global_batch_size"))
    batch = Batch(global_batch=gbs, micro_batch=_int(g("micro_batch_size")),
                  tokens_per_step=gbs * seq if gbs and seq else None, steps=_int(g("train_iters")))
    paths = g("data_path")
    path_list = tuple(str(p) for p in (paths if isinstance(paths, list) else [paths])) if paths else ()
    mock = g("mock_data") is True
    data = Data(sequence_length=seq, paths=path_list, generator={"kind": "megatron-mock-data"} if mock else {})
    script = g("_script")
    task = Task(
        dataset=" ".join(path_list) if path_list else ("megatron-mock-data" if mock else None),
        tokenizer=_str(g("tokenizer_model")) or _str(g("tokenizer_type")),
        vocab_size=_int(g("vocab_size")),
        objective="causal-lm" if script == "pretrain_gpt.py" else None,
    )
    warmup = _int(g("lr_warmup_iters"))
    optimizer = Optimizer(name=_str(g("optimizer")), lr=_float(g("lr")),
                          warmup_steps=warmup if warmup else None,
                          schedule=_str(g("lr_decay_style")), weight_decay=_float(g("weight_decay")),
                          grad_clip=_float(g("clip_grad")))
    return Workload(task=task, data=data, model=model, router=router, kernels=kernels, parallelism=parallelism,
                    precision=precision, batch=batch, optimizer=optimizer, seed=_int(g("seed")))


def _precision(args: Mapping[str, Any], complete: bool) -> Precision:
    g = args.get
    bf16, fp16 = _bool(args, "bf16", complete), _bool(args, "fp16", complete)
    fp8 = _str(g("fp8"))
    recipe = _str(g("fp8_recipe")) if fp8 else None
    params = _dtype(g("params_dtype"))
    if params is None and complete:
        params = "fp16" if fp16 else "bf16" if bf16 else "fp32"
    if fp8:
        compute: str | None = "mxfp8" if recipe == "mxfp8" else "fp8"
    elif bf16:
        compute = "bf16"
    elif fp16:
        compute = "fp16"
    elif complete or bf16 is False:
        compute = "fp32"
    else:
        compute = None
    layers: tuple[str, ...] = ()
    if fp8 and g("first_last_layers_bf16") is True:
        start, end = _int(g("num_layers_at_start_in_bf16")), _int(g("num_layers_at_end_in_bf16"))
        layers = (f"first:{start}" if start else "first", f"last:{end}" if end else "last")
    return Precision(params=params, compute=compute, fp8_format=fp8, fp8_recipe=recipe,
                     fp8_backend="transformer_engine" if fp8 else None, bf16_layers=layers)


def merge_args(*sources: Mapping[str, Any]) -> dict[str, Any]:
    """Later sources win where they say something (an argument dump after the launch flags: the dump is
    what Megatron actually ran with, after its own validation)."""
    out: dict[str, Any] = {}
    for source in sources:
        out.update({k: v for k, v in source.items() if v is not None or k not in out})
    return out


__all__ = [
    "ARG_LINE", "DEEPSPEED_MOE_KEYS", "WORLD_LINE", "YamlError", "args_from_command", "args_from_dump_lines",
    "args_from_flags", "args_from_mapping", "args_from_text", "args_from_world_line", "deepspeed_moe",
    "is_megatron_command", "layer_pattern", "load_yaml", "merge_args", "parse_value", "split_command",
    "workload_from_args",
]
