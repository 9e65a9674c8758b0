"""TrainConfig: one YAML file describes a training run.

    name: mqar-gdn                    # run folder: <output_dir>/<name>
    seed: 0
    model: {hybrid: {d_model: 128, layers: "gdn,gdn", mlp_ratio: 0}}
    data: {kind: mqar, seq_len: 256, num_kv_pairs: 16}
    optim: {lr: 2.2e-3, weight_decay: 0.1, warmup_steps: 100}
    train: {steps: 2000, batch_size: 64}

Every section rejects unknown keys with an error that lists the allowed ones
(``load_config``); ``--set key.sub=value`` overrides any field, the value
parsed as YAML unless the field is a string.
"""
from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from .config_base import Seed
from .config_base import Strict as _Strict
from .config_files import (ConfigError, Key, parse_key, parse_yaml, put_value, read_mapping, show_key, split_override,
                           take_smoke)
# the data section's classes live in data_config.py; re-exported here, where configs are read
from .data_config import (DATA_KINDS, ChainSumData, DataConfig, FilesData, GraphPathData, GraphWalkData,  # noqa: F401
                          MixtureData, ModularData, MQARData, NeedleData, ProblemsData, SelectiveCopyData)
from .grad_transforms import GradTransformConfig

if TYPE_CHECKING:
    from assocmem.models import HybridConfig


# a run name is one path component: the run folder <output_dir>/<name> is a direct child of output_dir
RUN_NAME_RULE = "letters, digits and . _ - + = , @, not starting with '.' or '-', at most 200 characters"
_RUN_NAME = re.compile(r"^[A-Za-z0-9_+=,@][A-Za-z0-9._+=,@-]{0,199}$")


def check_run_name(name: str) -> str:
    """``name`` if it is a safe run name (RUN_NAME_RULE), else ValueError naming the rule."""
    if not isinstance(name, str) or not _RUN_NAME.match(name):
        raise ValueError(f"run name {name!r} is not a single safe folder name; use {RUN_NAME_RULE}")
    return name


# ---------------------------------------------------------------- model
def _check_finite(value: Any, where: str) -> None:
    """Refuse NaN or ±inf anywhere in a free-form section (``model.hf_config``), naming the dotted key."""
    if isinstance(value, dict):
        for key, sub in value.items():
            _check_finite(sub, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            _check_finite(sub, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}; every number of the model config must be finite")


class ModelConfig(_Strict):
    """The network: exactly one of ``preset``, ``hybrid`` or ``hf_config``; or ``init_from`` a saved
    model, alone (its architecture) or with one of them (which must describe the same architecture)."""

    preset: str | None = Field(None, description="model preset name (assocmem.models.list_model_presets())")
    hybrid: dict[str, Any] | None = Field(
        None, description="HybridConfig fields (d_model, layers pattern or list of MixerSpecs, mlp_ratio, ...); "
        "vocab_size defaults to the data's vocabulary")
    hf_config: dict[str, Any] | None = Field(
        None, description="a transformers config dict with model_type (e.g. llama), built with "
        "AutoModelForCausalLM.from_config; vocab_size defaults to the data's vocabulary")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="HybridConfig field updates applied to the preset (e.g. n_layers)")
    init_from: str | None = Field(
        None, description="start from the weights of a save_pretrained folder, a run folder (its final/) or a "
        "Hugging Face Hub id (fetched once; offline, it must be in the HF cache); "
        "alone, the folder's architecture is used; with preset/hybrid/hf_config, a mismatch is refused with the "
        "differing fields named (a checkpoint resume still loads the checkpoint)")

    @model_validator(mode="after")
    def _exactly_one(self) -> "ModelConfig":
        given = [k for k in ("preset", "hybrid", "hf_config") if getattr(self, k) is not None]
        if len(given) > 1 or (not given and self.init_from is None):
            raise ValueError(f"model needs exactly one of preset, hybrid, hf_config (or init_from alone); "
                             f"got {given or 'none'}")
        if self.overrides and self.preset is None:
            raise ValueError("model.overrides applies to a preset only; edit model.hybrid directly instead")
        if not given:
            return self
        if self.hf_config is not None and "model_type" not in self.hf_config:
            raise ValueError("model.hf_config needs a model_type (e.g. llama)")
        if self.hf_config is not None:
            _check_finite(self.hf_config, "model.hf_config")
        if self.hf_config is None:
            self.hybrid_config(vocab_size=None)  # validate the hybrid now, not at build time
        return self

    def hybrid_config(self, *, vocab_size: int | None) -> "HybridConfig":
        """The HybridConfig of the preset (plus overrides) or of ``hybrid``; ``vocab_size`` (the
        data's vocabulary) fills an unset vocabulary and refuses a smaller one."""
        from assocmem.models import HybridConfig, get_model_preset

        if self.preset is not None:
            data = {**get_model_preset(self.preset).model_dump(), **self.overrides}
        else:
            data = dict(self.hybrid or {})
            if vocab_size is not None:
                data.setdefault("vocab_size", vocab_size)
        hc = HybridConfig.model_validate(data)
        check_vocab(hc.vocab_size, vocab_size)
        return hc


