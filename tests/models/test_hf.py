"""HF integration: Auto* registration, save/load, generate, the cache object, bad input."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, DynamicCache

from assocmem.models import (AssocMemCache, AssocMemConfig, AssocMemForCausalLM, AssocMemModel, HybridConfig, build_model,
                             output_cache)
from assocmem.models.hf_kwargs import CACHE_FIELD

HC = dict(d_model=32, vocab_size=64, num_heads=2, mlp_ratio=2.0)


def tiny(layers="gdn,sca,attn", dtype=torch.float64, seed=0, **kw):
    torch.manual_seed(seed)
    if isinstance(layers, str) and "sca" in layers:
        kw["overrides"] = {"sca": {"num_heads": 2}}
    return build_model(HybridConfig(layers=layers, **(HC | kw)), dtype=dtype).eval()


def ids(B=2, T=7, seed=1):
    return torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(seed))


def test_auto_classes_registered():
    config = AutoConfig.for_model("assocmem", hybrid=HybridConfig(layers="gdn,attn", **HC))
    assert isinstance(config, AssocMemConfig)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (64, 32, 2)
    assert isinstance(AutoModelForCausalLM.from_config(config), AssocMemForCausalLM)
    assert isinstance(AutoModel.from_config(config), AssocMemModel)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_save_load_round_trip_identical_logits(tmp_path, dtype):
    model = tiny(dtype=dtype)
    x = ids()
    want = model(x).logits
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / "config.json").exists()
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype).eval()
    assert back.config.hybrid == model.config.hybrid
    torch.testing.assert_close(back(x).logits, want, atol=0, rtol=0)


def test_user_spec_survives_save_load(tmp_path):
    from assocmem.memories import Huber, L2Decay, Matrix, RetainThenGD
    from assocmem.mixers import LayerOptions, MixerSpec

    mine = MixerSpec(name="huber", memory=Matrix(), bias=Huber(delta=0.3), retention=L2Decay(gate="scalar"),
                     optimizer=RetainThenGD(), layer=LayerOptions(num_heads=2, head_dim=8, lr_gate="sigmoid"))
    model = tiny(layers=[mine, "attn"], forms={"huber": "recurrent"})
    model.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64)
    assert back.config.hybrid_config.layer_specs()[0] == mine
    torch.testing.assert_close(back(ids()).logits, model(ids()).logits, atol=0, rtol=0)


def test_tied_and_untied_heads():
    tied = tiny()
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    untied = tiny(tie_embeddings=False)
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


@torch.no_grad()
def test_greedy_generate_equals_argmax_loop():
    model = tiny()
    x = ids(2, 5)
    got = model.generate(x, max_new_tokens=6, do_sample=False)
    seq = x
    for _ in range(6):
        nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert got.tolist() == seq.tolist()


@torch.no_grad()
def test_sampling_generate_uses_cache_and_is_seeded():
    model = tiny(dtype=torch.float32)
    x = ids(2, 5)
    torch.manual_seed(3)
    out = model.generate(x, max_new_tokens=8, do_sample=True, top_k=10, num_return_sequences=2,
                         return_dict_in_generate=True)
    torch.manual_seed(3)
    again = model.generate(x, max_new_tokens=8, do_sample=True, top_k=10, num_return_sequences=2)
    assert out.sequences.tolist() == again.tolist() and out.sequences.shape == (4, 13)
    cache = output_cache(out)
    assert isinstance(cache, AssocMemCache) and cache.get_seq_length() == 12  # last token not fed back
    # the returned cache continues exactly like a forward over the whole sequence
    step = model(out.sequences[:, -1:], cache=cache).logits[:, -1]
    torch.testing.assert_close(step, model(out.sequences, use_cache=False).logits[:, -1])


@torch.no_grad()
def test_beam_search_with_reordered_cache_equals_no_cache():
    model = tiny()
    kw = dict(max_new_tokens=5, num_beams=3, num_return_sequences=3, do_sample=False,
              return_dict_in_generate=True, output_scores=True)
    cached = model.generate(ids(2, 4), **kw)
    plain = model.generate(ids(2, 4), use_cache=False, **kw)
    assert cached.sequences.tolist() == plain.sequences.tolist()
    torch.testing.assert_close(cached.sequences_scores, plain.sequences_scores, atol=1e-6, rtol=0)


def test_loss_and_hidden_states():
    model = tiny()
    x = ids(2, 6)
    out = model(x, labels=x, output_hidden_states=True)
    ref = F.cross_entropy(out.logits[:, :-1].reshape(-1, 64), x[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, ref, atol=1e-12, rtol=0)
    assert len(out.hidden_states) == 4
    torch.testing.assert_close(out.hidden_states[0], model.model.embed_tokens(x), atol=0, rtol=0)
    torch.testing.assert_close(model.model.norm(out.hidden_states[-1]), model.model(x).last_hidden_state,
                               atol=0, rtol=0)
    assert model(x, logits_to_keep=1).logits.shape == (2, 1, 64)
    as_tuple = model(x, labels=x, use_cache=False, return_dict=False)
    assert len(as_tuple) == 2 and torch.equal(as_tuple[1], out.logits)  # (loss, logits)


def test_cache_bytes_and_reset():
    model = tiny("gdn,attn")
    cache = output_cache(model(ids(1, 5)))
    gdn = model.model.layers[0].mixer
    attn = model.model.layers[1].mixer
    floats = gdn.state_size() + attn.state_size(5)
    assert cache.state_bytes() == floats * 8 + 8 * 1 + 5 * 1  # float64 states + attention pos (int64) + valid
    cache.reset()
    assert cache.get_seq_length() == 0 and cache.state_bytes() == 0


def test_bad_inputs():
    model = tiny()
    with pytest.raises(ValueError, match="input_ids out of range: min 0, max 64"):
        model(torch.tensor([[0, 64]]))
    with pytest.raises(ValueError, match="out of range: min -1"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(ValueError, match="attention_mask must be"):
        model(ids(2, 5), attention_mask=torch.ones(2, 3))
    with pytest.raises(TypeError, match="must be an AssocMemCache"):
        model(ids(), cache=[])
    other = tiny(seed=1)  # same architecture, another instance
    with pytest.raises(ValueError, match="from a different model"):
        model(ids(), cache=output_cache(other(ids())))
    bigger = tiny("gdn,sca,attn,attn")
    with pytest.raises(ValueError, match="from a different model"):
        model(ids(), cache=output_cache(bigger(ids())))
    with pytest.raises(ValueError, match="cannot be cropped"):
        output_cache(model(ids())).crop(1)


def test_fresh_cache_binds_to_first_model():
    model = tiny()
    cache = AssocMemCache(3)
    full = model(ids(1, 6), use_cache=False).logits
    a = model(ids(1, 6)[:, :4], cache=cache).logits
    b = model(ids(1, 6)[:, 4:], cache=cache).logits
    torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-10, rtol=0)
    assert cache.signature is not None


def _states(cache: AssocMemCache) -> list[torch.Tensor]:
    from assocmem.models.blocks import state_tensors
    return [t for i in range(len(cache.layers)) for t in state_tensors(cache[i])]


def test_cache_keyword_old_and_new_names_are_one_path():
    """transformers >= 5.24 passes the cache as ``cache=``, earlier releases as ``past_key_values=``;
    both give the same logits and the same cache contents, bit for bit, and giving both is refused."""
    model = tiny()
    prompt, step = ids(2, 5), ids(2, 3, seed=2)
    runs = {}
    for name in ("cache", "past_key_values"):
        cache = output_cache(model(prompt))
        out = model(step, **{name: cache})
        assert output_cache(out) is cache and getattr(out, CACHE_FIELD) is cache
        runs[name] = (out.logits, _states(cache), cache.get_seq_length())
    (a, sa, na), (b, sb, nb) = runs["cache"], runs["past_key_values"]
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert na == nb == 8 and len(sa) == len(sb) > 0
    for x, y in zip(sa, sb):
        torch.testing.assert_close(x, y, atol=0, rtol=0)
    torch.testing.assert_close(a, model(torch.cat([prompt, step], 1), use_cache=False).logits[:, 5:],
                               atol=1e-10, rtol=0)
    both = output_cache(model(prompt))
    with pytest.raises(ValueError, match="give the cache once"):
        model(step, cache=both, past_key_values=both)
    with pytest.raises(ValueError, match="give the cache once"):
        model.model(step, cache=both, past_key_values=both)
