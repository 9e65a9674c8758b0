"""The Wiola experiment (seed 002): wiola-tiny against a same-size attention baseline on
byte-level text, and the as-written variant under the random-future control.

Three models per seed, trained on the same tokens (same text, steps, batch and recipe):

    baseline          attention (RoPE, 4 heads, 2 KV heads) + SwiGLU + RMSNorm          (d 64, 6 layers)
    wiola             the wiola-tiny stack, causal GCLA and ATM                           (same d, depth, heads)
    wiola_as_written  the same stack with GCLA and ATM as the paper writes them (they see the future)

The text is procedural (``textgen.py``: a story grammar, generated here, no download).
For every trained model the command measures on held-out blocks, in eval mode (ATM off, as at
inference) and in train mode (ATM on, as in training; no dropout, so deterministic):

    loss                 next-token loss over every position (nats/byte)
    control_loss         the loss at cut positions c when every byte after c is random
                         (future_control.py); equal to the real loss at the same
                         positions (``cut_loss``) for a causal model, higher for one that reads
                         the future
    mu                   ATM's merge ratio μ = 1 − T'/T in the ATM layers (train mode), against the
                         paper's 0.08–0.14 at τ = 0.92, and ΔC = μ(2 − μ) (eq. 33)

    assocmem experiment wiola --seeds 0 1 2 --out runs/wiola --result probes/experiments/results/wiola-experiment.json

Jobs (model × seed) run in ``--jobs`` processes (default 2) at nice 5 with one torch thread each.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from assocmem.cli.types import positive_int

from .frame import Experiment, Outcome, config_from_flags, run_jobs

VARIANTS = ("baseline", "wiola", "wiola_as_written")


class WiolaExperimentConfig(BaseModel):
    """Sizes and budgets (defaults: the documented run, ≤ 30 min on 2 idle cores for 3 seeds)."""

    model_config = ConfigDict(extra="forbid")

    d_model: int = Field(64, gt=0, description="residual width of every model")
    n_layers: int = Field(6, gt=0, description="depth of every model (ATM in layers [L/3, 2L/3))")
    num_heads: int = Field(4, gt=0, description="query heads (head_dim = d_model / num_heads)")
    num_kv_heads: int = Field(2, gt=0, description="KV heads (GQA) of every model")
    hidden_a: int = Field(64, gt=0, description="DSFF narrow SwiGLU width d_A")
    hidden_b: int = Field(256, gt=0, description="DSFF wide GELU width d_B")
    baseline_mlp: int = Field(320, gt=0, description="baseline SwiGLU width (320: parameters within 0.2 % of wiola)")
    seq_len: int = Field(128, ge=16, description="bytes per training block")
    batch_size: int = Field(16, gt=0, description="blocks per optimizer step")
    steps: int = Field(600, gt=0, description="optimizer steps per model (tokens = steps · batch · seq_len)")
    lr: float = Field(3e-3, gt=0, description="peak learning rate (AdamW β 0.9/0.95, wd 0.1, clip 1, warm-up 5 %, "
                      "cosine: the paper's recipe, §XIII, at a small-model learning rate)")
    train_chars: int = Field(1_500_000, gt=0, description="characters of training text (text seed 0)")
    eval_chars: int = Field(80_000, gt=0, description="characters of held-out text (text seed 1)")
    eval_blocks: int = Field(64, gt=0, description="held-out blocks measured")
    cut_stride: int = Field(8, gt=0, description="control cuts at positions stride − 1, 2·stride − 1, ...")

    @classmethod
    def quick(cls) -> "WiolaExperimentConfig":
        """A smoke-sized run (a minute): same pipeline, tiny budgets."""
        return cls(d_model=32, n_layers=3, hidden_a=32, hidden_b=96, baseline_mlp=144, seq_len=32, batch_size=4,
                   steps=8, train_chars=20_000, eval_chars=5_000, eval_blocks=8)


def hybrid_configs(cfg: WiolaExperimentConfig) -> dict:
    """variant -> HybridConfig dict (vocabulary 257: bytes + end of document)."""
    from assocmem.models import HybridConfig
    from assocmem.models.presets import wiola_config

    shape = (cfg.d_model, cfg.n_layers, 257, cfg.num_heads, cfg.num_kv_heads, cfg.hidden_a, cfg.hidden_b)
    baseline = HybridConfig(d_model=cfg.d_model, vocab_size=257, layers="attn", n_layers=cfg.n_layers,
                            num_heads=cfg.num_heads, overrides={"attn": {"attention": {"num_kv_heads": cfg.num_kv_heads}}},
                            mlp_hidden=cfg.baseline_mlp, tie_embeddings=True)
    return {"baseline": baseline.model_dump(mode="json"),
            "wiola": wiola_config(*shape).model_dump(mode="json"),
            "wiola_as_written": wiola_config(*shape, mode="as_written").model_dump(mode="json")}


def write_texts(cfg: WiolaExperimentConfig, out: Path) -> tuple[Path, Path]:
    from .textgen import procedural_text

    (out / "data").mkdir(parents=True, exist_ok=True)
    train, held_out = out / "data" / "train.txt", out / "data" / "eval.txt"
    train.write_text(procedural_text(cfg.train_chars, seed=0))
    held_out.write_text(procedural_text(cfg.eval_chars, seed=1))
    return train, held_out


def _train_config(cfg: WiolaExperimentConfig, variant: str, hybrid: dict, seed: int, out: Path) -> dict:
    return {
        "name": f"{variant}_s{seed}", "output_dir": str(out / "runs"), "seed": seed,
        "model": {"hybrid": hybrid},
        "data": {"kind": "files", "train_files": [str(out / "data" / "train.txt")],
                 "eval_files": [str(out / "data" / "eval.txt")], "seq_len": cfg.seq_len, "sample_by": "paragraph",
                 "documents": "joined"},  # as the stored result (results/wiola-experiment.json) was trained
        "optim": {"lr": cfg.lr, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0,
                  "warmup_steps": max(1, cfg.steps // 20)},
        "train": {"steps": cfg.steps, "batch_size": cfg.batch_size, "progress": False, "threads": 1,
                  "log_every": max(1, cfg.steps // 20), "logits": "all"},
    }


def held_out_blocks(cfg: WiolaExperimentConfig, path: Path):
    """The first ``eval_blocks`` packed blocks of the held-out text [N, seq_len]."""
    import torch

    from assocmem.training.data import ByteTokenizer, load_text_files, pack_dataset

    packed = pack_dataset(load_text_files([path], sample_by="paragraph"), ByteTokenizer(), cfg.seq_len,
                          documents="joined")
    return torch.tensor(packed["input_ids"][: cfg.eval_blocks])


def merge_ratios(model, blocks) -> dict[int, float]:
    """μ per ATM layer (train mode) on ``blocks``: the share of tokens merged into a pair's second slot."""
    import torch

    from assocmem.mixers.wiola import merge_ratio, merge_starts

    found: dict[int, float] = {}
    hooks = []
    for i, block in enumerate(model.model.layers):
        atm = getattr(block.mixer, "token_merge", None)
        if atm is None:
            continue
        hooks.append(block.mixer.register_forward_pre_hook(
            lambda mod, args, i=i, tau=atm.tau: found.__setitem__(i, merge_ratio(merge_starts(args[0], tau)))))
    was = model.training
    try:
        model.train()
        with torch.no_grad():
            model(input_ids=blocks)
    finally:
        model.train(was)
        for h in hooks:
            h.remove()
    return found