def check_vocab(model_vocab: int, data_vocab: int | None) -> None:
    """Refuse a model whose vocabulary is smaller than the data's."""
    if data_vocab is not None and model_vocab < data_vocab:
        raise ValueError(f"the model's vocab_size={model_vocab} is smaller than the data's vocabulary "
                         f"{data_vocab}; set model vocab_size >= {data_vocab} (or leave it unset)")


# ---------------------------------------------------------------- optimisation
class OptimConfig(_Strict):
    """AdamW with a learning-rate schedule: ours (linear warm-up then cosine decay to min_lr_ratio · lr)
    or one of transformers' (``get_scheduler``), see optim.py."""

    lr: float = Field(1e-3, gt=0, description="peak learning rate")
    weight_decay: float = Field(0.1, ge=0, description="decoupled weight decay on matrices (>= 2-D parameters)")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW betas")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up from 0 over this many optimizer steps")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine floor as a fraction of lr (warmup_cosine "
                                "and cosine_with_min_lr)")
    schedule: Literal["warmup_cosine", "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                      "constant_with_warmup", "inverse_sqrt", "cosine_with_min_lr"] = Field(
        "warmup_cosine", description="warmup_cosine (ours: warm-up (s+1)/W, so the first step already moves; "
        "then cosine to min_lr_ratio) or the transformers get_scheduler schedule of that name, over the run's "
        "steps with warmup_steps")

    @model_validator(mode="after")
    def _floor_only_where_read(self) -> "OptimConfig":
        if self.min_lr_ratio and self.schedule not in ("warmup_cosine", "cosine_with_min_lr"):
            raise ValueError(f"optim.min_lr_ratio is read by the warmup_cosine and cosine_with_min_lr schedules only, "
                             f"not by {self.schedule!r}; leave it at 0 or choose one of those")
        return self
    grad_clip: float | None = Field(1.0, gt=0, description="max global gradient norm (null = no clipping)")


class TrainLoopConfig(_Strict):
    """Steps, batches, precision, evaluation, logging and checkpoints."""

    steps: int | None = Field(None, gt=0, description="optimizer steps (exactly one of steps, epochs)")
    epochs: float | None = Field(None, gt=0, description="passes over the training set (steps = ceil(epochs·N/batch))")
    batch_size: int = Field(64, gt=0, description="global batch in sequences per optimizer step")
    micro_batch_size: int | None = Field(None, gt=0, description="sequences per forward per process "
                                         "(null = batch_size / world size); accumulation makes up the rest")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16 = torch.autocast(bfloat16) on the forward")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available")
    eval_every: int = Field(0, ge=0, description="evaluate every N steps (0 = at the end only)")
    eval_batch_size: int = Field(64, gt=0, description="sequences per evaluation forward")
    log_every: int = Field(10, gt=0, description="write a JSONL log line every N steps")
    log_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list, description="also send the log to TensorBoard (<run>/tensorboard/, the [log] extra) "
        "and/or Weights & Biases (wandb installed and set up); a missing package is refused before the run")
    checkpoint_every: int = Field(0, ge=0, description="checkpoint every N steps (0 = at the end only)")
    keep_last: int = Field(2, gt=0, description="checkpoints kept (older ones deleted; never the newest one "
                           "that verifies)")
    on_nonfinite: Literal["stop", "skip"] = Field(
        "stop", description="a NaN/inf loss or gradient norm: stop with an error naming the step and the batch "
        "(the checkpoints so far are kept), or skip the step (no update; counted as skipped_steps in the log)")
    progress: bool = Field(True, description="tqdm progress bar on rank 0")
    threads: int | None = Field(None, gt=0, description="torch.set_num_threads (null = torch default)")
    deterministic: bool = Field(True, description="torch.use_deterministic_algorithms(True)")
    compile: bool = Field(
        False, description="torch.compile the model's decoder (nn.Module.compile: parameters and checkpoints "
        "unchanged) before training; the first steps compile (minutes on a small CPU). It wraps whatever "
        "train.backend runs inside the mixers; for the mixers' chunk forms alone, set train.backend: compiled")
    backend: Literal["auto", "torch", "compiled", "fla"] | None = Field(
        None, description="the kernel backend of every recurrent mixer (mixers/kernels.py; null: each layer's "
        "layer.backend, default auto = FLA's Triton kernel on CUDA where FLA takes the call, else the compiled "
        "form; the eager form on CPU). Checked on the run's device and precision before the first step: "
        "backend fla that FLA would refuse stops the run there, naming the layer, the reason and the fix")
    grad_transforms: list[GradTransformConfig] = Field(
        default_factory=list, description="gradient transforms applied in order after backward (and the DDP "
        "all-reduce), before clipping and the optimizer step: fgp | pfft | fgp_adaptive | grokfast_ema "
        "(training/grad_transforms.py); their state is saved in checkpoints")
    logits: Literal["supervised", "all"] = Field(
        "supervised", description="apply the LM head only at supervised positions (same loss, checked against "
        "the model's forward at start) or everywhere (the model's own forward)")

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> "TrainLoopConfig":
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("train needs exactly one of steps, epochs")
        return self

    def total_steps(self, num_train: int) -> int:
        return self.steps if self.steps is not None else math.ceil(self.epochs * num_train / self.batch_size)


