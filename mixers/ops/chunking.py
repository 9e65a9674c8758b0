"""The chunk layout of every chunk form: [N, B·H, C, ·], the chunks first.

    chunks(x, C)        [B, T, H, ...] -> [N, B·H, C, ...], zero-padded to N = ⌈T / C⌉ chunks
    unchunk(o, B, T)    [N, B·H, C, V] -> [B, T, H, V], the padding dropped

Zero padding writes nothing: k = v = 0, β = 0 and log α = 0 (α = 1) leave S unchanged.
The per-chunk state carry indexes the first axis (``x[n]``, ``unbind(0)``); every batched
product runs over the first two.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["chunks", "unchunk"]


def chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """[B, T, H, ...] -> [N, B·H, C, ...]: a fresh contiguous tensor (the in-place paths may overwrite it)."""
    B, T, H = x.shape[:3]
    N = -(-T // C)
    if N * C != T:
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, N * C - T))  # (B, N*C, H, ...)
    x = x.reshape(B, N, C, H, *x.shape[3:])  # (B, N, C, H, ...)
    x = x.permute(1, 0, 3, 2, *range(4, x.dim()))  # (N, B, H, C, ...)
    x = x.clone(memory_format=torch.contiguous_format)
    return x.view(N, B * H, C, *x.shape[4:])  # (N, B*H, C, ...)


def unchunk(o: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """[N, B·H, C, V] -> [B, T, H, V] (a copy; the zero-padded tail of the last chunk dropped)."""
    N, BH, C, V = o.shape
    return o.view(N, B, BH // B, C, V).permute(1, 0, 3, 2, 4).reshape(B, N * C, BH // B, V)[:, :T]
