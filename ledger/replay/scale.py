"""Scale dimensions: the named axes along which a runner workload is replicated at another scale.

A dimension maps to one or more runner config keys. ``DIM=V`` sets the dimension to V; ``DIM=xK`` multiplies
it by K. Dimensions (for the reference runner, runners.moe):

- ``layers``  transformer layers (model.layers)
- ``width``   model width (model.hidden, and the dense FFN width with it; heads stay, so width must stay
              divisible by them)
- ``experts`` routed experts per MoE layer (moe.num_experts)
- ``ranks``   processes: expert-parallel size (parallel.ep), launched with torchrun on as many processes
- ``batch``   sequences per step (batch_size)
- ``steps``   optimizer steps (steps)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ledger.errors import BadInput
from ledger.kv import pair

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "layers": ("model.layers",),
    "width": ("model.hidden", "model.ffn_hidden"),
    "experts": ("moe.num_experts",),
    "ranks": ("parallel.ep",),
    "batch": ("batch_size",),
    "steps": ("steps",),
}


@dataclass(frozen=True)
class ScaleChange:
    """One dimension set to a value or multiplied by a factor."""

    dimension: str
    value: float
    factor: bool

    def apply(self, current: Mapping[str, float]) -> dict[str, int]:
        """New values of the dimension's config keys, from their current values."""
        out = {}
        base = current[DIMENSIONS[self.dimension][0]]
        for key in DIMENSIONS[self.dimension]:
            now = current[key]
            new = now * self.value if self.factor else now * (self.value / base)
            if new < 1 or abs(new - round(new)) > 1e-9:
                raise BadInput(f"--scale {self}: {key} would become {new:g}, which is not a positive integer")
            out[key] = int(round(new))
        return out

    def __str__(self) -> str:
        return f"{self.dimension}={'x' if self.factor else ''}{self.value:g}"


def parse_scale(text: str) -> ScaleChange:
    """``DIM=V`` or ``DIM=xK``; an unknown dimension lists the known ones."""
    known = ", ".join(DIMENSIONS)
    name, raw = pair(text, "--scale", example=f"--scale layers=x2 (DIM=VALUE or DIM=xFACTOR, DIM one of {known})")
    if name not in DIMENSIONS:
        raise BadInput(f"unknown scale dimension in {text!r}: use DIM=VALUE or DIM=xFACTOR with DIM one of {known}")
    factor = raw.startswith("x")
    try:
        value = float(raw[1:] if factor else raw)
    except ValueError:
        raise BadInput(f"--scale {text!r}: {raw!r} is not a number (e.g. layers=4 or layers=x2)") from None
    if value <= 0:
        raise BadInput(f"--scale {text!r}: the value must be positive")
    return ScaleChange(name, value, factor)
