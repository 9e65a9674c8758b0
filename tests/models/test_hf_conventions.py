"""HF conventions: the HF config names, resize + save + load, gradient checkpointing, the cache
objects and keywords HF callers pass, ``import assocmem`` registering the Auto classes."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import DynamicCache
from torch.testing import assert_close
from transformers.loss.loss_utils import ForCausalLMLoss

from assocmem.models import AssocMemConfig, AssocMemForCausalLM, HybridConfig, build_model, output_cache

HC = dict(d_model=32, vocab_size=50, num_heads=2, mlp_ratio=2.0, overrides={"sca": {"num_heads": 2}})


def tiny(layers="gdn,sca,attn", seed=0):
    torch.manual_seed(seed)
    return build_model(HybridConfig(layers=layers, **HC), dtype=torch.float64)


def ids(B=2, T=9, seed=1):
    return torch.randint(0, 50, (B, T), generator=torch.Generator().manual_seed(seed))


def test_hf_names_build_the_model_they_name():
    config = AssocMemConfig(hidden_size=128, num_hidden_layers=4, vocab_size=1000, intermediate_size=96,
                            num_attention_heads=4, rms_norm_eps=1e-5, initializer_range=0.01, my_note="kept")
    hc = config.hybrid_config
    assert (hc.d_model, hc.depth, hc.vocab_size, hc.mlp_width, hc.num_heads, hc.norm_eps, hc.init_std) == \
        (128, 4, 1000, 96, 4, 1e-5, 0.01)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (128, 4, 1000)
    assert config.my_note == "kept"  # other keywords stay attributes, as in every HF config
    model = AssocMemForCausalLM(config)
    assert model.lm_head.weight.shape == (1000, 128) and len(model.model.layers) == 4


def test_hf_name_contradicting_the_hybrid_is_refused():
    with pytest.raises(ValueError, match=r"hidden_size=128 contradicts hybrid.d_model=64 .* give it once"):
        AssocMemConfig(hybrid=dict(d_model=64), hidden_size=128)
    with pytest.raises(ValueError, match=r"num_hidden_layers=3 contradicts hybrid.n_layers=4"):
        AssocMemConfig(hybrid=dict(layers="gdn,attn", n_layers=4), num_hidden_layers=3)
    # the same value twice, or the depth the pattern gives, is no contradiction
    assert AssocMemConfig(hybrid=dict(d_model=64), hidden_size=64).hidden_size == 64
    assert AssocMemConfig(hybrid=dict(layers="gdn*3,attn"), num_hidden_layers=4).hybrid["n_layers"] is None
    # a pattern the HF depth repeats
    assert AssocMemConfig(hybrid=dict(layers="gdn,attn"), num_hidden_layers=6).hybrid_config.depth == 6


def test_resize_token_embeddings_save_load_round_trip(tmp_path):
    model = tiny().eval()
    model.resize_token_embeddings(61, mean_resizing=False)
    assert model.config.hybrid["vocab_size"] == 61 == model.config.vocab_size
    model.save_pretrained(tmp_path)
    loaded = AssocMemForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    x = torch.tensor([[60, 3, 59, 1, 0]])
    assert loaded.lm_head.weight.shape == (61, 32)
    assert torch.equal(loaded(x).logits, model(x).logits)


def test_hf_name_edited_without_its_hybrid_field_is_refused_on_save(tmp_path):
    model = tiny()
    model.config.vocab_size = 70
    with pytest.raises(ValueError, match=r"config.vocab_size=70 but hybrid.vocab_size gives 50"):
        model.save_pretrained(tmp_path)


def _loss_and_grads(model, x, mask):
    model.zero_grad()
    loss = model(x, attention_mask=mask, labels=x).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing_gives_the_plain_gradients(reentrant):
    """Every block runs twice (forward, then again in backward) and the loss and every parameter's
    gradient equal the plain run's bit for bit (float64, left-padded batch)."""
    model = tiny().train()
    x, mask = ids(), torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0
    want_loss, want = _loss_and_grads(model, x, mask)
    calls = []
    hooks = [b.register_forward_pre_hook(lambda *a: calls.append(1)) for b in model.model.layers]
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.24
    if enable is None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    else:
        enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    got_loss, got = _loss_and_grads(model, x, mask)
    for h in hooks:
        h.remove()
    assert len(calls) == 2 * len(model.model.layers)
    assert torch.equal(got_loss, want_loss)
    for name in want:
        assert torch.equal(got[name], want[name]), name
    with pytest.raises(ValueError, match="cannot be continued under gradient checkpointing"):
        model(x, cache=model.new_cache())
    hidden = model(x, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(hidden) == len(model.model.layers) + 1
    model.eval()  # decoding is unaffected in eval mode
    assert output_cache(model(x)).get_seq_length() == 9


def test_gradient_checkpointing_with_cross_layer_streams():
    """Wiola's GCLA reads earlier residual streams: they are checkpoint inputs too, so their gradients
    flow (reentrant mode would drop a keyword tensor's gradient)."""
    torch.manual_seed(0)
    model = build_model("wiola-tiny", dtype=torch.float64).train()
    x = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    want_loss, want = _loss_and_grads(model, x, None)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    got_loss, got = _loss_and_grads(model, x, None)
    assert torch.equal(got_loss, want_loss)
    for name in want:
        assert_close(got[name], want[name], atol=1e-13, rtol=0, msg=name)


def test_empty_dynamic_cache_is_taken_as_a_fresh_one_and_a_filled_one_refused():
    model = tiny().eval()
    x = ids()
    want = model(x)
    got = model(x, past_key_values=DynamicCache())
    assert torch.equal(got.logits, want.logits)
    assert output_cache(got).get_seq_length() == 9
    step = model(ids(T=1, seed=2), cache=output_cache(got)).logits
    assert torch.equal(step, model(ids(T=1, seed=2), cache=output_cache(want)).logits)
    filled = DynamicCache()
    filled.update(torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16), 0)
    with pytest.raises(TypeError, match="DynamicCache holding 3 tokens .* cannot continue an assocmem model"):
        model(x, cache=filled)
    out = model.generate(ids(B=1, T=4), past_key_values=DynamicCache(), max_new_tokens=3, do_sample=False)
    assert torch.equal(out, model.generate(ids(B=1, T=4), max_new_tokens=3, do_sample=False))


