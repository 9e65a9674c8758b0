"""Feature maps φ on q and k of the recurrent Mixer (``LayerOptions.feature_map``): the one table.

    identity, silu, elu_plus_one (Katharopoulos et al. 2020), relu    fixed, width K
    hedgehog                                                          learnable, width 2K
    favor                                                             random (redrawable), width K
    cosformer                                                         positional, width 2K

Hedgehog (Zhang et al. 2024, "The Hedgehog & the Porcupine"; as HazyResearch/lolcats builds its
``softmax_dim`` map on a per-head linear layer ``untied_head_einsum``), per head h:

    φ_h(x) = clamp([softmax(x W_h), softmax(−x W_h)], min=1e-12)      x [K] -> [2K]

with each softmax over its own K entries, W_h ∈ R^{K×K} initialised to the identity and no bias.
Its features are positive and sum to 2, so the normalised read-out (``layer.normalize``) has a
positive denominator. (FLA's ``HedgehogFeatureMap`` is a different variant: one softmax over the
2K entries of [2xW + b, −2xW − b].)

FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with Performers", Lemma 1 with orthogonal
random features, §2.4), per head h with m = K random directions ω_1..ω_m:

    φ_h(x) = exp(ω x − ‖x‖²/2) / √m,     E_ω[φ(q)·φ(k)] = exp(q·k)

ω's rows are one block of orthogonal directions (the Q factor of a Gaussian matrix, Haar by the sign
of R's diagonal), each scaled by the norm of an independent Gaussian vector, so that every ω_i is
N(0, I_K) and the estimate is unbiased. They are a buffer drawn from a seed (``redraw(seed)``, or
``redraw_features(module, seed)`` for every FAVOR+ map of a model; q and k maps of one layer draw the
same ω from the same seed). For the softmax kernel exp(q·k/√K), feed q and k scaled by K^(−1/4).

cosFormer (Qin et al. 2022, "cosFormer: Rethinking Softmax in Attention", eqs. 8–10): ReLU features
re-weighted by cos(π/2 · (i − j)/M) between query position i and key position j, written as
cos·cos + sin·sin so that it stays a product of a query feature and a key feature (a linear-attention
write of every hebbian class):

    φ(x_i) = [ReLU(x_i) cos(π i / 2M), ReLU(x_i) sin(π i / 2M)],   φ(q_i)·φ(k_j) = ReLU(q_i)·ReLU(k_j) cos(π(i − j)/2M)

M = ``layer.cosformer_horizon``; i counts the tokens of the sequence from 0 (the recurrent Mixer carries
it in its decode state, ``MixerState.pos``). The maps that read positions have ``needs_positions``.

    phi = build_feature_map(name, num_heads, head_dim)     # an nn.Module
    phi(x, positions): [B, T, num_heads, head_dim], positions [B, T] (or None)
                       -> [B, T, num_heads, feature_width(name, head_dim)]
"""
from __future__ import annotations

from typing import Callable

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["FEATURE_MAPS", "CosFormer", "FavorPlus", "Hedgehog", "build_feature_map", "feature_width",
           "orthogonal_gaussian", "redraw_features"]

HEDGEHOG_EPS = 1e-12  # lolcats' FeatureMap default eps (the clamp floor)
COSFORMER_HORIZON = 2048  # M of cosFormer's re-weighting when none is given


class Fixed(nn.Module):
    """A parameter-free feature map applied elementwise."""

    needs_positions = False

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.fn(x)


def orthogonal_gaussian(num_heads: int, dim: int, seed: int) -> torch.Tensor:
    """ω [num_heads, dim, dim] (float64): per head, ``dim`` orthogonal rows, each N(0, I_dim) marginally
    (Haar-random directions times the norms of independent Gaussian vectors; module docstring)."""
    g = torch.Generator().manual_seed(seed)
    heads = []
    for _ in range(num_heads):
        Q, R = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
        Q = Q * torch.sign(torch.diagonal(R))  # Haar: each column's sign fixed by R
        norms = torch.randn(dim, dim, generator=g, dtype=torch.float64).norm(dim=1)
        heads.append(norms[:, None] * Q.t())
    return torch.stack(heads)


