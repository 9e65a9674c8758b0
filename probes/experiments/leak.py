"""Seed 003 §7.3 on this machine: is ST-1's "spectral snap" a look at the future?

ST-1 as the paper writes it filters each block's update with an rfft mask over the whole sequence
and mixes its middle layer with a circular FFT convolution (FOH, eq. 6): both let position t read
positions after t, so the next byte is visible to the model that has to predict it. This experiment
trains three byte-level models of equal size on a local text and measures, after every epoch,

    bpc          bits per byte by teacher forcing on the held-out blocks (what the paper reports)
    bpc_control  the same prediction with every byte after the predicted position replaced by a random
                 byte: a causal model gives exactly bpc (it never reads those bytes); a model that reads
                 the future loses what it read there
    snap         the paper's definition: the first epoch whose held-out BPC is more than 30 % below the
                 BPC 10 epochs earlier (from the untrained model at epoch 0)

    models       baseline        st1-tiny-baseline: 6 attention layers, learned positions, no steering
                 st1_as_written  st1-tiny: Table 8's low/high-pass steering and FOH, circular as written,
                                 + FGP on the position embedding (top-32 modes, §7.1)
                 st1_causal      st1-tiny-causal: the same with the causal filters and causal FOH, + FGP

If the as-written model's bpc collapses while its bpc_control does not, and the causal model tracks
the baseline, the snap is a leak.

The text is the repository's procedural story text (textgen.py, ``--procedural-chars`` characters
from ``--text-seed``; written to OUT/text.txt) unless ``--text FILE`` names a local file.

    assocmem experiment leak --seeds 0 1 2 --epochs 20 --out runs/leak --result leak.json
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from assocmem.cli.types import positive_int, seed_int

from .frame import Experiment, Outcome, run_jobs, save_outputs, spread

MODELS = {"baseline": "st1-tiny-baseline", "st1_as_written": "st1-tiny", "st1_causal": "st1-tiny-causal"}
FGP_POSITIONS = {"kind": "fgp_adaptive", "param": "model.embed_positions.weight", "top_k": 32}
SNAP_DROP, SNAP_WINDOW = 0.30, 10

# Seed 003 Table 10 (3 seeds, TinyStories characters, 1000 epochs): BPC at epoch 1 / 100 / terminal, snap epoch.
PAPER = {"baseline": {"bpc_epoch_1": 6.85, "bpc_epoch_100": 3.63, "terminal_bpc": 1.907, "snap": None},
         "st1_as_written": {"bpc_epoch_1": 7.61, "bpc_epoch_100": 1.222, "terminal_bpc": 0.018, "snap": 10}}


def leak_config(model: str, seed: int, text: Path, epochs: int, run_dir: Path, *, lr: float = 1e-3) -> dict:
    """The TrainConfig dict of one run."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {list(MODELS)}")
    return {
        "name": run_dir.name, "output_dir": str(run_dir.parent), "seed": seed,
        "model": {"preset": MODELS[model]},
        "data": {"kind": "files", "train_files": [str(text)], "eval_fraction": 0.1, "seq_len": 128,
                 "tokenizer": "bytes", "sample_by": "document",
                 "documents": "joined"},  # as the stored result (results/spectral-leak.json) was trained
        "optim": {"lr": lr, "weight_decay": 0.1, "warmup_steps": min(20, epochs), "min_lr_ratio": 0.1},
        "train": {"epochs": epochs, "batch_size": 32, "eval_batch_size": 64, "threads": 1, "progress": False,
                  "grad_transforms": [] if model == "baseline" else [FGP_POSITIONS]},
    }


# ---------------------------------------------------------------- measures
def bits(nats: float) -> float:
    return nats / math.log(2)


