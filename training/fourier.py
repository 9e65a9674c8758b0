"""Fourier modes of a tensor along one axis: projection, power per mode, top-K modes.

Seed 003 (Spectral Alignment) works with the real DFT of a weight gradient G along an axis of
length n (the token axis of an embedding, the position axis of a position embedding):

    Ĝ[k] = rfft(G, dim=axis)[k],  k = 0 … ⌊n/2⌋                              (rfft bins)
    G ← irfft(Ĝ ⊙ 1[k ∈ S], n, dim=axis)                                     (eq. 4, FGP)
    P(k) = |rfft(G, dim=axis)[k]|²                                           (eq. 5, the power)

Eq. 5 leaves the other dimensions of G (the embedding columns e) unsaid; the seed says once, under
eq. 4: "M_S[k] = 1[k ∈ S] is a binary frequency mask and G is summed over the embedding dimension."
``mode_power`` takes either reading (``FOURIER_POWERS``):

    power_of_sum (default)   P(k) = |Σ_e Ĝ[k, e]|² = |rfft(Σ_e G[:, e])[k]|²    (G summed over e, then the power)
    sum_of_powers            P(k) = Σ_e |Ĝ[k, e]|²                             (each column's power, summed)

They differ whenever the columns' spectra do not share a phase: columns that cancel in the sum
keep their power under sum_of_powers. The power picks the modes of adaptive FGP (§4.3) and gives
the sounding's ρ (§4.4); the projection of eq. 4 applies one mask to every column either way.

For real G, eq. 4 is the orthogonal projection onto span{cos(2πkt/n), sin(2πkt/n) : k ∈ S}
(bin 0 is the constant, and for even n the Nyquist bin n/2 holds the cosine only). It is
idempotent and S = all bins is the identity (tests/training/test_fourier.py checks both, and
checks the projector against the explicit Fourier basis of Nanda et al. 2023).

Only the first ``n`` indices of the axis take part (``n`` = None: the whole axis): an embedding
with p number tokens and an "=" token is transformed over the p number rows and its last row
is left as it is.
"""
from __future__ import annotations

from typing import Literal

import torch


def num_bins(n: int) -> int:
    """Number of rfft bins of a length-n signal: ⌊n/2⌋ + 1."""
    return n // 2 + 1


def _span(x: torch.Tensor, axis: int, n: int | None) -> tuple[int, int]:
    """(normalised axis, n) after checking that the first n indices exist."""
    if not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis {axis} is out of range for a tensor of shape {tuple(x.shape)}")
    axis %= x.dim()
    size = x.shape[axis]
    n = size if n is None else n
    if not 2 <= n <= size:
        raise ValueError(f"the transformed length n={n} must lie in [2, {size}] (the size of axis {axis} of "
                         f"shape {tuple(x.shape)})")
    return axis, n


