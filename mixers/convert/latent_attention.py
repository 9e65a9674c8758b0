"""Multi-head latent attention ↔ transformers' ``DeepseekV3Attention`` (DeepSeek-V2/V3's MLA).

The published layer (DeepSeek-AI 2024, DeepSeek-V2 §2.1; transformers' modeling_deepseek_v3):

    q = x W_q, or q_b_proj(RMSNorm(q_a_proj(x)))                    [B, T, H, d_h + d_R] = [q_pass; q_rot]
    [c_KV; k_rot] = kv_a_proj_with_mqa(x),  c_KV = RMSNorm(c_KV)    [B, T, d_c], [B, T, d_R]
    q_rot, k_rot = RoPE(q_rot), RoPE(k_rot)                         the cache keeps c_KV and k_rot
    [k_pass; v] = kv_b_proj(c_KV) per head                         [B, T, H, d_h], [B, T, H, d_v]
    o = softmax([q_pass; q_rot] · [k_pass; k_rot] · scaling + causal mask) v,    y = o W_o

Our ``mla`` preset layer (mixers/latent_attention.py) has the parameters under the same names, so the
state-dict maps are the identity; ``rope_interleave`` (the default of DeepSeek's configs) is
``attention.latent.rope_interleave``. Refused: scaled RoPE (YaRN), biases and attention dropout.
"""
from __future__ import annotations

import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .attention import rope_of
from .common import LayerConverter, StateDict, expand_ratio, require


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``mla`` preset at the shapes of a ``DeepseekV3Attention``."""
    cfg = module.config
    theta, kind, _ = rope_of(cfg)
    require(module, "rope_type", {"default"}, kind)
    require(module, "attention_bias", {False}, bool(cfg.attention_bias))
    require(module, "attention_dropout", {0.0}, float(module.attention_dropout))
    K, R = module.qk_nope_head_dim, module.qk_rope_head_dim
    data = get_preset("mla").model_dump()
    data["layer"].update(num_heads=module.num_heads, head_dim=K, expand_v=expand_ratio(module, K, module.v_head_dim),
                         scale=None if module.scaling == (K + R) ** -0.5 else float(module.scaling),
                         norm_eps=module.kv_a_layernorm.variance_epsilon)
    data["layer"]["attention"].update(rope_theta=theta)
    data["layer"]["attention"]["latent"].update(kv_rank=module.kv_lora_rank, q_rank=module.q_lora_rank, rope_dim=R,
                                                rope_interleave=bool(cfg.rope_interleave))
    return MixerSpec.model_validate(data), cfg.hidden_size


def same_names(state: StateDict, spec: MixerSpec) -> StateDict:
    """q_proj (or q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj."""
    return dict(state)


CONVERTER = LayerConverter("DeepseekV3Attention", spec, same_names, same_names)
