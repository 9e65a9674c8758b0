"""Parallel hybrids (thesis Fig. A.4, mixers/parallel.py): `par(gdn,attn)` splits a layer's heads.

The layer equals its branches run alone (outputs added = head outputs concatenated through the
stacked output maps), prefill + decode equals the full forward, padding gives the unpadded rows,
the model is causal, it trains, and a head split that does not divide is refused at construction."""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers import get_preset
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.parallel import ParallelMixer, ParallelSpec, ParallelState, build_layer
from assocmem.models import HybridConfig, build_model, output_cache
from assocmem.models.blocks import run_mixer
from assocmem.probes.causality import mixer_causality, model_causality
from assocmem.probes.recall import model_state_size

VOCAB = 32


def tiny(layers: str, dtype=torch.float32, num_heads: int = 4):
    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, layers=layers, num_heads=num_heads, mlp_ratio=2.0)
    return build_model(hc, dtype=dtype)


def _branch(name: str, heads: int, head_dim: int = 8):
    spec = get_preset(name)
    return spec.model_copy(update={"layer": spec.layer.model_copy(update={"num_heads": heads, "head_dim": head_dim})})


# ---------------------------------------------------------------- the pattern and the head split
def test_pattern_splits_the_heads():
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, layers="par(gdn*3, attn),gdn", num_heads=8, mlp_ratio=0)
    par, gdn = hc.layer_specs()
    assert isinstance(par, ParallelSpec) and par.name == "par(gdn*3,attn)"
    assert [(b.name, b.layer.num_heads, b.layer.head_dim) for b in par.branches] == [
        ("gated_deltanet", 6, 4), ("softmax", 2, 4)]
    assert (gdn.layer.num_heads, gdn.layer.head_dim) == (8, 4)
    assert [s.name for s in hc.mixer_specs()] == ["gated_deltanet", "softmax", "gated_deltanet"]
    assert HybridConfig(d_model=32, vocab_size=VOCAB, layers="par(gdn,attn)*2,gdn").depth == 3


def test_forms_and_overrides_reach_the_branches():
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, layers="par(gdn,attn)", num_heads=4, forms={"gdn": "recurrent"},
                      overrides={"attn": {"attention": {"rope": False}}})
    assert hc.layer_forms() == [("recurrent", "auto")]
    assert hc.layer_specs()[0].branches[1].layer.attention.rope is False


@pytest.mark.parametrize("kw, match", [
    (dict(layers="par(gdn*2,attn)", num_heads=4), r"3 equal shares, which does not divide num_heads=4.*\[3, 6, 9, 12\]"),
    (dict(layers="par(gdn)", num_heads=4), r"needs at least 2"),
    (dict(layers="par(gdn,nope)", num_heads=4), r"unknown layer name 'nope'"),
    (dict(layers="par(gdn,attn*0)", num_heads=4), r"head share must be >= 1"),
    (dict(layers="par(gdn,attn", num_heads=4), r"unbalanced '\('"),
    (dict(layers="par(par(gdn,attn),gdn)", num_heads=4), r"bad layer pattern token"),
    (dict(layers="par(gdn,attn)", num_heads=4, forms={"par(gdn,attn)": "chunk"}), r"forms name layers"),
])
def test_bad_parallel_layers_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        HybridConfig(d_model=32, vocab_size=VOCAB, **kw)


def test_parallel_spec_needs_two_branches_and_round_trips():
    with pytest.raises(ValueError, match="at least 2 branches"):
        ParallelSpec(branches=[_branch("gdn", 2)])
    spec = ParallelSpec(name="mine", branches=[_branch("gdn", 2), _branch("attn", 2)])
    hc = HybridConfig(d_model=32, vocab_size=VOCAB, layers=[spec.model_dump(mode="json"), "gdn"], num_heads=4)
    assert hc.layer_specs()[0] == spec
    assert HybridConfig.from_yaml(hc.to_yaml()).layer_specs() == hc.layer_specs()


