"""The input check at the boundary of every mixer module (Mixer, Attention, SCALayer).

A ``MixerModule`` (``layer.py``) takes x [B, T, d_model] and an optional padding mask [B, T].
A wrong input is refused here, before any projection, with the argument, the expected shape
and the received one named (instead of "not enough values to unpack" or a matmul error from
deep inside). B = 0 is a valid batch (empty outputs); T = 0 is refused: a step of a sequence
model needs at least one token.
"""
from __future__ import annotations

import torch

__all__ = ["check_mixer_input"]


def check_mixer_input(owner: str, x, d_model: int, mask=None) -> None:
    """Refuse x unless it is a floating tensor [B, T, d_model] with T >= 1, and mask unless it is
    None or a bool/integer tensor [B, T]. ``owner`` (the module's class) starts the message."""
    if not torch.is_tensor(x):
        raise TypeError(f"{owner}: x must be a torch.Tensor [B, T, d_model={d_model}], got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{owner}: x must be a floating tensor [B, T, d_model={d_model}], got {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != d_model or x.shape[1] < 1:
        raise ValueError(f"{owner}: x must have shape [B, T, d_model={d_model}] with T >= 1, got {list(x.shape)}")
    if mask is None:
        return
    if not torch.is_tensor(mask) or mask.is_floating_point() or mask.is_complex():
        got = mask.dtype if torch.is_tensor(mask) else type(mask).__name__
        raise TypeError(f"{owner}: mask must be a bool tensor [B, T] (True = real token), got {got}")
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(f"{owner}: mask must have shape [B, T] = {list(x.shape[:2])} (those of x), "
                         f"got {list(mask.shape)}")
