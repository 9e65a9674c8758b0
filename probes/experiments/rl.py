"""RL after SFT at toy scale (Nautile-370M §4.2–4.4, Table 1): does plain GRPO degrade at a low
success rate, and do gradient balancing and scored self-distillation help?

  1. SFT: a 2-layer d = 64 GDN + attention model is trained on ``chain_sum`` (6 digits, scratchpad)
     at a constant learning rate for ``sft_steps`` steps, chosen so that held-out pass@1 (temperature
     1) is about 25–30 % on the 2-core AMD EPYC the step count was chosen on: Nautile's regime (28 % on
     GSM8K after SFT). Pass@1 climbs steeply there, so another CPU's rounding lands elsewhere (about
     45 % on an AVX-512 Xeon; docs/experiments/rl.md). One SFT model, shared by all
     RL runs (``out/sft``; the seeds vary the RL runs).
  2. RL from it, four methods (``METHODS``), each ``rounds`` rounds of ``prompts`` prompts × G
     samples, so every run samples the same number of completions (the sampled tokens differ only by
     the responses' lengths, which are reported):
        GRPO                   advantages ÷ group std, ``grpo`` aggregation (mean of sequence means)
        Dr. GRPO + dapo        A = r − mean, token-level (``dapo``) aggregation
        gradient-balanced      Dr. GRPO + dapo with g = g⁺ + ‖g⁺‖/(‖g⁻‖+ε) g⁻ (Nautile §4.3)
        self-distillation      keep A > 0, advantage-weighted CE, ``distill_epochs`` epochs per round (§4.4)
  3. held-out pass@1 of each final policy with ``run_tts`` (the ``probe tts`` code): ``samples``
     completions per held-out problem at temperature 1, with a bootstrap interval; ‖g⁻‖/‖g⁺‖, the
     samples' reward and the scale applied to g⁻ per round from the run's log.jsonl (‖g±‖ measured
     for every method, also where they are not used), averaged per quarter of the run.

    assocmem experiment rl --out runs/rl-experiment --seeds 0 1 2
    assocmem experiment rl --lr 2e-4 --out runs/rl-experiment-lr2e-4 --seeds 0 1 2
    assocmem experiment rl --beta 0.1 --methods GRPO "Dr. GRPO + dapo" gradient-balanced \
        --out runs/rl-experiment-kl --seeds 0 1 2     # with the k3 KL to the SFT model (policy gradients only)
    assocmem experiment rl --out /tmp/rl --quick          # a smoke run (a minute)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assocmem.cli.types import non_negative_float, positive_float
from assocmem.training.rl.config import LossConfig

from .frame import Experiment, config_from_flags, run_seeds, seeded_run, spread

METHODS: dict[str, dict] = {
    "GRPO": {"rollout": {"advantage_scale": "group"}, "loss": {"algorithm": "policy_gradient", "aggregation": "grpo"}},
    "Dr. GRPO + dapo": {"rollout": {"advantage_scale": "none"},
                        "loss": {"algorithm": "policy_gradient", "aggregation": "dapo"}},
    "gradient-balanced": {"rollout": {"advantage_scale": "none"}, "loss": {"algorithm": "balanced", "aggregation": "dapo"}},
    "self-distillation": {"rollout": {"advantage_scale": "none"},
                          "loss": {"algorithm": "self_distillation", "aggregation": "dapo"}},
}


class RLExperimentConfig(BaseModel):
    """Sizes and budgets of the experiment."""

    model_config = ConfigDict(extra="forbid")

    d_model: int = Field(64, gt=0, description="residual width")
    layers: str = Field("gdn,attn", description="layer pattern")
    num_heads: int = Field(4, gt=0, description="heads of every mixer")
    mlp_ratio: float = Field(2.0, ge=0, description="SwiGLU width / d_model")
    num_digits: int = Field(6, ge=1, description="chain_sum's m")
    sft_train: int = Field(5000, gt=0, description="SFT problems")
    sft_steps: int = Field(340, gt=0, description="SFT steps at a constant learning rate (after 10 warm-up steps)")
    sft_batch: int = Field(32, gt=0, description="SFT sequences per step")
    sft_lr: float = Field(3e-3, gt=0, description="SFT learning rate")
    rl_train: int = Field(2000, gt=0, description="RL prompts (the SFT set's first ones)")
    rounds: int = Field(80, gt=0, description="RL rounds per run")
    prompts: int = Field(16, gt=0, description="prompts per round")
    group_size: int = Field(8, ge=2, description="G, samples per prompt")
    rl_lr: float = Field(1e-3, gt=0, description="RL learning rate (constant; AdamW, no weight decay)")
    beta: float = Field(0.0, ge=0, description="KL weight to the SFT model")
    distill_epochs: int = Field(2, ge=1, description="self-distillation epochs per round")
    eval_every: int = Field(20, ge=0, description="in-run held-out pass@1 every N rounds (curves)")
    eval_samples: int = Field(4, gt=0, description="samples per held-out problem in the in-run curve")
    num_problems: int = Field(200, gt=0, description="held-out problems")
    samples: int = Field(16, gt=0, description="samples per held-out problem for the final pass@1")
    methods: list[str] = Field(list(METHODS), description="methods run (keys of METHODS)")
    threads: int | None = Field(1, gt=0, description="torch threads")

    @model_validator(mode="after")
    def _methods_take_the_loss_settings(self) -> "RLExperimentConfig":
        """Each method's RL loss with this beta, validated by the RL config itself (``LossConfig``: e.g.
        self-distillation takes no KL term), before the SFT model trains."""
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {list(METHODS)}")
        refused = {}
        for m in self.methods:
            try:
                LossConfig(**METHODS[m]["loss"], beta=self.beta)
            except ValidationError as err:
                refused[m] = err.errors()[0]["msg"].removeprefix("Value error, ")
        if refused:
            others = [m for m in self.methods if m not in refused]
            raise ValueError(f"beta = {self.beta:g}: " + "; ".join(f"{m}: {msg}" for m, msg in refused.items())
                             + f". Or run the other methods only (--methods {' '.join(repr(m) for m in others)})")
        return self

    @classmethod
    def quick(cls) -> "RLExperimentConfig":
        return cls(sft_steps=60, sft_train=500, rl_train=64, rounds=3, prompts=4, group_size=4, eval_every=0,
                   eval_samples=2, num_problems=16, samples=4)


def _sft(cfg: RLExperimentConfig, folder: Path) -> Path:
    """Step 1: the SFT run (reused when ``folder/final`` exists: it is deterministic)."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    if (folder / "final" / "config.json").is_file():
        return folder
    sft = {"name": folder.name, "output_dir": str(folder.parent), "seed": 0,
           "model": {"hybrid": {"d_model": cfg.d_model, "layers": cfg.layers, "num_heads": cfg.num_heads,
                                "mlp_ratio": cfg.mlp_ratio}},
           "data": {"kind": "chain_sum", "num_digits": cfg.num_digits, "num_train": cfg.sft_train, "num_eval": 64},
           "optim": {"lr": cfg.sft_lr, "weight_decay": 0.1, "warmup_steps": 10, "min_lr_ratio": 1.0},
           "train": {"steps": cfg.sft_steps, "batch_size": cfg.sft_batch, "progress": False, "threads": cfg.threads,
                     "log_every": 20}}
    train(config_from_dict(sft), overwrite=True)
    return folder