def measure(cfg: WiolaExperimentConfig, model, blocks) -> dict:
    """Held-out losses (eval and train mode), the random-future control and ATM's μ."""
    import torch
    import torch.nn.functional as F

    from .future_control import future_control

    cuts = list(range(cfg.cut_stride - 1, cfg.seq_len - 1, cfg.cut_stride))
    out: dict = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        with torch.no_grad():
            logits = model(input_ids=blocks).logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).double(), blocks[:, 1:].flatten())
        control = future_control(model, blocks, cuts, random_ids=256, seed=1234)
        out[mode] = {"loss": float(loss), "cut_loss": control.loss_real, "control_loss": control.loss_random_future,
                     "control_rise": control.rise}
    model.eval()
    mu = merge_ratios(model, blocks)
    out["mu_per_layer"] = mu
    out["mu"] = sum(mu.values()) / len(mu) if mu else None
    out["beta_per_layer"] = [float(torch.sigmoid(b.mixer.context.phi.detach())) for b in model.model.layers
                             if getattr(b.mixer, "context", None) is not None]
    offsets = [p.detach().abs().mean().item() for n, p in model.named_parameters() if n.endswith("offset")]
    out["mean_abs_offset"] = sum(offsets) / len(offsets) if offsets else None
    out["parameters"] = sum(p.numel() for p in model.parameters())
    return out


