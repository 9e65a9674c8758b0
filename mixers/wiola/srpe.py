"""Spiral Rotary Positional Encoding, SRPE (Wiola, seed 002, §VI, eqs. 11–18).

For position p and pair index j < d_h/2 (pairs (j, j + d_h/2), as in RoPE's rotate-half layout):

    1. ω_j = θ₀^(−2j/d_h)                                                 (eq. 11)
    2. θ⁽¹⁾_j(p) = p ω_j,  θ⁽²⁾_j(p) = p ω_j / k_s,
       Θ_j(p) = θ⁽¹⁾ + θ⁽²⁾ = p ω_j (1 + 1/k_s)                            (eqs. 12–13)
    3. r_j(p) = 1 + a_s sin(p f_s ω_j)                                     (eq. 14)
    4. c_j(p) = r_j(p) cos Θ_j(p),  s_j(p) = r_j(p) sin Θ_j(p)             (eqs. 15–16)
    5. SRPE(q, p)_j = q_j c_j − q_{j+d_h/2} s_j,
       SRPE(q, p)_{j+d_h/2} = q_j s_j + q_{j+d_h/2} c_j                     (eqs. 17–18)

Step 5 is RoPE's rotation with (cos, sin) replaced by (c, s), so ``srpe_angles`` returns (c, s)
in the layout of ``rope_angles`` and the attention layer rotates q and k with the same function.

What the equations give (checked in ``tests/mixers/test_wiola_srpe.py``):
  - The "dual winding angles" add into one angle: with a_s = 0 SRPE *is* RoPE with every
    frequency multiplied by (1 + 1/k_s) (transformers' ``apply_rotary_pos_emb`` with inv_freq·(1 + 1/k_s)).
  - The score of pair j is r_j(p) r_j(p') times the RoPE score at offset p − p' (eq. 19 written
    for general q, k). So the encoding is relative only when a_s = 0; for a_s ≠ 0 the score of the
    same (q, k) at the same offset changes with absolute position, as eq. 19's radial factor says,
    and the "exact relative position" property of Table II does not hold.
  - No learned parameters (claimed, true). The paper's Table I values of k_s, a_s, f_s are missing
    from the text, so all three are required fields here.

Convention (not in the paper): a_s ∈ [0, 1), so r_j(p) > 0 and the rotation stays invertible
(a_s ≥ 1 would zero or flip q and k at some positions).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field


class SRPEOptions(BaseModel):
    """SRPE's three constants (eqs. 12–14); the base θ₀ is the attention layer's ``rope_theta``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    kind: Literal["srpe"] = Field("srpe", description="tag of the rotary option")
    k_s: float = Field(..., gt=0, description="secondary winding ratio: θ⁽²⁾ = p ω_j / k_s (eq. 12)")
    a_s: float = Field(..., ge=0, lt=1, description="radial amplitude: r_j(p) = 1 + a_s sin(p f_s ω_j) (eq. 14); "
                       "0 makes SRPE relative (RoPE at frequencies ω_j (1 + 1/k_s))")
    f_s: float = Field(..., gt=0, description="radial frequency factor in r_j(p) (eq. 14)")


def srpe_angles(pos: torch.Tensor, dim: int, theta: float, options: SRPEOptions, dtype: torch.dtype):
    """c, s of eqs. 15–16 for positions pos [B, T] -> [B, T, 1, dim/2] each (float64 work for float64)."""
    if dim % 2:
        raise ValueError(f"SRPE needs an even head_dim, got {dim}")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    j = torch.arange(0, dim, 2, device=pos.device, dtype=work)     # 2j, j < dim/2
    omega = theta ** (-j / dim)                                    # 1. ω_j                 [dim/2]
    p = pos.to(work)[..., None]                                    # [B, T, 1]
    big_theta = p * omega * (1.0 + 1.0 / options.k_s)              # 2. Θ_j(p)              [B, T, dim/2]
    radius = 1.0 + options.a_s * torch.sin(p * options.f_s * omega)  # 3. r_j(p)            [B, T, dim/2]
    c = radius * torch.cos(big_theta)                              # 4. c_j(p), s_j(p)
    s = radius * torch.sin(big_theta)
    return c.to(dtype)[:, :, None], s.to(dtype)[:, :, None]
