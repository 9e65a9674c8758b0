"""Fourier-Only Attention (FOH), seed 003 §7.1 eq. 6 — as written (circular) and causal.

    circular (eq. 6)   y = irfft(rfft(x, dim=1) ⊙ W_φ, n=T, dim=1),   W_φ ∈ C^{(⌊T/2⌋+1) × d}
                       = a circular convolution y_t = Σ_s w_{(t−s) mod T} ⊙ x_s,  w = irfft(W_φ, n=T)
    causal             y_t = Σ_{j=0}^{t} h_j ⊙ x_{t−j},                h ∈ R^{L × d}
                       computed as a zero-padded FFT convolution of length 2T:
                       y = irfft(rfft(x, n=2T) ⊙ rfft(h[:T], n=2T), n=2T)[:T]

As written, W_φ has ⌊T/2⌋+1 rows, so the layer exists for one sequence length T only (other lengths
are refused), and every output mixes every position, the future included: there is no incremental
decode, and ``assocmem probe causality`` flags it at position 0. The causal form keeps the
convolution but pads to 2T so that nothing wraps around: position t reads positions ≤ t only
(exactly in exact arithmetic; the FFT rounds, so a changed future moves earlier outputs by
≈ 1e-16 relative in float64 — the causality tests use atol 1e-12 there and 0 for the circular leak's
opposite). Its decode state is the inputs seen so far (like a KV cache), at most L of them.

Init: a kernel h ~ N(0, 1/L) per tap and channel; the circular filter starts as its rfft (n = T).
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn as nn
from pydantic import BaseModel, ConfigDict, Field

FOH_MODES = ("circular", "causal")


# ---------------------------------------------------------------- functional forms
def circular_fourier_filter(x: torch.Tensor, w_phi: torch.Tensor) -> torch.Tensor:
    """Eq. 6: x [B, T, d] real, w_phi [⌊T/2⌋+1, d] complex -> y [B, T, d]."""
    T = x.shape[1]
    if w_phi.shape[0] != T // 2 + 1:
        raise ValueError(f"the circular filter has {w_phi.shape[0]} frequency rows, which fits sequences of length "
                         f"{2 * (w_phi.shape[0] - 1)} or {2 * w_phi.shape[0] - 1}; got T={T}")
    return torch.fft.irfft(torch.fft.rfft(x, dim=1) * w_phi, n=T, dim=1)


def causal_fft_conv(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """y_t = Σ_{j≤t} h_j ⊙ x_{t−j} by a zero-padded FFT of length 2T: x [B, T, d], h [≥T, d] -> [B, T, d]."""
    T = x.shape[1]
    if h.shape[0] < T:
        raise ValueError(f"the causal kernel has {h.shape[0]} taps, fewer than the sequence length T={T}")
    spec = torch.fft.rfft(x, n=2 * T, dim=1) * torch.fft.rfft(h[:T], n=2 * T, dim=0)  # [B, T+1, d]
    return torch.fft.irfft(spec, n=2 * T, dim=1)[:, :T]


def direct_causal_conv(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The O(T²) reference of ``causal_fft_conv``: the sum written out, one output position at a time."""
    B, T, d = x.shape
    y = x.new_zeros(B, T, d)
    for t in range(T):
        taps = h[:t + 1].flip(0)                  # h_t … h_0 against x_0 … x_t
        y[:, t] = (taps[None] * x[:, :t + 1]).sum(1)
    return y


# ---------------------------------------------------------------- config and module
class FOHConfig(BaseModel):
    """A FOH layer of a hybrid (the block extension ``foh``, models/extensions.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    mode: Literal["circular", "causal"] = Field(description="circular: eq. 6 as written (sees the future, tied to "
                                                "seq_len); causal: zero-padded 2T FFT convolution")
    seq_len: int = Field(gt=0, description="circular: the one sequence length; causal: the longest sequence")


class FOHState(NamedTuple):
    """Decode state of a causal FOH layer: the inputs seen so far, [B, n, d]."""

    inputs: torch.Tensor


class FourierOnlyAttention(nn.Module):
    """The FOH mixer: ``forward(x, *, state=None, return_state=True) -> (y, state)`` (see the module docstring).

    Args:
        d_model: channels d (the filter is depthwise: one per channel).
        seq_len: circular: the one sequence length T the filter fits; causal: L, the longest sequence.
        mode: "circular" (eq. 6, as written) or "causal".
    """

    masks_padding = False  # MixerModule: padded batches are run row group by row group (models/blocks.run_mixer)

    def __init__(self, d_model: int, *, seq_len: int, mode: Literal["circular", "causal"] = "causal",
                 layer_idx: int | None = None):
        super().__init__()
        if mode not in FOH_MODES:
            raise ValueError(f"FOH mode must be one of {FOH_MODES}, got {mode!r}")
        if seq_len < 1:
            raise ValueError(f"FOH seq_len must be >= 1, got {seq_len}")
        self.d, self.seq_len, self.mode, self.layer_idx = d_model, seq_len, mode, layer_idx
        kernel = torch.randn(seq_len, d_model) / seq_len ** 0.5              # h ~ N(0, 1/L)
        if mode == "circular":
            self.filter = nn.Parameter(torch.view_as_real(torch.fft.rfft(kernel, dim=0)).contiguous())  # [T/2+1, d, 2]
        else:
            self.kernel = nn.Parameter(kernel)                                 # [L, d]

    def state_size(self, seq_len: int = 1) -> int:
        """Floats held per sequence after ``seq_len`` tokens (causal: the inputs; circular: none)."""
        return 0 if self.mode == "circular" else min(seq_len, self.seq_len) * self.d

    def forward(self, x: torch.Tensor, *, state: FOHState | None = None, return_state: bool = True):
        """x [B, T, d] -> (y [B, T, d], FOHState or None)."""
        if x.dim() != 3 or x.shape[-1] != self.d:
            raise ValueError(f"FOH input must be [B, T, {self.d}], got {tuple(x.shape)}")
        if self.mode == "circular":
            return self._circular(x, state), None
        past = None if state is None else state.inputs
        seq = x if past is None else torch.cat([past, x], dim=1)               # [B, n + T, d]
        if seq.shape[1] > self.seq_len:
            raise ValueError(f"the causal FOH kernel has {self.seq_len} taps; {seq.shape[1]} positions exceed it")
        y = causal_fft_conv(seq, self.kernel)[:, seq.shape[1] - x.shape[1]:]
        return y, (FOHState(seq) if return_state else None)

    def _circular(self, x: torch.Tensor, state) -> torch.Tensor:
        if state is not None:
            raise ValueError("circular FOH (eq. 6, as written) mixes the whole sequence, future included: it has no "
                             "incremental decode; use mode: causal")
        if x.shape[1] != self.seq_len:
            raise ValueError(f"circular FOH (eq. 6) has its filter tied to T={self.seq_len}; got a sequence of "
                             f"length {x.shape[1]} (use mode: causal for other lengths)")
        return circular_fourier_filter(x, torch.view_as_complex(self.filter))
