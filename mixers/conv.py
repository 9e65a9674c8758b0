"""Causal depthwise short convolution with a carried decode buffer.

    u_t[c] = Σ_{j<w} W[c, j] · z_{t−w+1+j}[c] (+ b[c]),    y_t = SiLU(u_t)

z_τ = 0 for τ before the first token. The decode state is the last w − 1
inputs z (pre-convolution, oldest first), so prefill + step-by-step decoding
equals one call on the whole sequence.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ShortConv(nn.Module):
    """Depthwise causal conv of width ``size`` over ``channels``, then SiLU."""

    def __init__(self, channels: int, size: int = 4, activation: bool = True, bias: bool = False):
        super().__init__()
        if size < 1:
            raise ValueError(f"conv size must be >= 1, got {size}")
        self.channels, self.size, self.activation = channels, size, activation
        self.weight = nn.Parameter(torch.empty(channels, 1, size))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.size)  # nn.Conv1d's default for a depthwise kernel (and its bias)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def init_buffer(self, batch_size: int, *, device=None, dtype=None) -> torch.Tensor:
        """The empty buffer [B, size − 1, channels] (zeros = the conv's left padding)."""
        return torch.zeros(batch_size, self.size - 1, self.channels, device=device or self.weight.device,
                           dtype=dtype or self.weight.dtype)

    def forward(self, z: torch.Tensor, buffer: torch.Tensor | None = None):
        """z [B, T, C], buffer [B, size − 1, C] or None -> (y [B, T, C], new buffer [B, size − 1, C])."""
        B, T, C = z.shape
        if buffer is None:
            buffer = self.init_buffer(B, device=z.device, dtype=z.dtype)
        elif tuple(buffer.shape) != (B, self.size - 1, C):
            raise ValueError(f"conv buffer must be [B, size-1, C] = {(B, self.size - 1, C)}, got {tuple(buffer.shape)}")
        window = torch.cat([buffer.to(z.dtype), z], dim=1)  # [B, size − 1 + T, C]
        taps = self.weight[:, 0, :].to(z.dtype)  # [C, size]; tap size − 1 multiplies z_t
        u = window[:, :T] * taps[:, 0]
        for j in range(1, self.size):  # a sum over the few taps (no conv primitive: no per-shape setup)
            u = u + window[:, j:j + T] * taps[:, j]  # [B, T, C]
        if self.bias is not None:
            u = u + self.bias.to(z.dtype)
        y = F.silu(u) if self.activation else u
        return y, window[:, window.shape[1] - (self.size - 1):]
