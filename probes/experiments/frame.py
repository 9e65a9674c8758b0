"""The frame of every ``assocmem experiment NAME`` command, written once.

An experiment module defines its flags and the work; the frame does the rest:

    EXPERIMENT = Experiment("rl", help="...", doc=__doc__, run=run, flags=add_flags, settings=config)

    1. flags: the experiment's own (``flags(Flags)``), --quick, --threads, --jobs as it asks, then
       --seeds, --out, --overwrite, --result;
    2. before any work: the versions of this process are read (``current_versions``), the settings
       are built and checked (``settings(args)``, e.g. the experiment's config), an existing
       --result is refused (unless --overwrite), --out is prepared;
    3. ``run(settings, args, out) -> Outcome``: the table printed, the numbers of the result record;
    4. with --result, the record (training/results.py), whose command is rebuilt from the parsed
       flags (``Flags.words``: every flag that differs from its default, in the order declared,
       then --seeds, --out, --result); a user error exits 2 with "assocmem experiment NAME: why".

What the runs share: one model trained with ``assocmem train``'s loop (``train_variant``), the
seeds of a config-driven experiment each in ``out/seed_<s>/`` (``run_seeds``), jobs in worker
processes (``run_jobs``), mean and range over seeds (``spread``) and the tables and curves of
a job-based experiment (``save_outputs``).

    spread([0.2, 0.4, 0.3])   {"mean": 0.3, "min": 0.2, "max": 0.4, "n": 3}
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assocmem.cli.types import positive_int, seed_int
from assocmem.training.progress import Progress, progress, progress_line

# what a user's input raises (an existing --out or --result, a missing file, a bad value)
USER_ERRORS: tuple[type[Exception], ...] = (FileExistsError, FileNotFoundError, ValueError)


@dataclass
class Outcome:
    """What one run of an experiment command leaves for the frame to print and record."""

    table: str                                    # markdown, printed
    per_seed: dict[int, dict[str, float | None]]  # seed -> metric -> value: the numbers of the record
    description: str                              # what was run, for the record
    extra: dict[str, Any] = field(default_factory=dict)
    name: str | None = None                       # the record's name (default: the --result file's stem)


class Flags:
    """The flags of one experiment command, kept in order: the recorded command is rebuilt from them."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser
        self.recorded: list[tuple[argparse.Action, bool]] = []

    def add(self, *names: str, always: bool = False, group=None, **kwargs) -> argparse.Action:
        """``parser.add_argument`` (or ``group.add_argument``: a mutually exclusive group of the parser); the
        flag is recorded when it differs from its default (or ``always``)."""
        action = (group or self.parser).add_argument(*names, **kwargs)
        self.recorded.append((action, always))
        return action

    def words(self, args: argparse.Namespace) -> list[str]:
        """The given flags as command-line words (see the module docstring)."""
        last = [(a, always) for a, always in self.recorded if a.dest in ("seeds", "out", "result")]
        words: list[str] = []
        for action, always in [x for x in self.recorded if x not in last] + last:
            value = getattr(args, action.dest)
            if value is None or value is False or (value == action.default and not always):
                continue
            flag = action.option_strings[-1]
            if value is True:
                words.append(flag)
            else:
                words += [flag, *map(_word, value if isinstance(value, list) else [value])]
        return words


