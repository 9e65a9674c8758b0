"""``assocmem reproduce --list`` and ``assocmem reproduce NAME [--quick] [--out DIR] [--results DIR]``.

Reruns a registered result (``registry.py``) with its own command into a fresh folder (never
a folder that holds anything, so no run of the user's is touched), then compares the new
record with the stored ``<results>/<NAME>.json`` metric by metric and seed by seed. The
results folder is ``--results DIR``, by default the one shipped with the package. Exit code
0 when every checked number holds, 1 when one does not, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from . import registry
from .registry import get, judge, packaged_results, respell, verdict_table


def register(subparsers) -> None:
    """Add the ``reproduce`` subcommand (called by cli.py)."""
    p = subparsers.add_parser(
        "reproduce", help="rerun a stored result (RESULTS/NAME.json) and check that its numbers hold",
        description="Rerun a registered result into a fresh folder and compare it with the stored record: "
                    "a rerun value holds when it lies within the stored mean ± max(range over seeds, atol) "
                    "(and above the result's floor, if it has one).")
    p.add_argument("name", nargs="?", help="result name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered results, their commands and cost")
    p.add_argument("--quick", action="store_true", help="rerun one seed only (the result's quick seeds)")
    p.add_argument("--seeds", type=int, nargs="+", metavar="S", help="rerun these seeds instead")
    p.add_argument("--out", help="folder for the rerun (must not exist or be empty; default: a new temporary folder)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="folder of the stored records <NAME>.json (default: the results shipped with assocmem)")
    p.set_defaults(func=_cli)


def _fresh_folder(out: str | None, name: str) -> Path:
    if out is None:
        return Path(tempfile.mkdtemp(prefix=f"assocmem-reproduce-{name}-"))
    path = Path(out)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"--out {path} is not an empty folder; a rerun never writes into existing runs "
                              f"(give a new path, or leave --out out for a temporary folder)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _results_folder(results: str | Path | None) -> Path:
    folder = packaged_results() if results is None else Path(results)
    if not folder.is_dir():
        raise FileNotFoundError(f"--results {folder} is not a folder (it holds the stored records <NAME>.json)")
    return folder


def list_results(results: str | Path | None = None) -> str:
    """Markdown table of the registry with each stored summary (from ``results``, default: the packaged ones)."""
    from assocmem.training.results import read_result

    folder = _results_folder(results)
    rows = ["| name | seeds | minutes (all seeds / --quick) | checked: stored mean [min, max] | command |",
            "|---|---|---|---|---|"]
    for entry in registry.REPRODUCIBLE.values():
        try:
            stored = read_result(entry.stored_path(folder))
            checked = "; ".join(f"{c.metric} {stored.summary[c.metric].mean:.3g} "
                                f"[{stored.summary[c.metric].min:.3g}, {stored.summary[c.metric].max:.3g}]"
                                for c in entry.checks if c.metric in stored.summary)
        except (FileNotFoundError, ValueError) as err:
            checked = f"(stored record unreadable: {err})"
        minutes = f"{entry.minutes_per_seed * len(entry.seeds):.0f} / " \
                  f"{entry.minutes_per_seed * len(entry.rerun_seeds(True)):.0f}"
        rows.append(f"| {entry.name} | {' '.join(map(str, entry.seeds))} | {minutes} | {checked} | "
                    f"`{entry.documented_command()}` |")
    return "\n".join(rows) + "\n"


def reproduce(name: str, *, quick: bool = False, seeds: list[int] | None = None, out: str | None = None,
              results: str | Path | None = None) -> int:
    """Rerun ``name`` and print the verdicts; returns the exit code (0 all hold, 1 some do not)."""
    from assocmem.training.results import read_result

    entry = get(name)
    folder = _results_folder(results)
    stored = read_result(entry.stored_path(folder))
    rerun_folder = _fresh_folder(out, name)
    chosen = tuple(seeds) if seeds else entry.rerun_seeds(quick)
    argv = entry.argv(chosen, rerun_folder / "runs", rerun_folder / "result.json", folder)
    print(f"reproduce {name}: seeds {list(chosen)}, about {entry.minutes_per_seed * len(chosen):.0f} min on one "
          f"thread of an idle 2-core AMD EPYC\n  stored by: {stored.command}"
          + (f"\n  (today:    {respell(stored.command)})" if respell(stored.command) != stored.command else "")
          + f"\n  rerun:     assocmem {' '.join(argv)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "assocmem.training.cli", *argv])
    if done.returncode != 0:
        print(f"assocmem reproduce: the command failed (exit {done.returncode}); nothing to compare",
              file=sys.stderr)
        return 2
    rerun = read_result(rerun_folder / "result.json")
    verdicts = judge(entry, stored, rerun)
    table = verdict_table(verdicts, stored)
    held = sum(v.holds for v in verdicts)
    (rerun_folder / "reproduce.json").write_text(json.dumps({
        "name": name, "seeds": list(chosen), "stored": str(entry.stored_path(folder)), "held": held,
        "checked": len(verdicts), "verdicts": [{**v.__dict__, "holds": v.holds} for v in verdicts]}, indent=2))
    print(f"\n{table}\n{held} of {len(verdicts)} checked numbers hold "
          f"(stored: {stored.versions.assocmem_commit or '?'} on {stored.versions.machine}; "
          f"rerun: {rerun.versions.assocmem_commit or '?'} on {rerun.versions.machine})\nrerun folder: {rerun_folder}")
    return 0 if held == len(verdicts) else 1


def _cli(args: argparse.Namespace) -> int:
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
