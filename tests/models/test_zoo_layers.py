"""The new mixers as layers of a hybrid: recurrent depth, RWKV-7 (Table 2.1 and DPLR), Hedgehog
(normalised), ℓ1 retention. Each trains, decodes with the cache equal to the full forward, and the
model is causal bit for bit (the mixer-level causality probe runs on every preset in
tests/probes/test_causality.py)."""
from __future__ import annotations

import pytest
import torch

from assocmem.models import HybridConfig, build_model, output_cache
from assocmem.probes.causality import model_causality

NEW = ["gated_deltanet_steps3", "huber_delta_steps3", "rwkv7", "rwkv7_dplr", "hedgehog", "l1_deltanet"]
FORMS = {"l1_deltanet": "recurrent", "huber_delta_steps3": "recurrent"}  # class scan: the uncompiled derived step (the compiled one is slow to build)
VOCAB = 32


def tiny(name: str, dtype=torch.float32):
    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, layers=[name, "attn"], num_heads=2, mlp_ratio=2.0,
                      forms={k: v for k, v in FORMS.items() if k == name})
    return build_model(hc, dtype=dtype)


def _counting(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    start = torch.randint(0, VOCAB, (B, 1), generator=gen)
    return (start + torch.arange(T)) % VOCAB


@pytest.mark.parametrize("name", NEW)
def test_trains(name):
    model = tiny(name).train()
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        x = _counting(8, 12, gen)
        loss = model(x, labels=x, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-4:]) / 4 < 0.6 * sum(losses[:4]) / 4, losses


@pytest.mark.parametrize("name", NEW)
@torch.no_grad()
def test_prefill_then_decode_equals_full(name):
    model = tiny(name, torch.float64).eval()
    x = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    full = model(x, use_cache=False).logits
    out = model(x[:, :7])
    cache, pieces = output_cache(out), [out.logits]
    for t in range(7, 11):
        out = model(x[:, t:t + 1], cache=cache)
        pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", NEW)
def test_model_is_causal(name):
    model = tiny(name, torch.float64).eval()
    ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(2))
    report = model_causality(model, ids)
    assert report.causal and report.max_leak == 0.0