def _rl_config(cfg: RLExperimentConfig, method: str, sft: Path, seed: int, runs: Path) -> dict:
    update = METHODS[method]
    inner = cfg.distill_epochs if update["loss"]["algorithm"] == "self_distillation" else 1
    return {"name": method.replace(" ", "_").replace(".", "").replace("+", "plus"), "output_dir": str(runs),
            "seed": seed, "model": {"init_from": str(sft)},
            "data": {"kind": "chain_sum", "num_digits": cfg.num_digits, "num_train": cfg.rl_train,
                     "num_eval": cfg.num_problems, "eval_seed": 10_000},
            "rollout": {"group_size": cfg.group_size, "prompts_per_step": cfg.prompts, "temperature": 1.0,
                        "reward": "correct", **update["rollout"]},
            "loss": {**update["loss"], "beta": cfg.beta, "inner_iterations": inner},
            "optim": {"lr": cfg.rl_lr, "weight_decay": 0.0, "warmup_steps": 0, "min_lr_ratio": 1.0, "grad_clip": 1.0},
            "train": {"steps": cfg.rounds, "eval_every": cfg.eval_every, "eval_samples": cfg.eval_samples,
                      "progress": False, "threads": cfg.threads, "eval_batch_size": 256}}


def _held_out(model, cfg: RLExperimentConfig, seed: int) -> dict:
    """Step 3: pass@1 of ``model`` on the held-out problems with run_tts (the ``probe tts`` code)."""
    from assocmem.training.generation import SamplingSettings
    from assocmem.training.verifiable import ChainSum

    from ..test_time_scaling import run_tts

    task = ChainSum(num_digits=cfg.num_digits)
    problems = task.problems(cfg.num_problems, seed=10_000)
    settings = SamplingSettings(num_samples=cfg.samples, temperature=1.0, max_new_tokens=task.max_new_tokens,
                                batch_size=256, seed=seed)
    report = run_tts(model, task, problems, settings, ks=[1], num_resamples=200)
    m = report["metrics"]["pass@k"]
    return {"pass@1": m["mean"][0], "low": m["low"][0], "high": m["high"][0],
            "mean response tokens": report["mean response tokens"]}


