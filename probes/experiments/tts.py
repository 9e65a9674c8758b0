"""The thesis' test-time scaling experiment at toy scale (seed thesis §3.5, Figs 4.2–4.3, 4.8, 4.10):
does less attention buy more samples, and do more samples buy accuracy?

Four 4-layer d = 64 models (GDN×4; GDN×3 + attention; GDN×2 + attention×2 at layers 1 and 3;
attention×4) are trained on ``chain_sum`` with the same recipe. Per seed and model:
  1. train (``assocmem train``'s loop);
  2. ``run_tts`` on held-out problems: n samples each, pass@k, maj@k (first k and random k),
     best-of-N by mean log-probability and the weighted vote, for every k = 1 … n;
  3. the per-sample decode cost: ``bench decode``'s ``time_decode`` (median ms per decoded token,
     all models timed round-robin) at the problems' own context and at a long one (the cache
     filled as after 4096 tokens), times the response length, per sequence of the batch.
The summary gives every metric's mean and range over seeds, and accuracy at equal compute: for a
budget B (ms), a model draws k = ⌊B / cost⌋ samples (1 ≤ k ≤ n).

    assocmem experiment tts --out results/tts --seeds 0 1 2
    assocmem experiment tts --out /tmp/tts --quick            # a smoke run (minutes)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import Field

from .frame import Experiment, VariantRecipe, config_from_flags, run_seeds, seeded_run, spread

SUMMARY_METRICS = ["pass@k", "maj@k (first k)", "maj@k (random k)", "best-of-N@k (mean log-prob)",
                   "weighted vote@k (random k)"]


class TTSExperimentConfig(VariantRecipe):
    """Sizes and budgets of the experiment (the models and recipe: ``VariantRecipe``)."""

    models: dict[str, str] = Field({"gdn×4": "gdn*4", "gdn×3+attn": "gdn,gdn,gdn,attn",
                                    "gdn×2+attn×2": "gdn,attn,gdn,attn", "attn×4": "attn*4"},
                                   description="label -> layer pattern")
    num_digits: int = Field(8, ge=1, description="chain_sum's m")
    num_problems: int = Field(100, gt=0, description="held-out problems sampled")
    samples: int = Field(32, gt=0, description="n, samples per problem")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    rule: str = Field("first", description="scoring rule (first / last / strict)")
    sample_batch: int = Field(256, gt=0, description="sequences per generate() call")
    long_context: int = Field(4096, gt=0, description="the long context of the decode cost")
    cost_batch: int = Field(32, gt=0, description="sequences per decode step when timing")
    cost_steps: int = Field(30, gt=0, description="timed decode steps per (model, context)")

    @classmethod
    def quick(cls) -> "TTSExperimentConfig":
        return cls(num_digits=3, num_train=512, steps=40, batch_size=16, num_problems=16, samples=4, long_context=256,
                   cost_steps=3, models={"gdn×4": "gdn*4", "attn×4": "attn*4"})


def decode_costs(nets: dict, cfg: TTSExperimentConfig, prompt_len: int, response_len: float) -> dict:
    """label -> {"short": ms, "long": ms} per sampled response (per sequence of the timed batch)."""
    import torch

    from assocmem.training.bench.decode import time_decode

    contexts = {"short": prompt_len, "long": cfg.long_context}
    with torch.inference_mode():
        rows = time_decode(nets, sorted(set(contexts.values())), batch=cfg.cost_batch, steps=cfg.cost_steps, warmup=3)
    per_token = {(r["model"], r["context"]): r["ms_per_token"] / cfg.cost_batch for r in rows}
    return {label: {name: per_token[(label, n)] * response_len for name, n in contexts.items()} for label in nets}


def run_seed(cfg: TTSExperimentConfig, seed: int, out: Path) -> dict:
    """Train, sample and time every model for one seed; per-model folders under ``out``."""
    from assocmem.training.generation import SamplingSettings
    from assocmem.training.verifiable import ChainSum

    from ..test_time_scaling import run_tts, save_samples, save_tts_figure

    task = ChainSum(num_digits=cfg.num_digits)
    eval_seed = 10_000 + seed
    data = {"kind": "chain_sum", "num_digits": cfg.num_digits, "num_train": cfg.num_train, "num_eval": 256,
            "seed": seed, "eval_seed": eval_seed}
    problems = task.problems(cfg.num_problems, seed=eval_seed)
    settings = SamplingSettings(num_samples=cfg.samples, temperature=cfg.temperature, max_new_tokens=task.max_new_tokens,
                                batch_size=cfg.sample_batch, seed=seed)
    results, nets = {}, {}
    for label, layers in cfg.models.items():
        model, seconds, summary = cfg.train(out / "runs", label, task.vocab_size, data, seed)
        start = time.time()
        report = run_tts(model, task, problems, settings, ks=list(range(1, cfg.samples + 1)), rule=cfg.rule)
        folder = out / "models" / label
        folder.mkdir(parents=True, exist_ok=True)
        save_samples(report, folder / "samples.jsonl")
        save_tts_figure(report, folder / "tts.png", title=f"{label}, seed {seed}")
        report.pop("samples")
        (folder / "tts.json").write_text(json.dumps(report, indent=2))
        results[label] = {"layers": layers, "train_seconds": seconds, "sample_seconds": time.time() - start,
                          "train_eval": summary["eval"], "pass@1 by rule": report["pass@1 by rule"],
                          "mean response tokens": report["mean response tokens"],
                          "metrics": {m: report["metrics"][m]["mean"] for m in SUMMARY_METRICS}}
        nets[label] = model
    response = max(r["mean response tokens"] for r in results.values())
    for label, cost in decode_costs(nets, cfg, len(problems[0].prompt), response).items():
        results[label]["ms_per_sample"] = cost
    return results


def equal_compute(results: dict, cfg: TTSExperimentConfig, context: str, metric: str) -> list[dict]:
    """Budgets B_j = 2^j × (one sample of the costliest model), j = 0, 1, …: each model's
    k = ⌊B_j / its cost⌋ (1 ≤ k ≤ n) and its metric at that k."""
    costs = {label: r["ms_per_sample"][context] for label, r in results.items()}
    top = max(costs.values())
    rows = []
    for j in range(cfg.samples.bit_length()):
        budget = top * 2 ** j
        ks = {label: max(1, min(cfg.samples, int(budget // cost))) for label, cost in costs.items()}
        rows.append({"budget_ms": budget, **{label: {"k": k, "value": results[label]["metrics"][metric][k - 1]}
                                             for label, k in ks.items()}})
    return rows


def summarize(per_seed: dict, cfg: TTSExperimentConfig) -> dict:
    """Mean and range over seeds of every metric at every k, of the costs, and of equal compute."""
    seeds = list(per_seed)
    labels = list(cfg.models)
    summary = {"metrics": {}, "ms_per_sample": {}, "equal_compute": {}}
    for label in labels:
        runs = [per_seed[s][label] for s in seeds]
        summary["metrics"][label] = {m: [spread(r["metrics"][m][k] for r in runs) for k in range(cfg.samples)]
                                     for m in SUMMARY_METRICS}
        summary["ms_per_sample"][label] = {c: spread(r["ms_per_sample"][c] for r in runs) for c in ("short", "long")}
        summary["metrics"][label]["pass@1 strict"] = [spread(r["pass@1 by rule"]["strict"] for r in runs)]
    for context in ("short", "long"):
        for metric in ("pass@k", "maj@k (random k)"):
            tables = [equal_compute(per_seed[s], cfg, context, metric) for s in seeds]   # [seed][j]
            summary["equal_compute"][f"{metric}, {context} context"] = [
                {"budget": f"2^{j} × one sample of the costliest model",
                 "budget_ms": spread(t[j]["budget_ms"] for t in tables),
                 **{label: {"k": [t[j][label]["k"] for t in tables], **spread(t[j][label]["value"] for t in tables)}
                    for label in labels}} for j in range(len(tables[0]))]
    return summary


def markdown_table(summary: dict, cfg: TTSExperimentConfig) -> str:
    n = cfg.samples

    def cell(s: dict) -> str:
        return f"{s['mean']:.3f} [{s['min']:.3f}–{s['max']:.3f}]"

    head = (f"| model | pass@1 | pass@{n} | maj@{n} (first {n}) | maj@{n} (random {n}) | best-of-{n} (log-prob) | "
            f"pass@1 strict | ms / sample (prompt ctx) | ms / sample ({cfg.long_context} ctx) |")
    lines = [head, "|" + "---|" * 9]
    for label, m in summary["metrics"].items():
        cost = summary["ms_per_sample"][label]
        lines.append(f"| {label} | {cell(m['pass@k'][0])} | {cell(m['pass@k'][-1])} | {cell(m['maj@k (first k)'][-1])} | "
                     f"{cell(m['maj@k (random k)'][-1])} | {cell(m['best-of-N@k (mean log-prob)'][-1])} | "
                     f"{cell(m['pass@1 strict'][0])} | {cost['short']['mean']:.3f} | {cost['long']['mean']:.3f} |")
    return "\n".join(lines) + "\n"


def save_figure(summary: dict, cfg: TTSExperimentConfig, path: Path) -> Path:
    from ..plotting import ACCURACY_LIMITS, CurvePanel, save_curve_panels

    ks = list(range(1, cfg.samples + 1))
    panels = []
    for metric in ("pass@k", "maj@k (random k)"):
        series, bands = {}, {}
        for label, m in summary["metrics"].items():
            series[label] = (ks, [s["mean"] for s in m[metric]])
            bands[label] = ([s["min"] for s in m[metric]], [s["max"] for s in m[metric]])
        if metric == "pass@k":   # the answer is one of 10 digits: a uniform guess already reaches this
            series["uniform guess, 1/10 per sample"] = (ks, [1 - 0.9 ** k for k in ks])
        panels.append(CurvePanel(f"{metric} (mean, range over seeds)", "k samples per problem", "accuracy (fraction of problems)",
                                 series, bands=bands, logx_base=2, ylim=ACCURACY_LIMITS))
        for context in ("short", "long"):
            series = {label: ([k * summary["ms_per_sample"][label][context]["mean"] for k in ks],
                              [s["mean"] for s in m[metric]]) for label, m in summary["metrics"].items()}
            title = f"{metric} at equal compute ({'prompt' if context == 'short' else cfg.long_context} context)"
            panels.append(CurvePanel(title, "decoding time per problem (ms)", "accuracy (fraction of problems)", series,
                                     logx_base=2, ylim=ACCURACY_LIMITS))
    return save_curve_panels(path, panels, ncols=3)


def seed_metrics(per_seed: dict, cfg: TTSExperimentConfig) -> dict[int, dict[str, float]]:
    """seed -> "<model> <metric>" -> value: the flat numbers of the result record."""
    n = cfg.samples
    out = {}
    for seed, results in per_seed.items():
        row = {}
        for label, r in results.items():
            m = r["metrics"]
            row.update({f"{label} pass@1": m["pass@k"][0], f"{label} pass@{n}": m["pass@k"][-1],
                        f"{label} maj@{n} first": m["maj@k (first k)"][-1],
                        f"{label} maj@{n} random": m["maj@k (random k)"][-1],
                        f"{label} best-of-{n} logprob": m["best-of-N@k (mean log-prob)"][-1],
                        f"{label} pass@1 strict": r["pass@1 by rule"]["strict"],
                        f"{label} ms/sample prompt ctx": r["ms_per_sample"]["short"],
                        f"{label} ms/sample long ctx": r["ms_per_sample"]["long"],
                        f"{label} train minutes": r["train_seconds"] / 60})
        out[seed] = row
    return out


def run_experiment(cfg: TTSExperimentConfig, seeds: list[int], out: str | Path) -> dict:
    """Every seed into ``out/seed_<s>/``, then tts_experiment.{json,md,png} in ``out``."""
    return run_seeds("tts", cfg, seeds, out, run_seed=run_seed, summarize=summarize, markdown_table=markdown_table,
                     save_figures=lambda summary, cfg, out: save_figure(summary, cfg, out / "tts_experiment.png"))


run = seeded_run(run_experiment, markdown_table, seed_metrics,
                 lambda cfg: "the thesis' test-time scaling experiment (probes/experiments/tts.py): 4-layer d=64 "
                             "GDN / hybrid / attention models trained on chain_sum; pass@k, maj@k, best-of-N on "
                             "held-out problems, per-sample decode cost, accuracy at equal compute",
                 lambda summary: {"curves": summary["metrics"], "equal_compute": summary["equal_compute"]})


EXPERIMENT = Experiment("tts", help="the thesis' test-time scaling experiment: GDN / hybrids / attention trained on "
                        "chain_sum, pass@k and maj@k against k and against decode compute", doc=__doc__,
                        run=run, settings=lambda args: config_from_flags(TTSExperimentConfig, args), threads=True)
