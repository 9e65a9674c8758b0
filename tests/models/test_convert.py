"""from_hf_causal_lm: a local transformers Llama / Qwen2 / Qwen3 folder as an assocmem model.

Identity conversion (no layer replaced): logits equal at float32 (≤ 1e-5, the reference as published)
and float64 (≤ 1e-10, the reference re-typed: its float32 casts renamed, mixers/retype.py, and its RoPE
frequencies rebuilt by its own code in float64); greedy generate() gives the same tokens; every copied
tensor is equal. Replaced layers take the teacher's q/k/v/o.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from assocmem.mixers.retype import float64_retyped
from assocmem.models.convert import from_hf_causal_lm

transformers = pytest.importorskip("transformers")

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(attention_bias=True, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=12, tie_word_embeddings=True)),
}


def teacher(family: str, tmp_path, seed: int = 0, **extra):
    """A small random teacher saved to and loaded back from a folder (float32, eval mode)."""
    cfg_name, model_name, kw = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2, rope_theta=500.0,
                                          rms_norm_eps=1e-5, **{**kw, **extra})
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))  # norms not all ones, so a wrong map shows
            elif p.dim() == 1:
                p.normal_(0, 0.3)  # biases
    model.save_pretrained(tmp_path / family)
    return getattr(transformers, model_name).from_pretrained(tmp_path / family).eval(), tmp_path / family


def float64_reference(model, family: str):
    """The teacher in float64, its RoPE frequencies rebuilt by its own code re-typed to float64; call it
    inside the returned context, where every float32 its modeling file names reads as float64."""
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    model = model.double()
    with float64_retyped(module):
        rotary = model.model.rotary_emb
        rotary.inv_freq = rotary.compute_default_rope_parameters(model.config)[0]
    return model, float64_retyped(module)


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_conversion_reproduces_the_logits(family, tmp_path):
    hf, path = teacher(family, tmp_path)
    ours = from_hf_causal_lm(path)
    ids = torch.randint(0, 61, (2, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        err32 = float((ours(ids).logits - hf(ids).logits).abs().max())
        hf64, retyped = float64_reference(hf, family)
        with retyped:
            ref64 = hf64(ids).logits
        err64 = float((ours.double()(ids).logits - ref64).abs().max())
    print(f"{family}: logits max abs error float32 {err32:.1e}, float64 {err64:.1e}")
    assert err32 <= 1e-5, err32
    assert err64 <= 1e-10, err64


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_conversion_generates_the_same_tokens(family, tmp_path):
    hf, path = teacher(family, tmp_path)
    ours = from_hf_causal_lm(path)
    prompt = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(2))
    args = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        assert torch.equal(ours.generate(prompt, **args), hf.generate(prompt, **args))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_copied_tensor_is_equal(family, tmp_path):
    hf, path = teacher(family, tmp_path)
    ours, theirs = from_hf_causal_lm(path).state_dict(), hf.state_dict()
    names = {"input_layernorm": "mixer_norm", "post_attention_layernorm": "mlp_norm", "self_attn": "mixer"}
    mapped = 0
    for name, tensor in theirs.items():
        ours_name = name
        for a, b in names.items():
            ours_name = ours_name.replace(f".{a}.", f".{b}.")
        assert torch.equal(ours[ours_name], tensor), name
        mapped += 1
    assert mapped == len(theirs) and mapped >= 3 * 9 + 3


def test_replaced_layers_take_the_teacher_projections(tmp_path):
    hf, path = teacher("llama", tmp_path, attention_bias=False)
    ours = from_hf_causal_lm(path, replace=[1], student="gdn", identity_conv=True)
    kept, new = ours.model.layers[0].mixer, ours.model.layers[1].mixer
    assert kept.spec.name == "softmax" and new.spec.name == "gated_deltanet"
    attn = hf.model.layers[1].self_attn
    k = attn.k_proj.weight.view(2, 8, 32).repeat_interleave(2, dim=0).reshape(32, 32)  # 2 kv heads -> 4 heads
    v = attn.v_proj.weight.view(2, 8, 32).repeat_interleave(2, dim=0).reshape(32, 32)
    assert torch.equal(new.qkv_proj.weight, torch.cat([attn.q_proj.weight, k, v]))
    assert torch.equal(new.o_proj.weight, attn.o_proj.weight)
    taps = torch.zeros_like(new.conv.weight)
    taps[..., -1] = 1
    assert torch.equal(new.conv.weight, taps)
    ids = torch.randint(0, 61, (1, 9))
    with torch.no_grad():
        assert float((ours(ids).logits - hf(ids).logits).abs().max()) > 1e-3  # a different function now
        assert torch.equal(from_hf_causal_lm(hf, replace=[]).state_dict()["model.layers.1.mixer.q_proj.weight"],
                           attn.q_proj.weight)


def test_refusals_name_the_field(tmp_path):
    hf, path = teacher("qwen2", tmp_path)
    with pytest.raises(ValueError, match=r"replace \[3\] out of range for a teacher with 3 layers"):
        from_hf_causal_lm(hf, replace=[3])
    with pytest.raises(ValueError, match="q/k/v biases"):
        from_hf_causal_lm(hf, replace=[0])
    with pytest.raises(ValueError, match="student 'softmax'"):
        from_hf_causal_lm(teacher("llama", tmp_path, attention_bias=False)[0], replace=[0], student="softmax")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        from_hf_causal_lm(tmp_path / "missing")
    scaled, _ = teacher("llama", tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type = 'linear' is not supported"):
        from_hf_causal_lm(scaled)


def test_replace_fraction_gives_the_rows_of_table_3_3():
    from assocmem.models.convert import TABLE_3_3, replace_fraction, table_3_3

    for fraction, row in [(0.25, "25"), (0.5, "50"), (0.75, "75"), (0.875, "87_5")]:
        assert replace_fraction(fraction, 16) == list(TABLE_3_3[row]) == table_3_3(row, 16)
    assert len(table_3_3("100", 16)) == 15 and 0 not in table_3_3("100", 16)  # the table keeps layer 0
    assert [replace_fraction(f, 4) for f in (0.0, 0.25, 0.5, 0.75, 1.0)] == [[], [3], [1, 3], [1, 2, 3], [0, 1, 2, 3]]
    with pytest.raises(ValueError, match="replace_fraction must be in"):
        replace_fraction(1.5, 4)
    with pytest.raises(ValueError, match="is for a 16-layer teacher, this one has 4"):
        table_3_3("25", 4)
