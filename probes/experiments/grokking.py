"""Seed 003 §5 on this machine: does projecting the embedding gradient onto prescribed Fourier modes
(PFFT / FGP) make modular addition grok sooner, as the paper claims (p = 97: 57 vs 782 epochs)?

The model and recipe are Nanda et al. 2023's (progress-measures-paper, ``Config``): one layer, d 128,
4 heads of 32, ReLU MLP 512 with biases, no LayerNorm, learned positions, untied embed/unembed,
weights ~ N(0, 1/d); full-batch AdamW (lr 1e-3, weight decay 1.0, betas 0.9/0.98, 10 warm-up steps,
then constant), 30 % of the p² pairs train (their split: the ``modular`` data kind). Differences, all
stated in the README: our AdamW decays only matrices (their biases are decayed too), and the sequence
carries the answer as a 4th token so that HF-aligned labels score the '=' position (causal: it
changes no number).

Variants (``VARIANTS``): the baseline, PFFT with the paper's Table 1 sets on W_E's token axis (the p
number rows; the '=' row is left alone), adaptive FGP (top-5 modes per step) and GrokFast-EMA (α 0.98,
λ 2.0, all parameters) as the comparator. Per run:

    grokking epoch (ETG)  first evaluated epoch from which held-out accuracy stays >= 0.99 to the end of
                          the run (the run stops once it has held for ``patience`` evaluations)
    memorisation epoch    first epoch whose full-batch training accuracy is >= 0.99
    sounding at init      dominant mode (k >= 1) and ρ (K = 5) of W_E's mean gradient before training
                          (eq. 5's power as the sounding reads it: power_of_sum, training/fourier.py)
    final W_E modes       the 5 strongest Fourier modes of the trained embedding (the "utilisation gap"):
                          per frequency the squared norm over the embedding columns, Σ_e |Ŵ_E[k, e]|²
                          (sum_of_powers; Nanda et al. 2023's norm of W_E's Fourier components)

    assocmem experiment grokking --p 97 --seeds 0 1 2 --epochs 600 --out runs/grok --result grok.json
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from assocmem.cli.types import positive_int

from .frame import Experiment, Outcome, run_jobs, save_outputs, spread

VARIANTS: dict[str, list[dict]] = {
    "baseline": [],
    "pfft_wrong_high": [{"kind": "pfft", "prescription": "wrong_high"}],
    "pfft_nanda3": [{"kind": "pfft", "prescription": "nanda3"}],
    "pfft_fundamental": [{"kind": "pfft", "prescription": "fundamental"}],
    "adaptive_k5": [{"kind": "fgp_adaptive", "top_k": 5}],
    "grokfast_ema": [{"kind": "grokfast_ema", "alpha": 0.98, "lamb": 2.0}],
    "pfft_spread5_p113": [{"kind": "pfft", "prescription": "spread5_p113"}],
}
ONLY_FOR_P = {"pfft_spread5_p113": 113}   # variants that belong to one modulus (Table 2's near-Nyquist set for p = 113)
EMBEDDING = "model.embed_tokens.weight"
THRESHOLD = 0.99

# Seed 003 Table 1 (p = 97, 3 seeds, mean ± std) and Table 2 (p = 113): ETG and memorisation epochs.
PAPER = {
    97: {"baseline": (782.0, 95.4, 450.7), "pfft_wrong_high": (57.3, 3.8, 9.3), "pfft_nanda3": (191.3, 4.8, 32.3),
         "pfft_fundamental": (789.7, 62.1, 148.7), "adaptive_k5": (97.0, 7.0, 38.3)},
    113: {"baseline": (321.0, None, None), "pfft_spread5_p113": (75.0, None, None)},
}


def runs_for(ps: list[int], variants: list[str]) -> list[tuple[int, str]]:
    """The (p, variant) pairs to run: every variant for every p, except a p-specific one off its own p."""
    return [(p, v) for p in ps for v in variants if ONLY_FOR_P.get(v, p) == p]


def result_name(ps: list[int]) -> str:
    """The name of the result record: ``spectral-grokking-p97`` (one record per modulus and command)."""
    return "spectral-grokking-" + "-".join(f"p{p}" for p in ps)


def nanda_config(p: int, seed: int, variant: str, epochs: int, run_dir: Path) -> dict:
    """The TrainConfig dict of one run (see the module docstring)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    transforms = [t if t["kind"] == "grokfast_ema" else {**t, "param": EMBEDDING, "length": p}
                  for t in VARIANTS[variant]]
    num_train = int(0.3 * p * p)
    return {
        "name": run_dir.name, "output_dir": str(run_dir.parent), "seed": seed,
        "model": {"hybrid": {"d_model": 128, "layers": "attn", "num_heads": 4, "overrides": {"attn": {"attention": {"rope": False}}},
                             "mlp_kind": "relu", "mlp_hidden": 512, "block_norm": "none",
                             "position_embedding": "learned", "max_positions": 4, "tie_embeddings": False,
                             "init_std": 128 ** -0.5}},
        "data": {"kind": "modular", "p": p, "op": "add", "train_fraction": 0.3, "seed": seed},
        "optim": {"lr": 1e-3, "weight_decay": 1.0, "betas": [0.9, 0.98], "warmup_steps": 10, "min_lr_ratio": 1.0,
                  "grad_clip": None},
        "train": {"epochs": epochs, "batch_size": num_train, "eval_batch_size": p * p - num_train, "threads": 1,
                  "progress": False, "grad_transforms": transforms},
    }


