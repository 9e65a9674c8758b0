"""Learned absolute positions, blocks without norms and the ReLU MLP: together they are the one-layer
transformer of Nanda et al. 2023, checked against its forward pass written as in their code."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from assocmem.models import HybridConfig, build_model, output_cache

P, D, HEADS, MLP = 11, 16, 4, 24


def nanda_config(**change) -> HybridConfig:
    fields = dict(d_model=D, vocab_size=P + 1, layers="attn", num_heads=HEADS, overrides={"attn": {"attention": {"rope": False}}},
                  mlp_kind="relu", mlp_hidden=MLP, block_norm="none", position_embedding="learned", max_positions=4,
                  tie_embeddings=False, init_std=D ** -0.5)
    return HybridConfig(**{**fields, **change})


def nanda_forward(model, x: torch.Tensor) -> torch.Tensor:
    """The forward pass of progress-measures-paper's ``Transformer`` (Nanda et al. 2023, transformers.py:
    Embed, PosEmbed, Attention, MLP, Unembed; use_ln=False), written with its einsums, reading our weights
    in their layout: W_E [d, vocab], W_pos [ctx, d], W_Q/W_K/W_V [heads, d_head, d], W_O [d, heads·d_head],
    W_in [d_mlp, d], W_out [d, d_mlp], W_U [d, vocab]."""
    m, block = model.model, model.model.layers[0]
    attn, mlp = block.mixer, block.mlp
    d_head = D // HEADS
    W_E, W_pos = m.embed_tokens.weight.T, m.embed_positions.weight
    W_Q, W_K, W_V = (w.weight.view(HEADS, d_head, D) for w in (attn.q_proj, attn.k_proj, attn.v_proj))
    W_O, W_U = attn.o_proj.weight, model.lm_head.weight.T
    h = torch.einsum("dbp -> bpd", W_E[:, x]) + W_pos[:x.shape[-1]]
    k = torch.einsum("ihd,bpd->biph", W_K, h)
    q = torch.einsum("ihd,bpd->biph", W_Q, h)
    v = torch.einsum("ihd,bpd->biph", W_V, h)
    scores = torch.einsum("biph,biqh->biqp", k, q)
    n = x.shape[-1]
    mask = torch.tril(torch.ones(n, n, dtype=h.dtype))
    scores = torch.tril(scores) - 1e10 * (1 - mask)
    pattern = F.softmax(scores / math.sqrt(d_head), dim=-1)
    z = torch.einsum("biph,biqp->biqh", v, pattern)
    h = h + torch.einsum("df,bqf->bqd", W_O, z.permute(0, 2, 1, 3).reshape(x.shape[0], n, HEADS * d_head))
    pre = torch.einsum("md,bpd->bpm", mlp.up_proj.weight, h) + mlp.up_proj.bias
    h = h + torch.einsum("dm,bpm->bpd", mlp.down_proj.weight, F.relu(pre)) + mlp.down_proj.bias
    return h @ W_U


def _model():
    torch.manual_seed(0)
    model = build_model(nanda_config()).double().eval()
    with torch.no_grad():                                   # nonzero biases, so they are checked too
        for block in model.model.layers:
            block.mlp.up_proj.bias.normal_()
            block.mlp.down_proj.bias.normal_()
    return model


def test_the_nanda_layout_equals_their_forward_pass():
    model = _model()
    x = torch.randint(0, P, (5, 3), generator=torch.Generator().manual_seed(1))
    x[:, 2] = P                                             # [a, b, =]
    ours = model(x).logits
    torch.testing.assert_close(ours, nanda_forward(model, x), atol=1e-12, rtol=0)
    names = {n for n, _ in model.named_parameters()}
    assert "model.embed_positions.weight" in names and not any("norm" in n for n in names)
    assert {"model.layers.0.mlp.up_proj.bias", "model.layers.0.mlp.down_proj.bias"} <= names


def test_learned_positions_decode_equals_the_full_forward():
    model = _model()
    x = torch.randint(0, P + 1, (3, 4), generator=torch.Generator().manual_seed(2))
    full = model(x).logits
    out = model(x[:, :2], use_cache=True)
    steps = [out.logits]
    cache = output_cache(out)
    for t in (2, 3):
        out = model(x[:, t:t + 1], cache=cache, use_cache=True)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=0)
    assert (model(x[:, :2]).logits - full[:, :2]).abs().max() < 1e-12
    with torch.no_grad():
        model.model.embed_positions.weight[3] += 1.0             # the table is what sets position 3
    assert (model(x).logits[:, 3] - full[:, 3]).abs().max() > 1e-3
    torch.testing.assert_close(model(x).logits[:, :3], full[:, :3], atol=0, rtol=0)


def test_learned_positions_refuse_padding_and_positions_past_the_table():
    model = _model()
    x = torch.randint(0, P, (2, 5))
    with pytest.raises(ValueError, match=r"exceed the learned position table \(max_positions=4\)"):
        model(x)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="padded batch"):
        model(x[:, :3], attention_mask=mask)
    with pytest.raises(ValueError, match="needs max_positions"):
        nanda_config(max_positions=None)
    with pytest.raises(ValueError, match="only used with position_embedding: learned"):
        nanda_config(position_embedding="none")


def test_defaults_keep_the_existing_layout():
    cfg = HybridConfig(d_model=16, vocab_size=32, layers="gdn,attn", num_heads=2)
    assert (cfg.position_embedding, cfg.block_norm, cfg.mlp_kind, cfg.max_positions) == ("none", "rmsnorm",
                                                                                          "swiglu", None)
    names = {n for n, _ in build_model(cfg).named_parameters()}
    assert "model.embed_positions.weight" not in names and "model.norm.weight" in names
    assert "model.layers.0.mlp.gate_proj.weight" in names
    old = {k: v for k, v in cfg.model_dump(mode="json").items()
           if k not in ("position_embedding", "max_positions", "block_norm", "mlp_kind")}
    assert HybridConfig.model_validate(old) == cfg               # configs saved before these fields still load
