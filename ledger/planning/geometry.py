"""MoE transformer geometries, as columns of numpy arrays (one row per geometry), so that thousands of
candidates are evaluated at once.

Parameter counts follow the reference runner (``runners.moe.model.param_counts``): pre-norm blocks with
4 D^2 attention weights and two norms, SwiGLU FFNs (3 D F), a router of D E per MoE layer, learned
positions, an untied LM head. Sparsity S = 1 - top_k / experts; granularity G = ffn_hidden / expert width.
Model FLOPs per token: :func:`ledger.mfu.model_flops_per_token` of the active parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ledger.mfu import model_flops_per_token

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Geometry:
    """Model geometries, one row each (every field is a 1-D float array of the same length)."""

    layers: Array
    hidden: Array
    heads: Array
    ffn_hidden: Array
    """Dense FFN width; one routed expert is ffn_hidden / granularity wide."""
    experts: Array
    """Routed experts per MoE layer (1: dense)."""
    top_k: Array
    granularity: Array
    seq_len: Array
    vocab: Array
    moe_layers: Array
    """MoE layers among the layers (the others have a dense FFN of ffn_hidden)."""
    shared_experts: Array

    @classmethod
    def of(cls, **values: Any) -> Geometry:
        """Broadcast scalars and arrays to columns. ``moe_layers`` defaults to every layer,
        ``shared_experts`` to 0, ``heads`` to hidden / 128."""
        values.setdefault("shared_experts", 0)
        values.setdefault("heads", np.maximum(1, np.asarray(values["hidden"], float) // 128))
        values.setdefault("moe_layers", values["layers"])
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(f"Geometry.of needs {', '.join(missing)}")
        cols = np.broadcast_arrays(*(np.atleast_1d(np.asarray(values[n], dtype=float)) for n in names))
        return cls(**{n: np.array(c, dtype=float) for n, c in zip(names, cols, strict=True)})

    def __len__(self) -> int:
        return int(self.layers.shape[0])

    def take(self, index: Any) -> Geometry:
        """The rows at ``index`` (an integer array, a mask or a slice)."""
        return replace(self, **{f.name: np.atleast_1d(getattr(self, f.name)[index]) for f in fields(self)})

    def row(self, i: int) -> dict[str, float | int]:
        """Row ``i`` as a dict of plain numbers (integers where whole)."""
        out: dict[str, float | int] = {}
        for f in fields(self):
            v = float(getattr(self, f.name)[i])
            out[f.name] = int(v) if v.is_integer() else v
        out["expert_hidden"] = _plain(float(self.expert_hidden[i]))
        out["sparsity"] = float(self.sparsity[i])
        return out

    # ------------------------------------------------------------------------------------ derived
    @property
    def expert_hidden(self) -> Array:
        return self.ffn_hidden / self.granularity

    @property
    def sparsity(self) -> Array:
        """S = 1 - top_k / experts (0 for a dense model)."""
        return 1.0 - self.top_k / self.experts

    @property
    def dense_layers(self) -> Array:
        return self.layers - self.moe_layers

    @property
    def expert_params_per_layer(self) -> Array:
        """Routed-expert weights of one MoE layer (all experts)."""
        return self.experts * 3.0 * self.hidden * self.expert_hidden

    @property
    def attention_params_per_layer(self) -> Array:
        """Attention weights and the two norms of one block."""
        return 4.0 * self.hidden**2 + 2.0 * self.hidden

    @property
    def router_params_per_layer(self) -> Array:
        """Router and shared experts of one MoE layer."""
        router = np.where(self.experts > 1, self.hidden * self.experts, 0.0)
        return router + 3.0 * self.hidden * self.shared_experts * self.expert_hidden

    @property
    def embedding_params(self) -> Array:
        """Token and position embeddings (not active: a lookup, not a matmul)."""
        return self.vocab * self.hidden + self.seq_len * self.hidden

    @property
    def head_params(self) -> Array:
        """Final norm and LM head."""
        return self.hidden + self.vocab * self.hidden

    @property
    def common_params(self) -> Array:
        """Weights every token passes through: blocks without routed experts, router, shared, head."""
        return (
            self.layers * self.attention_params_per_layer
            + self.dense_layers * 3.0 * self.hidden * self.ffn_hidden
            + self.moe_layers * self.router_params_per_layer
            + self.head_params
        )

    @property
    def total_params(self) -> Array:
        return self.embedding_params + self.common_params + self.moe_layers * self.expert_params_per_layer

    @property
    def active_params(self) -> Array:
        return self.common_params + self.moe_layers * self.top_k * 3.0 * self.hidden * self.expert_hidden

    @property
    def flops_per_token(self) -> Array:
        """Model FLOPs per token (:func:`ledger.mfu.model_flops_per_token`, DESIGN.md's definition)."""
        return model_flops_per_token(self.active_params, self.layers, self.hidden, self.seq_len)


def _plain(v: float) -> float | int:
    return int(v) if v.is_integer() else v


def concat(parts: list[Geometry]) -> Geometry:
    """Rows of several geometries, in order."""
    return Geometry(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Geometry)})


def parse_spec(text: str, defaults: dict[str, float]) -> dict[str, float]:
    """``layers=32,hidden=4096,experts=64,top_k=4,granularity=2`` -> dict (over ``defaults``)."""
    from ledger.errors import BadInput
    from ledger.kv import listed

    given = listed(text, "--geometry", [f.name for f in fields(Geometry)], convert=float,
                   example="--geometry layers=32,hidden=4096,experts=64,top_k=4")
    for key, value in given.items():
        if not value > 0 and key != "shared_experts":
            raise BadInput(f"--geometry: {key} must be > 0, got {value:g}")
    return {**defaults, **given}