# ---------------------------------------------------------------- reading a run
def grokking_epoch(evals: list[tuple[int, float]], threshold: float = THRESHOLD) -> int | None:
    """First evaluated epoch from which accuracy stays >= threshold through the last evaluation."""
    start = None
    for epoch, acc in evals:
        if acc >= threshold:
            start = epoch if start is None else start
        else:
            start = None
    return start


def first_epoch_at(values: list[tuple[int, float]], threshold: float = THRESHOLD) -> int | None:
    """First epoch whose value is >= threshold."""
    return next((e for e, v in values if v >= threshold), None)


def held_for(evals: list[tuple[int, float]], patience: int, threshold: float = THRESHOLD) -> bool:
    """The last ``patience`` evaluations are all >= threshold."""
    return len(evals) >= patience and all(acc >= threshold for _, acc in evals[-patience:])


# ---------------------------------------------------------------- one run (a worker process)
def _sounding_at_init(trainer, p: int) -> dict:
    from assocmem.training.fourier import mode_power, top_modes

    from ..sounding import mean_gradient, select_parameters, sound

    k = min(5, p // 2)
    grads = mean_gradient(trainer.model, trainer.train_ds, batch_size=len(trainer.train_ds),
                          params=select_parameters(trainer.model, [EMBEDDING]))
    s = sound(EMBEDDING, grads[EMBEDDING], axis=0, length=p, top_k=k)
    weights = mode_power(trainer.model.get_input_embeddings().weight.detach(), axis=0, n=p, power="sum_of_powers")
    return {"grad_dominant_mode": s.dominant_mode, "grad_top_modes": top_modes(mode_power(grads[EMBEDDING], n=p), k,
                                                                               skip_dc=True),
            "grad_rho_k5": s.rho, "fourier_power": s.fourier_power,
            "weight_top_modes": top_modes(weights, k, skip_dc=True)}


def run_one(cfg_dict: dict, *, eval_every: int, patience: int) -> dict:
    """Train one run epoch by epoch (full batch) with early stopping once grokked; return its record."""
    import torch

    from assocmem.training.config import config_from_dict
    from assocmem.training.distributed import init_distributed
    from assocmem.training.fourier import mode_power, top_modes
    from assocmem.training.loop import Trainer

    torch.set_num_threads(1)
    cfg = config_from_dict(cfg_dict)
    run_dir = Path(cfg.output_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, init_distributed("cpu"), run_dir, resume=False)
    p = cfg.data.p
    init = _sounding_at_init(trainer, p)
    train_acc, evals, start, cpu = [], [], time.perf_counter(), time.process_time()
    while trainer.step < trainer.total_steps:
        metrics = trainer.train_step()
        train_acc.append((trainer.step, metrics["accuracy"]))  # the forward pass of this epoch, before its update
        if trainer.step % eval_every == 0 or trainer.step == trainer.total_steps:
            evals.append((trainer.step, trainer.evaluate()["accuracy"]))
            if held_for(evals, patience):
                break
    weights = mode_power(trainer.model.get_input_embeddings().weight.detach(), axis=0, n=p, power="sum_of_powers")
    if trainer.log is not None:
        trainer.log.close()
    record = {"name": cfg.name, "seed": cfg.seed, "p": p, "epochs_run": trainer.step,
              "grokking_epoch": grokking_epoch(evals), "memorisation_epoch": first_epoch_at(train_acc),
              "final_val_accuracy": evals[-1][1], "best_val_accuracy": max(a for _, a in evals),
              "minutes": (time.perf_counter() - start) / 60, "cpu_minutes": (time.process_time() - cpu) / 60,
              "init": init,
              "final_weight_top_modes": top_modes(weights, min(5, p // 2), skip_dc=True),
              "val_curve": evals, "train_curve": train_acc[::eval_every]}
    (run_dir / "grokking.json").write_text(json.dumps(record))
    return record


# ---------------------------------------------------------------- the experiment
def run_experiment(*, ps: list[int], seeds: list[int], variants: list[str], epochs: int, eval_every: int,
                   patience: int, jobs: int, out: Path) -> list[dict]:
    """Every (p, variant, seed) run, ``jobs`` at a time (one torch thread each)."""
    todo = [(p, v, s) for p, v in runs_for(ps, variants) for s in seeds]
    work = {f"p={p} {v} seed {s}": {"cfg_dict": nanda_config(p, s, v, epochs, out / "runs" / f"p{p}-{v}-s{s}"),
                                    "eval_every": eval_every, "patience": patience} for p, v, s in todo}
    records = run_jobs("grokking-experiment", run_one, work, jobs, _note)
    return [{**r, "variant": v} for r, (_, v, _) in zip(records, todo)]


def _note(r: dict) -> str:
    etg = r["grokking_epoch"]
    return (f"ETG {etg if etg is not None else 'DNF'} (mem {r['memorisation_epoch']}, val {r['final_val_accuracy']:.3f}, "
            f"{r['epochs_run']} epochs, {r['minutes']:.1f} min, {r['cpu_minutes']:.1f} CPU min)")


def summarize(records: list[dict], epochs: int) -> list[dict]:
    """One row per (p, variant): ETG and memorisation over seeds, beside the paper's numbers."""
    rows = []
    for p in sorted({r["p"] for r in records}):
        for v in dict.fromkeys(r["variant"] for r in records if r["p"] == p):
            runs = [r for r in records if r["p"] == p and r["variant"] == v]
            etg = [r["grokking_epoch"] for r in runs]
            mem = [r["memorisation_epoch"] for r in runs]
            paper = PAPER.get(p, {}).get(v)
            rows.append({"p": p, "variant": v, "seeds": len(runs), "grokked": sum(e is not None for e in etg),
                         "etg": spread(etg), "memorisation": spread(mem), "budget_epochs": epochs,
                         "final_val_accuracy": spread([r["final_val_accuracy"] for r in runs]),
                         "paper_etg": None if paper is None else paper[0],
                         "paper_etg_std": None if paper is None else paper[1],
                         "paper_memorisation": None if paper is None else paper[2]})
    return rows


def markdown_table(rows: list[dict]) -> str:
    """The README table: ours (mean [min, max], grokked/seeds) beside the paper's."""
    fmt = lambda s: "—" if s is None else f"{s['mean']:.0f} [{s['min']:.0f}, {s['max']:.0f}]"  # noqa: E731
    paper = lambda r: "—" if r["paper_etg"] is None else (  # noqa: E731
        f"{r['paper_etg']:.1f}" + (f" ± {r['paper_etg_std']}" if r["paper_etg_std"] is not None else ""))
    mem = lambda r: "—" if r["paper_memorisation"] is None else f"{r['paper_memorisation']}"  # noqa: E731
    lines = ["| p | variant | grokked (≤ budget) | ETG ours | ETG paper | memorisation ours | memorisation paper | "
             "final held-out acc |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['p']} | {r['variant']} | {r['grokked']}/{r['seeds']} (≤ {r['budget_epochs']}) | "
                     f"{fmt(r['etg'])} | {paper(r)} | {fmt(r['memorisation'])} | {mem(r)} | "
                     f"{r['final_val_accuracy']['mean']:.3f} |")
    return "\n".join(lines) + "\n"


def save_curves(records: list[dict], path: Path) -> Path:
    """Held-out accuracy against epoch, one panel per p, one colour per variant."""
    from ..plotting import ACCURACY_LIMITS, finish, integer_axis, panel_grid, save_figure

    ps = sorted({r["p"] for r in records})
    fig, axes = panel_grid(max(len(ps), 1), size=(5.0, 3.6))
    colours = {v: f"C{i}" for i, v in enumerate(VARIANTS)}
    for ax, p in zip(axes, ps):
        seen = set()
        for r in (r for r in records if r["p"] == p):
            e, a = zip(*r["val_curve"])
            ax.plot(e, a, color=colours[r["variant"]], lw=1, label=None if r["variant"] in seen else r["variant"])
            seen.add(r["variant"])
        ax.axhline(THRESHOLD, color="k", ls=":", lw=0.8, label=f"threshold {THRESHOLD}")
        ax.set_title(f"(a + b) mod {p}")
        ax.set_xlabel("epoch (full batch)")
        ax.set_ylabel("held-out accuracy (fraction correct)")
        ax.set_ylim(*ACCURACY_LIMITS)
        integer_axis(ax.xaxis)
        ax.grid(alpha=0.3)
    finish(fig)
    return save_figure(fig, path)


# ---------------------------------------------------------------- command line
def add_flags(flags) -> None:
    flags.add("--p", type=positive_int, nargs="+", default=[97, 113], help="moduli (default 97 113)")
    flags.add("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
              help="variants (default all; pfft_spread5_p113 runs at p = 113 only)")
    flags.add("--epochs", type=positive_int, default=3000, help="full-batch epochs per run at most (default 3000)")
    flags.add("--eval-every", type=positive_int, default=10, help="held-out evaluation every N epochs (default 10)")
    flags.add("--patience", type=positive_int, default=5, help="stop once held-out accuracy >= 0.99 for N evaluations")


def check_runs(args) -> None:
    """Before any work, every (p, variant) run's settings: its config validates, its warm-up fits in --epochs
    (one full-batch step per epoch) and its PFFT modes are frequencies of p; the error names the flags."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.fourier import check_modes
    from assocmem.training.grad_transforms import prescription_modes

    for p, variant in runs_for(args.p, args.variants):
        cfg = nanda_config(p, 0, variant, args.epochs, Path("runs") / "check")
        try:
            config_from_dict(cfg)
            for t in VARIANTS[variant]:
                if t["kind"] == "pfft":
                    check_modes(prescription_modes(t["prescription"], p), p)
        except ValueError as err:
            raise ValueError(f"--p {p} --variants {variant}: {err}") from None
        if cfg["optim"]["warmup_steps"] > args.epochs:
            raise ValueError(f"--epochs {args.epochs} is shorter than the {cfg['optim']['warmup_steps']} warm-up "
                             f"epochs of every run (one full-batch step per epoch)")


def run(_, args, out: Path) -> Outcome:
    """``assocmem experiment grokking``: the runs, grokking.{json,md,png} and the numbers of the result record."""
    records = run_experiment(ps=args.p, seeds=args.seeds, variants=args.variants, epochs=args.epochs,
                             eval_every=args.eval_every, patience=args.patience, jobs=args.jobs, out=out)
    rows = summarize(records, args.epochs)
    table = save_outputs(out, "grokking", rows, records, markdown_table, save_curves)
    return Outcome(table, {s: _seed_metrics(records, s, args.epochs) for s in args.seeds},
                   "Seed 003 §5 on Nanda et al. 2023's one-layer model: epochs-to-grokking and memorisation epoch of "
                   "the baseline, PFFT, adaptive FGP and GrokFast-EMA",
                   {"rows": rows, "epochs": args.epochs, "eval_every": args.eval_every, "patience": args.patience,
                    "jobs": args.jobs, "curves": {r["name"]: r["val_curve"] for r in records},
                    "init": {r["name"]: r["init"] for r in records},
                    "final_weight_top_modes": {r["name"]: r["final_weight_top_modes"] for r in records}},
                   name=result_name(args.p))


EXPERIMENT = Experiment("grokking", help="seed 003 §5: PFFT / FGP / GrokFast on Nanda et al.'s grokking setup, "
                        "epochs-to-grokking beside the paper's", doc=__doc__, run=run, flags=add_flags,
                        settings=check_runs, seeds=(0, 1, 2), quick=False, jobs=2)


def _seed_metrics(records: list[dict], seed: int, epochs: int) -> dict[str, float | None]:
    """Per seed: each run's ETG (None when it did not grok) and held-out accuracy at its end."""
    metrics: dict[str, float | None] = {}
    for r in (r for r in records if r["seed"] == seed):
        key = f"p{r['p']}/{r['variant']}"
        metrics[f"{key}/etg"] = None if r["grokking_epoch"] is None else float(r["grokking_epoch"])
        metrics[f"{key}/memorisation"] = (None if r["memorisation_epoch"] is None
                                          else float(r["memorisation_epoch"]))
        metrics[f"{key}/final_val_accuracy"] = r["final_val_accuracy"]
    return metrics
