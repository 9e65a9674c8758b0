"""Cross-architecture distillation at toy scale (thesis §3.4, probed as in §4.3): does a hybrid distilled
from an attention teacher beat the same hybrid trained from scratch on the same tokens?

Per seed:
  1. a teacher ``LlamaForCausalLM`` (hidden 64, 4 layers, 4 heads, 2 KV heads) trained on chain_sum with
     ``assocmem train``'s loop;
  2. students with 25 / 50 / 75 % of its layers → Gated DeltaNet and 50 % → Mamba2 (layers spaced as
     Table 3.3, models/convert.replace_fraction), each through ``assocmem distill``'s four stages
     (training/distill/); held-out accuracy after every stage;
  3. per student, the same architecture from a random initialisation trained on the same data for as
     many steps (and sequences) as stages 2 + 3 + 4 together;
  4. ``assocmem probe graph-tracing`` (probes/graph_tracing.py) on the teacher and every final student.

    assocmem experiment distill --out results/distill --seeds 0 1 2
    assocmem experiment distill --out /tmp/distill --quick          # a smoke run (minutes)
"""
from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .frame import Experiment, config_from_flags, run_seeds, seeded_run, spread

STAGES = ("stage1", "stage2", "stage3", "stage4")


class DistillExperimentConfig(BaseModel):
    """Sizes and budgets of the experiment (defaults: the README's run)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hidden: int = Field(64, gt=0, description="teacher hidden size")
    layers: int = Field(4, gt=0, description="teacher layers")
    heads: int = Field(4, gt=0, description="teacher attention heads")
    kv_heads: int = Field(2, gt=0, description="teacher key-value heads (GQA)")
    intermediate: int = Field(128, gt=0, description="teacher SwiGLU width")
    num_digits: int = Field(8, ge=1, description="chain_sum's m (training/verifiable/chain_sum.py)")
    num_train: int = Field(20000, gt=0, description="training problems")
    num_eval: int = Field(256, gt=0, description="held-out problems")
    batch_size: int = Field(32, gt=0, description="sequences per step, every run")
    teacher_steps: int = Field(2000, gt=0, description="teacher training steps")
    teacher_lr: float = Field(3e-3, gt=0, description="teacher peak learning rate")
    students: dict[str, tuple[str, float]] = Field(
        {"gdn25": ("gated_deltanet", 0.25), "gdn50": ("gated_deltanet", 0.5), "gdn75": ("gated_deltanet", 0.75),
         "mamba2_50": ("mamba2", 0.5)}, description="label -> (student mixer preset, fraction of layers replaced)")
    stage2_steps: int = Field(150, gt=0, description="attention alignment steps")
    stage3_steps: int = Field(250, gt=0, description="logit distillation steps")
    stage4_steps: int = Field(250, gt=0, description="SFT steps")
    stage2_lr: float = Field(3e-3, gt=0, description="stage 2 peak learning rate")
    stage34_lr: float = Field(1e-3, gt=0, description="stages 3 and 4 peak learning rate")
    scratch_lr: float = Field(3e-3, gt=0, description="the from-scratch hybrid's peak learning rate")
    temperature: float = Field(2.0, gt=0, description="stage 3 τ")
    direction: str = Field("reverse", description="stage 3 KL direction (reverse | forward)")
    probe_graph: str = Field("ring", description="graph of the tracing probe (chain_sum's 14 ids hold a 10-node "
                             "ring, not the 16-node grid)")
    probe_walks: int = Field(8, gt=0, description="walks in the probe batch")
    probe_length: int = Field(128, gt=0, description="walk length of the probe")
    probe_window: int = Field(16, gt=0, description="trailing window of the probe's class means")
    threads: int | None = Field(1, gt=0, description="torch threads")

    @classmethod
    def quick(cls) -> "DistillExperimentConfig":
        return cls(num_digits=3, num_train=512, num_eval=64, teacher_steps=30, stage2_steps=5, stage3_steps=5, stage4_steps=5,
                   batch_size=8, students={"gdn50": ("gated_deltanet", 0.5)}, probe_walks=2, probe_length=48,
                   probe_window=8)

    @property
    def data(self) -> dict:
        return {"kind": "chain_sum", "num_digits": self.num_digits, "num_train": self.num_train,
                "num_eval": self.num_eval}


def _loop(steps: int, cfg: DistillExperimentConfig) -> dict:
    return {"steps": steps, "batch_size": cfg.batch_size, "eval_batch_size": 250, "log_every": max(1, steps // 10),
            "checkpoint_every": 0, "keep_last": 1, "progress": False, "threads": cfg.threads}


def _optim(lr: float, steps: int) -> dict:
    return {"lr": lr, "weight_decay": 0.1, "betas": [0.9, 0.98], "warmup_steps": max(1, steps // 10)}


def train_teacher(cfg: DistillExperimentConfig, seed: int, runs: Path) -> dict:
    """The teacher run (``assocmem train`` with a transformers Llama config); returns its summary."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    hf = {"model_type": "llama", "hidden_size": cfg.hidden, "intermediate_size": cfg.intermediate,
          "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
          "tie_word_embeddings": False, "max_position_embeddings": 4 * cfg.probe_length}
    return train(config_from_dict({"name": "teacher", "output_dir": str(runs), "seed": seed,
                                   "model": {"hf_config": hf}, "data": cfg.data,
                                   "optim": _optim(cfg.teacher_lr, cfg.teacher_steps),
                                   "train": _loop(cfg.teacher_steps, cfg)}), overwrite=True)


