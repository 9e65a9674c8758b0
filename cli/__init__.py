"""The ``assocmem`` command line: every parser, one way to register one.

One console script with a subcommand per capability. Each command module here defines
``add_parser(subparsers)``: it adds its parser(s) and sets ``run="module:function"``, the
handler, named by string and imported only when the command runs (it takes the parsed
namespace and returns the exit code). ``SUBCOMMANDS`` is the explicit table, no plugin discovery:

    assocmem derive SPEC / verify [NAME ...]          cli/mixers.py
    assocmem bench mixers|breakdown|scaling|decode|train   cli/bench.py
    assocmem train CONFIG / eval RUN_DIR              cli/train.py
    assocmem probe <name> ...                         cli/probe.py (tts, niah: cli/sampling.py)
    assocmem demo                                     cli/demo.py
    assocmem eval-harness RUN [lm-eval args]          cli/eval_harness.py
    assocmem experiment NAME ...                      cli/experiment.py (parsers: probes/experiments/frame.py)
    assocmem reproduce --list / NAME                  cli/reproduce.py
    assocmem distill CONFIG                           cli/distill.py
    assocmem rl CONFIG                                cli/rl.py

The parser modules import argparse and cheap stdlib only, so ``assocmem --help`` and
``assocmem derive --help`` print without importing torch or transformers; the library (on its
floors: memories < mixers < models < training < probes) is imported by the handler. This
package is the top floor: it may import every floor, and no floor imports it.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from pathlib import Path

# subcommand -> module of this package defining add_parser(subparsers)
SUBCOMMANDS: dict[str, str] = {
    "derive": "mixers",
    "verify": "mixers",
    "bench": "bench",
    "train": "train",
    "eval": "train",
    "probe": "probe",
    "demo": "demo",
    "eval-harness": "eval_harness",
    "experiment": "experiment",
    "reproduce": "reproduce",
    "distill": "distill",
    "rl": "rl",
}


def build_parser(only: str | None = None, *, deferred: bool = False) -> argparse.ArgumentParser:
    """The parser of every command, or of the command ``only`` (the others are not built).

    A command parser may defer part of itself until it parses (``assocmem experiment``: the
    experiment modules import torch): ``deferred=True`` leaves those parts unbuilt, as ``main``
    does; by default they are built (``complete()``), so the whole tree can be read.
    """
    parser = argparse.ArgumentParser(
        prog="assocmem",
        description="Sequence mixers as associative memories: derive, verify, bench, train, probe.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [SUBCOMMANDS[only]] if only else list(dict.fromkeys(SUBCOMMANDS.values()))
    for module in modules:  # a module may add several commands (train + eval)
        importlib.import_module(f"{__name__}.{module}").add_parser(sub)
    if not deferred:
        for command in sub.choices.values():
            getattr(command, "complete", lambda: None)()
    return parser


def module_doc(module: str) -> str:
    """The docstring of a library module, read from its source without running it (for --help)."""
    origin = importlib.util.find_spec(module).origin
    return ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8"))) or ""


def handler(run: str):
    """The function named ``"package.module:function"`` (imported now)."""
    module, _, name = run.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in SUBCOMMANDS else None  # unknown: argparse lists the choices
    args = build_parser(only, deferred=True).parse_args(argv)
    return int(handler(args.run)(args) or 0)
