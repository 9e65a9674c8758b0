"""The converter record shared by the per-family files, and small checks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from ..spec import MixerSpec

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LayerConverter:
    """How one transformers layer class maps onto an assocmem layer.

    spec(module) -> (MixerSpec, d_model); to_ours / to_hf map state dicts and are exact inverses."""

    hf_class: str
    spec: Callable[[nn.Module], tuple[MixerSpec, int]]
    to_ours: Callable[[StateDict, MixerSpec], StateDict]
    to_hf: Callable[[StateDict, MixerSpec], StateDict]


_ATTRIBUTE = object()


def require(module: nn.Module, attr: str, allowed, value=_ATTRIBUTE) -> None:
    """Refuse a published layer whose ``attr`` (or the ``value`` given for it) is one our layer does not compute."""
    value = getattr(module, attr) if value is _ATTRIBUTE else value
    if value not in allowed:
        raise ValueError(f"{type(module).__name__}.{attr} = {value!r} is not supported by the assocmem layer; "
                         f"supported: {', '.join(sorted(map(repr, allowed)))}")


def expand_ratio(module: nn.Module, head_dim: int, value_dim: int) -> float:
    """LayerOptions.expand_v for V = value_dim at K = head_dim, checked to round-trip through int(K · e)."""
    ratio = value_dim / head_dim
    if int(head_dim * ratio) != value_dim:
        raise ValueError(f"{type(module).__name__}: value head width {value_dim} is not int(K · {ratio}) at "
                         f"K = {head_dim}; choose widths whose ratio is exact in floating point")
    return ratio
