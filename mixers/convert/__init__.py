"""Published layers ↔ assocmem layers, weight for weight.

    ours = from_hf(module)           # an assocmem mixer equal to a transformers layer (same dtype, device)
    to_hf(ours, module)              # write an assocmem mixer's weights into a transformers layer
    spec, d_model = spec_from_hf(module)

One converter per family (``CONVERTERS``, keyed by the transformers class name), each a
pair of state-dict maps that are exact inverses of each other (row permutations and
reshapes, no arithmetic), so ``to_hf(from_hf(m), m)`` gives back ``m``'s tensors bit for
bit. Where the published layer computes something our layer cannot express, the
converter refuses with the attribute and its supported values.

Tested, weight-mapped, in tests/layers/: outputs and input gradients at float64 against
the reference re-typed to float64 (``mixers/retype.py``), float32 against the reference
as published, and prefill + decode through both caches.
"""
from __future__ import annotations

import torch.nn as nn

from ..layer import build_mixer
from ..spec import MixerSpec
from . import attention, gated_deltanet, kda, latent_attention, mamba, mamba2
from .common import LayerConverter

CONVERTERS: dict[str, LayerConverter] = {
    c.hf_class: c for c in (gated_deltanet.CONVERTER, kda.CONVERTER, mamba.CONVERTER, mamba2.CONVERTER,
                            latent_attention.CONVERTER, *attention.CONVERTERS)}

__all__ = ["CONVERTERS", "LayerConverter", "from_hf", "spec_from_hf", "to_hf"]


def _converter(module: nn.Module) -> LayerConverter:
    name = type(module).__name__
    if name not in CONVERTERS:
        raise ValueError(f"no converter for {name}; supported transformers layers: {sorted(CONVERTERS)}")
    return CONVERTERS[name]


def spec_from_hf(module: nn.Module) -> tuple[MixerSpec, int]:
    """The MixerSpec and d_model of the assocmem layer equal to ``module``."""
    return _converter(module).spec(module)


def from_hf(module: nn.Module, *, form: str = "auto") -> nn.Module:
    """A new assocmem mixer computing what ``module`` computes, with its weights (copied)."""
    conv = _converter(module)
    spec, d_model = conv.spec(module)
    weight = next(module.parameters())
    ours = build_mixer(spec, d_model, form=form).to(dtype=weight.dtype, device=weight.device)
    ours.load_state_dict(conv.to_ours(module.state_dict(), spec), strict=True)
    return ours


def to_hf(ours: nn.Module, module: nn.Module) -> nn.Module:
    """Write ``ours``' weights into the transformers layer ``module`` (same shapes; returns ``module``)."""
    conv = _converter(module)
    spec, d_model = conv.spec(module)
    if _computation(ours.spec) != _computation(spec):
        raise ValueError(f"the assocmem layer ({ours.spec.name}: {_computation(ours.spec)}) does not compute what "
                         f"the {type(module).__name__} computes ({_computation(spec)}); convert a layer built "
                         f"with spec_from_hf(module)")
    module.load_state_dict(conv.to_hf(ours.state_dict(), spec), strict=True)
    return module


def _computation(spec: MixerSpec) -> dict:
    """What a spec computes: everything but its label and the chunk size (which only changes rounding)."""
    data = spec.model_dump(exclude={"name"})
    data["layer"].pop("chunk_size")
    return data
