"""What the multi-seed experiments share: training one model variant, running the seeds (run_seeds),
mean and range over seeds, the command line of a config-driven experiment (add_seeded_flags,
seeded_cli: experiment_tts.py, experiment_niah.py), the files every experiment writes (save_outputs:
grokking.py, leak.py) and the result record.

    model, seconds, summary = train_variant(runs, label, hybrid, data, steps=..., batch_size=..., lr=..., seed=...)
    spread([0.2, 0.4, 0.3])   {"mean": 0.3, "min": 0.2, "max": 0.4}
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from assocmem.training.progress import progress


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
    """Mean, min and max over the seeds that have a value (None when none has: e.g. no length
    beyond the training length was probed)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    return {"mean": sum(kept) / len(kept), "min": min(kept), "max": max(kept)}


def check_result_path(args) -> None:
    """--result needs --seeds' set and refuses an existing file unless --overwrite (before any work)."""
    if args.result and Path(args.result).exists() and not args.overwrite:
        raise FileExistsError(f"--result {args.result} exists; pass --overwrite to replace it")


def write_record(args, argv: list[str], *, per_seed: dict, description: str, extra: dict) -> None:
    """The result record (training/results.py) of an experiment run with ``args.seeds``."""
    from assocmem.training.results import command_line, write_result

    write_result(args.result, name=Path(args.result).stem, command=command_line("assocmem", argv), seeds=args.seeds,
                 per_seed=per_seed, description=description, extra=extra, overwrite=args.overwrite)


def run_seeds(name: str, cfg, seeds: list[int], out: str | Path, *, run_seed, summarize, markdown_table,
              save_figures) -> dict:
    """The frame of every multi-seed experiment: each seed into ``out/seed_<s>/`` (``run_seed(cfg, s,
    folder)``) at ``cfg.threads`` torch threads, then ``out/<name>_experiment.json`` (config, seeds,
    versions, per-seed results, ``summarize(per_seed, cfg)``), its markdown table and its figures
    (``save_figures(summary, cfg, out)``)."""
    import torch

    from assocmem.training.results import current_versions

    current_versions()  # read now: the code this process starts with, whatever is committed while it trains
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


def add_seeded_flags(p) -> None:
    """--seeds, --quick, --threads, --result and the common probe flags of a config-driven experiment."""
    from .io import add_common_flags

    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default 0)")
    p.add_argument("--quick", action="store_true", help="a smoke-sized run (a few minutes)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the config's, 1)")
    p.add_argument("--result", default=None, metavar="PATH",
                   help="also write the result record (training/results.py) to PATH (refused if it exists, "
                        "unless --overwrite)")
    add_common_flags(p)


def seeded_cli(args, command: str, config_type, run_experiment, markdown_table, record, options=None) -> Path:
    """``assocmem probe COMMAND`` for a config-driven experiment (flags of ``add_seeded_flags``):

    1. refuse an existing --result and prepare --out (before any work);
    2. ``config_type.quick()`` or ``config_type()``, with --threads and, if given, the experiment's own
       flags: ``options(args)`` returns (config field updates, those flags as command-line words);
    3. ``run_experiment(cfg, seeds, out)`` and print its markdown table;
    4. with --result, the record: ``record(result, cfg)`` gives (per_seed, extra, description).
    """
    from assocmem.training.results import current_versions

    from .io import prepare_out

    current_versions()  # read now: the code this process runs, whatever is committed while it runs
    check_result_path(args)
    updates, words = options(args) if options is not None else ({}, [])
    cfg = config_type.quick() if args.quick else config_type()
    cfg = cfg.model_validate({**cfg.model_dump(), **updates, **({"threads": args.threads} if args.threads else {})})
    out = prepare_out(args.out, args.overwrite)
    result = run_experiment(cfg, args.seeds, out)
    print(markdown_table(result["summary"], cfg), end="")
    if args.result:
        argv = ["probe", command, *words, *(["--quick"] if args.quick else []),
                *(["--threads", str(args.threads)] if args.threads else []), "--seeds", *map(str, args.seeds),
                "--out", args.out, "--result", args.result]
        per_seed, extra, description = record(result, cfg)
        write_record(args, argv, per_seed=per_seed, extra=extra, description=description)
    return out


def save_outputs(out: Path, name: str, rows: list[dict], records: list[dict], minutes: float, markdown_table,
                 save_curves) -> None:
    """``out/NAME.json`` (rows, runs, minutes), ``NAME.md`` (``markdown_table(rows)``) and ``NAME.png``
    (``save_curves(records, path)``); the table and the minutes are printed."""
    (out / f"{name}.json").write_text(json.dumps({"rows": rows, "runs": records, "minutes": minutes}, indent=1))
    (out / f"{name}.md").write_text(markdown_table(rows))
    save_curves(records, out / f"{name}.png")
    print(markdown_table(rows), end="")
    print(f"{minutes:.1f} min")
