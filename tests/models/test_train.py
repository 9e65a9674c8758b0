"""A model built from a user-defined spec trains (loss decreases) and decodes."""
from __future__ import annotations

import torch

from assocmem.memories import L2, Huber, L2Decay, Matrix, RetainThenGD
from assocmem.mixers import LayerOptions, MixerSpec
from assocmem.models import HybridConfig, build_model


def _counting_task(B: int, T: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Sequences s, s+1, s+2, ... (mod vocab) from a random start s."""
    start = torch.randint(0, vocab, (B, 1), generator=gen)
    return (start + torch.arange(T)) % vocab


def _train(model, steps: int, vocab: int) -> list[float]:
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        x = _counting_task(8, 16, vocab, gen)
        loss = model(x, labels=x, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_user_spec_model_trains_and_decodes():
    mine = MixerSpec(name="my_delta", memory=Matrix(), bias=L2(), retention=L2Decay(gate="scalar"),
                     optimizer=RetainThenGD(), layer=LayerOptions(num_heads=2, head_dim=16, qk_norm="l2",
                                                                  lr_gate="sigmoid"))
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=32, vocab_size=32, layers=[mine, "attn"], num_heads=2, mlp_ratio=2))
    model.train()
    losses = _train(model, 30, 32)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses
    model.eval()
    prompt = torch.tensor([[3, 7, 11, 5]])
    out = model.generate(prompt, max_new_tokens=4, do_sample=False)
    with torch.no_grad():
        seq = prompt
        for _ in range(4):
            seq = torch.cat([seq, model(seq, use_cache=False).logits[:, -1:].argmax(-1)], 1)
    assert out.tolist() == seq.tolist()


def test_scan_class_user_spec_trains():
    """A spec with no parallel form (Huber bias) trains through the derived recurrent step."""
    mine = MixerSpec(name="my_huber", memory=Matrix(), bias=Huber(delta=0.5), retention=L2Decay(gate="scalar"),
                     optimizer=RetainThenGD(), layer=LayerOptions(num_heads=2, head_dim=8, qk_norm="l2",
                                                                  lr_gate="sigmoid"))
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=16, vocab_size=16, layers=[mine], n_layers=1, mlp_ratio=0,
                                     forms={"my_huber": "recurrent"}))
    losses = _train(model, 8, 16)
    assert losses[-1] < losses[0], losses