class TrainConfig(_Strict):
    """A training run (see the module docstring for an example)."""

    name: str | None = Field(None, description="run name; the run folder is <output_dir>/<name> "
                             f"(default: the config file's stem); {RUN_NAME_RULE}")
    output_dir: str = Field("runs", description="parent folder of run folders")
    seed: Seed = Field(0, description="seed of model init and everything random in the loop")
    model: ModelConfig = Field(description="the network")
    data: DataConfig = Field(description="the data; kind = mqar | graph_walk | selective_copy | chain_sum | "
                             "graph_path | modular | needle | files | problems | mixture")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="optimizer and schedule")
    train: TrainLoopConfig = Field(description="loop settings")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str | None) -> str | None:
        return None if name is None else check_run_name(name)

    @model_validator(mode="after")
    def _warmup_fits(self) -> "TrainConfig":
        if self.train.steps is not None and self.optim.warmup_steps > self.train.steps:
            raise ValueError(f"optim.warmup_steps={self.optim.warmup_steps} exceeds train.steps={self.train.steps}")
        return self

    @model_validator(mode="after")
    def _stages_fit(self) -> "TrainConfig":
        if not isinstance(self.data, MixtureData):
            return self
        if self.train.steps is None:
            raise ValueError("data.kind: mixture is drawn per step, not read in epochs; set train.steps instead of "
                             "train.epochs")
        late = [(i, st.step) for i, st in enumerate(self.data.stages) if st.step >= self.train.steps]
        if late:
            i, step = late[0]
            raise ValueError(f"data.stages[{i}].step={step} is not before train.steps={self.train.steps}: the stage "
                             f"would never start; lower its step or raise train.steps")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------- key checking
def _unwrap(annotation: Any) -> Any:
    """Strip Annotated / Optional to the core type."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else annotation
    return annotation


def _sub_model(cls: type[BaseModel], key: str, value: Any, where: str) -> type[BaseModel] | None:
    """The pydantic class that validates ``value`` at ``cls.key`` (None for plain values)."""
    if cls is ModelConfig and key in ("hybrid", "overrides"):
        from assocmem.models import HybridConfig  # checked here for friendly unknown-key errors
        return HybridConfig
    if cls is TrainConfig and key == "data":
        kind = value.get("kind") if isinstance(value, dict) else None
        if kind not in DATA_KINDS:
            raise ConfigError(f"{where}.kind must be one of {list(DATA_KINDS)}, got {kind!r}")
        return DATA_KINDS[kind]
    core = _unwrap(cls.model_fields[key].annotation)
    return core if isinstance(core, type) and issubclass(core, BaseModel) else None


def check_keys(cls: type[BaseModel], data: Any, where: str = "config") -> None:
    """Raise ConfigError on the first unknown key, listing the keys allowed at that place."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    allowed = list(cls.model_fields)
    for key, value in data.items():
        if key not in cls.model_fields:
            raise ConfigError(f"unknown key {where}.{key}; allowed keys in {where} ({cls.__name__}): "
                              f"{', '.join(allowed)}")
        sub = _sub_model(cls, key, value, f"{where}.{key}")
        if sub is not None and isinstance(value, dict):
            check_keys(sub, value, f"{where}.{key}")