def future_control(model, data, *, cuts_per_block: int, seed: int, batch_size: int = 64) -> tuple[float, float]:
    """(bpc by teacher forcing, bpc with the future replaced by random bytes) at random cut positions.

    For every held-out block x [T] and each of ``cuts_per_block`` cut positions c ∈ [0, T − 2] (seeded),
    the logits at c score x[c + 1] twice: on x itself, and on x with x[c + 1:] replaced by uniform
    random bytes. Returns both means in bits per byte.
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.stack(data.with_format("numpy")["input_ids"]), dtype=torch.long)  # [N, T]
    N, T = ids.shape
    cuts = torch.randint(0, T - 1, (N, cuts_per_block), generator=gen)                     # [N, C]
    rows = ids.repeat_interleave(cuts_per_block, 0)                                          # [N·C, T]
    cut = cuts.flatten()
    noise = torch.randint(0, 256, rows.shape, generator=gen)
    future = torch.arange(T)[None, :] > cut[:, None]
    control = torch.where(future, noise, rows)
    targets = rows[torch.arange(len(rows)), cut + 1]
    nll_tf = nll_ctrl = 0.0
    model.eval()
    with torch.no_grad():
        for s in range(0, len(rows), batch_size):
            sl = slice(s, s + batch_size)
            pick = torch.arange(len(rows[sl])), cut[sl]
            for seqs, acc in ((rows[sl], "tf"), (control[sl], "ctrl")):
                logits = model(input_ids=seqs).logits[pick]                                 # [b, V]
                value = float(F.cross_entropy(logits.float(), targets[sl], reduction="sum"))
                if acc == "tf":
                    nll_tf += value
                else:
                    nll_ctrl += value
    return bits(nll_tf / len(rows)), bits(nll_ctrl / len(rows))


def snap_epoch(curve: list[tuple[int, float]], drop: float = SNAP_DROP, window: int = SNAP_WINDOW) -> int | None:
    """The paper's snap: the first epoch e whose BPC is below (1 − drop) × the BPC at epoch e − window
    (the earliest measured epoch when e < window)."""
    values = dict(curve)
    first = curve[0][0]
    for e, v in curve[1:]:
        ref = values.get(max(first, e - window))
        if ref is not None and v < (1 - drop) * ref:
            return e
    return None


# ---------------------------------------------------------------- one run (a worker process)
def run_one(cfg_dict: dict, *, cuts_per_block: int) -> dict:
    """Train one model epoch by epoch; after each epoch, held-out bpc and bpc_control."""
    import torch

    from assocmem.training.config import config_from_dict
    from assocmem.training.distributed import init_distributed
    from assocmem.training.loop import Trainer

    torch.set_num_threads(1)
    cfg = config_from_dict(cfg_dict)
    run_dir = Path(cfg.output_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, init_distributed("cpu"), run_dir, resume=False)
    steps_per_epoch = math.ceil(len(trainer.train_ds) / cfg.train.batch_size)
    start, cpu = time.perf_counter(), time.process_time()
    curve, control, train_bpc = [], [], []

    def measure(epoch: int) -> None:
        tf, ctrl = future_control(trainer.model, trainer.eval_ds, cuts_per_block=cuts_per_block, seed=epoch)
        trainer.model.train()
        curve.append((epoch, bits(trainer.evaluate()["loss"])))
        control.append((epoch, tf, ctrl))

    measure(0)
    while trainer.step < trainer.total_steps:
        losses = [trainer.train_step()["loss"] for _ in range(min(steps_per_epoch, trainer.total_steps - trainer.step))]
        epoch = math.ceil(trainer.step / steps_per_epoch)
        train_bpc.append((epoch, bits(sum(losses) / len(losses))))
        measure(epoch)
    if trainer.log is not None:
        trainer.log.close()
    last = control[-1]
    record = {"name": cfg.name, "seed": cfg.seed, "preset": cfg.model.preset, "epochs": curve[-1][0],
              "steps_per_epoch": steps_per_epoch, "final_bpc": curve[-1][1], "final_bpc_tf_at_cuts": last[1],
              "final_bpc_control": last[2], "snap_epoch": snap_epoch(curve), "bpc_curve": curve,
              "control_curve": control, "train_bpc": train_bpc, "minutes": (time.perf_counter() - start) / 60,
              "cpu_minutes": (time.process_time() - cpu) / 60,
              "parameters": sum(p.numel() for p in trainer.model.parameters())}
    (run_dir / "leak.json").write_text(json.dumps(record))
    return record


# ---------------------------------------------------------------- the experiment
def run_experiment(*, text: Path, seeds: list[int], models: list[str], epochs: int, jobs: int, out: Path,
                   cuts_per_block: int) -> list[dict]:
    """Every (model, seed) run, ``jobs`` at a time (one torch thread each)."""
    todo = [(m, s) for m in models for s in seeds]
    work = {f"{m} seed {s}": {"cfg_dict": leak_config(m, s, text, epochs, out / "runs" / f"{m}-s{s}"),
                              "cuts_per_block": cuts_per_block} for m, s in todo}
    records = run_jobs("leak-experiment", run_one, work, jobs, _note)
    return [{**r, "model": m} for r, (m, _) in zip(records, todo)]


def _note(r: dict) -> str:
    return (f"bpc {r['final_bpc']:.3f}, control {r['final_bpc_control']:.3f} (teacher forcing at the same cuts "
            f"{r['final_bpc_tf_at_cuts']:.3f}), snap {r['snap_epoch']}, {r['minutes']:.1f} min, "
            f"{r['cpu_minutes']:.1f} CPU min")


def summarize(records: list[dict]) -> list[dict]:
    rows = []
    for m in dict.fromkeys(r["model"] for r in records):
        runs = [r for r in records if r["model"] == m]
        stat = lambda key: spread([r[key] for r in runs])  # noqa: E731
        snaps = [r["snap_epoch"] for r in runs]
        rows.append({"model": m, "seeds": len(runs), "bpc": stat("final_bpc"), "bpc_tf_at_cuts": stat("final_bpc_tf_at_cuts"),
                     "bpc_control": stat("final_bpc_control"), "snapped": sum(s is not None for s in snaps),
                     "snap_epoch": spread(snaps), "epochs": runs[0]["epochs"], "paper": PAPER.get(m)})
    return rows


def markdown_table(rows: list[dict]) -> str:
    fmt = lambda s, d=3: "—" if s is None else f"{s['mean']:.{d}f} [{s['min']:.{d}f}, {s['max']:.{d}f}]"  # noqa: E731
    lines = ["| model | held-out BPC (teacher forcing) | BPC, future replaced by random bytes | "
             "teacher forcing at the same positions | snap (> 30 % in 10 epochs) | paper: terminal BPC / snap |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        paper = r["paper"]
        p = "—" if paper is None else f"{paper['terminal_bpc']} / {paper['snap'] or 'none'}"
        lines.append(f"| {r['model']} | {fmt(r['bpc'])} | {fmt(r['bpc_control'])} | {fmt(r['bpc_tf_at_cuts'])} | "
                     f"{r['snapped']}/{r['seeds']} at {fmt(r['snap_epoch'], 0)} | {p} |")
    return "\n".join(lines) + "\n"


def save_curves(records: list[dict], path: Path) -> Path:
    from ..plotting import finish, integer_axis, log_axis, plt, save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    colours = {m: f"C{i}" for i, m in enumerate(MODELS)}
    seen = set()
    for r in records:
        label = None if r["model"] in seen else r["model"]
        seen.add(r["model"])
        e, v = zip(*r["bpc_curve"])
        left.plot(e, v, color=colours[r["model"]], label=label)
        e, tf, ctrl = zip(*r["control_curve"])
        right.plot(e, ctrl, color=colours[r["model"]], label=label)
        right.plot(e, tf, color=colours[r["model"]], ls=":")
    left.set_title("held-out BPC (teacher forcing)")
    right.set_title("BPC with the future replaced by random bytes (dotted: teacher forcing)")
    for ax in (left, right):
        ax.set_xlabel("epoch (passes over the training blocks)")
        ax.set_ylabel("bits per character")
        log_axis(ax.yaxis)
        integer_axis(ax.xaxis)
        ax.grid(alpha=0.3)
    finish(fig)
    return save_figure(fig, path)


# ---------------------------------------------------------------- command line
def add_flags(flags) -> None:
    source = flags.parser.add_mutually_exclusive_group()
    flags.add("--text", group=source, help="a local text file (byte-level; the last 10 %% of blocks held out); "
              "default: the procedural text of textgen.py")
    flags.add("--procedural-chars", group=source, type=positive_int, default=51_200,
              help="characters of procedural text when no --text is given (default 51200)")
    flags.add("--text-seed", type=seed_int, default=0, help="seed of the procedural text, 0 to 2**32 - 1 (default 0)")
    flags.add("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="models")
    flags.add("--epochs", type=positive_int, default=20, help="passes over the training blocks (default 20)")
    flags.add("--cuts", type=positive_int, default=4, help="control cut positions per held-out block (default 4)")


def text_file(args, out: Path) -> tuple[Path, dict]:
    """The text to train on and a record of where it came from (name, characters, sha256).

    ``--text FILE`` is used as it is; otherwise ``procedural_text(--procedural-chars, --text-seed)`` is
    written to ``out/text.txt`` (the same bytes on every machine).
    """
    import hashlib

    from .textgen import procedural_text

    if args.text is not None:
        path = Path(args.text).resolve()
        source = {"kind": "file", "name": path.name}
    else:
        if args.procedural_chars < 1024:
            raise ValueError(f"--procedural-chars must be >= 1024 (a few 128-byte blocks), got {args.procedural_chars}")
        path = out / "text.txt"
        path.write_text(procedural_text(args.procedural_chars, args.text_seed))
        source = {"kind": "procedural", "chars": args.procedural_chars, "seed": args.text_seed}
    data = path.read_bytes()
    return path, {**source, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def check_text(args) -> None:
    """--text before any work: a file the runs' data reader takes (not empty, UTF-8 text; named with its line)."""
    from assocmem.training.text_files import check_data_file

    if args.text is not None and not Path(args.text).is_file():
        raise FileNotFoundError(f"--text {args.text} is not a file")
    if args.text is not None:
        check_data_file(Path(args.text), "text")