def check_modes(modes, n: int) -> list[int]:
    """Sorted distinct modes, each in 0 … ⌊n/2⌋ (the rfft bins of length n)."""
    modes = sorted({int(k) for k in modes})
    bad = [k for k in modes if not 0 <= k <= n // 2]
    if bad or not modes:
        raise ValueError(f"modes {bad or '[] (empty)'} are not rfft bins of length {n}: each must lie in "
                         f"0..{n // 2}, and at least one is needed")
    return modes


def mode_mask(modes, n: int, *, device=None) -> torch.Tensor:
    """M_S [⌊n/2⌋ + 1] float: 1 at the bins in S, 0 elsewhere."""
    mask = torch.zeros(num_bins(n), device=device)
    mask[check_modes(modes, n)] = 1.0
    return mask


def _broadcast(vec: torch.Tensor, dim: int, axis: int) -> torch.Tensor:
    """A [bins] vector reshaped to broadcast along ``axis`` of a ``dim``-d tensor."""
    shape = [1] * dim
    shape[axis] = vec.shape[0]
    return vec.view(shape)


def project_modes(x: torch.Tensor, modes, *, axis: int = 0, n: int | None = None) -> torch.Tensor:
    """Eq. 4: x with its first n indices along ``axis`` projected onto the Fourier modes S.

    x: any real tensor; returns a new tensor of x's shape and dtype (indices ≥ n unchanged).
    """
    axis, n = _span(x, axis, n)
    part = x.narrow(axis, 0, n)
    mask = _broadcast(mode_mask(modes, n, device=x.device), x.dim(), axis)
    projected = torch.fft.irfft(torch.fft.rfft(part, dim=axis) * mask, n=n, dim=axis)  # [.., n, ..]
    out = x.clone()
    out.narrow(axis, 0, n).copy_(projected)
    return out


FourierPower = Literal["power_of_sum", "sum_of_powers"]
FOURIER_POWERS = ("power_of_sum", "sum_of_powers")


def mode_power(x: torch.Tensor, *, axis: int = 0, n: int | None = None,
               power: FourierPower = "power_of_sum") -> torch.Tensor:
    """Eq. 5's P(k) over the first n indices of ``axis``: [⌊n/2⌋ + 1] float64 (module docstring: ``power``
    = power_of_sum: |Σ_other dims rfft(x)[k]|²; sum_of_powers: Σ_other dims |rfft(x)[k]|²)."""
    if power not in FOURIER_POWERS:
        raise ValueError(f"fourier_power: got {power!r}, allowed {' or '.join(FOURIER_POWERS)}")
    axis, n = _span(x, axis, n)
    spec = torch.fft.rfft(x.narrow(axis, 0, n).double(), dim=axis).movedim(axis, 0)  # [bins, ...]
    spec = spec.reshape(spec.shape[0], -1)                                          # [bins, other]
    if power == "power_of_sum":
        return spec.sum(1).abs().pow(2)
    return spec.abs().pow(2).sum(1)


def top_modes(power: torch.Tensor, k: int, *, skip_dc: bool) -> list[int]:
    """The k bins of largest power (sorted by bin index); bin 0 excluded when ``skip_dc``.

    Ties go to the lower bin (a stable sort of −power), so the choice is deterministic.
    """
    first = 1 if skip_dc else 0
    candidates = power.shape[0] - first
    if not 1 <= k <= candidates:
        raise ValueError(f"top-K needs 1 <= K <= {candidates} (the candidate bins), got K={k}")
    order = torch.sort(-power[first:].double(), stable=True).indices[:k] + first
    return sorted(order.tolist())


def regularity(power: torch.Tensor, k: int) -> float:
    """Eq. 5's ρ: the share of the total power held by the k strongest bins (DC included)."""
    total = float(power.sum())
    if total <= 0:
        raise ValueError("the spectrum has zero total power (an all-zero gradient): ρ is undefined")
    top = torch.sort(power.double(), descending=True, stable=True).values[:k]
    return float(top.sum()) / total


def flat_spectrum_regularity(bins: int, k: int) -> float:
    """The expected ρ of a white-noise signal with ``bins`` rfft bins: E[share of the k largest].

    Each bin's power is then ≈ exponential with one mean; the i-th largest of N has mean
    H_N − H_{i−1} (order statistics), so E[Σ top-k] / E[Σ all] = Σ_{i=1..k} (H_N − H_{i−1}) / N.
    That is the power of one signal (``power_of_sum``); summing the powers of m independent white
    columns (``sum_of_powers``) evens the bins out, and its flat ρ falls from this value toward k / N.
    """
    if not 1 <= k <= bins:
        raise ValueError(f"k must lie in [1, {bins}], got {k}")
    harmonic = [0.0]
    for j in range(1, bins + 1):
        harmonic.append(harmonic[-1] + 1.0 / j)
    return sum(harmonic[bins] - harmonic[i - 1] for i in range(1, k + 1)) / bins
