"""DistillConfig: one YAML file describes the four stages of cross-architecture distillation (thesis §3.4).

    name: llama-to-gdn50              # stage folders: <output_dir>/<name>/stage1 ... stage4
    teacher: runs/teacher/final       # a local Llama / Qwen2 / Qwen3 save_pretrained folder (or run folder)
    student: {mixer: gated_deltanet, replace_fraction: 0.5, identity_conv: true}
    data: {kind: mqar, seq_len: 64, num_kv_pairs: 8, vocab_size: 128}
    stage2: {target: heads, optim: {lr: 1e-3}, train: {steps: 200, batch_size: 32}}
    stage3: {direction: reverse, temperature: 2.0, optim: {lr: 1e-3}, train: {steps: 300, batch_size: 32}}
    stage4: {optim: {lr: 5e-4}, train: {steps: 300, batch_size: 32}}

Stage 1 (weight transfer) always runs; a stage left out (null) is skipped and the next one starts
from the last stage that ran. Every section refuses unknown keys; ``check_distill`` refuses, before any
work, a missing teacher folder, a teacher the student cannot take and replaced layers out of range,
naming the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config import ConfigError, DataConfig, OptimConfig, Seed, TrainLoopConfig, check_run_name
from ..config_files import read_config_mapping


class _Strict(BaseModel):
    """Unknown keys are refused and every float must be finite (as in training/config.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StudentConfig(_Strict):
    """The hybrid built in stage 1: which teacher layers lose their attention, and to which mixer."""

    mixer: str = Field("gated_deltanet", description="mixer preset of the replaced layers (a parametric-memory "
                       "preset: gated_deltanet, mamba2, gla, ...; assocmem.mixers.list_presets())")
    replace: list[int] | None = Field(None, description="0-indexed teacher layers to replace (exactly one of "
                                      "replace, table_3_3, replace_fraction)")
    table_3_3: Literal["none", "25", "50", "75", "87_5", "100"] | None = Field(
        None, description="a row of the thesis' Table 3.3 (16-layer teacher; '100' keeps layer 0)")
    replace_fraction: float | None = Field(None, ge=0, le=1, description="replace round(f·n) layers spaced as "
                                           "Table 3.3 spaces them (models/convert.replace_fraction)")
    identity_conv: bool = Field(False, description="start each replaced layer's short conv as the identity tap")

    @model_validator(mode="after")
    def _one_rule(self) -> "StudentConfig":
        given = [k for k in ("replace", "table_3_3", "replace_fraction") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"student needs exactly one of replace, table_3_3, replace_fraction; got {given or 'none'}")
        return self

    def layers(self, num_layers: int) -> list[int]:
        """The replaced layers of a teacher with ``num_layers`` layers (sorted)."""
        from assocmem.models.convert import replace_fraction, table_3_3

        if self.replace is not None:
            return sorted(self.replace)
        if self.table_3_3 is not None:
            return table_3_3(self.table_3_3, num_layers)
        return replace_fraction(self.replace_fraction, num_layers)


class RandomTeacher(_Strict):
    """A randomly initialised transformers teacher (under ``torch.manual_seed(seed)``): for smoke runs and tests
    of the pipeline, not for a distillation worth keeping."""

    hf_config: dict = Field(description="a transformers config dict with model_type (llama, qwen2, qwen3); "
                            "vocab_size defaults to the data's vocabulary")

    @field_validator("hf_config")
    @classmethod
    def _has_type(cls, hf_config: dict) -> dict:
        if "model_type" not in hf_config:
            raise ValueError("teacher.hf_config needs a model_type (e.g. llama)")
        return hf_config


class _Stage(_Strict):
    optim: OptimConfig = Field(default_factory=OptimConfig, description="optimizer and schedule of this stage")
    train: TrainLoopConfig = Field(description="loop settings of this stage (steps, batch, checkpoints, ...)")

    @model_validator(mode="after")
    def _warmup_fits(self):
        if self.train.steps is not None and self.optim.warmup_steps > self.train.steps:
            raise ValueError(f"optim.warmup_steps={self.optim.warmup_steps} exceeds train.steps={self.train.steps}")
        return self


class AlignStage(_Stage):
    """Stage 2, attention alignment (eqs 3.21-3.22): each replaced mixer, given the teacher's normed input at
    its layer, learns to reproduce that layer's attention output (MSE); the layers train independently."""

    target: Literal["heads", "output"] = Field(
        "heads", description="heads: per head before o_proj (1/(MH) Σ_m Σ_h (1/d)‖y − ŷ‖², eq. 3.22; needs "
        "the student's o_proj input to be H heads of the teacher's head width); output: after o_proj (any mixer)")
    trainable: Literal["mixer", "new"] = Field(
        "mixer", description="mixer: every parameter of the replaced mixers; new: only those stage 1 did not "
        "copy from the teacher (gates, conv, feature map, output norm: not q/k/v/o)")


class KDStage(_Stage):
    """Stage 3, logit distillation (eqs 3.23-3.24): w_kl·τ²·KL + w_ce·CE per position."""

    direction: Literal["reverse", "forward"] = Field(
        "reverse", description="reverse: KL(P_student ‖ P_teacher) as the thesis writes (§3.4, stage 3); forward: "
        "KL(P_teacher ‖ P_student), what the MambaInLlama code computes")
    temperature: float = Field(1.0, gt=0, description="τ: both logits divided by τ before the softmax (eq. 3.24)")
    w_kl: float = Field(1.0, ge=0, description="weight of τ²·KL")
    w_ce: float = Field(0.0, ge=0, description="weight of the cross-entropy of the student (τ = 1) on the labels")
    trainable: Literal["mixers", "all"] = Field("all", description="mixers: only the replaced mixers train; all: "
                                                "every student parameter")
    positions: Literal["supervised", "all"] = Field(
        "all", description="positions distilled: the data's supervised ones, or every position of each row up "
        "to its last supervised one (the teacher's distribution is a target wherever it is defined)")

    @model_validator(mode="after")
    def _some_loss(self) -> "KDStage":
        if self.w_kl == 0 and self.w_ce == 0:
            raise ValueError("w_kl and w_ce are both 0, so the loss is exactly 0 and nothing would train; set w_kl > 0 "
                             "(distillation) and/or w_ce > 0 (cross-entropy on the labels)")
        return self


class SFTStage(_Stage):
    """Stage 4, supervised fine-tuning from the last stage's weights, the loss on the labels (the prompt masked)."""

    data: DataConfig | None = Field(None, description="the SFT data (prompt/response files or a task); null = "
                                    "the distillation data")


class DistillConfig(_Strict):
    """The four stages (module docstring)."""

    name: str = Field(description="the distillation's folder <output_dir>/<name> (holds stage1 ... stage4)")
    output_dir: str = Field("runs", description="parent folder")
    seed: Seed = Field(0, description="seed of the new mixer parameters (stage 1) and of every stage's loop")
    teacher: str | RandomTeacher = Field(
        description="local transformers Llama / Qwen2 / Qwen3 folder, a run folder (its final/) or a Hugging Face Hub "
        "id; or {hf_config: {...}}, a random teacher of that config (smoke runs)")
    student: StudentConfig = Field(description="the layers replaced and the mixer they get")
    data: DataConfig = Field(description="the data of stages 2 and 3 (and 4 unless stage4.data is set)")
    stage2: AlignStage | None = Field(None, description="attention alignment (null = skipped)")
    stage3: KDStage | None = Field(None, description="logit distillation (null = skipped)")
    stage4: SFTStage | None = Field(None, description="supervised fine-tuning (null = skipped)")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return check_run_name(name)

    @field_validator("data")
    @classmethod
    def _one_dataset(cls, data):
        if getattr(data, "kind", None) == "mixture":
            raise ValueError("stages 2 and 3 read one dataset; a mixture (data.kind: mixture) is for stage4.data "
                             "or assocmem train; give data a files section or a task")
        return data

    @property
    def root(self) -> Path:
        return Path(self.output_dir) / self.name

    def stages(self) -> list[int]:
        """The stages that run, in order (1 always)."""
        return [1] + [k for k in (2, 3, 4) if getattr(self, f"stage{k}") is not None]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def distill_config_from_dict(data: dict) -> DistillConfig:
    try:
        return DistillConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid distill config:\n" + "\n".join(lines)) from None


def load_distill_config(path: str | Path, overrides: list[str] | None = None, *,
                        smoke: bool = False) -> DistillConfig:
    """Read a YAML DistillConfig, apply ``key.sub=value`` overrides (values parsed as YAML) and validate;
    ``name`` defaults to the file's stem."""
    return distill_config_from_dict(read_config_mapping(path, overrides, example="stage3.temperature=2", smoke=smoke))
