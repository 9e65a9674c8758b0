"""``assocmem eval-harness RUN [lm-eval arguments]``: lm-evaluation-harness on an assocmem model
(probes/lm_eval_cli.py builds lm-eval's command line and runs it)."""
from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval-harness", help="run lm-evaluation-harness on a run folder, a saved model or a Hub id",
        description="lm-evaluation-harness (hf backend) on RUN; the arguments after RUN go to lm-eval "
                    "(--tasks, --limit, --batch_size, --output_path, --model_args extra=..., --include_path FOLDER "
                    "for local tasks). --tasks assocmem_copy is a local task assocmem ships (no download). "
                    "Needs the [eval] extra.")
    p.add_argument("model", metavar="RUN", help="a run folder (its final/), a save_pretrained folder or a Hub id")
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, metavar="LM_EVAL_ARGS",
                   help="lm-eval arguments, e.g. --tasks hellaswag --limit 100")
    p.set_defaults(run=f"{__name__}:eval_harness")


def eval_harness(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from assocmem.probes.lm_eval_cli import harness_argv, run_lm_eval

    with tempfile.TemporaryDirectory(prefix="assocmem-tasks-") as tasks:  # the shipped local tasks, if asked for
        try:
            argv = harness_argv(args.model, args.lm_eval_args, local_tasks=Path(tasks))
        except (OSError, ValueError) as err:  # a missing folder, an unreachable Hub id, a refused argument
            print(f"assocmem eval-harness: {err}", file=sys.stderr)
            return 2
        try:
            import lm_eval  # noqa: F401
        except ImportError as err:
            print(f"assocmem eval-harness: lm-evaluation-harness is not installed ({err}); pip install "
                  f"'assocmem[eval]' (or make setup-eval)", file=sys.stderr)
            return 2
        run_lm_eval(argv)
    return 0
