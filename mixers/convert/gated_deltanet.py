"""Gated DeltaNet ↔ transformers' ``Qwen3NextGatedDeltaNet``.

The published layer (Yang et al. 2024, "Gated Delta Networks", §3.3; as built in Qwen3-Next):

    q, k, v, z = x W_qkvz                per q/k head g: [q_g (K), k_g (K), v_g (r·V), z_g (r·V)], r = Hv / Hk
    b, a       = x W_ba                  per q/k head g: [b_g (r), a_g (r)]
    q, k, v    = SiLU(causal depthwise conv([q, k, v]))           one conv over the concatenated channels
    q, k       = L2norm(q), L2norm(k)    x · rsqrt(‖x‖² + 1e-6), inside the op (use_qk_l2norm_in_kernel)
    β = σ(b),  log α = −exp(A_log) · softplus(a + dt_bias)       (computed in float32)
    o = gated delta rule (q, k repeated to the Hv value heads)
    y = W_out (RMSNorm_head(o) · w · SiLU(z))

Our ``gated_deltanet`` preset computes the same with qkv_proj = [W_q; W_k; W_v] (all heads of q, then
k, then v), g_proj = W_z, b_proj = W_b, a_proj = W_a, conv over [q, k, v] (the same channel order),
``num_qk_heads`` = Hk. The maps below only permute rows.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .common import LayerConverter, StateDict, expand_ratio, require


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``gated_deltanet`` preset at the shapes of a ``Qwen3NextGatedDeltaNet``."""
    require(module, "activation", {"silu"})
    hk, hv, K, V = module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim
    if module.conv1d.bias is not None:
        raise ValueError(f"{type(module).__name__}.conv1d has a bias; the assocmem short conv has none")
    data = get_preset("gated_deltanet").model_dump()
    data["layer"].update(num_heads=hv, head_dim=K, expand_v=expand_ratio(module, K, V),
                         num_qk_heads=None if hk == hv else hk, conv_size=module.conv_kernel_size,
                         norm_eps=module.layer_norm_epsilon)
    return MixerSpec.model_validate(data), module.hidden_size


def _shape(spec: MixerSpec) -> tuple[int, int, int, int]:
    o = spec.layer
    return o.qk_heads, o.num_heads // o.qk_heads, o.head_dim, o.value_dim


def to_ours(hf: StateDict, spec: MixerSpec) -> StateDict:
    hk, r, K, V = _shape(spec)
    d = hf["in_proj_qkvz.weight"].shape[1]
    q, k, v, z = hf["in_proj_qkvz.weight"].view(hk, 2 * K + 2 * r * V, d).split([K, K, r * V, r * V], dim=1)
    b, a = hf["in_proj_ba.weight"].view(hk, 2 * r, d).split([r, r], dim=1)
    flat = lambda t: t.reshape(-1, d)  # noqa: E731  [Hk, rows, d] -> [Hk·rows, d], heads in order
    return {
        "qkv_proj.weight": torch.cat([flat(q), flat(k), flat(v)]),
        "conv.weight": hf["conv1d.weight"],
        "a_proj.weight": flat(a), "A_log": hf["A_log"], "dt_bias": hf["dt_bias"], "b_proj.weight": flat(b),
        "norm_weight": hf["norm.weight"], "g_proj.weight": flat(z), "o_proj.weight": hf["out_proj.weight"],
    }


def to_hf(ours: StateDict, spec: MixerSpec) -> StateDict:
    hk, r, K, V = _shape(spec)
    d = ours["qkv_proj.weight"].shape[1]
    q, k, v = ours["qkv_proj.weight"].split([hk * K, hk * K, hk * r * V])
    group = lambda t, n: t.reshape(hk, n, d)  # noqa: E731  [Hk·n, d] -> [Hk, n, d]
    qkvz = torch.cat([group(q, K), group(k, K), group(v, r * V), group(ours["g_proj.weight"], r * V)], dim=1)
    ba = torch.cat([group(ours["b_proj.weight"], r), group(ours["a_proj.weight"], r)], dim=1)
    return {
        "conv1d.weight": ours["conv.weight"], "in_proj_qkvz.weight": qkvz.reshape(-1, d),
        "in_proj_ba.weight": ba.reshape(-1, d), "dt_bias": ours["dt_bias"], "A_log": ours["A_log"],
        "norm.weight": ours["norm_weight"], "out_proj.weight": ours["o_proj.weight"],
    }


CONVERTER = LayerConverter("Qwen3NextGatedDeltaNet", spec, to_ours, to_hf)