def _format(err: ValidationError, data: Any = None) -> str:
    lines = [f"  {'.'.join(str(p) for p in _config_keys(e['loc'], data)) or '(top)'}: {e['msg']}" for e in err.errors()]
    return "invalid config:\n" + "\n".join(lines)


def _config_keys(loc: tuple, data: Any) -> list:
    """The keys of an error's place as the config spells them: pydantic puts the ``kind`` of a tagged section
    into the place (data.mixture.seq_len), which the file does not hold (data.seq_len)."""
    keys, node = [], data
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue  # the section's kind, chosen by its tag
        keys.append(part)
        node = node.get(part) if isinstance(node, dict) else (
            node[part] if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node) else None)
    return keys


# ---------------------------------------------------------------- overrides
def _target_class(path: list[Key], data: dict) -> tuple[type[BaseModel] | None, Key]:
    """The class owning the last key of ``path`` (None inside free-form dicts and list entries)."""
    cls: type[BaseModel] | None = TrainConfig
    node: Any = data
    for i, key in enumerate(path[:-1]):
        where = "config." + show_key(path[: i + 1])
        if isinstance(key, int):  # a list entry: its keys are checked when the whole config validates
            cls, node = None, node[key] if isinstance(node, list) and 0 <= key < len(node) else {}
            continue
        if cls is not None and key not in cls.model_fields:
            raise ConfigError(f"unknown key {where}; allowed keys in {cls.__name__}: {', '.join(cls.model_fields)}")
        value = node.get(key) if isinstance(node, dict) else None
        cls = _sub_model(cls, key, value if value is not None else {}, where) if cls is not None else None
        node = value if isinstance(value, (dict, list)) else {}
    return cls, path[-1]


def _parse_value(cls: type[BaseModel] | None, key: Key, raw: str, *, where: str) -> Any:
    if cls is not None and key in cls.model_fields and _unwrap(cls.model_fields[key].annotation) is str:
        return None if raw in ("null", "~") else raw  # strings stay strings ("123" is a name)
    return parse_yaml(raw, source=f"--set {where}")


def set_values(data: dict, values: dict[str, Any]) -> dict:
    """Set already-typed values at dotted keys of a raw config dict (a deep copy is returned).

    Missing intermediate sections are created; unknown keys raise ConfigError.
    """
    out = yaml.safe_load(yaml.safe_dump(data))  # deep copy of plain data
    for dotted, value in values.items():
        path = parse_key(dotted)
        if not path:
            raise ConfigError(f"empty key in {dotted!r}")
        cls, key = _target_class(path, out)
        if cls is not None and key not in cls.model_fields:
            raise ConfigError(f"unknown key config.{dotted.strip()}; allowed keys in {cls.__name__}: "
                              f"{', '.join(cls.model_fields)}")
        put_value(out, path, value, where=dotted)
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``key.sub=value`` strings (``--set``) to a raw config dict (a deep copy is returned).

    Values are YAML (``1e-3``, ``[0.9, 0.99]``, ``true``, ``null``) unless the field is
    a string; missing intermediate sections are created; unknown keys raise; ``key[i]`` is entry i of a
    list (``model.hybrid.layers[0].bias.p=3``), an index into a non-list or out of range raises.
    """
    out = data
    for item in overrides:
        dotted, path, raw = split_override(item, "optim.lr=1e-3")
        cls, key = _target_class(path, out)
        out = set_values(out, {dotted: _parse_value(cls, key, raw.strip(), where=dotted)})
    return yaml.safe_load(yaml.safe_dump(out)) if out is data else out


# ---------------------------------------------------------------- loading
def config_from_dict(data: dict) -> TrainConfig:
    """Validate a raw dict (unknown keys -> ConfigError listing the allowed keys)."""
    check_keys(TrainConfig, data)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format(err, data)) from None


def load_config(path: str | Path, overrides: list[str] | None = None, *, smoke: bool = False) -> TrainConfig:
    """Read a YAML config, apply its ``smoke:`` section if ``smoke`` (config_files.take_smoke), then the ``--set``
    overrides, and validate; name defaults to the file stem."""
    path = Path(path)
    data = apply_overrides(take_smoke(read_mapping(path), path, smoke), overrides or [])
    data.setdefault("name", path.stem)
    return config_from_dict(data)
