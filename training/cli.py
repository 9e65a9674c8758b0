"""The ``assocmem`` command line: the one dispatcher.

One console script with a subcommand per capability. The parser of each subcommand
lives in the floor whose code it drives, in one CLI module per floor, which exposes
``register(subparsers)``: it adds its parsers and sets ``func`` (called with the parsed
namespace, returns an exit code). ``SUBCOMMANDS`` below is the explicit list, no plugin
discovery:

    assocmem derive SPEC / verify [NAME ...]          mixers/cli.py
    assocmem bench mixers|breakdown|decode|train      training/bench/cli.py
    assocmem train CONFIG / eval RUN_DIR              training/run_cli.py
    assocmem probe <name> ... / demo                  probes/cli.py, probes/demo.py
    assocmem eval-harness RUN [lm-eval args]          probes/lm_eval_cli.py
    assocmem experiment <name> ... / reproduce NAME   probes/experiments/cli.py (the annex's one entry)
    assocmem rl CONFIG                                training/rl/cli.py

The table names modules by string and imports only the one a command needs, when it
runs: ``assocmem derive`` does not pay for transformers, and this module imports nothing
from the floor above it (probes) unless a probe command is run. It is the one place
that names a higher floor (tests/test_layering.py allows exactly this table).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing register(subparsers), imported when the subcommand runs
SUBCOMMANDS: dict[str, str] = {
    "derive": "assocmem.mixers.cli",
    "verify": "assocmem.mixers.cli",
    "bench": "assocmem.training.bench.cli",
    "train": "assocmem.training.run_cli",
    "eval": "assocmem.training.run_cli",
    "probe": "assocmem.probes.cli",
    "demo": "assocmem.probes.demo",
    "eval-harness": "assocmem.probes.lm_eval_cli",
    "experiment": "assocmem.probes.experiments.cli",
    "reproduce": "assocmem.probes.experiments.cli",
    "distill": "assocmem.training.distill.cli",
    "rl": "assocmem.training.rl.cli",
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
