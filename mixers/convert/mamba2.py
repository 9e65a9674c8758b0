"""Mamba2 ↔ transformers' ``Mamba2Mixer`` (its PyTorch path; Dao & Gu 2024, "Transformers are SSMs").

The published layer, with H heads of width P, G groups of B and C of width N, d_inner = H·P:

    z, xBC, dt = x W_in                            rows [z (d_inner), x (d_inner), B (G·N), C (G·N), dt (H)]
    x, B, C    = SiLU(causal depthwise conv(xBC) + bias)
    Δ = softplus(dt + dt_bias),  A = −exp(A_log)                  (per head; Δ clamped to time_step_limit)
    S_t = exp(Δ_t A) S_{t−1} + B_t (Δ_t x_t)ᵀ,  y_t = S_tᵀ C_t + D x_t   (B, C shared by the H/G heads of a group)
    out = W_out (RMSNorm_group(y · SiLU(z)) · w)                 (norm over d_inner / G channels, w per channel)

Our ``mamba2`` preset is the same hebbian memory with q = C, k = B, v = x, β = Δ, log α = Δ·A, scale 1
(``lr_gate="dt"``): qkv_proj = [W_C; W_B; W_x], a_proj = W_dt, g_proj = W_z, the conv's channels in
the order [C, B, x], ``num_qk_heads`` = G, ``output_norm="gate_then_rmsnorm"``. The maps permute rows.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .common import LayerConverter, StateDict, expand_ratio, require


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``mamba2`` preset at the shapes of a ``Mamba2Mixer``."""
    require(module, "activation", {"silu"})
    require(module, "use_bias", {False})
    require(module, "time_step_limit", {(0.0, math.inf)}, tuple(map(float, module.time_step_limit)))
    H, P, N, G = module.num_heads, module.head_dim, module.ssm_state_size, module.n_groups
    if H * P != module.intermediate_size:
        raise ValueError(f"{type(module).__name__}: num_heads · head_dim = {H * P} != intermediate_size "
                         f"{module.intermediate_size}; the heads must tile the inner width")
    data = get_preset("mamba2").model_dump()
    data["layer"].update(num_heads=H, head_dim=N, expand_v=expand_ratio(module, N, P), num_qk_heads=G,
                         conv_size=module.conv_kernel_size, conv_bias=module.use_conv_bias,
                         norm_eps=module.layer_norm_epsilon)
    return MixerSpec.model_validate(data), module.hidden_size


def _widths(spec: MixerSpec) -> tuple[int, int]:
    o = spec.layer
    return o.num_heads * o.value_dim, o.qk_heads * o.head_dim  # d_inner, G·N


def to_ours(hf: StateDict, spec: MixerSpec) -> StateDict:
    inner, gn = _widths(spec)
    z, x, b, c, dt = hf["in_proj.weight"].split([inner, inner, gn, gn, spec.layer.num_heads])
    xbc = lambda t: list(t.split([inner, gn, gn]))  # noqa: E731  conv channels [x, B, C]
    cx, cb, cc = xbc(hf["conv1d.weight"])
    out = {"qkv_proj.weight": torch.cat([c, b, x]), "conv.weight": torch.cat([cc, cb, cx]),
           "a_proj.weight": dt, "A_log": hf["A_log"], "dt_bias": hf["dt_bias"], "D": hf["D"],
           "norm_weight": hf["norm.weight"], "g_proj.weight": z, "o_proj.weight": hf["out_proj.weight"]}
    if "conv1d.bias" in hf:
        bx, bb, bc = xbc(hf["conv1d.bias"])
        out["conv.bias"] = torch.cat([bc, bb, bx])
    return out


def to_hf(ours: StateDict, spec: MixerSpec) -> StateDict:
    inner, gn = _widths(spec)
    cbx = lambda t: list(t.split([gn, gn, inner]))  # noqa: E731  our channels [C, B, x]
    c, b, x = cbx(ours["qkv_proj.weight"])
    wc, wb, wx = cbx(ours["conv.weight"])
    out = {"dt_bias": ours["dt_bias"], "A_log": ours["A_log"], "D": ours["D"],
           "conv1d.weight": torch.cat([wx, wb, wc]),
           "in_proj.weight": torch.cat([ours["g_proj.weight"], x, b, c, ours["a_proj.weight"]]),
           "norm.weight": ours["norm_weight"], "out_proj.weight": ours["o_proj.weight"]}
    if "conv.bias" in ours:
        bc, bb, bx = cbx(ours["conv.bias"])
        out["conv1d.bias"] = torch.cat([bx, bb, bc])
    return out


CONVERTER = LayerConverter("Mamba2Mixer", spec, to_ours, to_hf)
