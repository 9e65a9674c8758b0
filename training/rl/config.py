"""RLConfig: one YAML file describes an RL run after SFT (``assocmem rl CONFIG.yaml``).

    name: chain-sum-grpo
    model: {init_from: runs/chain-sum-sft}      # the policy starts from the SFT model
    reference: null                             # frozen KL reference (null: the policy's init_from)
    data: {kind: chain_sum, num_digits: 6, num_train: 2000, num_eval: 200}   # prompts, held-out prompts
    rollout: {group_size: 8, prompts_per_step: 8, temperature: 1.0, reward: correct}
    loss: {algorithm: balanced, aggregation: dapo, beta: 0.0}
    optim: {lr: 1e-4, warmup_steps: 0, weight_decay: 0.0}
    train: {steps: 100, eval_every: 20}

Every section refuses unknown keys and every float must be finite; errors name the field
(``rollout.group_size: Input should be greater than or equal to 2``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config import (ChainSumData, ConfigError, GraphPathData, ModelConfig, ModularData, NeedleData, OptimConfig,
                      ProblemsData, Seed, check_run_name)
from ..config_files import read_config_mapping
from ..verifiable.verifiers import VerifierSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


TaskData = Annotated[Union[ChainSumData, GraphPathData, ModularData, NeedleData, ProblemsData],
                     Field(discriminator="kind")]


class Mastered(_Strict):
    """Nautile §4.2: "Groups in which every completion receives an overall score above 90 (and a minimum
    above 85) are skipped as mastered." A group is skipped when every completion's reward is above
    ``every_above`` and the group's minimum above ``min_above`` (advantages.py ``mastered_groups``)."""

    every_above: float = Field(description="a group is mastered only if every completion's reward is above this "
                               "(Nautile: 90)")
    min_above: float = Field(description="and its minimum reward above this (Nautile: 85; one reward per "
                             "completion, so it binds only above every_above)")

    @model_validator(mode="before")
    @classmethod
    def _mean_is_not_the_rule(cls, data):
        """``mean_above`` read the first threshold as the group's mean; the paper's rule reads every completion."""
        if isinstance(data, dict) and "mean_above" in data:
            raise ValueError(f"mean_above ({data['mean_above']}) compared the group's mean reward; Nautile §4.2 skips "
                             "a group when every completion is above the threshold: write every_above instead")
        return data


class RolloutConfig(_Strict):
    """How completions are sampled and scored."""

    group_size: int = Field(8, ge=2, description="G, completions per prompt (advantages need >= 2)")
    prompts_per_step: int = Field(8, ge=1, description="prompts per round (global; split over processes)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature (> 0: RL samples)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus mass (1 = off)")
    max_new_tokens: int | None = Field(None, ge=1, description="response budget T_max (null: the task's)")
    reward: str | dict[str, float] = Field(
        "correct", description="a reward name, or {name: weight} summed: names registered (rewards.py REWARDS: correct, "
        "correct_last, correct_strict, states_an_answer, or added with register_reward) or defined under verifiers")
    verifiers: dict[str, VerifierSpec] = Field(
        default_factory=dict, description="named verifiers for reward (verifiable/verifiers.py): {name: {kind: "
        "exact_match | numeric | python | model, ...}}")
    overlong_penalty: float = Field(0.0, ge=0, description="subtracted from the reward of a completion without EOS")
    advantage_scale: Literal["none", "group", "batch"] = Field(
        "none", description="none: A = r − mean (Dr. GRPO); group: ÷ (group std + 1e-4) (GRPO); batch: ÷ batch std")
    mastered: Mastered | None = Field(None, description="skip mastered groups (Nautile §4.2: every completion "
                                      "above every_above, minimum above min_above); null = keep all")


    @model_validator(mode="after")
    def _reward_resolves(self) -> "RolloutConfig":
        """Every reward name is registered or defined, no defined name shadows a registered one."""
        from .rewards import reward_fn

        reward_fn(self.reward, self.verifiers)
        return self


class LossConfig(_Strict):
    """What is optimised on each round's samples."""

    algorithm: Literal["policy_gradient", "balanced", "self_distillation"] = Field(
        "policy_gradient", description="policy_gradient: the GRPO-family loss; balanced: g⁺ + ‖g⁺‖/(‖g⁻‖+ε) g⁻ "
        "(Nautile §4.3); self_distillation: advantage-weighted CE on completions with A > 0 (Nautile §4.4)")
    aggregation: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        "dapo", description="token weights (losses.py; TRL's loss_type of the same name)")
    beta: float = Field(0.0, ge=0, description="weight of the k3 KL to the frozen reference")
    kl_bias_correction: bool = Field(False, description="multiply the k3 KL per token by the ratio π_θ/π_old "
                                     "(TRL's use_bias_correction_kl, True by default there): the unbiased reverse-KL "
                                     "gradient; false: the plain k3 term (Nautile §4.2's 'KL penalty ... with "
                                     "coefficient β')")
    eps_low: float = Field(0.2, ge=0, lt=1, description="ratio clip below: 1 − eps_low")
    eps_high: float = Field(0.2, ge=0, description="ratio clip above: 1 + eps_high (DAPO: 0.28)")
    inner_iterations: int = Field(1, ge=1, description="optimizer steps per round on the same samples (GRPO's μ; "
                                  "self-distillation's epochs E)")
    balance: Literal["prompt", "batch"] = Field(
        "prompt", description="balanced: prompt = one scale s_x per prompt, g = Σ_x (g⁺_x + s_x g⁻_x) (Nautile §4.3 "
        "writes g± for one prompt x, 'regardless of the proportion of correct completions in the group'); batch = one "
        "scale for the round's summed g⁺, g⁻ (balancing.py)")
    balance_eps: float = Field(1e-8, gt=0, description="ε of the balancing scale")
    balance_cap: bool = Field(False, description="scale g⁻ by min(1, ‖g⁺‖/(‖g⁻‖+ε)) (per prompt or per batch): "
                              "never up")
    distill_weighting: Literal["advantage", "none"] = Field(
        "advantage", description="self-distillation: CE weighted by A (Nautile) or plain CE on the kept set")

    @model_validator(mode="after")
    def _kl_needs_a_policy_gradient(self) -> "LossConfig":
        """Self-distillation steps on its kept completions' CE alone: a KL weight would be silently unused."""
        if self.algorithm == "self_distillation" and self.beta > 0:
            raise ValueError(f"loss.beta = {self.beta:g} has no effect with loss.algorithm: self_distillation (it "
                             "steps on the advantage-weighted CE of its kept completions only); set loss.beta: 0, or "
                             "choose policy_gradient or balanced for a KL-regularised run")
        return self