def run(_, args, out: Path) -> Outcome:
    """``assocmem experiment leak``: the runs, leak.{json,md,png} and the numbers of the result record."""
    text, source = text_file(args, out)
    records = run_experiment(text=text, seeds=args.seeds, models=args.models, epochs=args.epochs, jobs=args.jobs,
                             out=out, cuts_per_block=args.cuts)
    rows = summarize(records)
    table = save_outputs(out, "leak", rows, records, markdown_table, save_curves)
    per_seed = {s: {f"{r['model']}/{k}": r[k] for r in records if r["seed"] == s
                    for k in ("final_bpc", "final_bpc_control", "final_bpc_tf_at_cuts")} for s in args.seeds}
    return Outcome(table, per_seed,
                   "Seed 003 §7.3: byte-level ST-1 (as written, causal) vs baseline on the procedural text (or "
                   "--text); held-out BPC and BPC with the future replaced by random bytes",
                   {"rows": rows, "epochs": args.epochs, "text": source, "jobs": args.jobs,
                    "curves": {r["name"]: {"bpc": r["bpc_curve"], "control": r["control_curve"]} for r in records},
                    "snap_epoch": {r["name"]: r["snap_epoch"] for r in records}},
                   name="spectral-leak")


EXPERIMENT = Experiment("leak", help="seed 003 §7.3: ST-1 as written vs causal vs baseline, BPC and BPC with the "
                        "future replaced by random bytes", doc=__doc__, run=run, flags=add_flags,
                        settings=check_text, seeds=(0, 1, 2), quick=False, jobs=2)