class FavorPlus(nn.Module):
    """φ(x) = exp(ω x − ‖x‖²/2)/√m per head, ω from ``seed`` (module docstring)."""

    needs_positions = False

    def __init__(self, num_heads: int, head_dim: int, seed: int = 0):
        super().__init__()
        self.register_buffer("omega", orthogonal_gaussian(num_heads, head_dim, seed).float())  # (H, m, K)

    def redraw(self, seed: int) -> None:
        """New random directions ω from ``seed`` (the same seed gives the same ω)."""
        with torch.no_grad():
            self.omega.copy_(orthogonal_gaussian(*self.omega.shape[:2], seed))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, H, K] -> [B, T, H, m]."""
        z = torch.einsum("bthk,hmk->bthm", x, self.omega.to(x.dtype))
        return torch.exp(z - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(self.omega.shape[1])


class CosFormer(nn.Module):
    """φ(x_i) = [ReLU(x_i) cos(π i/2M), ReLU(x_i) sin(π i/2M)] (module docstring)."""

    needs_positions = True

    def __init__(self, num_heads: int, head_dim: int, horizon: int = COSFORMER_HORIZON):
        super().__init__()
        self.horizon = horizon

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, H, K], positions [B, T] (token indices from 0) -> [B, T, H, 2K]."""
        if positions is None or tuple(positions.shape) != tuple(x.shape[:2]):
            raise ValueError(f"the cosformer feature map needs the positions [B, T] = {tuple(x.shape[:2])} of the "
                             f"tokens, got {None if positions is None else tuple(positions.shape)}")
        angle = (math.pi / (2 * self.horizon)) * positions.to(x.dtype)[:, :, None, None]  # [B, T, 1, 1]
        r = F.relu(x)
        return torch.cat((r * torch.cos(angle), r * torch.sin(angle)), dim=-1)


class Hedgehog(nn.Module):
    """φ(x) = clamp([softmax(x W_h), softmax(−x W_h)], min=1e-12) per head h (module docstring)."""

    needs_positions = False

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(head_dim).repeat(num_heads, 1, 1))  # (H, K, K), identity per head

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, H, K] -> [B, T, H, 2K]."""
        z = torch.einsum("bthk,hkf->bthf", x, self.weight.to(x.dtype))  # (B, T, H, K)
        return torch.cat((z.softmax(-1), (-z).softmax(-1)), dim=-1).clamp(min=HEDGEHOG_EPS)


# name -> (factory(num_heads, head_dim, horizon) -> module, output width for head_dim K)
FEATURE_MAPS: dict[str, tuple[Callable[[int, int, int], nn.Module], Callable[[int], int]]] = {
    "identity": (lambda H, K, M: Fixed(lambda t: t), lambda K: K),
    "silu": (lambda H, K, M: Fixed(F.silu), lambda K: K),
    "elu_plus_one": (lambda H, K, M: Fixed(lambda t: F.elu(t) + 1.0), lambda K: K),
    "relu": (lambda H, K, M: Fixed(F.relu), lambda K: K),
    "hedgehog": (lambda H, K, M: Hedgehog(H, K), lambda K: 2 * K),
    "favor": (lambda H, K, M: FavorPlus(H, K), lambda K: K),
    "cosformer": (lambda H, K, M: CosFormer(H, K, M), lambda K: 2 * K),
}


def build_feature_map(name: str, num_heads: int, head_dim: int, horizon: int = COSFORMER_HORIZON) -> nn.Module:
    """The feature map ``name`` for ``num_heads`` heads of width ``head_dim`` (``horizon``: cosFormer's M)."""
    if name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature_map {name!r}; choose one of {sorted(FEATURE_MAPS)}")
    return FEATURE_MAPS[name][0](num_heads, head_dim, horizon)


def redraw_features(module: nn.Module, seed: int) -> int:
    """Redraw ω of every FAVOR+ map in ``module`` from ``seed`` (a layer's q and k maps get the same ω); returns
    how many maps were redrawn."""
    maps = [m for m in module.modules() if isinstance(m, FavorPlus)]
    for m in maps:
        m.redraw(seed)
    return len(maps)


def feature_width(name: str, head_dim: int) -> int:
    """Width of φ(x) for x of width ``head_dim``: the key width of the memory."""
    return FEATURE_MAPS[name][1](head_dim)
