"""Feature maps φ on q and k of the recurrent Mixer (``LayerOptions.feature_map``): the one table.

    identity, silu, elu_plus_one (Katharopoulos et al. 2020), relu    fixed, width K
    hedgehog                                                          learnable, width 2K

Hedgehog (Zhang et al. 2024, "The Hedgehog & the Porcupine"; as HazyResearch/lolcats builds its
``softmax_dim`` map on a per-head linear layer ``untied_head_einsum``), per head h:

    φ_h(x) = clamp([softmax(x W_h), softmax(−x W_h)], min=1e-12)      x [K] -> [2K]

with each softmax over its own K entries, W_h ∈ R^{K×K} initialised to the identity and no bias.
Its features are positive and sum to 2, so the normalised read-out (``layer.normalize``) has a
positive denominator. (FLA's ``HedgehogFeatureMap`` is a different variant: one softmax over the
2K entries of [2xW + b, −2xW − b].)

    phi = build_feature_map(name, num_heads, head_dim)     # an nn.Module
    phi(x): [B, T, num_heads, head_dim] -> [B, T, num_heads, feature_width(name, head_dim)]
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["FEATURE_MAPS", "Hedgehog", "build_feature_map", "feature_width"]

HEDGEHOG_EPS = 1e-12  # lolcats' FeatureMap default eps (the clamp floor)


class Fixed(nn.Module):
    """A parameter-free feature map applied elementwise."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Hedgehog(nn.Module):
    """φ(x) = clamp([softmax(x W_h), softmax(−x W_h)], min=1e-12) per head h (module docstring)."""

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(head_dim).repeat(num_heads, 1, 1))  # (H, K, K), identity per head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, H, K] -> [B, T, H, 2K]."""
        z = torch.einsum("bthk,hkf->bthf", x, self.weight.to(x.dtype))  # (B, T, H, K)
        return torch.cat((z.softmax(-1), (-z).softmax(-1)), dim=-1).clamp(min=HEDGEHOG_EPS)


# name -> (factory(num_heads, head_dim) -> module, output width for head_dim K)
FEATURE_MAPS: dict[str, tuple[Callable[[int, int], nn.Module], Callable[[int], int]]] = {
    "identity": (lambda H, K: Fixed(lambda t: t), lambda K: K),
    "silu": (lambda H, K: Fixed(F.silu), lambda K: K),
    "elu_plus_one": (lambda H, K: Fixed(lambda t: F.elu(t) + 1.0), lambda K: K),
    "relu": (lambda H, K: Fixed(F.relu), lambda K: K),
    "hedgehog": (Hedgehog, lambda K: 2 * K),
}


def build_feature_map(name: str, num_heads: int, head_dim: int) -> nn.Module:
    """The feature map ``name`` for ``num_heads`` heads of width ``head_dim``."""
    if name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature_map {name!r}; choose one of {sorted(FEATURE_MAPS)}")
    return FEATURE_MAPS[name][0](num_heads, head_dim)


def feature_width(name: str, head_dim: int) -> int:
    """Width of φ(x) for x of width ``head_dim``: the key width of the memory."""
    return FEATURE_MAPS[name][1](head_dim)
