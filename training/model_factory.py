"""Build the network a TrainConfig names: a HybridConfig, a preset, or a transformers config.

    build_from_config(ModelConfig(hybrid={"d_model": 128, "layers": "gdn,gdn", "mlp_ratio": 0}), vocab_size=8192)
    build_from_config(ModelConfig(preset="thesis-tiny-gdn-75"), vocab_size=257)
    build_from_config(ModelConfig(hf_config={"model_type": "llama", "hidden_size": 32, ...}), vocab_size=64)

``vocab_size`` is the data's vocabulary: it fills the model's vocabulary when
the config does not set one, and a model whose vocabulary is smaller than the
data's is refused.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from .config import ModelConfig, check_vocab

if TYPE_CHECKING:
    from assocmem.models import HybridConfig


def hybrid_config(model: ModelConfig, *, vocab_size: int | None) -> "HybridConfig":
    """The HybridConfig of a preset (plus overrides) or of ``model.hybrid`` (``ModelConfig.hybrid_config``)."""
    return model.hybrid_config(vocab_size=vocab_size)


def hf_model(hf_config: dict, *, vocab_size: int | None) -> nn.Module:
    """Any transformers causal LM from a config dict with ``model_type`` (randomly initialised)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(hf_config)
    model_type = data.pop("model_type")
    if vocab_size is not None:
        data.setdefault("vocab_size", vocab_size)
    config = AutoConfig.for_model(model_type, **data)
    check_vocab(config.vocab_size, vocab_size)
    return AutoModelForCausalLM.from_config(config)


def build_from_config(model: ModelConfig, *, vocab_size: int | None) -> nn.Module:
    """A randomly initialised causal LM (call under a fixed torch seed for reproducibility)."""
    if model.hf_config is not None:
        return hf_model(model.hf_config, vocab_size=vocab_size)
    from assocmem.models import build_model

    return build_model(model.hybrid_config(vocab_size=vocab_size))


def model_description(net: nn.Module) -> dict:
    """Parameter count and class, for the run log."""
    return {"class": type(net).__name__, "parameters": sum(p.numel() for p in net.parameters())}
