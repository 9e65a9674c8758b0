"""The ``assocmem`` command line.

One console script with a subcommand per capability. Each subcommand lives next
to the code it drives and exposes ``register(subparsers)``, which adds its
parser and sets ``func`` (called with the parsed namespace, returns an exit
code). The table below is the explicit list: no plugin discovery.

    assocmem derive SPEC            memories/cli.py
    assocmem verify [NAME ...]      mixers/verify_cli.py
    assocmem bench mixers|breakdown|decode|train
                                    mixers/bench.py, mixers/breakdown.py, models/bench.py,
                                    training/bench_train.py (via training/bench_cli.py)
    assocmem train CONFIG / eval    training/run_cli.py
    assocmem probe <name> ...       probes/cli.py
    assocmem demo                   training/demo.py
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing register(subparsers); imported lazily so that
# `assocmem derive` does not pay for transformers/datasets imports.
SUBCOMMANDS: dict[str, str] = {
    "derive": "assocmem.memories.cli",
    "verify": "assocmem.mixers.verify_cli",
    "bench": "assocmem.training.bench_cli",
    "train": "assocmem.training.run_cli",
    "eval": "assocmem.training.run_cli",
    "probe": "assocmem.probes.cli",
    "demo": "assocmem.training.demo",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assocmem",
        description="Sequence mixers as associative memories: derive, verify, bench, train, probe.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [SUBCOMMANDS[only]] if only else list(dict.fromkeys(SUBCOMMANDS.values()))
    for module in modules:  # a module may register several subcommands (train + eval)
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the module of the requested subcommand (fast --help per command).
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in SUBCOMMANDS else None  # unknown: argparse lists the choices
    parser = build_parser(only)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
