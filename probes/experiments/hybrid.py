"""The thesis' hybrid experiment (seed thesis §4.3.1): does less attention give less crisp
in-context representations?

Train small models on in-context random walks (``graph_walk`` data: a fresh random token
per node and a fresh walk per sequence) with 0, 25, 50, 75 and 100 % attention layers
(Gated DeltaNet otherwise) plus an SCA 2:1 hybrid ("sca,sca,attn"), then run the
graph-tracing probe on a held-out 4×4 grid: by default the models are trained on rings
and hexagonal lattices only, so the grid family itself is never seen in training. Per
model: energy ratio and neighbour accuracy against context length, PCA of the last
layer side by side, and a JSON summary.

Attention placement for a fraction p of n layers: layer i is attention when
floor((i+1)·p) > floor(i·p) (n = 4: 25 % → [3], 50 % → [1, 3], 75 % → [1, 2, 3]).

    assocmem experiment hybrid --out results/hybrid                  # one seed, ~15-20 min on 2 CPU cores
    assocmem experiment hybrid --out results/hybrid --seeds 0 1 2 3  # DIR/seed_<s>/ + hybrid_experiment.{md,json}
    assocmem experiment hybrid --out /tmp/h --quick                  # ~2 min smoke run

With several seeds the headline number per model is the lowest energy ratio over layers at
the full context (the layer whose class means follow the graph best), per seed and averaged.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assocmem.cli.types import positive_int
from assocmem.training.progress import progress

from .frame import Experiment, Outcome, config_from_flags, run_seeds


class HybridExperimentConfig(BaseModel):
    """Sizes and budgets of the experiment (defaults: the documented < 1 h CPU run)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every float finite

    d_model: int = Field(64, gt=0, description="residual width of every model")
    n_layers: int = Field(4, gt=0, description="depth of the GDN/attention models")
    sca_layers: int = Field(3, gt=0, description="depth of the SCA 2:1 hybrid (a multiple of 3)")
    head_dim: int = Field(16, gt=0, description="head width of every mixer")
    mlp_ratio: float = Field(2.0, ge=0, description="SwiGLU width / d_model")
    attention_percents: list[int] = Field([0, 25, 50, 75, 100], description="attention fractions trained")
    sca_hybrid: bool = Field(True, description="also train the SCA 2:1 hybrid")
    vocab_size: int = Field(512, gt=0, description="node tokens are drawn from [0, vocab_size)")
    train_kinds: list[str] = Field(["ring", "hex"], description="graph families of the training walks")
    seq_len: int = Field(256, gt=0, description="training walk length (and probe walk length)")
    steps: int = Field(300, gt=0, description="optimizer steps per model")
    batch_size: int = Field(16, gt=0, description="sequences per step")
    num_train: int = Field(3000, gt=0, description="training walks generated")
    lr: float = Field(5e-3, gt=0, description="peak learning rate (AdamW, warm-up 10 %, cosine)")
    probe_graph: str = Field("grid", description="graph of the probe (held out from train_kinds by default)")
    probe_walks: int = Field(16, gt=0, description="walks in the probe batch")
    window: int = Field(50, gt=0, description="trailing window of the class means (thesis: 50)")
    threads: int | None = Field(2, gt=0, description="torch threads while training")
    seed: int = Field(0, description="seed of data, init and probe")

    @classmethod
    def quick(cls) -> "HybridExperimentConfig":
        """A smoke-sized run (minutes): same pipeline, tiny budgets."""
        return cls(d_model=32, steps=30, seq_len=128, num_train=256, batch_size=8, probe_walks=4, window=20,
                   attention_percents=[0, 50, 100])


