"""Command line of the runner.

    python -m runners.moe --config NAME [--set key=value]... [--checkpoint-dir DIR] [--resume]

Bad input (unknown config or override key, invalid values, a launch that cannot run them) prints one line,
``error: ...``, on stderr and exits 2 before anything trains. --fail-at-step N crashes on purpose at step N.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from runners.moe.configs import CONFIGS, ConfigError, get_config

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m runners.moe",
        description="Reference MoE training runner (pure PyTorch; CPU or CUDA; torchrun for EP/DP).",
        epilog="Example: python -m runners.moe --config tiny --set moe.top_k=1 --set steps=50\n"
        f"Configs: {', '.join(CONFIGS)}",
    )
    p.add_argument("--config", required=True, help="config name (a function in runners/moe/configs.py)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config field, e.g. moe.num_experts=16 (repeatable)",
    )
    p.add_argument(
        "--checkpoint-dir", help="save checkpoints here (every checkpoint_every steps and at the end)"
    )
    p.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir"
    )
    p.add_argument("--fail-at-step", type=int, metavar="N", help="crash on purpose at step N (restart tests)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.resume and not args.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir")
        if args.fail_at_step is not None and args.fail_at_step < 1:
            raise ConfigError(f"--fail-at-step must be >= 1, got {args.fail_at_step}")
        cfg = get_config(args.config, args.overrides)
        from runners.moe.data import check_data_path
        from runners.moe.train import check_launch, train  # torch is imported from here on

        check_data_path(cfg.data, cfg.model.seq_len)
        from runners.moe.comm import world_from_env

        check_launch(cfg, world_from_env()[1])
        train(
            cfg,
            config_name=args.config,
            overrides=args.overrides,
            checkpoint_dir=args.checkpoint_dir,
            resume=args.resume,
            fail_at_step=args.fail_at_step,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
