"""``python -m runners.megatron``: build a Megatron-LM launch from a config and run it under `ledger record`."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from runners.megatron.config import ConfigError, apply_overrides, get_config, load_params
from runners.megatron.flags import WORKLOAD_ENV, record_command, torchrun_command, workload


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runners.megatron", description=__doc__)
    p.add_argument("--pretrain", required=True, help="Path of Megatron-LM's pretrain_gpt.py.")
    p.add_argument("--config", default="tiny_moe", help="Config function (tiny_moe, tiny_dense, small_moe).")
    p.add_argument("--params", type=Path, help="A params file (YAML or JSON) whose section overrides the config.")
    p.add_argument("--section", default="megatron", help="Section of --params (dotted), default: megatron.")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="Override one config field; repeatable, e.g. --set precision=fp8-delayed.")
    p.add_argument("--name", help="Receipt name.")
    p.add_argument("--tag", action="append", default=[], metavar="K=V", help="Receipt tag; repeatable.")
    p.add_argument("--ledger", help="Ledger directory.")
    p.add_argument("--no-record", action="store_true", help="Run torchrun directly, not under ledger record.")
    p.add_argument("--dry-run", action="store_true", help="Print the command and the workload; run nothing.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = get_config(args.config)
        overrides: list[str] = []
        if args.params is not None:
            section = load_params(args.params, args.section)
            overrides += [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in section.items()]
        overrides += args.overrides
        cfg = apply_overrides(cfg, overrides)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    cmd = torchrun_command(cfg, args.pretrain) if args.no_record else record_command(
        cfg, args.pretrain, args.name, args.tag, args.ledger)
    wl = workload(cfg, args.config, overrides)
    if args.dry_run:
        print(shlex.join(cmd))
        print(json.dumps(wl.model_dump(mode="json", exclude_defaults=True), indent=1, sort_keys=True))
        return 0
    with tempfile.TemporaryDirectory(prefix="megatron-workload-") as tmp:
        path = Path(tmp) / "workload.json"
        path.write_text(json.dumps(wl.model_dump(mode="json")))
        return subprocess.call(cmd, env={**os.environ, WORKLOAD_ENV: str(path)})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
