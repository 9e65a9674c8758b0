"""What the evaluation experiments (experiment_tts.py, experiment_niah.py) share: training one
model variant, mean and range over seeds, and writing the result record.

    model, seconds, summary = train_variant(runs, label, hybrid, data, steps=..., batch_size=..., lr=..., seed=...)
    spread([0.2, 0.4, 0.3])   {"mean": 0.3, "min": 0.2, "max": 0.4}
"""
from __future__ import annotations

import time
from pathlib import Path


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
