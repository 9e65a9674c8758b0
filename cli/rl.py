"""``assocmem rl CONFIG.yaml [--set key=value ...] [--resume | --overwrite]``.

Under torchrun the same command runs on every process:

    torchrun --nproc_per_node=2 -m assocmem.cli rl CONFIG.yaml
"""
from __future__ import annotations

import argparse
import json
import sys

from .train import SMOKE_HELP


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("rl", help="RL after SFT: GRPO family, gradient-balanced GRPO, self-distillation",
                              description="Reinforcement learning on a verifiable task from a YAML RLConfig "
                                          "(training/rl/config.py).")
    p.add_argument("config", help="YAML RLConfig file or a bundled recipe's name (recipes/nautile_rl_balanced)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set loss.algorithm=balanced (repeatable)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue from the newest checkpoint that verifies (exact)")
    mode.add_argument("--overwrite", action="store_true", help="replace an existing run folder of the same name")
    p.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    p.set_defaults(run=f"{__name__}:_rl")


def _rl(args: argparse.Namespace) -> int:
    from assocmem.training.config_files import ConfigError, resolve_config
    from assocmem.training.rl.config import load_rl_config

    try:
        cfg = load_rl_config(resolve_config(args.config), args.overrides, smoke=args.smoke)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(cfg.to_yaml())
        return 0
    from assocmem.training.checkpoint import CheckpointError
    from assocmem.training.loop import NonFiniteLossError, TrainingInterrupted
    from assocmem.training.out_of_memory import OutOfMemory
    from assocmem.training.rl.loop import train_rl

    try:
        summary = train_rl(cfg, resume=args.resume, overwrite=args.overwrite)
    except TrainingInterrupted as stop:  # Ctrl-C: the checkpoint is written, the message says how to resume
        print(f"assocmem rl: {stop}", file=sys.stderr)
        return 130
    except (NonFiniteLossError, CheckpointError, OutOfMemory) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as err:  # a run folder refused (output_dir a file, ...), a reference that differs
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0
