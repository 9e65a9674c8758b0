"""``assocmem experiment NAME ...``: the experiments of the annex (probes/experiments/), one subcommand each.

Each experiment module holds an ``EXPERIMENT`` (``probes/experiments/frame.Experiment``) that adds its
own parser (``register(subparsers)``: the frame's flags and the experiment's). Those modules import
torch, so they are added only when ``assocmem experiment`` is the command parsed (or the tree is
``complete()``d); ``assocmem --help`` does not load them. This module and cli/reproduce.py are the
only ones outside the annex that reach into it.
"""
from __future__ import annotations

import argparse
import importlib

ANNEX = "assocmem.probes.experiments"
# `assocmem experiment NAME` for each, in this order (modules of the annex)
EXPERIMENTS = ("hybrid", "rl", "tts", "niah", "distill", "wiola", "wiola_claims", "grokking", "leak", "dt_stability",
               "text_demo")


class _ExperimentParser(argparse.ArgumentParser):
    """The ``experiment`` parser, which adds the experiments' parsers when it first parses (or ``complete()``)."""

    experiments: argparse._SubParsersAction
    added = False

    def complete(self) -> None:
        if not self.added:
            self.added = True
            for name in EXPERIMENTS:
                importlib.import_module(f"{ANNEX}.{name}").EXPERIMENT.register(self.experiments)
            for parser in self.experiments.choices.values():  # the frame's handler, through this module
                parser.set_defaults(run=f"{__name__}:experiment")

    def parse_known_args(self, args=None, namespace=None):
        self.complete()
        return super().parse_known_args(args, namespace)


def add_parser(subparsers) -> None:
    """Add ``experiment``; its subcommands come from the annex when it parses."""
    p = subparsers.add_parser("experiment", help="the experiments behind the README's numbers (train, probe, "
                              "tabulate, record)",
                              description="Experiments: each trains its models, measures them, writes tables and "
                                          "figures into --out and, with --result, the result record that "
                                          "`assocmem reproduce` checks.")
    p.__class__ = _ExperimentParser  # argparse makes every command's parser of one class; this one defers
    sub = p.experiments = p.add_subparsers(dest="experiment", metavar="EXPERIMENT",
                                           parser_class=argparse.ArgumentParser)
    sub.required = True


def experiment(args: argparse.Namespace) -> int:
    """An experiment command: the frame's own handler (``Experiment.main``), set by its parser."""
    return args.func(args)
