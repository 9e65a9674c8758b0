"""``assocmem distill CONFIG.yaml [--stage N] [--set key=value ...] [--overwrite]``: the four stages of
cross-architecture distillation (training/distill/). Rerunning the command skips finished stages and resumes a
started one from its newest checkpoint."""
from __future__ import annotations

import argparse
import json
import sys

from .train import SMOKE_HELP


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("distill", help="distill a transformers Llama/Qwen teacher into a hybrid (4 stages)",
                              description="Cross-architecture distillation (thesis §3.4): 1 weight transfer, "
                              "2 attention alignment, 3 logit distillation, 4 SFT; each stage a run folder "
                              "<output_dir>/<name>/stage<k>.")
    p.add_argument("config", help="YAML DistillConfig (training/distill/config.py) or a bundled recipe's name "
                   "(recipes/thesis_table_3_2_distill)")
    p.add_argument("--stage", type=int, choices=(1, 2, 3, 4), help="run only this stage (the one before it must "
                   "be finished); default: every configured stage, finished ones skipped, a started one resumed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set student.replace_fraction=0.5 (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="redo the stages run (their folders are replaced)")
    p.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    p.set_defaults(run=f"{__name__}:_distill")


def _distill(args: argparse.Namespace) -> int:
    from assocmem.training.checkpoint import CheckpointError
    from assocmem.training.config_files import resolve_config
    from assocmem.training.distill.config import load_distill_config
    from assocmem.training.distill.stages import run_distill
    from assocmem.training.loop import NonFiniteLossError, TrainingInterrupted
    from assocmem.training.out_of_memory import OutOfMemory

    try:
        cfg = load_distill_config(resolve_config(args.config), args.overrides, smoke=args.smoke)
        if args.print_config:
            print(cfg.to_yaml(), end="")
            return 0
        summaries = run_distill(cfg, stage=args.stage, overwrite=args.overwrite)
    except TrainingInterrupted as stop:  # Ctrl-C in a stage: its checkpoint is written
        where = f"checkpoint {stop.checkpoint}" if stop.checkpoint is not None else "no checkpoint yet"
        print(f"assocmem distill: interrupted: {where}; resume with `assocmem distill {args.config}` (a started "
              f"stage resumes from its newest checkpoint)", file=sys.stderr)
        return 130
    except OutOfMemory as err:  # in a stage: its newest checkpoint is what is saved
        print(f"assocmem distill: {err.line(f'assocmem distill {args.config}')}", file=sys.stderr)
        return 1
    except (NonFiniteLossError, CheckpointError) as err:
        print(f"assocmem distill: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:  # ConfigError, a folder refused, a teacher the student cannot take
        print(f"assocmem distill: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: v.get("eval") for k, v in summaries.items()}))
    return 0
