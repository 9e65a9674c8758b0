"""``assocmem experiment NAME ...`` and ``assocmem reproduce ...``: the annex's one registration point.

The dispatcher (``assocmem.training.cli``) names this module for both commands; nothing else
outside probes/experiments/ imports the annex. ``EXPERIMENTS`` is the list of experiment modules,
each with an ``EXPERIMENT`` (``frame.Experiment``).
"""
from __future__ import annotations

import importlib

from . import reproduce

# `assocmem experiment NAME` for each, in this order (modules of this package)
EXPERIMENTS = ("hybrid", "rl", "tts", "niah", "distill", "wiola", "wiola_claims", "grokking", "leak")


def register(subparsers) -> None:
    """Add ``experiment`` (one subcommand per experiment) and ``reproduce`` (called by the dispatcher)."""
    p = subparsers.add_parser("experiment", help="the experiments behind the README's numbers (train, probe, "
                              "tabulate, record)",
                              description="Experiments: each trains its models, measures them, writes tables and "
                                          "figures into --out and, with --result, the result record that "
                                          "`assocmem reproduce` checks.")
    sub = p.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    sub.required = True
    for name in EXPERIMENTS:
        importlib.import_module(f"{__package__}.{name}").EXPERIMENT.register(sub)
    reproduce.register(subparsers)