def test_hf_keywords_handled_or_refused():
    model = tiny().eval()
    x = ids()
    want = model(x).logits
    assert torch.equal(model(x, position_ids=torch.arange(9)[None], cache_position=torch.arange(9)).logits, want)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['head_mask'\]"):
        model(x, head_mask=None)
    with pytest.raises(ValueError, match="output_attentions=True: .* no attention matrix"):
        model(x, output_attentions=True)
    assert torch.equal(model(x, output_attentions=False).logits, want)
    with pytest.raises(ValueError, match=r"cache_position \[1, 2\] is not the next 2 positions after the 0"):
        model(ids(T=2), cache_position=torch.tensor([1, 2]))


def test_num_items_in_batch_loss_equals_transformers():
    """The loss with and without num_items_in_batch equals transformers' ForCausalLMLoss (which
    computes in float32: compared at float32 rounding), and the sum / n form in float64 exactly."""
    model = tiny().eval()
    x = ids()
    labels = x.clone()
    labels[0, :4] = -100
    logits = model(x).logits
    for n in (None, 40):
        want = ForCausalLMLoss(logits, labels, vocab_size=50, num_items_in_batch=n)
        got = model(x, labels=labels, num_items_in_batch=n).loss
        torch.testing.assert_close(got.float(), want)
    mean = model(x, labels=labels).loss  # 13 labelled next tokens: 5 in row 0, 8 in row 1
    torch.testing.assert_close(model(x, labels=labels, num_items_in_batch=40).loss, mean * 13 / 40, rtol=1e-15, atol=0)


def test_import_assocmem_registers_the_auto_classes():
    code = ("import assocmem\n"
            "from transformers import AutoConfig, AutoModelForCausalLM\n"
            "c = AutoConfig.for_model('assocmem', hidden_size=16, vocab_size=20)\n"
            "print(type(AutoModelForCausalLM.from_config(c)).__name__, assocmem.__version__ != '')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["AssocMemForCausalLM", "True"]
