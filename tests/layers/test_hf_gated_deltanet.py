"""Gated DeltaNet specifics beyond the shared layer pairs (tests/layers/test_layer_pairs.py)."""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers import MixerSpec
from assocmem.mixers.convert import from_hf, spec_from_hf, to_hf
from assocmem.mixers.convert.cases import LAYER_CASES
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.retype import float64_retyped
from assocmem.mixers.verify_layers import build_reference

pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
CASE = LAYER_CASES["Qwen3NextGatedDeltaNet (Hk=2, Hv=2)"]


def test_the_old_double_silu_layer_differs():
    """The preset before the fix (feature_map='silu' after the conv's SiLU) is another function, which the
    float64 pair would have caught."""
    ref = build_reference(CASE, torch.float64, 0).layer
    spec, d = spec_from_hf(ref)
    data = spec.model_dump()
    data["layer"]["feature_map"] = "silu"
    old = build_mixer(MixerSpec.model_validate(data), d).double()
    old.load_state_dict(from_hf(ref).state_dict())
    x = torch.randn(2, 37, d, dtype=torch.float64)
    with torch.no_grad(), float64_retyped(CASE.module()):
        want = ref(x)
        assert float((old(x)[0] - want).abs().max() / want.abs().max()) > 0.1
        assert float((from_hf(ref)(x)[0] - want).abs().max()) < 1e-12


def test_refuses_what_it_cannot_compute():
    ref = build_reference(CASE, torch.float64, 0).layer
    ref.activation = "gelu"
    with pytest.raises(ValueError, match="activation = 'gelu' is not supported.*supported: 'silu'"):
        from_hf(ref)
    other = build_reference(CASE, torch.float64, 0).layer
    joint = MixerSpec.model_validate({**spec_from_hf(other)[0].model_dump(), "optimizer": {"kind": "gd"}})
    with pytest.raises(ValueError, match="does not compute what"):
        to_hf(build_mixer(joint, 32), other)
