"""The registry of reproducible results, and how a rerun is judged against the stored one.

Every number the README quotes comes from a result registered here: its name, the
``assocmem`` command that makes it (arguments, with placeholders), the seeds, which
metrics are checked and with what tolerance, and how long one seed takes. The stored
record is ``<name>.json`` in a results folder (format: ``training/results.py``): by default
the one shipped with the package (``packaged_results()``: probes/experiments/results/, found
through importlib.resources, so it is there after a plain ``pip install``).
``assocmem reproduce NAME`` reruns the command into a fresh folder and compares.

Placeholders in ``Reproducible.command``:

    {seeds}    the seeds, one argument each          (documented: the registered seeds)
    {out}      a folder the command may create        (documented: runs/<name>)
    {result}   the result record the command writes   (documented: probes/experiments/results/<name>.json)
    {stored}   the folder of the stored results       (documented: probes/experiments/results)

The tolerance rule (``Check``): a rerun value v of a metric holds when

    |v − mean| ≤ max(range, atol)            mean, range = max − min over the stored seeds

(the stored result's own spread over seeds, never narrower than ``atol``), and, if set,
v ≥ at_least (a claim such as "every seed reaches 0.9"). Each rerun seed is judged on
its own, so ``--quick`` (one seed) uses the same rule. Same machine, same thread count:
the runs are deterministic and the rerun repeats the stored per-seed values; another
CPU rounds differently, which the spread over seeds covers.

A stored record keeps the command that wrote it, as it was spelled then (its ``versions``
name the commit). Commands renamed since are listed once, in ``RESPELLED``; ``respell``
gives a stored command in today's spelling.

Adding a result: write the command (it must accept the seeds and write the record with
``training.results.write_result``), run it with the documented paths, commit the JSON,
then add one ``register(Reproducible(...))`` call below.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from assocmem.training.results import ResultRecord

PLACEHOLDERS = ("{seeds}", "{out}", "{result}")
DOCUMENTED_RESULTS = "probes/experiments/results"  # the packaged results, as a path in a checkout

# old spelling -> today's, applied in this order to a stored command (``respell``)
RESPELLED: tuple[tuple[str, str], ...] = (
    *((f"assocmem probe {old}", f"assocmem experiment {new}") for old, new in (
        ("hybrid-experiment", "hybrid"), ("rl-experiment", "rl"), ("tts-experiment", "tts"),
        ("niah-experiment", "niah"), ("distill-experiment", "distill"), ("wiola-experiment", "wiola"),
        ("grokking-experiment", "grokking"), ("leak-experiment", "leak"), ("wiola-claims", "wiola-claims"))),
    ("docs/results/", f"{DOCUMENTED_RESULTS}/"),   # where the stored results lived
    (" --seed ", " --seeds "),                      # wiola-claims took one --seed
)


def respell(command: str) -> str:
    """A stored command in today's spelling (``RESPELLED``)."""
    for old, new in RESPELLED:
        command = command.replace(old, new)
    return command


def packaged_results() -> Path:
    """The results folder shipped inside the package (probes/experiments/results/)."""
    return Path(str(files(__package__).joinpath("results")))


@dataclass(frozen=True)
class Check:
    """One metric of a result and how a rerun of it is judged (see the module docstring)."""

    metric: str
    atol: float = 0.0               # the half-width never goes below this (spread 0, e.g. every seed at 1.0)
    at_least: float | None = None   # every rerun seed must also reach this value

    def interval(self, stored: ResultRecord) -> tuple[float, float]:
        """[low, high] a rerun value must lie in."""
        s = stored.summary[self.metric]
        half = max(s.range, self.atol)
        low = s.mean - half if self.at_least is None else max(s.mean - half, self.at_least)
        return low, s.mean + half


