"""``assocmem demo [--out DIR] [--steps N]``: derive, verify, train and probe on built-in defaults
(probes/demo.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from . import module_doc
from .types import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="derive, verify, train and probe on built-in defaults",
                       description=module_doc("assocmem.probes.demo"))
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (a new one is made)")
    p.add_argument("--steps", type=positive_int, default=300, help="training steps of the MQAR hybrid (default 300)")
    p.set_defaults(run=f"{__name__}:demo")


def demo(args: argparse.Namespace) -> int:
    from assocmem.probes.demo import run_demo

    return run_demo(args.out, args.steps)