def _word(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Experiment:
    """One ``assocmem experiment NAME`` command (see the module docstring)."""

    name: str
    help: str
    doc: str                                                     # the module docstring: --help's description
    run: Callable[[Any, argparse.Namespace, Path], Outcome]     # run(settings, args, out)
    flags: Callable[[Flags], None] = lambda flags: None          # the experiment's own flags
    settings: Callable[[argparse.Namespace], Any] = lambda args: None  # built and checked before any work
    seeds: tuple[int, ...] = (0,)                                # --seeds' default
    quick: bool = True                                           # offers --quick (a smoke-sized run)
    threads: bool = False                                        # offers --threads (the config's field)
    jobs: int | None = None                                      # offers --jobs with this default

    def register(self, sub) -> None:
        """Add ``NAME`` to the ``experiment`` group's subparsers."""
        p = sub.add_parser(self.name, help=self.help, description=self.doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        flags = Flags(p)
        self.flags(flags)
        if self.quick:
            flags.add("--quick", action="store_true", help="a smoke-sized run (minutes)")
        if self.threads:
            flags.add("--threads", type=positive_int, default=None, help="torch threads (default: the config's)")
        if self.jobs is not None:
            flags.add("--jobs", type=positive_int, default=self.jobs, always=True,
                      help=f"runs at once, one torch thread each (default {self.jobs})")
        flags.add("--seeds", type=seed_int, nargs="+", default=list(self.seeds), metavar="S", always=True,
                  help=f"seeds, each 0 to 2**32 - 1 and given once (default {' '.join(map(str, self.seeds))})")
        flags.add("--out", required=True, help="output folder (refused if non-empty, unless --overwrite)")
        p.add_argument("--overwrite", action="store_true",
                       help="replace an existing non-empty --out and an existing --result")
        flags.add("--result", default=None, metavar="PATH",
                  help="also write the result record (training/results.py) to PATH (refused if it exists, "
                       "unless --overwrite)")
        p.set_defaults(func=lambda args: self.main(args, flags), flags=flags)

    def main(self, args: argparse.Namespace, flags: Flags) -> int:
        """Steps 2 to 4 of the module docstring; the exit code."""
        try:
            return self._main(args, flags)
        except USER_ERRORS as err:
            print(f"assocmem experiment {self.name}: {err}", file=sys.stderr)
            return 2

    def _main(self, args: argparse.Namespace, flags: Flags) -> int:
        from assocmem.training.results import command_line, current_versions, write_result

        from ..io import prepare_out

        twice = sorted({s for s in args.seeds if args.seeds.count(s) > 1})
        if twice:
            raise ValueError(f"--seeds: {twice} given more than once; each seed runs once (into <out>/seed_<s>)")
        current_versions()  # read now: the code this process runs, whatever is committed while it runs
        settings = self.settings(args)
        if args.result:
            check_result_path(Path(args.result), args.overwrite)
        out = prepare_out(args.out, args.overwrite)
        start = time.perf_counter()
        progress_line(f"experiment {self.name}")(f"seeds {list(args.seeds)} into {out} ...")  # from the first second
        outcome = self.run(settings, args, out)
        minutes = (time.perf_counter() - start) / 60
        print(outcome.table, end="")
        print(f"{minutes:.1f} min")
        if args.result:
            write_result(args.result, name=outcome.name or Path(args.result).stem,
                         command=command_line("assocmem", ["experiment", self.name, *flags.words(args)]),
                         seeds=args.seeds, per_seed=outcome.per_seed, description=outcome.description,
                         extra={**outcome.extra, "minutes": minutes}, overwrite=args.overwrite)
        print(out)
        return 0


def check_result_path(path: Path, overwrite: bool) -> None:
    """Refuse, before any work, a --result the record could not be written to once the runs are done: an
    existing file (unless ``overwrite``), a folder, or a path through a file."""
    if path.is_dir():
        raise ValueError(f"--result {path} is a folder; give the path of a .json file")
    if path.exists() and not overwrite:
        raise FileExistsError(f"--result {path} exists; pass --overwrite to replace it")
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"--result {path}: {blocking} is a file, not a folder, so the record cannot be written there")


def config_from_flags(config_type, args: argparse.Namespace, updates: dict | None = None):
    """``config_type.quick()`` with --quick, else ``config_type()``, updated by the experiment's own flags
    and --threads (a bad value is refused by the config, naming the field)."""
    cfg = config_type.quick() if args.quick else config_type()
    threads = {"threads": args.threads} if getattr(args, "threads", None) else {}
    try:
        return cfg.model_validate({**cfg.model_dump(), **(updates or {}), **threads})
    except ValidationError as err:  # one line per field, without pydantic's input dump and links
        lines = [f"  {'.'.join(map(str, e['loc'])) or '(settings)'}: {e['msg'].removeprefix('Value error, ')}"
                 for e in err.errors()]
        raise ValueError(f"invalid settings ({config_type.__name__}):\n" + "\n".join(lines)) from None


# ---------------------------------------------------------------- what the runs share
class VariantRecipe(BaseModel):
    """The models and recipe of an experiment that trains small hybrids with ``train_variant``: the
    fields its config shares (subclass it and add the experiment's own)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    models: dict[str, str] = Field(description="label -> layer pattern")
    d_model: int = Field(64, gt=0, description="residual width")
    head_dim: int = Field(16, gt=0, description="head width of every mixer")
    mlp_ratio: float = Field(2.0, ge=0, description="SwiGLU width / d_model")
    num_train: int = Field(20000, gt=0, description="training problems")
    steps: int = Field(600, gt=0, description="optimizer steps per model")
    batch_size: int = Field(32, gt=0, description="sequences per step")
    lr: float = Field(3e-3, gt=0, description="peak learning rate")
    threads: int | None = Field(1, gt=0, description="torch threads")

    def train(self, runs: Path, label: str, vocab_size: int, data: dict, seed: int) -> tuple[object, float, dict]:
        """``train_variant`` of the model ``label`` (its layer pattern in ``models``) on ``data``."""
        hybrid = {"d_model": self.d_model, "vocab_size": vocab_size, "layers": self.models[label],
                  "head_dim": self.head_dim, "mlp_ratio": self.mlp_ratio}
        return train_variant(runs, label, hybrid, data, steps=self.steps, batch_size=self.batch_size, lr=self.lr,
                             seed=seed, threads=self.threads)


def train_variant(runs: Path, label: str, hybrid: dict, data: dict, *, steps: int, batch_size: int, lr: float,
                  seed: int, threads: int | None) -> tuple[object, float, dict]:
    """Train one model with ``assocmem train``'s loop (warm-up 10 %, cosine, AdamW wd 0.1); returns
    (the final model in eval mode, training seconds, the run summary)."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train
    from assocmem.training.model_factory import load_pretrained

    cfg = {"name": label, "output_dir": str(runs), "seed": seed, "model": {"hybrid": hybrid}, "data": data,
           "optim": {"lr": lr, "weight_decay": 0.1, "warmup_steps": max(1, steps // 10)},
           "train": {"steps": steps, "batch_size": batch_size, "progress": False, "threads": threads,
                     "log_every": max(1, steps // 20), "eval_every": max(1, steps // 4)}}
    start = time.time()
    summary = train(config_from_dict(cfg), overwrite=True)
    return load_pretrained(runs / label), time.time() - start, summary


def spread(values) -> dict | None:
    """Mean, min, max and count over the seeds that have a value (None when none has: e.g. no length
    beyond the training length was probed, a run that never grokked)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    return {"mean": sum(kept) / len(kept), "min": min(kept), "max": max(kept), "n": len(kept)}


def seeded_run(run_experiment, markdown_table, seed_metrics, describe: Callable[[Any], str],
               extra: Callable[[dict], dict] = lambda summary: {}) -> Callable[..., Outcome]:
    """``run(cfg, args, out)`` of a config-driven experiment: ``run_experiment(cfg, seeds, out)`` (``run_seeds``),
    then its table, the flat numbers ``seed_metrics(per_seed, cfg)``, ``describe(cfg)`` and the record's
    extra: the config and ``extra(summary)``."""
    def run(cfg, args: argparse.Namespace, out: Path) -> Outcome:
        result = run_experiment(cfg, args.seeds, out)
        return Outcome(markdown_table(result["summary"], cfg), seed_metrics(result["per_seed_raw"], cfg),
                       describe(cfg), {"config": cfg.model_dump(), **extra(result["summary"])})
    return run


def run_seeds(name: str, cfg, seeds: list[int], out: str | Path, *, run_seed, summarize, markdown_table,
              save_figures) -> dict:
    """The seeds of a config-driven experiment: each into ``out/seed_<s>/`` (``run_seed(cfg, s, folder)``)
    at ``cfg.threads`` torch threads, then ``out/<name>_experiment.json`` (config, seeds, versions,
    per-seed results, ``summarize(per_seed, cfg)``), its markdown table and its figures
    (``save_figures(summary, cfg, out)``)."""
    import torch

    from assocmem.training.results import current_versions

    out = Path(out)
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        per_seed = {s: run_seed(cfg, s, out / f"seed_{s}")
                    for s in progress(seeds, f"{name}-experiment", label=lambda s: f"seed {s}")}
    finally:
        torch.set_num_threads(threads)
    summary = summarize(per_seed, cfg)
    result = {"experiment": name, "config": cfg.model_dump(), "seeds": seeds,
              "versions": current_versions().model_dump(), "per_seed": {str(s): r for s, r in per_seed.items()},
              "summary": summary}
    (out / f"{name}_experiment.json").write_text(json.dumps(result, indent=2))
    (out / f"{name}_experiment.md").write_text(markdown_table(summary, cfg))
    save_figures(summary, cfg, out)
    return {**result, "per_seed_raw": per_seed}


def run_jobs(name: str, fn: Callable[..., dict], jobs: dict[str, dict], workers: int,
             note: Callable[[dict], str]) -> list[dict]:
    """``fn(**kwargs)`` for every ``label -> kwargs`` of ``jobs`` in ``workers`` spawned processes (each sets
    its own torch threads); the results in the order of ``jobs``, each reported when done with ``note``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    tracker = Progress(len(jobs), f"{name} ({workers} at a time)")
    tracker.say(f"{len(jobs)} runs started: {', '.join(jobs)} ...")
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        pending = {pool.submit(fn, **kwargs): key for key, kwargs in jobs.items()}
        for done in as_completed(pending):
            tracker.done(pending[done], note(done.result()))
        results = {pending[f]: f.result() for f in pending}
    return [results[key] for key in jobs]


def save_outputs(out: Path, name: str, rows: list[dict], records: list[dict], markdown_table, save_curves) -> str:
    """``out/NAME.json`` (rows, runs), ``NAME.md`` (``markdown_table(rows)``) and ``NAME.png``
    (``save_curves(records, path)``); returns the table."""
    table = markdown_table(rows)
    (out / f"{name}.json").write_text(json.dumps({"rows": rows, "runs": records}, indent=1))
    (out / f"{name}.md").write_text(table)
    save_curves(records, out / f"{name}.png")
    return table
