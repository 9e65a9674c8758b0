"""The thesis' Mamba stability observation at toy scale (seed thesis §4.1.5, Fig 4.6): dt_rank and dt
clipping against loss spikes.

The thesis: "Mamba models are very susceptible to spikes" (Fig 4.5); "we tried changing the dt_rank
parameter ... We find conservative values of dt_rank reduce the instabilities. Related, Zuo et al.
(2025) reported that clipping dt to positive values also help with instabilities" (Fig 4.6).

Here 2-layer Mamba models (the ``mamba`` preset, d = 48) are trained as byte-level language models on
the procedural text (textgen.py) at a learning rate high enough to make spikes likely, one variant per
row of ``variants``: Mamba's default dt_rank = ceil(d/16) = 3, a small and a large dt_rank, and the
default with Δ clamped to ``dt_limit`` after the softplus (mamba.dt_limit, mamba_ssm's dt_limit). Every
step's training loss is kept; per run:

    spikes       steps whose loss exceeds 1.25 × the median of the 10 steps before it (after step 10)
    max_jump     the largest loss_t / median(loss_{t−10..t−1})
    diverged     1 if a loss is not finite or the mean of the last 20 steps exceeds the first step's loss
    final_loss   mean of the last 20 steps' losses (nats per byte)

    assocmem experiment dt-stability --out results/dt --seeds 0 1 2
    assocmem experiment dt-stability --out /tmp/dt --quick        # a smoke run (seconds)
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .frame import Experiment, config_from_flags, run_seeds, seeded_run, spread

METRICS = ("spikes", "max_jump", "diverged", "final_loss")


class DtStabilityConfig(BaseModel):
    """Sizes, recipe and variants of the experiment."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    variants: dict[str, dict] = Field(
        {"dt_rank auto (3)": {}, "dt_rank 1": {"dt_rank": 1}, "dt_rank 48": {"dt_rank": 48},
         "dt_rank auto + dt_limit (1e-3, 0.1)": {"dt_limit": [1e-3, 0.1]}},
        description="label -> updates of the mamba preset's layer.mamba options")
    d_model: int = Field(48, gt=0, description="residual width")
    n_layers: int = Field(2, gt=0, description="Mamba blocks")
    seq_len: int = Field(64, gt=0, description="bytes per training sequence")
    batch_size: int = Field(8, gt=0, description="sequences per step")
    steps: int = Field(100, gt=20, description="optimizer steps per run")
    lr: float = Field(3e-2, gt=0, description="AdamW learning rate, constant after a 10-step warm-up")
    text_chars: int = Field(200_000, gt=0, description="characters of procedural text to sample from")
    threads: int | None = Field(1, gt=0, description="torch threads")

    @classmethod
    def quick(cls) -> "DtStabilityConfig":
        return cls(steps=25, seq_len=32, batch_size=4, text_chars=20_000,
                   variants={"dt_rank auto (3)": {}, "dt_rank auto + dt_limit (1e-3, 0.1)": {"dt_limit": [1e-3, 0.1]}})


def spike_metrics(losses: list[float]) -> dict[str, float]:
    """The run's numbers (module docstring) from its per-step losses."""
    finite = all(math.isfinite(x) for x in losses)
    jumps = [losses[t] / statistics.median(losses[t - 10:t]) for t in range(10, len(losses))] if finite else []
    final = statistics.fmean(losses[-20:]) if finite else float("nan")
    return {"spikes": float(sum(j > 1.25 for j in jumps)), "max_jump": max(jumps, default=float("nan")),
            "diverged": float(not finite or final > losses[0]), "final_loss": final}


def train_losses(cfg: DtStabilityConfig, mamba: dict, text: bytes, seed: int) -> list[float]:
    """Per-step training losses of one variant (AdamW, weight decay 0.1, gradient norm clipped at 1)."""
    import torch
    import torch.nn.functional as F

    from assocmem.mixers import get_preset
    from assocmem.models import HybridConfig, build_model

    base = get_preset("mamba").layer.mamba.model_dump()
    torch.manual_seed(seed)
    model = build_model(HybridConfig(d_model=cfg.d_model, vocab_size=256, layers="mamba", n_layers=cfg.n_layers,
                                     overrides={"mamba": {"mamba": {**base, **mamba}}}))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 10))
    data = torch.tensor(list(text), dtype=torch.long)
    gen = torch.Generator().manual_seed(10_000 + seed)
    losses = []
    for _ in range(cfg.steps):
        start = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch_size,), generator=gen)
        batch = torch.stack([data[s:s + cfg.seq_len + 1] for s in start.tolist()])
        logits = model(batch[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            break
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return losses


def run_seed(cfg: DtStabilityConfig, seed: int, out: Path) -> dict:
    from .textgen import procedural_text

    text = procedural_text(cfg.text_chars, seed).encode()
    results = {}
    for label, mamba in cfg.variants.items():
        losses = train_losses(cfg, mamba, text, seed)
        results[label] = {"losses": losses, **spike_metrics(losses)}
    return results


def summarize(per_seed: dict, cfg: DtStabilityConfig) -> dict:
    return {label: {m: spread(per_seed[s][label][m] for s in per_seed) for m in METRICS} for label in cfg.variants}


def markdown_table(summary: dict, cfg: DtStabilityConfig) -> str:
    lines = ["| variant | spikes (> 1.25 × recent median) | max jump | diverged (runs) | final loss (nats/byte) |",
             "|---|---|---|---|---|"]
    for label, s in summary.items():
        cells = []
        for m in METRICS:
            c = s[m]
            if c is None:
                cells.append("–")
            elif m == "diverged":
                cells.append(f"{round(c['mean'] * c['n'])} of {c['n']}")
            else:
                cells.append(f"{c['mean']:.2f} [{c['min']:.2f}–{c['max']:.2f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def save_figures(summary: dict, cfg: DtStabilityConfig, out: Path) -> list[Path]:
    return []


def seed_metrics(per_seed: dict, cfg: DtStabilityConfig) -> dict[int, dict[str, float]]:
    """seed -> "<variant>/<metric>" -> value: the flat numbers of the result record."""
    return {seed: {f"{label}/{m}": r[m] for label, r in results.items() for m in METRICS}
            for seed, results in per_seed.items()}


def run_experiment(cfg: DtStabilityConfig, seeds: list[int], out: str | Path) -> dict:
    """Every seed into ``out/seed_<s>/``, then dt_stability_experiment.{json,md}."""
    return run_seeds("dt_stability", cfg, seeds, out, run_seed=run_seed, summarize=summarize,
                     markdown_table=markdown_table, save_figures=save_figures)


run = seeded_run(run_experiment, markdown_table, seed_metrics,
                 lambda cfg: "the thesis' Fig 4.6 at toy scale (probes/experiments/dt_stability.py): 2-layer Mamba "
                             f"byte LMs, d={cfg.d_model}, lr {cfg.lr:g}, {cfg.steps} steps; loss spikes and divergence "
                             "per dt_rank and dt clipping",
                 lambda summary: {"summary": summary})


EXPERIMENT = Experiment("dt-stability", help="the thesis' Fig 4.6 at toy scale: Mamba's dt_rank and dt clipping "
                        "against loss spikes", doc=__doc__, run=run,
                        settings=lambda args: config_from_flags(DtStabilityConfig, args), threads=True)
