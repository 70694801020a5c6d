"""Prices per device-hour (``--price-per-device-hour`` or ``ledger.toml``) and the devices an attempt held:
what turns a run's device-hours into money for :mod:`ledger.analyses.gates`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import BadInput
from schemas import Receipt

CONFIG_FILE = "ledger.toml"
"""Looked for in the working directory when no --config is given."""


@dataclass(frozen=True)
class Pricing:
    """Prices per device-hour by device model ("default" for any other)."""

    prices: dict[str, float]
    currency: str = "USD"
    source: str = ""
    """Where the prices came from: the flag or the file."""

    def price(self, model: str) -> float | None:
        if model in self.prices:
            return self.prices[model]
        return self.prices.get("default")


def load_pricing(path: Path | None = None, per_device_hour: float | None = None) -> Pricing | None:
    """Prices from the flag (one price for every device model), else the TOML file at ``path``, else
    ``./ledger.toml`` when it exists, else None. The file::

        currency = "USD"            # optional; shown next to money figures

        [prices]                    # per device-hour, by device model as receipts name it
        "NVIDIA H200" = 3.50        # (stack.hardware.gpu_model)
        "NVIDIA H100 80GB HBM3" = 2.40
        cpu = 0.05                  # runs on CPU (per rank-hour)
        default = 2.00              # any other model

    Raises :class:`BadInput` for a missing or malformed file or a negative price."""
    import tomllib

    if per_device_hour is not None:
        if not math.isfinite(per_device_hour) or per_device_hour < 0:
            raise BadInput(f"--price-per-device-hour must be a number >= 0, got {per_device_hour}")
        return Pricing({"default": float(per_device_hour)}, "USD", "--price-per-device-hour")
    if path is None:
        if not Path(CONFIG_FILE).is_file():
            return None
        path = Path(CONFIG_FILE)
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise BadInput(f"--config {path}: no such file") from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: not valid TOML ({exc})") from exc
    prices = data.get("prices")
    if not isinstance(prices, dict) or not prices:
        raise BadInput(f'{path}: expected a [prices] table, e.g. [prices] "NVIDIA H200" = 3.5')
    out: dict[str, float] = {}
    for model, value in prices.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise BadInput(f"{path}: price of {model!r} must be a number >= 0 per device-hour, got {value!r}")
        out[str(model)] = float(value)
    currency = data.get("currency", "USD")
    if not isinstance(currency, str):
        raise BadInput(f"{path}: currency must be a string, e.g. \"USD\"")
    return Pricing(out, currency, str(path))


def devices_of(r: Receipt) -> tuple[int, str]:
    """(devices held, device model) of one attempt; the model names the price ("cpu" for CPU runs)."""
    hw, kind = r.stack.hardware, r.workload.device
    on_gpu = kind == "cuda" or (kind is None and hw.gpu_count > 0)
    count = r.workload.parallelism.world_size or r.stack.launcher.world_size
    if not count and on_gpu and hw.gpu_count:
        count = hw.gpu_count * (r.stack.launcher.nodes or 1)
    model = (hw.gpu_model or "unknown GPU") if on_gpu else "cpu"
    return int(count or 1), model


__all__ = ["CONFIG_FILE", "Pricing", "devices_of", "load_pricing"]