def attention_layers(n_layers: int, percent: int) -> list[int]:
    """Layers that are attention for ``percent`` % of ``n_layers`` (see the module docstring)."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent: must lie in [0, 100], got {percent}")
    p = percent / 100
    return [i for i in range(n_layers) if math.floor((i + 1) * p + 1e-9) > math.floor(i * p + 1e-9)]


def model_variants(cfg: HybridExperimentConfig) -> dict[str, dict]:
    """label -> HybridConfig fields of every model of the experiment."""
    common = {"d_model": cfg.d_model, "vocab_size": cfg.vocab_size, "head_dim": cfg.head_dim,
              "mlp_ratio": cfg.mlp_ratio}
    variants = {}
    for pct in cfg.attention_percents:
        attn = attention_layers(cfg.n_layers, pct)
        variants[f"attn{pct:03d}"] = {**common, "layers": "gdn", "n_layers": cfg.n_layers,
                                      "attention_layers": attn or None}
    if cfg.sca_hybrid:
        if cfg.sca_layers % 3:
            raise ValueError(f"sca_layers: the 2:1 pattern needs a multiple of 3, got {cfg.sca_layers}")
        variants["sca2to1"] = {**common, "layers": "sca,sca,attn", "n_layers": cfg.sca_layers}
    return variants


def _train_config(cfg: HybridExperimentConfig, label: str, hybrid: dict, runs: Path) -> dict:
    return {
        "name": label, "output_dir": str(runs), "seed": cfg.seed,
        "model": {"hybrid": hybrid},
        "data": {"kind": "graph_walk", "seq_len": cfg.seq_len, "vocab_size": cfg.vocab_size,
                 "kinds": list(cfg.train_kinds), "num_train": cfg.num_train, "num_eval": 64,
                 "seed": cfg.seed, "eval_seed": cfg.seed + 1},
        "optim": {"lr": cfg.lr, "weight_decay": 0.1, "warmup_steps": max(1, cfg.steps // 10)},
        "train": {"steps": cfg.steps, "batch_size": cfg.batch_size, "progress": False, "threads": cfg.threads,
                  "log_every": max(1, cfg.steps // 20), "logits": "all"},
    }


def _train_and_probe(cfg: HybridExperimentConfig, label: str, hybrid: dict, out: Path, graph) -> dict:
    from assocmem.models.hf_load import load_causal_lm

    import assocmem.models  # noqa: F401  (registers the assocmem model type)
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    from ..graph_tracing import save_graph_tracing_figures, trace_graph

    t0 = time.time()
    summary = train(config_from_dict(_train_config(cfg, label, hybrid, out / "runs")), overwrite=True)
    t1 = time.time()
    model = load_causal_lm(out / "runs" / label / "final").eval()
    res = trace_graph(model, graph, num_walks=cfg.probe_walks, walk_length=cfg.seq_len, window=cfg.window,
                      pca_contexts=sorted({min(cfg.seq_len, 4 * cfg.window), cfg.seq_len}),
                      seed=cfg.seed + 12345)
    save_graph_tracing_figures(res, graph, out / "models", name=label, title=label)
    return {"label": label, "hybrid": hybrid, "train_seconds": t1 - t0, "probe_seconds": time.time() - t1,
            "train_eval": summary.get("eval"), "probe": res, "layers": [s.name for s in _specs(hybrid)]}


def _specs(hybrid: dict):
    from assocmem.models import HybridConfig

    return HybridConfig.model_validate(hybrid).layer_specs()


def headline_numbers(res, window_contexts: tuple[int, ...]) -> dict:
    """Accuracy (graph tokens / full vocab) and last-layer energy ratio at given contexts."""
    cs = res.context_lengths
    pick = {c: min(range(len(cs)), key=lambda i: abs(cs[i] - c)) for c in window_contexts}
    last = res.num_layers - 1
    best = int(np.nanargmin(res.energy_ratio[:, -1]))
    return {
        "contexts": [cs[i] for i in pick.values()],
        "accuracy": [float(res.accuracy[i]) for i in pick.values()],
        "accuracy_full_vocab": [float(res.accuracy_full[i]) for i in pick.values()],
        "energy_ratio_last_layer": [float(res.energy_ratio[last, i]) for i in pick.values()],
        "energy_last_layer": [float(res.energy[last, i]) for i in pick.values()],
        "min_energy_ratio_at_full_context": float(res.energy_ratio[best, -1]), "min_energy_ratio_layer": best,
        "chance": res.chance, "control_energy_ratio": res.control["mixed_energy_ratio"],
    }


def save_comparison_figures(results: list[dict], graph, out: Path) -> list[Path]:
    """hybrid_curves.png (accuracy and last-layer energy ratio vs context, one line per model)
    and hybrid_pca.png (last-layer PCA per model side by side, plus the control)."""
    from ..energy import ENERGY_LABELS, ENERGY_UNITS
    from ..plotting import ACCURACY_LIMITS, CurvePanel, PCAPanel, save_curve_panels, save_pca_panels

    def series(fn):
        return {r["label"]: (r["probe"].context_lengths, list(fn(r["probe"]))) for r in results}

    first = results[0]["probe"]
    context = "context length (tokens)"
    panels = [
        CurvePanel("neighbour accuracy (softmax over graph tokens)", context, "probability mass on neighbours",
                   series(lambda p: p.accuracy), hline=first.chance, hline_label="chance", ylim=ACCURACY_LIMITS),
        CurvePanel("neighbour accuracy (full vocabulary)", context, "probability mass on neighbours",
                   series(lambda p: p.accuracy_full), ylim=ACCURACY_LIMITS),
        CurvePanel("last-layer energy ratio E / E[shuffled]", context, "ratio (1 = unrelated to the graph)",
                   series(lambda p: p.energy_ratio[-1]), hline=first.control["mixed_energy_ratio"],
                   hline_label="control X + AX"),
        CurvePanel(f"last-layer {ENERGY_LABELS[first.energy_definition]}", context,
                   ENERGY_UNITS[first.energy_definition], series(lambda p: p.energy[-1]), logy=True),
    ]
    pca_cs = sorted({c for _, c in first.pca})
    rows = [[PCAPanel(r["probe"].pca[(r["probe"].num_layers - 1, c)], f"{r['label']} c={c}",
                      r["probe"].pca_explained.get((r["probe"].num_layers - 1, c))) for r in results]
            for c in reversed(pca_cs)]
    rows.append([PCAPanel(first.control["mixed_pca"], "control: random X + A X",
                          first.control.get("mixed_pca_explained"))])
    return [save_curve_panels(out / "hybrid_curves.png", panels, ncols=2),
            save_pca_panels(out / "hybrid_pca.png", rows, graph, suptitle="last layer, held-out 4x4 grid")]


def markdown_table(summary: dict) -> str:
    """The README table: one row per model."""
    rows = ["| model | layers | acc@c (graph tokens) | acc@c (full vocab) | energy ratio@c (last layer) | train s |",
            "|---|---|---|---|---|---|"]
    for m in summary["models"]:
        h = m["headline"]
        fmt = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        rows.append(f"| {m['label']} | {','.join(m['layers'])} | {fmt(h['accuracy'])} | "
                    f"{fmt(h['accuracy_full_vocab'])} | {fmt(h['energy_ratio_last_layer'])} | "
                    f"{m['train_seconds']:.0f} |")
    h = summary["models"][0]["headline"]
    rows.append(f"\nc = {h['contexts']}; chance (graph tokens) = {h['chance']:.3f}; "
                f"control (random X + AX) energy ratio = {h['control_energy_ratio']:.3f}")
    return "\n".join(rows) + "\n"


def run_hybrid_experiment(cfg: HybridExperimentConfig, out: str | Path) -> dict:
    """Train every variant, probe it on the held-out graph, write JSON, figures and a table."""
    from assocmem.training.graphs import make_graph

    out = Path(out)
    graph = make_graph(cfg.probe_graph)
    results = [_train_and_probe(cfg, label, hybrid, out, graph) for label, hybrid in
               progress(model_variants(cfg).items(), f"hybrid-experiment seed {cfg.seed}", label=lambda kv: kv[0])]
    contexts = tuple(c for c in (10, 50, 100, 200, cfg.seq_len) if c <= cfg.seq_len)
    summary = {"config": cfg.model_dump(), "models": []}
    for r in results:
        summary["models"].append({
            "label": r["label"], "layers": r["layers"], "train_seconds": r["train_seconds"],
            "probe_seconds": r["probe_seconds"], "train_eval": r["train_eval"],
            "headline": headline_numbers(r["probe"], contexts), "probe": r["probe"].to_json()})
    save_comparison_figures(results, graph, out)
    (out / "hybrid_experiment.json").write_text(json.dumps(summary, indent=2))
    (out / "hybrid_experiment.md").write_text(markdown_table(summary))
    return summary


def seed_summary(summaries: list[dict]) -> dict:
    """Per model over seeds: lowest energy ratio over layers at full context (and its layer),
    last-layer ratio and neighbour mass at full context. summaries: ``run_hybrid_experiment`` results."""
    models: dict[str, dict] = {}
    for summary in summaries:
        seed = summary["config"]["seed"]
        for m in summary["models"]:
            h = m["headline"]
            row = models.setdefault(m["label"], {"label": m["label"], "layers": m["layers"], "seeds": []})
            row["seeds"].append({"seed": seed, "min_energy_ratio": h["min_energy_ratio_at_full_context"],
                                 "min_energy_ratio_layer": h["min_energy_ratio_layer"],
                                 "last_layer_energy_ratio": h["energy_ratio_last_layer"][-1],
                                 "neighbour_mass": h["accuracy"][-1], "train_seconds": m["train_seconds"],
                                 "train_accuracy": (m["train_eval"] or {}).get("accuracy")})
    for row in models.values():
        for key in ("min_energy_ratio", "last_layer_energy_ratio", "neighbour_mass"):
            row[f"mean_{key}"] = float(np.mean([r[key] for r in row["seeds"]]))
    controls = [s["models"][0]["headline"]["control_energy_ratio"] for s in summaries]
    return {"seeds": [s["config"]["seed"] for s in summaries], "models": list(models.values()),
            "mean_control_energy_ratio": float(np.mean(controls))}


def seed_metrics(agg: dict) -> dict[int, dict[str, float]]:
    """seed -> {"<model>/min_energy_ratio", "<model>/last_layer_energy_ratio", "<model>/neighbour_mass",
    "<model>/train_accuracy" (held-out eval on the training graphs)} for a result record."""
    per_seed: dict[int, dict[str, float]] = {s: {} for s in agg["seeds"]}
    for m in agg["models"]:
        for r in m["seeds"]:
            for key in ("min_energy_ratio", "last_layer_energy_ratio", "neighbour_mass", "train_accuracy"):
                per_seed[r["seed"]][f"{m['label']}/{key}"] = r[key]
    return per_seed


def seed_table(agg: dict) -> str:
    """Markdown: one row per model, lowest energy ratio per seed (layer) and the means."""
    seeds = agg["seeds"]
    rows = ["| model | layers | lowest energy ratio over layers at full context, per seed "
            f"({', '.join(map(str, seeds))}) | mean | last-layer mean | neighbour mass mean |",
            "|---|---|---|---|---|---|"]
    for m in agg["models"]:
        per_seed = " / ".join(f"{r['min_energy_ratio']:.2f} (L{r['min_energy_ratio_layer']})" for r in m["seeds"])
        rows.append(f"| {m['label']} | {','.join(m['layers'])} | {per_seed} | **{m['mean_min_energy_ratio']:.2f}** | "
                    f"{m['mean_last_layer_energy_ratio']:.2f} | {m['mean_neighbour_mass']:.2f} |")
    rows.append(f"\n1 = geometry unrelated to the graph; control (random X + AX): "
                f"{agg['mean_control_energy_ratio']:.2f}; L<i> = layer (0 = embeddings)")
    return "\n".join(rows) + "\n"


def add_flags(flags) -> None:
    """--steps and --config: fields of ``HybridExperimentConfig``."""
    flags.add("--steps", type=positive_int, default=None, help="override the optimizer steps per model")
    flags.add("--config", default=None, help="YAML/JSON file of HybridExperimentConfig fields")


def config(args) -> HybridExperimentConfig:
    """The config of --quick, --config, --steps and --threads (refused before any work)."""
    from assocmem.training.config_files import read_mapping

    if args.config and not Path(args.config).is_file():
        raise FileNotFoundError(f"--config {args.config} is not a file")
    updates = {**(read_mapping(Path(args.config)) if args.config else {}),
               **({"steps": args.steps} if args.steps else {})}
    return config_from_flags(HybridExperimentConfig, args, updates)


def run(cfg: HybridExperimentConfig, args, out: Path) -> Outcome:
    """``assocmem experiment hybrid``: every seed into ``out/seed_<s>/``, then hybrid_experiment.{json,md}
    (``seed_summary``) in ``out``."""
    result = run_seeds("hybrid", cfg, args.seeds, out,
                       run_seed=lambda cfg, s, folder: run_hybrid_experiment(cfg.model_copy(update={"seed": s}), folder),
                       summarize=lambda per_seed, cfg: seed_summary(list(per_seed.values())),
                       markdown_table=lambda agg, cfg: seed_table(agg), save_figures=lambda agg, cfg, out: None)
    agg = result["summary"]
    return Outcome(seed_table(agg), seed_metrics(agg),
                   "the thesis' hybrid experiment (probes/experiments/hybrid.py): per model, the lowest energy ratio "
                   "over layers at full context, the last layer's, the neighbour mass and the held-out accuracy on "
                   "the training graphs",
                   {"config": cfg.model_dump(), "mean_control_energy_ratio": agg["mean_control_energy_ratio"],
                    "layers": {m["label"]: m["layers"] for m in agg["models"]}})


EXPERIMENT = Experiment("hybrid", help="the thesis' hybrid experiment: train 0-100%% attention GDN hybrids + SCA 2:1 "
                        "on graph walks, probe a held-out 4x4 grid", doc=__doc__, run=run, flags=add_flags,
                        settings=config, threads=True)
