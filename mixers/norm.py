"""Normalisation and rotary position embedding shared by the mixer modules and the blocks.

    rms_norm(x, weight, eps)   x / sqrt(mean(x²) + eps) · w over the last axis (Zhang & Sennrich 2019)
    RMSNorm(dim, eps)          the module: torch.nn.RMSNorm, whose kernel gives bit for bit the formula
                               above in float32 and float64 (tests/mixers/test_norm.py); half inputs and
                               mixed dtypes (bf16 activations under autocast, fp32 weight) take the
                               formula itself, as before, where torch's kernel would round differently
    rope_angles, apply_rope    RoPE (Su et al. 2021): pairs (i, i + K/2) of a head rotated by pos · θ^(−2i/K)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_FUSED = (torch.float32, torch.float64)  # dtypes where F.rms_norm equals the formula bit for bit


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x · rsqrt(mean(x²) + eps) · weight over the last axis; x [..., D], weight [D] or None."""
    if x.dtype in _FUSED and (weight is None or weight.dtype == x.dtype):
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


class RMSNorm(nn.RMSNorm):
    """RMSNorm over the last axis with a learned scale (initialised to 1); see ``rms_norm``."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_angles(pos: torch.Tensor, dim: int, theta: float, dtype: torch.dtype):
    """cos, sin of pos · θ^(−2i/dim), i < dim/2: pos [B, T] -> [B, T, 1, dim/2] each."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = theta ** (-torch.arange(0, dim, 2, device=pos.device, dtype=work) / dim)  # [dim/2]
    ang = pos.to(work)[..., None] * inv_freq  # [B, T, dim/2]
    return ang.cos().to(dtype)[:, :, None], ang.sin().to(dtype)[:, :, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x_i, x_{i+K/2}) of x [B, T, H, K] by the angles in cos/sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