# ---------------------------------------------------------------- equals the branches run alone
@torch.no_grad()
def test_equals_the_branches_alone_and_concatenated():
    """y = y_gdn + y_attn of the same modules run alone = [o_gdn, o_attn] · [W_o^gdn; W_o^attn]."""
    torch.manual_seed(0)
    spec = ParallelSpec(branches=[_branch("gdn", 2), _branch("attn", 2)])
    par = build_layer(spec, 32, run=run_mixer).double()
    gdn, attn = par.branches
    x = torch.randn(2, 13, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y, state = par(x)
    y_gdn, s_gdn = gdn(x)
    y_attn, s_attn = attn(x)
    assert torch.equal(y, y_gdn + y_attn)
    assert isinstance(state, ParallelState)
    torch.testing.assert_close(state.branches[0].memory, s_gdn.memory, atol=0, rtol=0)
    torch.testing.assert_close(state.branches[1].keys, s_attn.keys, atol=0, rtol=0)
    # the head outputs (inputs of each branch's output map), concatenated along the heads
    heads = {}
    hooks = [m.o_proj.register_forward_hook(lambda mod, inp, out, n=n: heads.__setitem__(n, inp[0]))
             for n, m in (("gdn", gdn), ("attn", attn))]
    par(x)
    for h in hooks:
        h.remove()
    assert heads["gdn"].shape[-1] == 2 * 8 and heads["attn"].shape[-1] == 2 * 8
    concat = torch.cat([heads["gdn"], heads["attn"]], -1)  # [B, T, (H_gdn + H_attn)·V]
    w_o = torch.cat([gdn.o_proj.weight, attn.o_proj.weight], 1)  # [d_model, (H_gdn + H_attn)·V]
    torch.testing.assert_close(concat @ w_o.T, y, atol=1e-12, rtol=0)


def test_parallel_mixer_refuses_a_foreign_state():
    par = ParallelMixer([build_mixer(_branch("gdn", 2), 32), build_mixer(_branch("attn", 2), 32)], run=run_mixer)
    with pytest.raises(TypeError, match="ParallelState of 2 branch states"):
        par(torch.randn(1, 3, 32), state=(None, None))
    with pytest.raises(ValueError, match="at least 2 branches"):
        ParallelMixer([build_mixer(_branch("gdn", 2), 32)], run=run_mixer)


def test_state_size_counts_each_branch_once():
    model = tiny("par(gdn,attn),gdn")
    par, gdn = model.model.layers[0].mixer, model.model.layers[1].mixer
    g, a = par.branches
    assert par.state_size(10) == g.state_size() + a.state_size(10) > 0
    assert model_state_size(model, seq_len=10) == par.state_size(10) + gdn.state_size()


# ---------------------------------------------------------------- in a model: decode, padding, causality, training
LAYERS = ["par(gdn,attn),gdn", "par(gdn,swa),attn", "par(rwkv7,hedgehog)"]


@pytest.mark.parametrize("layers", LAYERS)
@torch.no_grad()
def test_prefill_then_decode_equals_full(layers):
    model = tiny(layers, torch.float64).eval()
    x = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    full = model(x, use_cache=False).logits
    out = model(x[:, :7])
    cache, pieces = output_cache(out), [out.logits]
    for t in range(7, 11):
        out = model(x[:, t:t + 1], cache=cache)
        pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-10, rtol=0)


@torch.no_grad()
def test_left_padding_equals_the_unpadded_rows():
    """Attention branch masked, gdn branch on each row's real tokens (run_mixer), then decoding on."""
    model = tiny("par(gdn,attn),gdn", torch.float64).eval()
    gen = torch.Generator().manual_seed(3)
    short, long = torch.randint(0, VOCAB, (1, 5), generator=gen), torch.randint(0, VOCAB, (1, 8), generator=gen)
    ids = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = torch.cat([torch.cat([torch.zeros(1, 3), torch.ones(1, 5)], 1), torch.ones(1, 8)]).long()
    out = model(ids, attention_mask=mask)
    nxt = torch.randint(0, VOCAB, (2, 1), generator=gen)
    step = model(nxt, attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1), cache=output_cache(out))
    for row, seq in enumerate((short, long)):
        alone = model(torch.cat([seq, nxt[row:row + 1]], 1), use_cache=False).logits[0]
        n = seq.shape[1]
        torch.testing.assert_close(out.logits[row, -n:], alone[:n], atol=1e-10, rtol=0)
        torch.testing.assert_close(step.logits[row, 0], alone[n], atol=1e-10, rtol=0)


def test_parallel_mixer_is_causal():
    torch.manual_seed(0)
    spec = ParallelSpec(branches=[_branch("gdn", 2), _branch("attn", 2)])
    par = build_layer(spec, 16, run=run_mixer).double().eval()
    x = torch.randn(2, 15, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    report = mixer_causality(par, x, target="mixer:par(gdn,attn)")
    assert report.causal and report.max_leak == 0.0


def test_model_is_causal():
    model = tiny("par(gdn,attn),gdn", torch.float64).eval()
    report = model_causality(model, torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(2)))
    assert report.causal and report.max_leak == 0.0


def test_trains():
    model = tiny("par(gdn,attn),gdn").train()
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        start = torch.randint(0, VOCAB, (8, 1), generator=gen)
        x = (start + torch.arange(12)) % VOCAB  # counting: next = current + 1
        loss = model(x, labels=x, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-4:]) / 4 < 0.6 * sum(losses[:4]) / 4, losses


@torch.no_grad()
def test_save_and_load_round_trip(tmp_path):
    from transformers import AutoModelForCausalLM

    model = tiny("par(gdn*3,attn),gdn", num_heads=8).eval()
    model.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    x = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(back(x).logits, model(x).logits, atol=0, rtol=0)