def quarters(rounds: int) -> list[tuple[int, int]]:
    """The rounds (1-based, inclusive) of the four quarters of a run."""
    edges = [round(rounds * i / 4) for i in range(5)]
    return [(edges[i] + 1, edges[i + 1]) for i in range(4) if edges[i + 1] > edges[i]]


def _ratios(run_dir: Path, rounds: int) -> dict:
    """Per round ‖g⁻‖/‖g⁺‖, the reward, the scale applied to g⁻; their means per quarter of the run
    (``quarters``); the held-out curve and the sampled tokens, from the run's log.jsonl."""
    from assocmem.training.runlog import read_log

    records = read_log(run_dir / "log.jsonl")
    train = [r for r in records if r["split"] == "train"]

    def by_quarter(key: str) -> dict[str, float | None]:  # rounds without g⁺ (= 0) have no ratio
        out = {}
        for lo, hi in quarters(rounds):
            kept = [r[key] for r in train[lo - 1:hi] if r[key] is not None]
            out[f"{lo}-{hi}"] = float(np.mean(kept)) if kept else None
        return out

    return {"ratio": [r["g_neg_over_g_pos"] for r in train], "reward": [r["reward"] for r in train],
            "eval": [(r["step"], r["pass@1"]) for r in records if r["split"] == "eval"],
            "ratio_by_quarter": by_quarter("g_neg_over_g_pos"), "reward_by_quarter": by_quarter("reward"),
            "scale_by_quarter": by_quarter("neg_scale"), "sampled_tokens": train[-1]["sampled_tokens"]}


def run_seed(cfg: RLExperimentConfig, seed: int, out: Path) -> dict:
    """The SFT model (shared), then every method from it with RL seed ``seed``."""
    from assocmem.training.model_factory import load_pretrained
    from assocmem.training.rl.config import rl_config_from_dict
    from assocmem.training.rl.loop import train_rl

    sft = _sft(cfg, out.parent / "sft")
    results = {"SFT": {**_held_out(load_pretrained(sft), cfg, seed)}}
    for method in cfg.methods:
        start = time.time()
        rl_cfg = rl_config_from_dict(_rl_config(cfg, method, sft, seed, out / "runs"))
        train_rl(rl_cfg, overwrite=True)
        run_dir = out / "runs" / rl_cfg.name
        results[method] = {**_held_out(load_pretrained(run_dir), cfg, seed), **_ratios(run_dir, cfg.rounds),
                           "minutes": (time.time() - start) / 60}
    return results


def summarize(per_seed: dict, cfg: RLExperimentConfig) -> dict:
    """Mean and range over seeds: pass@1, sampled tokens, and per quarter of the run ‖g⁻‖/‖g⁺‖ and the
    reward of the samples."""
    rows = {}
    for label in ["SFT", *cfg.methods]:
        runs = [r[label] for r in per_seed.values()]
        rows[label] = {key: spread([r.get(key) for r in runs]) for key in ("pass@1", "sampled_tokens")}
        for key in ("ratio_by_quarter", "reward_by_quarter"):
            if label != "SFT":
                rows[label][key] = {span: spread([r[key][span] for r in runs]) for span in runs[0][key]}
    return {"rows": rows}


def _fmt(s: dict | None, digits: int = 3) -> str:
    return "–" if s is None else f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def markdown_table(summary: dict, cfg: RLExperimentConfig) -> str:
    """Held-out pass@1 per policy, then ‖g⁻‖/‖g⁺‖ and the samples' reward per quarter of the run."""
    spans = [f"{lo}-{hi}" for lo, hi in quarters(cfg.rounds)]
    lines = ["| policy | held-out pass@1 | sampled tokens |", "|---|---|---|"]
    for label, r in summary["rows"].items():
        tokens = "–" if r["sampled_tokens"] is None else f"{r['sampled_tokens']['mean']:,.0f}"
        lines.append(f"| {label} | {_fmt(r['pass@1'])} | {tokens} |")
    for key, what in (("ratio_by_quarter", "‖g⁻‖/‖g⁺‖"), ("reward_by_quarter", "reward of the samples")):
        lines += ["", f"| {what}, rounds | " + " | ".join(spans) + " |", "|---|" + "---|" * len(spans)]
        for label in cfg.methods:
            row = summary["rows"][label][key]
            lines.append(f"| {label} | " + " | ".join(_fmt(row[s], 2) for s in spans) + " |")
    return "\n".join(lines) + "\n"


