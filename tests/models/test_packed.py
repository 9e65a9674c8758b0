"""Packed documents (cu_seqlens) and the FLA-style layer adapter: equal to running the documents one
by one, no leakage across a boundary, padding and the cache honoured."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from assocmem.mixers.presets import get_preset
from assocmem.models import HybridConfig, build_model
from assocmem.models.blocks import state_tensors
from assocmem.models.fla_layer import FLAStyleLayer

D = 32
LENGTHS = [5, 9, 5, 3, 9]  # two pairs of equal length: batched groups as well as single documents
CU = torch.tensor([0, 5, 14, 19, 22, 31])
EXACT = dict(atol=1e-12, rtol=0)


def layer(preset: str, seed=0) -> FLAStyleLayer:
    torch.manual_seed(seed)
    spec = get_preset(preset)
    spec = spec.model_copy(update={"layer": spec.layer.model_copy(update={"num_heads": 2})})
    return FLAStyleLayer.from_spec(spec, D, layer_idx=1).double()


def packed(seed=1):
    return torch.randn(1, int(CU[-1]), D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("preset", ["gated_deltanet", "mamba2", "mamba", "softmax", "mla", "sca", "retnet"])
def test_packed_documents_equal_one_by_one(preset):
    m = layer(preset)
    x = packed()
    if preset in ("softmax", "mla"):  # keys and values (mla: latents) grow with the document: no one state of a row per document
        with pytest.raises(ValueError, match="differ in size"):
            m(x, cu_seqlens=CU, use_cache=True)
        o, cache = m(x, cu_seqlens=CU)[0], None
        for a, b in zip(CU[:-1].tolist(), CU[1:].tolist()):
            assert_close(o[:, a:b], m(x[:, a:b])[0], **EXACT)
        return
    o, attn, cache = m(x, cu_seqlens=CU, use_cache=True)
    assert attn is None and cache is not None
    states = state_tensors(cache[1])
    assert all(t.shape[0] == len(LENGTHS) for t in states)
    for i, (a, b) in enumerate(zip(CU[:-1].tolist(), CU[1:].tolist())):
        want, _, alone = m(x[:, a:b], use_cache=True)
        assert_close(o[:, a:b], want, **EXACT)
        for got_t, want_t in zip(states, state_tensors(alone[1])):
            assert_close(got_t[i:i + 1], want_t, **EXACT)


@pytest.mark.parametrize("preset", ["gated_deltanet", "mamba", "softmax", "sca"])
def test_no_leak_across_documents(preset):
    """Changing document 2 changes nothing outside it (and does change it)."""
    m = layer(preset)
    x = packed()
    y = x.clone()
    y[:, 5:14] = torch.randn(1, 9, D, dtype=torch.float64)
    ox, oy = m(x, cu_seqlens=CU)[0], m(y, cu_seqlens=CU)[0]
    outside = torch.ones(31, dtype=torch.bool)
    outside[5:14] = False
    assert torch.equal(ox[:, outside], oy[:, outside])
    assert (ox[:, 5:14] - oy[:, 5:14]).abs().max() > 1e-3


@pytest.mark.parametrize("preset", ["gated_deltanet", "softmax", "sca"])
def test_adapter_padding_and_cache(preset):
    """Left padding via attention_mask equals the unpadded rows; prefill + one step through the cache
    equals the full sequence."""
    m = layer(preset)
    x = packed()[:, :8].expand(2, 8, D).clone()
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0
    o = m(x, attention_mask=mask)[0]
    assert_close(o[0:1, 3:], m(x[0:1, 3:])[0], **EXACT)
    if not m.mixer.masks_padding:  # recurrent rows skip their padding (attention's padded outputs are unused)
        assert torch.equal(o[0, :3], torch.zeros(3, D, dtype=torch.float64))
    full = m(x[1:])[0]
    _, _, cache = m(x[1:, :7], use_cache=True)
    step, _, cache = m(x[1:, 7:], past_key_values=cache, use_cache=True)
    assert_close(step, full[:, 7:], **EXACT)


def test_adapter_refusals():
    m = layer("gated_deltanet")
    with pytest.raises(ValueError, match="increase strictly from 0 to the packed length 31"):
        m(packed(), cu_seqlens=torch.tensor([0, 5, 5, 31]))
    with pytest.raises(ValueError, match="one row"):
        m(packed().expand(2, 31, D), cu_seqlens=CU)
    with pytest.raises(ValueError, match="not both"):
        m(packed(), cu_seqlens=CU, attention_mask=torch.ones(1, 31))
    with pytest.raises(TypeError, match="must be an AssocMemCache"):
        m(packed(), past_key_values={})


def test_model_with_cu_seqlens_equals_documents_one_by_one():
    """Logits equal each document's own forward; the loss equals the token-weighted mean of the
    per-document losses (no prediction across a boundary)."""
    torch.manual_seed(0)
    model = build_model(HybridConfig(layers="gdn,sca,attn", d_model=D, vocab_size=40, num_heads=2,
                                     overrides={"sca": {"num_heads": 2}}), dtype=torch.float64).eval()
    ids = torch.randint(0, 40, (1, 31), generator=torch.Generator().manual_seed(3))
    out = model(ids, labels=ids, cu_seqlens=CU)
    total, count = 0.0, 0
    for a, b in zip(CU[:-1].tolist(), CU[1:].tolist()):
        alone = model(ids[:, a:b]).logits
        assert_close(out.logits[:, a:b], alone, **EXACT)
        total = total + F.cross_entropy(alone[0, :-1], ids[0, a + 1:b], reduction="sum")
        count += b - a - 1
    assert_close(out.loss, total / count, atol=1e-13, rtol=0)
    with pytest.raises(ValueError, match=r"cannot be combined with \['attention_mask'\]"):
        model(ids, attention_mask=torch.ones(1, 31), cu_seqlens=CU)
