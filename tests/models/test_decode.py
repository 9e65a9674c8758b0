"""Incremental decoding and padding: every mixer type and hybrids, float64.

prefill + token-by-token decode == one full forward (atol 1e-8); left- or
right-padded batches with an attention mask == the unpadded sequences.
"""
from __future__ import annotations

import pytest
import torch

from assocmem.memories import Window
from assocmem.mixers import MixerSpec, get_preset
from assocmem.models import AssocMemCache, HybridConfig, build_model, output_cache

TOL = dict(atol=1e-8, rtol=0)
VOCAB = 64
SWA5 = MixerSpec.model_validate({**get_preset("sliding_window").model_dump(), "name": "swa5",
                                 "retention": Window(size=5).model_dump()})
SCA_SMALL = {"sca": {"num_heads": 2, "sca": {"expand": 1.0, "maxlen": 16}}}

MODELS = {  # id -> HybridConfig kwargs
    "attn": dict(layers="attn", n_layers=2),
    "swa5": dict(layers=[SWA5, SWA5]),
    "gdn": dict(layers="gdn", n_layers=2),
    "mamba2": dict(layers="mamba2", n_layers=2),
    "mamba": dict(layers="mamba", n_layers=2),
    "gla": dict(layers="gla"),
    "retnet": dict(layers="retnet"),
    "linear_attention": dict(layers="linear_attention"),
    "deltanet": dict(layers="deltanet"),
    "longhorn": dict(layers="longhorn"),
    "gdn_joint": dict(layers="gated_deltanet_joint"),
    "sca": dict(layers="sca", n_layers=2, overrides=SCA_SMALL),
    "huber_delta": dict(layers="huber_delta", forms={"huber_delta": "recurrent"}),
    "titans_linear": dict(layers="titans_linear", forms={"titans_linear": "recurrent"}),
    "gdn*3,attn": dict(layers="gdn*3,attn"),
    "sca,sca,attn": dict(layers="sca,sca,attn", overrides=SCA_SMALL, mlp_layers="attention"),
    "mamba2,swa5": dict(layers=["mamba2", SWA5]),
    "mamba,attn": dict(layers="mamba,attn"),
    "mla": dict(layers="mla", n_layers=2, overrides={"mla": {"attention": {"latent": {"kv_rank": 12, "rope_dim": 4}}}}),
    "gdn*3,mla": dict(layers="gdn*3,mla"),
}


def tiny(key: str):
    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, num_heads=2, mlp_ratio=2.0, **MODELS[key])
    return build_model(hc, dtype=torch.float64).eval()


def ids(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("key", list(MODELS))
@torch.no_grad()
def test_prefill_then_decode_equals_full(key):
    model = tiny(key)
    x = ids(2, 12)
    full = model(x, use_cache=False).logits
    out = model(x[:, :8])
    cache, pieces = output_cache(out), [out.logits]
    for t in range(8, 12):
        out = model(x[:, t:t + 1], cache=cache)
        pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, **TOL)
    assert cache.get_seq_length() == 12


PAD_MODELS = ["attn", "swa5", "gdn", "mamba2", "mamba", "sca", "titans_linear", "gdn*3,attn", "sca,sca,attn", "mla"]


def _padded(rows: list[torch.Tensor], side: str, T: int):
    batch = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(T - len(r), T) if side == "left" else slice(0, len(r))
        batch[i, sl], mask[i, sl] = r, 1
    return batch, mask


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("key", PAD_MODELS)
@torch.no_grad()
def test_padded_batch_equals_unpadded(key, side):
    """Logits at real positions, and three decode steps after the prompt, equal each row alone."""
    model = tiny(key)
    rows = [ids(1, n, seed=n)[0] for n in (7, 4, 6)]
    batch, mask = _padded(rows, side, 7)
    out = model(batch, attention_mask=mask)
    nxt = ids(3, 3, seed=9)
    cache, step_logits = output_cache(out), []
    for t in range(3):
        mask = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
        step_logits.append(model(nxt[:, t:t + 1], attention_mask=mask, cache=cache).logits)
    for i, r in enumerate(rows):
        ref = model(torch.cat([r, nxt[i]])[None], use_cache=False).logits[0]
        real = out.logits[i, 7 - len(r):] if side == "left" else out.logits[i, :len(r)]
        torch.testing.assert_close(real, ref[:len(r)], **TOL)
        torch.testing.assert_close(torch.cat([s[i] for s in step_logits]), ref[len(r):], **TOL)


@pytest.mark.parametrize("key", ["gdn*3,attn", "sca,sca,attn", "mamba,attn", "gdn*3,mla"])
def test_generate_left_padded_equals_each_row(key):
    model = tiny(key)
    rows = [ids(1, n, seed=n)[0] for n in (6, 3)]
    batch, mask = _padded(rows, "left", 6)
    got = model.generate(batch, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
    for i, r in enumerate(rows):
        alone = model.generate(r[None], max_new_tokens=5, do_sample=False, pad_token_id=0)
        assert got[i, 6:].tolist() == alone[0, len(r):].tolist()


def test_middle_padding_is_rejected_for_recurrent_layers():
    model = tiny("gdn")
    mask = torch.tensor([[1, 0, 1, 1]])
    with pytest.raises(ValueError, match="one contiguous run"):
        model(ids(1, 4), attention_mask=mask)


def test_decode_state_is_constant_size_for_recurrent_layers():
    """Recurrent caches do not grow with the prefix; attention caches grow by one pair per token."""
    model = tiny("gdn*3,attn")
    cache = output_cache(model(ids(1, 5)))
    before = [[t.shape for t in _tensors(cache[i])] for i in range(4)]
    model(ids(1, 1), cache=cache)
    after = [[t.shape for t in _tensors(cache[i])] for i in range(4)]
    assert before[:3] == after[:3]
    assert after[3][0][2] == before[3][0][2] + 1  # keys [B, Hkv, N, K]: N grew by one
    assert isinstance(cache, AssocMemCache)


def _tensors(state):
    from assocmem.models.blocks import state_tensors

    return state_tensors(state)
