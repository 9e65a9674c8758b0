"""The Mamba layer (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces",
Algorithm 2 and §3.6), around the op of a selective-class spec (mixers/ops/selective.py).

With D = d_inner = int(expand · d_model) channels, N = layer.head_dim state entries per channel and
R = dt_rank:

    x, z = x W_in                                   [B, T, D] each            (in_proj)
    x = SiLU(causal depthwise conv(x) + b)          conv of width conv_size  (carried in the decode state)
    δ, B, C = x W_x                                 [B, T, R], [B, T, N], [B, T, N]   (x_proj)
    Δ = softplus(δ W_dtᵀ + dt_bias)                 [B, T, D]                 (dt_proj, computed in float32 at least)
    Δ = clamp(Δ, low, high)                         with mamba.dt_limit = (low, high) (mamba_ssm's dt_limit)
    A = −exp(A_log)                                 [D, N]
    h_t = exp(Δ_t ⊙ A) ⊙ h_{t−1} + (Δ_t ⊙ x_t) ⊗ B_t,   y_t = h_t C_t + D_skip ⊙ x_t    h ∈ R^{D×N}
    out = (y ⊙ SiLU(z)) W_out                                                  (out_proj)

The recurrence is the selective spec with one head: q = C, k = B, v = Δ ⊙ x (the write strength Δ_t,d
of each channel folded into its value), log α_{t,n,d} = Δ_{t,d} A_{d,n}, scale 1, S = hᵀ ∈ R^{N×D}.

Initialisation (Mamba's): A_log = log(1..N) for every channel (S4D-real), D_skip = 1, dt_proj's weight
U[−s, s] (``dt_init="random"``) or s (``"constant"``) with s = dt_scale · R^(−1/2), and dt_bias the
inverse softplus of Δ₀ ~ logU[dt_min, dt_max] floored at dt_init_floor, so that softplus(dt_bias) = Δ₀.
dt_proj's weight and bias, A_log and D_skip are parameters of their own (not nn.Linear), so a model's
``_init_weights`` leaves this init in place.

Parameter names follow transformers' MambaMixer (in_proj, x_proj, dt_proj, A_log, D, out_proj) except
the conv (``conv``, mixers/conv.py) and dt_proj's bias (``dt_bias``); mixers/convert/mamba.py maps them.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .boundary import check_mixer_input
from .conv import ShortConv
from .lowered import Lowered, MixerState, input_dtype
from .lower import require_class
from .spec import MixerSpec


class Mamba(Lowered, nn.Module):
    """Mamba's layer (a ``MixerModule``; module docstring)."""

    masks_padding = False  # a recurrent state has no notion of a padded token

    def __init__(self, spec: MixerSpec, d_model: int, *, form: str = "auto", layer_idx: int | None = None):
        super().__init__()
        require_class(spec, "selective", "Mamba", "retention l2_decay gate='entry', bias dot_product, optimizer gd")
        o, m = spec.layer, spec.layer.mamba
        self.spec, self.layer_idx = spec, layer_idx
        self.D_inner, self.N, self.R = int(m.expand * d_model), o.head_dim, m.rank(d_model)
        self.init_forms(spec, form)
        self.in_proj = nn.Linear(d_model, 2 * self.D_inner, bias=m.bias)
        self.conv = ShortConv(self.D_inner, o.conv_size, bias=o.conv_bias)
        self.x_proj = nn.Linear(self.D_inner, self.R + 2 * self.N, bias=False)
        self.dt_proj = nn.Parameter(torch.empty(self.D_inner, self.R))  # W_dt
        self.dt_bias = nn.Parameter(torch.empty(self.D_inner))
        self.A_log = nn.Parameter(torch.empty(self.D_inner, self.N))
        self.D = nn.Parameter(torch.empty(self.D_inner))
        self.out_proj = nn.Linear(self.D_inner, d_model, bias=m.bias)
        self.reset_ssm()

    def reset_ssm(self) -> None:
        """Mamba's init of A_log, D, dt_proj and dt_bias (module docstring)."""
        m = self.spec.layer.mamba
        with torch.no_grad():
            self.A_log.copy_(torch.log(torch.arange(1, self.N + 1, dtype=torch.float32)).expand(self.D_inner, -1))
            self.D.fill_(1.0)
            s = m.dt_scale * self.R ** -0.5
            if m.dt_init == "constant":
                self.dt_proj.fill_(s)
            else:
                self.dt_proj.uniform_(-s, s)
            log_dt = torch.rand(self.D_inner) * (math.log(m.dt_max) - math.log(m.dt_min)) + math.log(m.dt_min)
            dt = torch.exp(log_dt).clamp(min=m.dt_init_floor)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(Δ₀)

    def state_size(self) -> int:
        """Floats held per sequence: h (D·N) and the conv buffer."""
        return self.D_inner * self.N + (self.conv.size - 1) * self.conv.channels

    def forward(self, x: torch.Tensor, *, state: MixerState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True):
        """x [B, T, d_model] -> (y [B, T, d_model], MixerState(h as S [B, 1, N, D], conv buffer) or None)."""
        check_mixer_input("Mamba", x, self.in_proj.in_features)
        if mask is not None:
            raise ValueError("Mamba does not mask padding (masks_padding = False); run padded batches through "
                             "assocmem.models.blocks.run_mixer, which calls each row's real tokens")
        if state is not None and not isinstance(state, MixerState):
            raise TypeError(f"state must be a MixerState from this mixer, got {type(state).__name__}")
        B, T, _ = x.shape
        xs, z = self.in_proj(x).split(self.D_inner, dim=-1)
        xs, conv_state = self.conv(xs, None if state is None else state.conv)
        delta, Bt, Ct = self.x_proj(xs).split([self.R, self.N, self.N], dim=-1)
        gd = torch.promote_types(x.dtype, torch.float32)
        dt = F.softplus(F.linear(delta, self.dt_proj.to(delta.dtype)).to(gd) + self.dt_bias.to(gd))  # Δ [B, T, D]
        if self.spec.layer.mamba.dt_limit is not None:  # mamba_ssm's dt_limit
            dt = dt.clamp(*self.spec.layer.mamba.dt_limit)
        A = -torch.exp(self.A_log.to(gd))  # [D, N]
        log_alpha = (dt[:, :, None, None, :] * A.t()).reshape(B, T, 1, self.N, self.D_inner)  # Δ_{t,d} A_{d,n}
        step = state is not None and T == 1
        form, step_form = self.lowered(x.device, input_dtype(x), torch.is_grad_enabled())
        with torch.autocast(x.device.type, enabled=False):  # the op computes in the compute dtype of its inputs
            o, memory = (step_form if step else form).fn(
                Ct[:, :, None], Bt[:, :, None], (dt * xs)[:, :, None], log_alpha=log_alpha, scale=1.0,
                initial_state=None if state is None else state.memory, output_final_state=return_state)
        y = (o[:, :, 0] + self.D.to(xs.dtype) * xs) * F.silu(z)
        return self.out_proj(y.to(x.dtype)), (MixerState(memory, conv_state) if return_state else None)