def save_figure(per_seed: dict, cfg: RLExperimentConfig, path: Path) -> Path:
    """‖g⁻‖/‖g⁺‖, reward and held-out pass@1 against the round, every method and seed."""
    from ..plotting import finish, integer_axis, panel_grid, plt, save_figure

    fig, axes = panel_grid(3, size=(5.0, 3.6))
    colours = dict(zip(cfg.methods, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for seed, results in per_seed.items():
        for method in cfg.methods:
            r = results[method]
            label = method if seed == min(per_seed) else None  # held-out panel only
            one = {"marker": "o", "markersize": 3} if len(r["reward"]) == 1 else {}  # one round: a point
            axes[0].plot([np.nan if x is None else x for x in r["ratio"]], color=colours[method], lw=1, **one)
            axes[1].plot(r["reward"], color=colours[method], lw=1, **one)
            steps, values = zip(*r["eval"]) if r["eval"] else ((), ())
            axes[2].plot(steps, values, "o-", color=colours[method], label=label, lw=1, markersize=3)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    for ax, name in zip(axes, ["‖g⁻‖ / ‖g⁺‖ (ratio of gradient norms)", "reward (mean over the round's samples)",
                               "held-out pass@1 (fraction solved)"]):
        ax.set(xlabel="round", ylabel=name)
        integer_axis(ax.xaxis)
        ax.grid(alpha=0.3)
    finish(fig)  # one legend (every panel has the same methods), on the held-out panel
    return save_figure(fig, path)


def seed_metrics(per_seed: dict, cfg: RLExperimentConfig) -> dict[int, dict[str, float]]:
    """seed -> "<policy> <metric>" -> value: the flat numbers of the result record."""
    out = {}
    for seed, results in per_seed.items():
        row = {"SFT pass@1": results["SFT"]["pass@1"]}
        for method in cfg.methods:
            r = results[method]
            row.update({f"{method} pass@1": r["pass@1"], f"{method} sampled tokens": r["sampled_tokens"],
                        f"{method} minutes": r["minutes"]})
            for key, name in (("ratio_by_quarter", "g-/g+"), ("reward_by_quarter", "reward"),
                              ("scale_by_quarter", "g- scale")):
                row.update({f"{method} {name} rounds {span}": v for span, v in r[key].items()})
        out[seed] = row
    return out


def run_experiment(cfg: RLExperimentConfig, seeds: list[int], out: str | Path) -> dict:
    """Every seed into ``out/seed_<s>/`` (the SFT model in ``out/sft``), then rl_experiment.{json,md,png}."""
    holder: dict = {}

    def figures(summary, cfg, folder):
        save_figure(holder["per_seed"], cfg, folder / "rl_experiment.png")

    def run(cfg, seed, folder):
        result = run_seed(cfg, seed, folder)
        holder.setdefault("per_seed", {})[seed] = result
        return result

    return run_seeds("rl", cfg, seeds, out, run_seed=run, summarize=summarize, markdown_table=markdown_table,
                     save_figures=figures)


def add_flags(flags) -> None:
    """--lr, --beta and --methods: fields of ``RLExperimentConfig``."""
    flags.add("--lr", type=positive_float, default=None,
              help=f"RL learning rate of every method (default {RLExperimentConfig().rl_lr:g})")
    flags.add("--beta", type=non_negative_float, default=None,
              help=f"weight of the k3 KL to the SFT model, every method (default {RLExperimentConfig().beta:g})")
    flags.add("--methods", nargs="+", choices=list(METHODS), default=None, metavar="METHOD",
              help="methods to run, in this order (default: all four: " + ", ".join(map(repr, METHODS)) + ")")


def config(args) -> RLExperimentConfig:
    """The config of --quick, --threads, --lr, --beta and --methods (refused before any work)."""
    given = {"rl_lr": args.lr, "beta": args.beta, "methods": args.methods}
    return config_from_flags(RLExperimentConfig, args, {k: v for k, v in given.items() if v is not None})


run = seeded_run(run_experiment, markdown_table, seed_metrics,
                 lambda cfg: f"RL after SFT at toy scale (probes/experiments/rl.py): a GDN+attention d=64 model SFT'd "
                             f"on chain_sum (6 digits) for {cfg.sft_steps} steps (pass@1 ~29 % on an AMD EPYC, ~45 % on an AVX-512 Xeon), then GRPO / Dr. GRPO + dapo / gradient-balanced "
                             f"/ self-distillation at equal sampled completions, RL lr {cfg.rl_lr:g} and KL weight "
                             f"β = {cfg.beta:g}; held-out pass@1 (run_tts) and ‖g⁻‖/‖g⁺‖",
                 lambda summary: {"table": summary})


EXPERIMENT = Experiment("rl", help="RL after SFT on chain_sum: GRPO vs Dr. GRPO + dapo vs gradient-balanced vs "
                        "self-distillation, held-out pass@1 and ‖g⁻‖/‖g⁺‖", doc=__doc__, run=run, flags=add_flags,
                        settings=config, threads=True)
