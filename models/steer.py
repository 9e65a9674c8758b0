"""Spectral steering of a block's residual update (seed 003 §7.1, ST-1's hierarchical steering).

A block with the extension ``steer`` (models/extensions.py) replaces its update Δ = y − x along
the sequence axis by a filtered one, y = x + F(Δ). The cutoff is a frequency of the training length
T₀ = ``seq_len``: bin ``cutoff`` of a length-T₀ rfft, i.e. cutoff / T₀ cycles per token.

    mode circular (as written)   lowpass: keep the rfft bins k ≤ ⌊cutoff · T / T₀⌋ of Δ over the whole
                                 sequence of length T; highpass: keep the bins above. Every output
                                 reads every position, the future included (flagged by
                                 ``assocmem probe causality``); no incremental decode.
    mode causal                  lowpass: the causal moving average over the last w = round(T₀ / cutoff)
                                 positions (zeros before the start), whose first spectral null is at the
                                 cutoff; highpass: Δ minus it. Position t reads positions ≤ t only; the
                                 decode state is the last w − 1 updates.
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator


class SteerConfig(BaseModel):
    """One block's steering filter (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    band: Literal["lowpass", "highpass"] = Field(description="keep the frequencies below (lowpass) or above the cutoff")
    cutoff: int = Field(gt=0, description="the cutoff as an rfft bin of a length-seq_len sequence (ST-1: 8, 16, 32)")
    mode: Literal["circular", "causal"] = Field(description="circular: rfft mask over the whole sequence (as "
                                                "written, sees the future); causal: moving average / its complement")
    seq_len: int = Field(gt=1, description="T₀, the length the cutoff refers to (the training length)")

    @model_validator(mode="after")
    def _cutoff_below_nyquist(self) -> "SteerConfig":
        if self.cutoff > self.seq_len // 2:
            raise ValueError(f"steer cutoff {self.cutoff} exceeds the Nyquist bin {self.seq_len // 2} of seq_len "
                             f"{self.seq_len}")
        return self

    @property
    def window(self) -> int:
        """w of the causal moving average: round(T₀ / cutoff), at least 1."""
        return max(1, round(self.seq_len / self.cutoff))


class SteerState(NamedTuple):
    """Decode state of a causal steering filter: the last w − 1 updates, [B, w − 1, d]."""

    history: torch.Tensor


def circular_filter(u: torch.Tensor, cfg: SteerConfig) -> torch.Tensor:
    """u [B, T, d] -> the rfft bins of u along T kept by ``cfg`` (lowpass: k ≤ k_c, highpass: k > k_c)."""
    T = u.shape[1]
    k_c = (cfg.cutoff * T) // cfg.seq_len
    low = torch.arange(T // 2 + 1, device=u.device) <= k_c                  # [bins]
    keep = low if cfg.band == "lowpass" else ~low
    spec = torch.fft.rfft(u, dim=1) * keep[None, :, None].to(u.dtype)
    return torch.fft.irfft(spec, n=T, dim=1)


def causal_moving_average(u: torch.Tensor, window: int, history: torch.Tensor | None = None) -> torch.Tensor:
    """m_t = (1/w) Σ_{j=0}^{w−1} u_{t−j} (u before the start: ``history``, else zeros): u [B, T, d] -> [B, T, d]."""
    B, T, d = u.shape
    if history is None:
        history = u.new_zeros(B, window - 1, d)
    seq = torch.cat([history, u], dim=1).transpose(1, 2)                     # [B, d, w − 1 + T]
    weight = torch.full((d, 1, window), 1.0 / window, dtype=u.dtype, device=u.device)
    return F.conv1d(seq, weight, groups=d).transpose(1, 2)                   # [B, T, d]


class Steer(nn.Module):
    """F(Δ) of a block (see the module docstring); no parameters."""

    def __init__(self, cfg: SteerConfig):
        super().__init__()
        self.cfg = cfg

    def forward(self, u: torch.Tensor, *, state: SteerState | None = None, return_state: bool = True):
        """u [B, T, d] (the block's update) -> (F(u) [B, T, d], SteerState or None)."""
        if self.cfg.mode == "circular":
            if state is not None:
                raise ValueError("steer mode circular (as written) filters over the whole sequence, future included: "
                                 "it has no incremental decode; use mode: causal")
            return circular_filter(u, self.cfg), None
        w = self.cfg.window
        history = None if state is None else state.history
        low = causal_moving_average(u, w, history)
        out = low if self.cfg.band == "lowpass" else u - low
        if not return_state:
            return out, None
        seen = u if history is None else torch.cat([history, u], dim=1)
        keep = seen[:, max(0, seen.shape[1] - (w - 1)):]
        if keep.shape[1] < w - 1:                                            # fewer than w − 1 tokens so far
            keep = torch.cat([u.new_zeros(u.shape[0], w - 1 - keep.shape[1], u.shape[2]), keep], dim=1)
        return out, SteerState(keep)


class SteeredUpdate(nn.Module):
    """A steered block's output y = x + F(h − x) from its input x and h = x + its update (the block
    extension ``steer``'s residual hook, models/extensions.py)."""

    def __init__(self, cfg: SteerConfig):
        super().__init__()
        self.steer = Steer(cfg)

    def check_continue(self, layer_idx: int) -> None:
        """Refuse to continue a decode in mode circular (it filters over the whole sequence)."""
        if self.steer.cfg.mode == "circular":
            raise ValueError(f"layer {layer_idx}: steer mode circular (as written) filters over the whole "
                             f"sequence, future included: it has no incremental decode; use mode: causal")

    def forward(self, x: torch.Tensor, h: torch.Tensor, *, state: SteerState | None = None,
                mask: torch.Tensor | None = None, return_state: bool = True):
        """x, h [B, T, d] -> (y [B, T, d], SteerState or None)."""
        if mask is not None:
            raise ValueError("a steered block filters along the sequence, so padding would shift it; pass sequences "
                             "of equal length without padding")
        delta, state = self.steer(h - x, state=state, return_state=return_state)
        return x + delta, state
