"""Softmax attention ↔ transformers' ``LlamaAttention``, ``Qwen2Attention`` and ``Qwen3Attention``.

The published layers (Touvron et al. 2023; Qwen2 and Qwen3 technical reports):

    q = x W_q (+ b_q), k = x W_k (+ b_k), v = x W_v (+ b_v)        [B, T, H | Hkv, D]
    q, k = RMSNorm_head(q), RMSNorm_head(k)                         (Qwen3 only: QK-norm, before RoPE)
    q, k = RoPE(q), RoPE(k)          rotate_half pairs (i, i + D/2) by pos · θ^(−2i/D)
    o = softmax(q kᵀ · D^−½ + causal mask) v                        (GQA: each kv head serves H / Hkv heads)
    y = o W_o (+ b_o)

Biases: Llama and Qwen3 put ``attention_bias`` on all four projections, Qwen2 has q/k/v biases and no
output bias. Our ``softmax`` preset computes the same (mixers/attention.py) with the parameters under the
same names, so the state-dict maps are the identity. Refused: RoPE variants other than the default
(scaled, partial), sliding-window layers and attention dropout.
"""
from __future__ import annotations

import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .common import LayerConverter, StateDict, require


def rope_of(config) -> tuple[float, str, float]:
    """(θ, rope type, partial rotary factor) of a transformers config, old and new field names."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    return float(theta), kind, float(partial)


def _bias(module: nn.Module) -> str:
    qkv = [getattr(module, n).bias is not None for n in ("q_proj", "k_proj", "v_proj")]
    out = module.o_proj.bias is not None
    if len(set(qkv)) != 1 or (out and not qkv[0]):
        raise ValueError(f"{type(module).__name__}: biases on q/k/v = {qkv}, on o = {out}; supported: none, "
                         f"q/k/v only, or all four")
    return "all" if out else ("qkv" if qkv[0] else "none")


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``softmax`` preset at the shapes and options of a Llama / Qwen2 / Qwen3 attention layer."""
    cfg = module.config
    theta, kind, partial = rope_of(cfg)
    require(module, "rope_type", {"default"}, kind)
    require(module, "partial_rotary_factor", {1.0}, partial)
    require(module, "sliding_window", {None}, getattr(module, "sliding_window", None))
    require(module, "attention_dropout", {0.0}, float(getattr(module, "attention_dropout", 0.0)))
    D = module.head_dim
    qk_norm = getattr(module, "q_norm", None)
    data = get_preset("softmax").model_dump()
    data["layer"].update(num_heads=cfg.num_attention_heads, head_dim=D,
                         scale=None if module.scaling == D ** -0.5 else float(module.scaling),
                         norm_eps=qk_norm.variance_epsilon if qk_norm is not None else 1e-6)
    data["layer"]["attention"].update(num_kv_heads=cfg.num_key_value_heads, rope_theta=theta, bias=_bias(module),
                                      qk_norm="rmsnorm" if qk_norm is not None else "none")
    return MixerSpec.model_validate(data), cfg.hidden_size


def same_names(state: StateDict, spec: MixerSpec) -> StateDict:
    """q_proj, k_proj, v_proj, o_proj (weights, biases) and q_norm, k_norm carry the same names on both sides."""
    return dict(state)


CONVERTERS = [LayerConverter(name, spec, same_names, same_names)
              for name in ("LlamaAttention", "Qwen2Attention", "Qwen3Attention")]