def run_job(cfg_json: dict, variant: str, hybrid: dict, seed: int, out: str) -> dict:
    """One (variant, seed): train, reload the final model, measure. Runs in a worker process."""
    import torch

    os.nice(5)
    torch.set_num_threads(1)
    from assocmem.models.hf_load import load_causal_lm

    import assocmem.models  # noqa: F401  (registers the assocmem model type)
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    cfg, out = WiolaExperimentConfig.model_validate(cfg_json), Path(out)
    t0 = time.time()
    train(config_from_dict(_train_config(cfg, variant, hybrid, seed, out)), overwrite=True)
    seconds = time.time() - t0
    model = load_causal_lm(out / "runs" / f"{variant}_s{seed}" / "final").eval()
    result = measure(cfg, model, held_out_blocks(cfg, out / "data" / "eval.txt"))
    return {"variant": variant, "seed": seed, "train_seconds": seconds, **result}


def run_wiola_experiment(cfg: WiolaExperimentConfig, out: str | Path, seeds: list[int], jobs: int = 2) -> list[dict]:
    """Every (variant, seed) in ``jobs`` worker processes; returns the job results."""
    out = Path(out)
    write_texts(cfg, out)
    hybrids = hybrid_configs(cfg)
    work = {f"{v} seed {s}": {"cfg_json": cfg.model_dump(), "variant": v, "hybrid": hybrids[v], "seed": s, "out": str(out)}
            for s in seeds for v in VARIANTS}
    return run_jobs("wiola-experiment", run_job, work, jobs, lambda r: f"{r['train_seconds']:.0f} s of training")


def seed_metrics(results: list[dict]) -> dict[int, dict[str, float | None]]:
    """Per seed: each variant's metrics under '<variant>/<mode>/<metric>', μ and ΔC."""
    per_seed: dict[int, dict[str, float | None]] = {}
    for r in results:
        row = per_seed.setdefault(r["seed"], {})
        for mode in ("eval", "train"):
            for key, value in r[mode].items():
                row[f"{r['variant']}/{mode}/{key}"] = value
        if r["mu"] is not None:
            row[f"{r['variant']}/mu"] = r["mu"]
            row[f"{r['variant']}/delta_C"] = r["mu"] * (2 - r["mu"])
    for row in per_seed.values():
        row["wiola_minus_baseline/eval/loss"] = row["wiola/eval/loss"] - row["baseline/eval/loss"]
    return per_seed


def markdown_table(summary: dict) -> str:
    """Mean [min, max] over seeds of the headline metrics."""
    def cell(key):
        s = summary.get(key)
        return "—" if s is None else f"{s.mean:.3f} [{s.min:.3f}, {s.max:.3f}]"

    rows = ["| model | mode | loss (all positions) | loss at cuts | loss at cuts, random future | rise | μ |",
            "|---|---|---|---|---|---|---|"]
    for v in VARIANTS:
        for mode in ("eval", "train"):
            rows.append(f"| {v} | {mode} | {cell(f'{v}/{mode}/loss')} | {cell(f'{v}/{mode}/cut_loss')} | "
                        f"{cell(f'{v}/{mode}/control_loss')} | {cell(f'{v}/{mode}/control_rise')} | "
                        f"{cell(f'{v}/mu') if mode == 'train' else ''} |")
    return "\n".join(rows) + "\n"


def add_flags(flags) -> None:
    flags.add("--steps", type=positive_int, default=None, help="override the optimizer steps per model")


def config(args) -> WiolaExperimentConfig:
    return config_from_flags(WiolaExperimentConfig, args, {"steps": args.steps} if args.steps is not None else {})


def run(cfg: WiolaExperimentConfig, args, out: Path) -> Outcome:
    """``assocmem experiment wiola``: the jobs, wiola_experiment.{md,json} and the numbers of the result record."""
    import json

    from assocmem.training.results import summarize

    results = run_wiola_experiment(cfg, out, args.seeds, args.jobs)
    per_seed = seed_metrics(results)
    table = markdown_table(summarize(per_seed))
    (out / "wiola_experiment.md").write_text(table)
    (out / "wiola_experiment.json").write_text(json.dumps({"config": cfg.model_dump(), "runs": results}, indent=2))
    return Outcome(table, per_seed,
                   "Wiola (seed 002): wiola-tiny (causal GCLA/ATM) vs a same-size attention baseline and the "
                   "as-written variant, byte-level procedural text, equal tokens; held-out loss and the random-future "
                   "control (probes/experiments/wiola.py)",
                   {"config": cfg.model_dump(),
                    "runs": [{k: r[k] for k in ("variant", "seed", "train_seconds", "mu_per_layer", "beta_per_layer",
                                                "mean_abs_offset", "parameters")} for r in results]})


EXPERIMENT = Experiment("wiola", help="wiola-tiny vs a same-size attention baseline on procedural bytes, and the "
                        "as-written GCLA/ATM under the random-future control", doc=__doc__, run=run, flags=add_flags,
                        settings=config, seeds=(0, 1, 2), jobs=2)