@dataclass(frozen=True)
class Reproducible:
    """A registered result: the command that makes it and what a rerun must repeat."""

    name: str
    description: str
    command: tuple[str, ...]   # assocmem arguments with the placeholders {seeds}, {out}, {result}
    seeds: tuple[int, ...]
    checks: tuple[Check, ...]
    minutes_per_seed: float    # one seed, one thread, the reference machine (2-core AMD EPYC), idle
    quick_seeds: tuple[int, ...] = field(default=())  # --quick reruns these (default: the first seed)

    def __post_init__(self):
        missing = [p for p in PLACEHOLDERS if not any(p in arg for arg in self.command)]
        if missing:
            raise ValueError(f"result {self.name!r}: the command needs the placeholders {missing} "
                             f"(every rerun goes into a fresh folder and writes its own record)")
        if any("{seeds}" in arg and arg != "{seeds}" for arg in self.command):
            raise ValueError(f"result {self.name!r}: {{seeds}} must be an argument of its own (it expands to one "
                             f"argument per seed)")
        if not self.seeds or not self.checks:
            raise ValueError(f"result {self.name!r}: give at least one seed and one Check")

    def stored_path(self, results: str | Path) -> Path:
        """The stored record in the results folder ``results``."""
        return Path(results) / f"{self.name}.json"

    def argv(self, seeds: tuple[int, ...] | list[int], out: str | Path, result: str | Path,
             stored: str | Path) -> list[str]:
        """The command's arguments with the placeholders filled in."""
        args: list[str] = []
        for arg in self.command:
            if arg == "{seeds}":
                args += [str(s) for s in seeds]
            else:
                args.append(arg.replace("{out}", str(out)).replace("{result}", str(result))
                            .replace("{stored}", str(stored)))
        return args

    def documented_command(self) -> str:
        """The command as the README gives it, run from a checkout (the stored record was written by it)."""
        return shlex.join(["assocmem", *self.argv(self.seeds, f"runs/{self.name}",
                                                   f"{DOCUMENTED_RESULTS}/{self.name}.json", DOCUMENTED_RESULTS)])

    def rerun_seeds(self, quick: bool) -> tuple[int, ...]:
        return (self.quick_seeds or self.seeds[:1]) if quick else self.seeds


REPRODUCIBLE: dict[str, Reproducible] = {}


def register(entry: Reproducible) -> Reproducible:
    """Add a result to the registry (names are unique)."""
    if entry.name in REPRODUCIBLE:
        raise ValueError(f"a result named {entry.name!r} is already registered")
    REPRODUCIBLE[entry.name] = entry
    return entry


def get(name: str) -> Reproducible:
    """The registered result ``name`` (the error lists the registered names)."""
    try:
        return REPRODUCIBLE[name]
    except KeyError:
        raise KeyError(f"no reproducible result named {name!r}; registered: {sorted(REPRODUCIBLE)}") from None


# ---------------------------------------------------------------- judging a rerun
@dataclass(frozen=True)
class Verdict:
    """One checked metric of one rerun seed."""

    metric: str
    seed: int
    value: float | None
    stored_value: float | None    # the stored record's value for the same seed (None if it has no such seed)
    low: float
    high: float

    @property
    def holds(self) -> bool:
        return self.value is not None and self.low <= self.value <= self.high


def judge(entry: Reproducible, stored: ResultRecord, rerun: ResultRecord) -> list[Verdict]:
    """Every (checked metric, rerun seed) pair with its interval; see the module docstring."""
    verdicts = []
    for check in entry.checks:
        if check.metric not in stored.summary:
            raise ValueError(f"{entry.name}: the stored result has no metric {check.metric!r} "
                             f"(it has {sorted(stored.summary)})")
        low, high = check.interval(stored)
        before = stored.values(check.metric)
        for seed, value in rerun.values(check.metric).items():
            verdicts.append(Verdict(check.metric, seed, value, before.get(seed), low, high))
    return verdicts


