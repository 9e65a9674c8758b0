"""The chunk layout of every chunk form: [N, B, H, C, ·], the chunks first.

    chunks(x, C)              [B, T, H, ...] -> [N, B, H, C, ...], zero-padded to N = ⌈T / C⌉ chunks
    chunks(x, C, copy=False)  the same as a strided view of x where no padding is needed
    unchunk(o, T)             [N, B, H, C, V] -> [B, T, H, V], the padding dropped

Zero padding writes nothing: k = v = 0, β = 0 and log α = 0 (α = 1) leave S unchanged.
The state carry steps over the first axis (``x[n]``, ``unbind(0)``); the batched products run
over the leading axes at once, and the delta form flattens B and H into one (``flatten(1, 2)``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["chunks", "unchunk"]


def chunks(x: torch.Tensor, C: int, *, copy: bool = True) -> torch.Tensor:
    """[B, T, H, ...] -> [N, B, H, C, ...]; a fresh contiguous tensor (the in-place paths may overwrite
    it), or with ``copy=False`` a view of x when T is a multiple of C (read once by the op that uses it)."""
    B, T, H = x.shape[:3]
    N = -(-T // C)
    if N * C != T:
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, N * C - T))  # (B, N*C, H, ...)
    x = x.reshape(B, N, C, H, *x.shape[3:]).permute(1, 0, 3, 2, *range(4, x.dim() + 1))  # (N, B, H, C, ...)
    return x.clone(memory_format=torch.contiguous_format) if copy else x


def unchunk(o: torch.Tensor, T: int) -> torch.Tensor:
    """[N, B, H, C, V] -> [B, T, H, V] (a copy; the zero-padded tail of the last chunk dropped)."""
    N, B, H, C, V = o.shape
    return o.permute(1, 0, 3, 2, 4).reshape(B, N * C, H, V)[:, :T]
