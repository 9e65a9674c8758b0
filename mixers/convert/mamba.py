"""Mamba ↔ transformers' ``MambaMixer`` (its PyTorch path; Gu & Dao 2023).

The published layer with D = intermediate_size channels, N = state_size, R = time_step_rank:

    x, z = x W_in;  x = SiLU(conv1d(x) + b);  δ, B, C = x W_x;  Δ = softplus(δ W_dtᵀ + b_dt);  A = −exp(A_log)
    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,  y_t = h_t C_t + D ⊙ x_t,  out = W_out (y ⊙ SiLU(z))

is our ``mamba`` preset's layer (mixers/mamba.py) tensor for tensor: in_proj, x_proj, A_log, D and out_proj
under the same names, conv1d as ``conv``, dt_proj's weight as ``dt_proj`` and its bias as ``dt_bias``.
"""
from __future__ import annotations

import torch.nn as nn

from ..presets import get_preset
from ..spec import MixerSpec
from .common import LayerConverter, StateDict, require

_RENAMES = {"conv1d.weight": "conv.weight", "conv1d.bias": "conv.bias", "dt_proj.weight": "dt_proj",
            "dt_proj.bias": "dt_bias"}


def spec(module: nn.Module) -> tuple[MixerSpec, int]:
    """The ``mamba`` preset at the shapes of a ``MambaMixer``."""
    require(module, "activation", {"silu"})
    d, inner = module.hidden_size, module.intermediate_size
    expand = inner / d
    if int(expand * d) != inner:
        raise ValueError(f"{type(module).__name__}: intermediate_size {inner} is not int(expand · hidden_size) "
                         f"for expand = {expand}; choose widths whose ratio is exact in floating point")
    data = get_preset("mamba").model_dump()
    data["layer"].update(head_dim=module.ssm_state_size, conv_size=module.conv_kernel_size,
                         conv_bias=module.use_conv_bias)
    data["layer"]["mamba"].update(expand=expand, dt_rank=module.time_step_rank, bias=module.use_bias)
    return MixerSpec.model_validate(data), d


def to_ours(hf: StateDict, spec: MixerSpec) -> StateDict:
    return {_RENAMES.get(k, k): v for k, v in hf.items()}


def to_hf(ours: StateDict, spec: MixerSpec) -> StateDict:
    back = {v: k for k, v in _RENAMES.items()}
    return {back.get(k, k): v for k, v in ours.items()}


CONVERTER = LayerConverter("MambaMixer", spec, to_ours, to_hf)
