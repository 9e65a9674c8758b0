"""``assocmem reproduce --list`` and ``assocmem reproduce NAME [--quick] [--out DIR] [--results DIR]``: rerun a
stored result and check that its numbers hold (probes/experiments/reproduce.py, registry.py)."""
from __future__ import annotations

import argparse
import sys

from .types import seed_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce", help="rerun a stored result (RESULTS/NAME.json) and check that its numbers hold",
        description="Rerun a registered result into a fresh folder and compare it with the stored record: "
                    "a rerun value holds when it lies within the stored mean ± max(range over seeds, atol) "
                    "(and above the result's floor, if it has one).")
    p.add_argument("name", nargs="?", help="result name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered results, their commands and cost")
    p.add_argument("--quick", action="store_true", help="rerun one seed only (the result's quick seeds)")
    p.add_argument("--seeds", type=seed_int, nargs="+", metavar="S", help="rerun these seeds instead")
    p.add_argument("--out", help="folder for the rerun (must not exist or be empty; default: a new temporary folder)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="folder of the stored records <NAME>.json (default: the results shipped with assocmem)")
    p.set_defaults(run=f"{__name__}:reproduce_command")


def reproduce_command(args: argparse.Namespace) -> int:
    from assocmem.probes.experiments.reproduce import list_results, reproduce

    try:
        if args.list:
            print(list_results(args.results), end="")
            return 0
        if not args.name:
            print("assocmem reproduce: give a result name, or --list to see them", file=sys.stderr)
            return 2
        return reproduce(args.name, quick=args.quick, seeds=args.seeds, out=args.out, results=args.results)
    except (KeyError, FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"assocmem reproduce: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
