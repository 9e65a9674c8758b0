"""Build the network a TrainConfig names: a HybridConfig, a preset, a transformers config, or a saved model.

    build_from_config(ModelConfig(hybrid={"d_model": 128, "layers": "gdn,gdn", "mlp_ratio": 0}), vocab_size=8192)
    build_from_config(ModelConfig(preset="thesis-tiny-gdn-75"), vocab_size=257)
    build_from_config(ModelConfig(hf_config={"model_type": "llama", "hidden_size": 32, ...}), vocab_size=64)
    build_from_config(ModelConfig(init_from="runs/sft/final"), vocab_size=14)

``init_from`` may also be a Hugging Face Hub id (hub.py). ``vocab_size`` is the data's vocabulary: it fills the model's vocabulary when
the config does not set one, and a model whose vocabulary is smaller than the
data's is refused. ``init_from`` loads a ``save_pretrained`` folder (or a run
folder's ``final/``); when the config also describes an architecture, every
field that differs from the folder's is named and the start is refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from torch import nn

from .config import ModelConfig, check_vocab
from .hub import hub_folder, is_hub_id

if TYPE_CHECKING:
    from assocmem.models import HybridConfig

# HybridConfig fields that do not change the weights' meaning (labels, init, compute forms)
_NOT_ARCHITECTURE = {"name", "init_std", "form", "forms"}


def hybrid_config(model: ModelConfig, *, vocab_size: int | None) -> "HybridConfig":
    """The HybridConfig of a preset (plus overrides) or of ``model.hybrid`` (``ModelConfig.hybrid_config``)."""
    return model.hybrid_config(vocab_size=vocab_size)


def hf_config_object(hf_config: dict, *, vocab_size: int | None):
    """The transformers config of a config dict with ``model_type`` (``vocab_size`` fills an unset one and refuses
    a smaller one)."""
    from transformers import AutoConfig

    data = dict(hf_config)
    model_type = data.pop("model_type")
    if vocab_size is not None:
        data.setdefault("vocab_size", vocab_size)
    config = AutoConfig.for_model(model_type, **data)
    check_vocab(config.vocab_size, vocab_size)
    return config


def hf_model(hf_config: dict, *, vocab_size: int | None) -> nn.Module:
    """Any transformers causal LM from a config dict with ``model_type`` (randomly initialised)."""
    from assocmem.models.hf_load import causal_lm_from_config

    return causal_lm_from_config(hf_config_object(hf_config, vocab_size=vocab_size))


def _build(model: ModelConfig, vocab_size: int | None) -> nn.Module:
    if model.hf_config is not None:
        return hf_model(model.hf_config, vocab_size=vocab_size)
    from assocmem.models import build_model

    return build_model(hybrid_config(model, vocab_size=vocab_size))


def build_from_config(model: ModelConfig, *, vocab_size: int | None) -> nn.Module:
    """A randomly initialised causal LM (call under a fixed torch seed for reproducibility), or the
    weights of ``model.init_from``."""
    if model.init_from is not None:
        return _init_from(model, vocab_size)
    return _build(model, vocab_size)


# ---------------------------------------------------------------- init_from
def pretrained_folder(ref: str | Path) -> Path:
    """A ``save_pretrained`` folder: ``ref`` itself, or ``ref/final`` for a run folder, or the local
    snapshot of a Hugging Face Hub id (hub.py: a local folder of that name wins)."""
    path = Path(ref)
    if not path.exists() and isinstance(ref, str) and is_hub_id(ref):
        path = hub_folder(ref)
    for folder in (path / "final", path):
        if (folder / "config.json").is_file():
            return folder
    raise FileNotFoundError(f"{ref} is not a saved model: no config.json in it or in its final/ "
                            f"(give a save_pretrained folder, a finished run folder or a Hugging Face Hub id)")


def load_pretrained(ref: str | Path) -> nn.Module:
    """The causal LM saved at ``ref`` (assocmem or transformers), in eval mode."""
    from assocmem.models.hf_load import CustomCodeError, UnsafePickleError, load_causal_lm

    folder = pretrained_folder(ref)
    try:
        return load_causal_lm(folder).eval()
    except (CustomCodeError, UnsafePickleError):
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"the model in {folder} does not load: {type(err).__name__}: {err}") from None


def _resolved(hc: "HybridConfig") -> dict[str, object]:
    """A HybridConfig as the per-layer architecture it builds (two spellings of one model compare equal)."""
    data = {k: v for k, v in hc.model_dump(mode="json").items()
            if k not in _NOT_ARCHITECTURE | {"layers", "n_layers", "attention_layers", "attention", "num_heads",
                                             "head_dim", "overrides", "mlp_ratio", "mlp_hidden", "mlp_layers"}}
    flags = hc.mlp_flags()
    data["depth"] = len(flags)
    data["mlp_width"] = hc.mlp_width if any(flags) else 0
    for i, (spec, mlp) in enumerate(zip(hc.layer_specs(), flags)):
        data[f"layers[{i}]"] = spec.model_dump(mode="json")
        data[f"mlp[{i}]"] = mlp
    return data


def _flat(value: object, prefix: str) -> dict[str, object]:
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _flat(sub, f"{prefix}.{key}").items()}
    return {prefix: value}


def architecture_differences(model: ModelConfig, loaded_config, vocab_size: int | None) -> list[str]:
    """Fields where the config's architecture and a loaded model's config differ ("field: config X,
    init_from Y"); empty when they describe the same network."""
    want_type = model.hf_config["model_type"] if model.hf_config is not None else "assocmem"
    if loaded_config.model_type != want_type:
        return [f"model_type: config {want_type!r}, init_from {loaded_config.model_type!r}"]
    if model.hf_config is not None:
        want = hf_config_object(model.hf_config, vocab_size=vocab_size).to_dict()
        got = loaded_config.to_dict()
        keys = [k for k in model.hf_config if k != "model_type"] + ["vocab_size"]
        return [f"model.hf_config.{k}: config {want.get(k)!r}, init_from {got.get(k)!r}"
                for k in dict.fromkeys(keys) if want.get(k) != got.get(k)]
    want = _flat(_resolved(hybrid_config(model, vocab_size=vocab_size)), "model")
    got = _flat(_resolved(loaded_config.hybrid_config), "model")
    differing = [k for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
    renamed = {k[: -len(".name")] for k in differing if k.endswith("].name")}   # another mixer: name it only
    return [f"{k}: config {want.get(k)!r}, init_from {got.get(k)!r}" for k in differing
            if k.endswith("].name") or not any(k.startswith(layer + ".") for layer in renamed)]


def _init_from(model: ModelConfig, vocab_size: int | None) -> nn.Module:
    loaded = load_pretrained(model.init_from)
    if model.preset is None and model.hybrid is None and model.hf_config is None:
        check_vocab(loaded.config.vocab_size, vocab_size)
        return loaded.train()
    differences = architecture_differences(model, loaded.config, vocab_size)
    if differences:
        raise ValueError(f"model.init_from={model.init_from} holds another architecture than the config's model; "
                         f"differing fields: {'; '.join(differences)}")
    net = _build(model, vocab_size)
    try:
        net.load_state_dict(loaded.state_dict(), strict=True)
    except RuntimeError as err:
        raise ValueError(f"model.init_from={model.init_from}: the weights do not fit the config's model: {err}") from None
    return net


def set_end_token(net: nn.Module, eos_id: int | None) -> None:
    """Write the data's end-of-document id into the model's config (saved in every checkpoint's and
    final/'s config.json) and generation config (``generate`` and ``pipeline`` stop there; padding
    defaults to it). None (data without one) leaves the model as it is."""
    if eos_id is None:
        return
    net.config.eos_token_id = eos_id
    generation = getattr(net, "generation_config", None)
    if generation is not None:
        generation.eos_token_id = eos_id
        if generation.pad_token_id is None:
            generation.pad_token_id = eos_id


def model_description(net: nn.Module) -> dict:
    """Parameter count and class, for the run log."""
    return {"class": type(net).__name__, "parameters": sum(p.numel() for p in net.parameters())}