class RLLoopConfig(_Strict):
    """Loop settings."""

    steps: int = Field(gt=0, description="rounds (sample, then inner_iterations optimizer steps)")
    eval_every: int = Field(0, ge=0, description="held-out pass@1 every N rounds (0: at the start and end only)")
    eval_samples: int = Field(8, ge=1, description="completions per held-out prompt for pass@1")
    eval_temperature: float = Field(1.0, ge=0, description="temperature of the held-out samples (0 = greedy)")
    eval_batch_size: int = Field(64, ge=1, description="rows per generate() call in evaluation")
    log_every: int = Field(1, gt=0, description="a JSONL line every N rounds")
    checkpoint_every: int = Field(0, ge=0, description="checkpoint every N rounds (0: at the end only)")
    keep_last: int = Field(2, gt=0, description="checkpoints kept")
    on_nonfinite: Literal["stop", "skip"] = Field(
        "stop", description="a NaN/inf gradient norm in an optimizer step (a huge loss.beta or optim.lr): stop with an "
        "error naming the round (the checkpoints so far are kept), or skip that step (no update; counted as "
        "skipped_steps in the log)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available")
    threads: int | None = Field(None, gt=0, description="torch.set_num_threads (null = torch default)")
    progress: bool = Field(True, description="tqdm progress bar on rank 0")


class RLConfig(_Strict):
    """An RL run after SFT."""

    name: str | None = Field(None, description="run name; the run folder is <output_dir>/<name> (default: file stem)")
    output_dir: str = Field("runs", description="parent folder of run folders")
    seed: Seed = Field(0, description="seed of sampling and of everything random in the loop")
    model: ModelConfig = Field(description="the policy (usually init_from the SFT run)")
    reference: str | None = Field(None, description="save_pretrained or run folder of the frozen KL reference "
                                  "(null: model.init_from, or the initial policy)")
    data: TaskData = Field(description="the verifiable task: num_train prompts to train on, num_eval held out; or a "
                           "problem file (kind: problems, verifiable/problem_file.py)")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="sampling and rewards")
    loss: LossConfig = Field(default_factory=LossConfig, description="the objective")
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4, weight_decay=0.0, grad_clip=1.0),
                               description="AdamW and schedule (training/config.py)")
    train: RLLoopConfig = Field(description="loop settings")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str | None) -> str | None:
        return None if name is None else check_run_name(name)

    @model_validator(mode="after")
    def _self_distillation_is_unnormalised(self) -> "RLConfig":
        """Nautile §4.4 scores completions "using the same advantage computation as GRPO (without
        standard-deviation normalization)": a std-scaled advantage is not its self-distillation."""
        if self.loss.algorithm == "self_distillation" and self.rollout.advantage_scale != "none":
            raise ValueError(f"rollout.advantage_scale: {self.rollout.advantage_scale} divides the advantages by "
                             "a standard deviation, but loss.algorithm: self_distillation is Nautile §4.4's, which "
                             "scores 'without standard-deviation normalization' (A = r − mean, so hard prompts weigh "
                             "more); set rollout.advantage_scale: none")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _where(loc: tuple) -> str:
    """Dotted field of a pydantic error location (the data union's tag, e.g. ``chain_sum``, left out)."""
    parts = [str(p) for p in loc]
    if len(parts) > 2 and parts[0] == "data":
        parts = [parts[0], *parts[2:]]
    return ".".join(parts) or "(top)"


def rl_config_from_dict(data: dict) -> RLConfig:
    """Validate a raw dict; every problem is listed with its dotted field."""
    try:
        return RLConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {_where(e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid RL config:\n" + "\n".join(lines)) from None


def load_rl_config(path: str | Path, overrides: list[str] | None = None, *,
                        smoke: bool = False) -> RLConfig:
    """Read a YAML RLConfig, apply ``--set key=value`` (values parsed as YAML) and validate; name
    defaults to the file stem."""
    return rl_config_from_dict(read_config_mapping(path, overrides, example="loss.beta=0.04", smoke=smoke))