def distill_student(cfg: DistillExperimentConfig, seed: int, runs: Path, label: str, mixer: str,
                    fraction: float) -> dict[str, dict]:
    """The four stages of one student (training/distill/); returns {"stage<k>": summary}."""
    from assocmem.training.distill import DistillConfig, run_distill

    loop2, loop3, loop4 = (_loop(n, cfg) for n in (cfg.stage2_steps, cfg.stage3_steps, cfg.stage4_steps))
    dc = DistillConfig.model_validate({
        "name": label, "output_dir": str(runs), "seed": seed, "teacher": str(runs / "teacher"),
        "student": {"mixer": mixer, "replace_fraction": fraction, "identity_conv": True}, "data": cfg.data,
        "stage2": {"target": "heads", "optim": _optim(cfg.stage2_lr, cfg.stage2_steps), "train": loop2},
        "stage3": {"direction": cfg.direction, "temperature": cfg.temperature,
                   "optim": _optim(cfg.stage34_lr, cfg.stage3_steps), "train": loop3},
        "stage4": {"optim": _optim(cfg.stage34_lr, cfg.stage4_steps), "train": loop4}})
    return run_distill(dc, overwrite=True)


def train_scratch(cfg: DistillExperimentConfig, seed: int, runs: Path, label: str) -> dict:
    """The student's architecture (its stage-1 HybridConfig) from a random initialisation, trained for
    stages 2 + 3 + 4's steps on the same data; returns the run summary."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train
    from assocmem.training.model_factory import load_pretrained

    hybrid = load_pretrained(runs / label / "stage1").config.hybrid_config.model_dump(mode="json")
    steps = cfg.stage2_steps + cfg.stage3_steps + cfg.stage4_steps
    return train(config_from_dict({"name": f"{label}-scratch", "output_dir": str(runs), "seed": seed,
                                   "model": {"hybrid": hybrid}, "data": cfg.data,
                                   "optim": _optim(cfg.scratch_lr, steps), "train": _loop(steps, cfg)}),
                 overwrite=True)


def probe(cfg: DistillExperimentConfig, folder: Path, seed: int) -> dict:
    """Graph tracing (Park et al. 2025) on a saved model: the lowest energy ratio over layers at the full
    context (lower: class means follow the graph), its layer, and the next-token neighbour mass."""
    import numpy as np

    from assocmem.training.graphs import make_graph
    from assocmem.training.model_factory import load_pretrained

    from ..graph_tracing import trace_graph

    res = trace_graph(load_pretrained(folder), make_graph(cfg.probe_graph), num_walks=cfg.probe_walks,
                      walk_length=cfg.probe_length, window=cfg.probe_window, seed=seed + 12345)
    best = int(np.nanargmin(res.energy_ratio[:, -1]))
    return {"min_energy_ratio": float(res.energy_ratio[best, -1]), "min_energy_ratio_layer": best,
            "neighbour_mass": float(res.accuracy[-1])}


def run_seed(cfg: DistillExperimentConfig, seed: int, out: Path) -> dict:
    """Teacher, students (four stages each), from-scratch twins and probes of one seed."""
    runs = out / "runs"
    t0 = time.time()
    teacher = train_teacher(cfg, seed, runs)
    result = {"teacher": {"accuracy": teacher["eval"]["accuracy"], "probe": probe(cfg, runs / "teacher", seed)},
              "minutes": {"teacher": (time.time() - t0) / 60}}
    for label, (mixer, fraction) in cfg.students.items():
        t0 = time.time()
        stages = distill_student(cfg, seed, runs, label, mixer, fraction)
        t1 = time.time()
        scratch = train_scratch(cfg, seed, runs, label)
        result[label] = {"replaced": stages["stage1"]["replaced"], "mixer": mixer,
                         **{k: stages[k]["eval"]["accuracy"] for k in STAGES},
                         "scratch": scratch["eval"]["accuracy"],
                         "probe": probe(cfg, runs / label / "stage4", seed),
                         "scratch_probe": probe(cfg, runs / f"{label}-scratch", seed)}
        result["minutes"][label] = (t1 - t0) / 60
        result["minutes"][f"{label}-scratch"] = (time.time() - t1) / 60
    return result


def seed_metrics(per_seed: dict, cfg: DistillExperimentConfig) -> dict[int, dict[str, float]]:
    """seed -> "<model>/<metric>" -> value: the flat numbers of the result record."""
    out = {}
    for seed, r in per_seed.items():
        row = {"teacher/accuracy": r["teacher"]["accuracy"],
               "teacher/min_energy_ratio": r["teacher"]["probe"]["min_energy_ratio"],
               "teacher/neighbour_mass": r["teacher"]["probe"]["neighbour_mass"]}
        for label in cfg.students:
            s = r[label]
            row.update({f"{label}/{k}": s[k] for k in (*STAGES, "scratch")})
            row.update({f"{label}/min_energy_ratio": s["probe"]["min_energy_ratio"],
                        f"{label}/neighbour_mass": s["probe"]["neighbour_mass"],
                        f"{label}/scratch_min_energy_ratio": s["scratch_probe"]["min_energy_ratio"]})
        row["minutes"] = sum(r["minutes"].values())
        out[seed] = row
    return out


def summarize(per_seed: dict, cfg: DistillExperimentConfig) -> dict:
    """Mean, min and max over seeds of every number of ``seed_metrics``."""
    flat = seed_metrics(per_seed, cfg)
    keys = next(iter(flat.values())).keys()
    return {k: spread([flat[s][k] for s in flat]) for k in keys}


def markdown_table(summary: dict, cfg: DistillExperimentConfig) -> str:
    """Accuracy after each stage vs the teacher vs from scratch, and the probe, mean [min, max] over seeds."""
    def cell(key: str, digits: int = 3) -> str:
        s = summary[key]
        return f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"

    lines = ["| model | replaced | stage 1 | stage 2 | stage 3 | stage 4 | from scratch | graph energy ratio "
             "(scratch) |", "|---|---|---|---|---|---|---|---|",
             f"| teacher (Llama, attention ×{cfg.layers}) | – | {cell('teacher/accuracy')} | | | | | "
             f"{cell('teacher/min_energy_ratio')} |"]
    for label, (mixer, fraction) in cfg.students.items():
        lines.append(f"| {label} | {fraction:.0%} → {mixer} | " + " | ".join(cell(f"{label}/{k}") for k in STAGES)
                     + f" | {cell(f'{label}/scratch')} | {cell(f'{label}/min_energy_ratio')} "
                     f"({cell(f'{label}/scratch_min_energy_ratio')}) |")
    return "\n".join(lines) + "\n"


def run_experiment(cfg: DistillExperimentConfig, seeds: list[int], out: str | Path) -> dict:
    """Every seed into ``out/seed_<s>/``, then distill_experiment.{json,md} in ``out``."""
    return run_seeds("distill", cfg, seeds, out, run_seed=run_seed, summarize=summarize,
                     markdown_table=markdown_table, save_figures=lambda summary, cfg, out: None)


run = seeded_run(run_experiment, markdown_table, seed_metrics,
                 lambda cfg: "cross-architecture distillation at toy scale (probes/experiments/distill.py): a 4-layer "
                             "Llama teacher on chain_sum distilled into GDN / Mamba2 hybrids in four stages; held-out "
                             "accuracy per stage vs the teacher vs the same hybrid from scratch on the same tokens; "
                             "graph-tracing energy ratio")


EXPERIMENT = Experiment("distill", help="distil a Llama teacher (chain_sum) into 25/50/75 %% GDN and 50 %% Mamba2 "
                        "hybrids; accuracy per stage vs teacher vs from scratch; graph tracing", doc=__doc__,
                        run=run, settings=lambda args: config_from_flags(DistillExperimentConfig, args), threads=True)
