"""``assocmem train CONFIG.yaml [--set key=value ...] [--resume | --overwrite]`` and ``assocmem eval RUN_DIR``.

Under torchrun the same command trains with DDP on every process:

    torchrun --nproc_per_node=2 -m assocmem.training.cli train CONFIG.yaml
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import ConfigError, load_config


def register(subparsers) -> None:
    """Add the ``train`` and ``eval`` subcommands (called by training/cli.py)."""
    p = subparsers.add_parser("train", help="train a model from a YAML TrainConfig",
                              description="Train a model from a YAML TrainConfig (see training/configs/).")
    p.add_argument("config", help="YAML TrainConfig file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set optim.lr=1e-3 --set model.hybrid.layers=gdn,attn (repeatable)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint (exact)")
    mode.add_argument("--overwrite", action="store_true", help="replace an existing run folder of the same name")
    p.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    p.set_defaults(func=_train)

    e = subparsers.add_parser("eval", help="evaluate a trained run",
                              description="Evaluate a run's checkpoint on its eval set or on other data.")
    e.add_argument("run_dir", help="a run folder (with config.yaml and checkpoints/)")
    e.add_argument("--data", help="YAML file holding a `data:` section (or the section itself) to evaluate on")
    e.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override config fields before evaluating, e.g. --set data.num_kv_pairs=32")
    e.add_argument("--checkpoint", help="checkpoint folder (default: the run's latest)")
    e.add_argument("--batch-size", type=int, help="sequences per forward (default: train.eval_batch_size)")
    e.add_argument("--json", help="write the metrics to this file (default: RUN_DIR/eval.json)")
    e.set_defaults(func=_eval)


def _train(args: argparse.Namespace) -> int:
    from .loop import train

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    try:
        summary = train(cfg, resume=args.resume, overwrite=args.overwrite)
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("name", "steps", "tokens_per_s", "eval")}))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate_run

    try:
        metrics = evaluate_run(args.run_dir, data=args.data, overrides=args.overrides,
                               checkpoint=args.checkpoint, batch_size=args.batch_size)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"assocmem eval: {err}", file=sys.stderr)
        return 2
    out = Path(args.json) if args.json else Path(args.run_dir) / "eval.json"
    out.write_text(json.dumps(metrics, indent=2))
    print(json.dumps(metrics))
    return 0