def verdict_table(verdicts: list[Verdict], stored: ResultRecord) -> str:
    """Markdown: one row per checked metric and rerun seed."""
    rows = ["| metric | seed | rerun | stored (same seed) | stored mean [min, max] over seeds | holds if in | holds |",
            "|---|---|---|---|---|---|---|"]
    fmt = lambda x: "—" if x is None else f"{x:.4g}"  # noqa: E731
    for v in verdicts:
        s = stored.summary[v.metric]
        rows.append(f"| {v.metric} | {v.seed} | {fmt(v.value)} | {fmt(v.stored_value)} | "
                    f"{s.mean:.4g} [{s.min:.4g}, {s.max:.4g}] (n={s.n}) | [{v.low:.4g}, {v.high:.4g}] | "
                    f"{'yes' if v.holds else '**no**'} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------- the registry
# One call per result; the stored record is results/<name>.json.

register(Reproducible(
    name="spectral-leak",
    description="Seed 003 §7.3: byte-level ST-1 as written vs causal vs baseline on the repository's procedural "
                "text (textgen.py, seed 0); held-out BPC and BPC with the future replaced by random bytes",
    command=("experiment", "leak", "--epochs", "15", "--jobs", "1", "--seeds", "{seeds}", "--out", "{out}",
             "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=(Check("st1_as_written/final_bpc_control", atol=0.3), Check("st1_as_written/final_bpc", atol=0.3),
            Check("st1_causal/final_bpc", atol=0.3), Check("baseline/final_bpc_control", atol=0.1)),
    minutes_per_seed=2.8,
))

register(Reproducible(
    name="spectral-grokking-p97",
    description="Seed 003 §5 on Nanda et al. 2023's one-layer model, (a + b) mod 97: held-out accuracy and "
                "epochs-to-grokking of the baseline, PFFT {30,35,40,45,48} and GrokFast-EMA within 200 epochs",
    command=("experiment", "grokking", "--p", "97", "--variants", "baseline", "pfft_wrong_high", "grokfast_ema",
             "--epochs", "200", "--jobs", "1", "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=(Check("p97/pfft_wrong_high/final_val_accuracy", atol=0.05),
            Check("p97/baseline/final_val_accuracy", atol=0.05)),
    minutes_per_seed=3.0,
))

register(Reproducible(
    name="spectral-grokking-p113",
    description="Seed 003 §5 / Table 2 at p = 113 on Nanda et al. 2023's one-layer model: held-out accuracy and "
                "epochs-to-grokking of the baseline, PFFT {30,35,40,45,48} and {34,40,46,51,56} within 100 epochs",
    command=("experiment", "grokking", "--p", "113", "--variants", "baseline", "pfft_wrong_high", "pfft_spread5_p113",
             "--epochs", "100", "--jobs", "3", "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=(Check("p113/pfft_wrong_high/final_val_accuracy", atol=0.05),
            Check("p113/pfft_spread5_p113/final_val_accuracy", atol=0.05),
            Check("p113/baseline/final_val_accuracy", atol=0.02)),
    minutes_per_seed=2.1,
))

register(Reproducible(
    name="hybrid-quick",
    description="the hybrid experiment's smoke-sized variant (--quick: d=32, 30 steps, 0/50/100 % attention and "
                "SCA 2:1 on ring/hex walks, probed on a held-out 4x4 grid); the README's hybrid table is the full run",
    command=("experiment", "hybrid", "--quick", "--threads", "1", "--seeds", "{seeds}", "--out", "{out}",
             "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=tuple(Check(f"{model}/min_energy_ratio", atol=0.02) for model in ("attn000", "attn050", "attn100", "sca2to1"))
    + (Check("attn100/neighbour_mass", atol=0.01),),
    minutes_per_seed=2.0,
))

register(Reproducible(
    name="mqar-gdn-target",
    description="the MQAR target: 2-layer Gated DeltaNet, d=128, 2 heads, no MLP, at Zoology's (L=256, K=16) cell; "
                "2000 steps of batch 16, lr 1e-2, one thread (training/configs/mqar_gdn_target.yaml)",
    command=("train", "mqar_gdn_target", "--seeds", "{seeds}", "--set", "train.threads=1", "--set", "output_dir={out}",
             "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=(Check("accuracy", atol=0.01, at_least=0.9), Check("steps_to_0.9", atol=200.0)),
    minutes_per_seed=10.0,
))

_EVAL_SEEDS = (0, 1, 2)

register(Reproducible(
    name="tts-experiment",
    description="test-time scaling at toy scale (probes/experiments/tts.py): GDN×4, GDN×3+attn, GDN×2+attn×2, "
                "attn×4 trained on chain_sum for 600 steps; pass@k and maj@k on 100 held-out problems × 32 samples",
    command=("experiment", "tts", "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
    seeds=_EVAL_SEEDS,
    checks=tuple(Check(f"{model} {metric}", atol=0.03) for model in ("gdn×4", "gdn×3+attn", "gdn×2+attn×2", "attn×4")
                 for metric in ("pass@1", "pass@32", "maj@32 random")),
    minutes_per_seed=3.0))

register(Reproducible(
    name="niah-experiment",
    description="needle in a haystack at toy scale (probes/experiments/niah.py): attn×2, GDN+attn, GDN×2 trained "
                "at L=128 for 600 steps, probed at 64..1024 × depths 0..100 %",
    command=("experiment", "niah", "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
    seeds=_EVAL_SEEDS,
    checks=tuple(Check(f"{model} {metric}", atol=0.05) for model in ("attn×2", "gdn+attn", "gdn×2")
                 for metric in ("within L<=128", "beyond", "L=1024")),
    minutes_per_seed=3.5))

register(Reproducible(
    name="wiola-claims",
    description="the Wiola paper's checkable numbers (eqs. 10, 19, 33, 38-41, parameter counts) recomputed on "
                "the wiola-360m shape (meta device); ATM's FLOPs at the μ measured by wiola-experiment",
    command=("experiment", "wiola-claims", "--mu-from", "{stored}/wiola-experiment.json", "--seeds", "{seeds}",
             "--out", "{out}", "--result", "{result}"),
    seeds=(0,),
    checks=(Check("rmsnorm/eq10_printed_vs_central_differences", atol=1e-6),
            Check("rmsnorm/eq10_corrected_vs_central_differences", atol=1e-7),
            Check("srpe/score_spread_a_s_0", atol=1e-11),
            Check("srpe/score_spread_a_s_0.1", atol=1e-6),
            Check("kv_cache/eq38_arithmetic_bytes"),
            Check("kv_cache/model_cache_bytes"),
            Check("gqa_flops/gqa_measured"),
            Check("gcla_overhead/causal_overhead_with_gate", atol=1e-9),
            Check("atm_flops/measured/mu", atol=1e-12),
            Check("atm_flops/measured/model_saving", atol=1e-9),
            Check("atm_flops/paper_high/model_saving", atol=1e-9),
            Check("parameters/parameters")),
    minutes_per_seed=1.0,
))

# Recurrent depth on MQAR (issue 24): the same 2-layer model (59,460 parameters), three layers.
for _name, _layers, _what, _minutes in (
        ("mqar-depth-gdn1", "gdn,gdn", "Gated DeltaNet, one GD step per token", 5.0),
        ("mqar-depth-gdn3", "gated_deltanet_steps3,gated_deltanet_steps3",
         "Gated DeltaNet, 3 GD steps per token (= one step with β_eff)", 5.0),
        ("mqar-depth-huber3", "huber_delta_steps3,huber_delta_steps3",
         "Huber bias, 3 GD steps per token (the derived scan)", 21.0)):
    register(Reproducible(
        name=_name,
        description=f"MQAR (L=64, 8 pairs, vocab 256, 600 steps; training/configs/mqar_depth.yaml): {_what}",
        command=("train", "mqar_depth", "--seeds", "{seeds}", "--set", f"model.hybrid.layers={_layers}",
                 "--set", "output_dir={out}", "--result", "{result}"),
        seeds=(0, 1, 2),
        checks=(Check("accuracy", atol=0.01),),
        minutes_per_seed=_minutes,  # measured with 8 sessions sharing the 2 cores; idle is faster
    ))

# RL after SFT (issue 23): one SFT model on chain_sum (~29 % pass@1 on an AMD EPYC, ~45 % on an AVX-512 Xeon), four RL methods, 80 rounds of 16 × 8 samples.
# With --beta 0.1, the same runs with the k3 KL to the SFT model in the loss (the policy-gradient methods: self-distillation
# takes no KL term).
_PG = ("GRPO", "Dr. GRPO + dapo", "gradient-balanced")
for _name, _lr, _beta in (("rl-experiment", None, None), ("rl-experiment-lr2e-4", "0.0002", None),
                          ("rl-experiment-kl", None, "0.1"), ("rl-experiment-kl-lr2e-4", "0.0002", "0.1")):
    _methods = _PG if _beta else (*_PG, "self-distillation")
    register(Reproducible(
        name=_name,
        description=f"RL after SFT at toy scale (probes/experiments/rl.py), RL lr {_lr or '0.001'}, KL weight "
                    f"{_beta or '0'}: {', '.join(_methods)} from one chain_sum SFT model; held-out pass@1",
        command=("experiment", "rl", *(("--lr", _lr) if _lr else ()),
                 *(("--beta", _beta, "--methods", *_PG) if _beta else ()),
                 "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
        seeds=(0, 1, 2),
        checks=tuple(Check(f"{policy} pass@1", atol=0.03) for policy in ("SFT", *_methods)),
        minutes_per_seed=5.5,  # 3 seeds in 16 min with other jobs sharing the 2 cores (1.5 min per seed when idle)
    ))

register(Reproducible(
    name="distill-experiment",
    description="cross-architecture distillation at toy scale (probes/experiments/distill.py): a 4-layer Llama "
                "teacher (hidden 64, 4 heads, 2 KV heads) on chain_sum, 25/50/75 % of its layers -> Gated DeltaNet "
                "and 50 % -> Mamba2 through the four stages; held-out token accuracy per stage vs the same hybrid "
                "from scratch on the same tokens; graph-tracing energy ratio",
    command=("experiment", "distill", "--threads", "1", "--seeds", "{seeds}", "--out", "{out}",
             "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=(Check("teacher/accuracy", atol=0.01, at_least=0.9),
            *(Check(f"{m}/stage4", atol=0.02) for m in ("gdn25", "gdn50", "gdn75", "mamba2_50")),
            *(Check(f"{m}/scratch", atol=0.1) for m in ("gdn75", "mamba2_50"))),
    minutes_per_seed=20.0,  # measured with the 2 cores shared (load average 5-7); idle is faster
))

register(Reproducible(
    name="dt-stability",
    description="the thesis' Fig 4.6 at toy scale: 2-layer Mamba byte LMs (d=48, lr 3e-2, 100 steps) with dt_rank "
                "3 (auto), 1 and 48 and with Δ clamped to (1e-3, 0.1); loss spikes, divergence and final loss",
    command=("experiment", "dt-stability", "--seeds", "{seeds}", "--out", "{out}", "--result", "{result}"),
    seeds=(0, 1, 2),
    checks=tuple(Check(f"{variant}/final_loss", atol=0.05) for variant in (
        "dt_rank auto (3)", "dt_rank 1", "dt_rank 48", "dt_rank auto + dt_limit (1e-3, 0.1)")),
    minutes_per_seed=2.0,
))

# The text pipeline at toy scale (issue 38): the shipped word problems, SFT -> RL -> parallel and sequential scaling;
# text-demo-rl-lr1e-4: the same with a third of the RL learning rate.
for _name, _lr in (("text-demo", None), ("text-demo-rl-lr1e-4", "0.0001")):
    register(Reproducible(
        name=_name,
        description="the text pipeline at toy scale (probes/experiments/text_demo.py): byte-level GDN+attention and "
                    "attention×2 (d=64, 2 layers) SFT'd on the shipped word problems, then RL (Dr. GRPO, reward "
                    f"correct, lr {_lr or '3e-4'}); greedy, pass@k, maj@k, best-of-N by a step verifier and sequential "
                    "verify-revise rounds on the 50 held-out problems",
        command=("experiment", "text-demo", *(("--rl-lr", _lr) if _lr else ()), "--seeds", "{seeds}", "--out", "{out}",
                 "--result", "{result}"),
        seeds=(0, 1, 2),
        checks=tuple(Check(f"{model} {stage} {metric}", atol=0.05) for model in ("gdn+attn", "attn×2")
                     for stage in ("SFT", "RL") for metric in ("greedy", "pass@1", "pass@8", "maj@8")),
        minutes_per_seed=4.5,  # measured with ~6 sessions sharing the 2 cores (about half a core); idle is faster
    ))
