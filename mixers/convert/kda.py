"""Kimi Delta Attention ↔ transformers' ``KimiLinearDeltaAttention`` (Kimi Linear).

The published layer:

    q, k, v = SiLU(causal depthwise conv([x W_q, x W_k, x W_v]))      one conv over the concatenated channels
    q, k    = L2norm(q), L2norm(k)             x / sqrt(‖x‖² + 1e-6), inside the op
    log α   = −exp(A_log_h) · softplus(x W_fa W_fb + dt_bias)          per head and key (float32)
    β       = σ(x W_b)
    S_t     = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t K^−½
    y       = W_o (RMSNorm_head(o) · w · σ(x W_ga W_gb))

Our ``kda`` preset computes the same: qkv_proj = [W_q; W_k; W_v], a_proj = (W_fa, W_fb) and
g_proj = (W_ga, W_gb) as rank-K pairs (``low_rank_gates``), A_log [1, 1, H, 1] stored as [H]. The
maps concatenate, split and reshape; no arithmetic.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .common import LayerConverter, StateDict, require

_SAME = {  # our name -> the reference's name, for the tensors that only change name
    "conv.weight": "conv1d.weight", "a_proj.0.weight": "forget_gate.f_a_proj.weight",
    "a_proj.1.weight": "forget_gate.f_b_proj.weight", "dt_bias": "forget_gate.dt_bias",
    "b_proj.weight": "b_proj.weight", "g_proj.0.weight": "g_a_proj.weight", "g_proj.1.weight": "g_b_proj.weight",
    "norm_weight": "o_norm.weight", "o_proj.weight": "o_proj.weight",
}


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``kda`` preset at the shapes of a ``KimiLinearDeltaAttention``."""
    require(module, "activation", {"silu"})
    if module.conv1d.bias is not None:
        raise ValueError(f"{type(module).__name__}.conv1d has a bias; the assocmem short conv has none")
    data = get_preset("kda").model_dump()
    data["layer"].update(num_heads=module.num_heads, head_dim=module.head_dim, expand_v=1.0,
                         conv_size=module.conv_kernel_size, norm_eps=module.layer_norm_epsilon)
    return MixerSpec.model_validate(data), module.hidden_size


def to_ours(hf: StateDict, spec: MixerSpec) -> StateDict:
    out = {ours: hf[theirs] for ours, theirs in _SAME.items()}
    out["qkv_proj.weight"] = torch.cat([hf["q_proj.weight"], hf["k_proj.weight"], hf["v_proj.weight"]])
    out["A_log"] = hf["forget_gate.A_log"].reshape(-1)  # [1, 1, H, 1] -> [H]
    return out


def to_hf(ours: StateDict, spec: MixerSpec) -> StateDict:
    out = {theirs: ours[mine] for mine, theirs in _SAME.items()}
    out["q_proj.weight"], out["k_proj.weight"], out["v_proj.weight"] = ours["qkv_proj.weight"].chunk(3)
    out["forget_gate.A_log"] = ours["A_log"].reshape(1, 1, -1, 1)
    return out


CONVERTER = LayerConverter("KimiLinearDeltaAttention", spec, to_ours, to_hf)
