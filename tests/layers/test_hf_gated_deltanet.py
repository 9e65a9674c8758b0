"""The gated_deltanet preset equals transformers' Qwen3NextGatedDeltaNet, weight for weight.

float64: the reference re-typed to float64 (its float32 casts renamed, mixers/retype.py), held to 1e-10
on outputs, input gradients and every parameter gradient. float32: the reference as published, at
assert_close's float32 tolerances. Decode: prefill + one token at a time through its cache and ours.
"""
from __future__ import annotations

import pytest
import torch

from layer_helpers import compare, randomize_, relative_error
from assocmem.mixers import MixerSpec
from assocmem.mixers.convert import from_hf, spec_from_hf, to_hf
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.retype import float64_retyped

qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
from transformers import DynamicCache, Qwen3NextConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
D, K, V = 32, 8, 6
SHAPES = {"heads 2/2": (2, 2), "grouped values 2/4": (2, 4)}


def reference(hk: int, hv: int, dtype=torch.float64, seed: int = 0):
    cfg = Qwen3NextConfig(hidden_size=D, linear_num_key_heads=hk, linear_num_value_heads=hv, linear_key_head_dim=K,
                          linear_value_head_dim=V, num_hidden_layers=1, layer_types=["linear_attention"])
    return randomize_(qwen3_next.Qwen3NextGatedDeltaNet(cfg, 0).to(dtype), seed), cfg


@pytest.mark.parametrize("heads", SHAPES.values(), ids=SHAPES.keys())
def test_float64_outputs_and_gradients(heads):
    ref, _ = reference(*heads)
    ours = from_hf(ref)
    x = torch.randn(2, 37, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with float64_retyped(qwen3_next):
        errors = compare(ref, ref, ours, lambda t: ours(t)[0], x)
    assert len(errors) == 2 + 7  # output, grad x, 7 parameters
    assert max(errors.values()) <= 1e-10, errors


@pytest.mark.parametrize("heads", SHAPES.values(), ids=SHAPES.keys())
def test_float32_against_the_published_layer(heads):
    ref, _ = reference(*heads, dtype=torch.float32)
    ours = from_hf(ref)
    x = torch.randn(2, 37, D, generator=torch.Generator().manual_seed(2))
    errors = compare(ref, ref, ours, lambda t: ours(t)[0], x, relative=True)
    assert max(errors.values()) <= 1e-5, errors  # relative to each tensor's largest entry
    torch.testing.assert_close(ours(x)[0], ref(x))


def test_prefill_then_decode_equals_the_reference_cache_path():
    ref, cfg = reference(2, 4)
    ours = from_hf(ref)
    x = torch.randn(2, 21, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with float64_retyped(qwen3_next), torch.no_grad():
        cache = DynamicCache(config=cfg)
        theirs = [ref(x[:, :16], cache=cache)] + [ref(x[:, t:t + 1], cache=cache) for t in range(16, 21)]
        y, state = ours(x[:, :16])
        mine = [y]
        for t in range(16, 21):
            y, state = ours(x[:, t:t + 1], state=state)
            mine.append(y)
    torch.testing.assert_close(torch.cat(mine, 1), torch.cat(theirs, 1), atol=1e-10, rtol=0)
    torch.testing.assert_close(state.memory, cache.get_recurrent_state(0), atol=1e-10, rtol=0)
    w = ours.conv.size - 1  # the reference keeps the last `size` inputs, we keep the last size − 1
    torch.testing.assert_close(state.conv, cache.get_conv_state(0)[..., -w:].transpose(1, 2), atol=0, rtol=0)


@pytest.mark.parametrize("heads", SHAPES.values(), ids=SHAPES.keys())
def test_weights_round_trip_bit_for_bit(heads):
    ref, _ = reference(*heads)
    back = to_hf(from_hf(ref), reference(*heads, seed=9)[0])
    for (name, a), (_, b) in zip(ref.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name


def test_the_old_double_silu_layer_differs():
    """The preset before the fix (feature_map='silu' after the conv's SiLU) is another function: the
    comparison above would have caught it."""
    ref, _ = reference(2, 2)
    spec, d = spec_from_hf(ref)
    data = spec.model_dump()
    data["layer"]["feature_map"] = "silu"
    old = build_mixer(MixerSpec.model_validate(data), d).double()
    old.load_state_dict(from_hf(ref).state_dict())
    x = torch.randn(2, 37, D, dtype=torch.float64)
    with torch.no_grad(), float64_retyped(qwen3_next):
        assert relative_error(old(x)[0], ref(x)) > 0.1


def test_refuses_what_it_cannot_compute():
    ref, _ = reference(2, 2)
    ref.activation = "gelu"
    with pytest.raises(ValueError, match="activation = 'gelu' is not supported.*supported: 'silu'"):
        from_hf(ref)
    other, _ = reference(2, 4)
    with pytest.raises(ValueError, match="does not compute what"):
        to_hf(build_mixer(MixerSpec.model_validate({**spec_from_hf(other)[0].model_dump(), "optimizer": {"kind": "gd"}}),
                          D), other)
