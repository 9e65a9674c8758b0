"""What ``assocmem reproduce --list`` and ``assocmem reproduce NAME [--quick] [--out DIR] [--results DIR]`` run
(the parser: cli/reproduce.py).

Reruns a registered result (``registry.py``) with its own command into a fresh folder (never
a folder that holds anything, so no run of the user's is touched), then compares the new
record with the stored ``<results>/<NAME>.json`` metric by metric and seed by seed. The
results folder is ``--results DIR``, by default the one shipped with the package. Exit code
0 when every checked number holds, 1 when one does not, 2 on bad input.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from . import registry
from .registry import get, judge, packaged_results, respell, verdict_table


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
    done = subprocess.run([sys.executable, "-m", "assocmem.cli", *argv])
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
    if stored.versions.machine != rerun.versions.machine:
        print(f"note: the record was made on {stored.versions.machine}, the rerun ran on {rerun.versions.machine}; "
              "rounding differs between instruction sets, and a long training run can amplify it (the RL "
              "experiment's SFT stage does: docs/experiments/rl.md)")
    return 0 if held == len(verdicts) else 1
