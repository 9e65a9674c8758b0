"""The softmax preset equals transformers' LlamaAttention, Qwen2Attention and Qwen3Attention, weight for
weight: RoPE, GQA, biases (Llama all four, Qwen2 q/k/v), QK-norm (Qwen3), head_dim ≠ d_model / H.

float64: the reference re-typed to float64 (mixers/retype.py; its RoPE frequencies rebuilt by its own
code under the re-typing), ≤ 1e-10 on outputs, input and parameter gradients. float32: as published.
Decode: prefill + one token at a time through its DynamicCache and our AttentionState.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from layer_helpers import compare, randomize_
from assocmem.mixers.convert import from_hf, to_hf
from assocmem.mixers.retype import float64_retyped

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
D = 32
LAYERS = {
    "llama GQA bias": ("llama", "Llama", dict(attention_bias=True)),
    "qwen2 qkv bias": ("qwen2", "Qwen2", {}),
    "qwen3 QK-norm": ("qwen3", "Qwen3", dict(head_dim=12)),
}


def reference(key: str, dtype=torch.float64, seed: int = 0):
    """(attention layer, rotary embedding, modeling module) of a small random config."""
    family, prefix, kw = LAYERS[key]
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cfg = getattr(transformers, f"{prefix}Config")(hidden_size=D, num_attention_heads=4, num_key_value_heads=2,
                                                   num_hidden_layers=1, rope_theta=500.0, rms_norm_eps=1e-5, **kw)
    cfg._attn_implementation = "sdpa"
    attn = randomize_(getattr(module, f"{prefix}Attention")(cfg, 0).to(dtype), seed)
    rotary = getattr(module, f"{prefix}RotaryEmbedding")(cfg).to(dtype)
    if dtype == torch.float64:
        with float64_retyped(module):
            rotary.inv_freq = rotary.compute_default_rope_parameters(cfg)[0]
    return attn, rotary, module


def call(attn, rotary, start: int = 0, cache=None):
    def run(x):
        pos = torch.arange(start, start + x.shape[1])[None]
        return attn(x, position_embeddings=rotary(x, pos), attention_mask=None, cache=cache)[0]
    return run


@pytest.mark.parametrize("key", LAYERS)
def test_float64_outputs_and_gradients(key):
    attn, rotary, module = reference(key)
    ours = from_hf(attn)
    x = torch.randn(2, 37, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with float64_retyped(module):
        errors = compare(attn, call(attn, rotary), ours, lambda t: ours(t)[0], x)
    assert len(errors) == 2 + len(list(attn.parameters()))
    assert max(errors.values()) <= 1e-10, errors


@pytest.mark.parametrize("key", LAYERS)
def test_float32_against_the_published_layer(key):
    attn, rotary, _ = reference(key, dtype=torch.float32)
    ours = from_hf(attn)
    x = torch.randn(2, 37, D, generator=torch.Generator().manual_seed(2))
    errors = compare(attn, call(attn, rotary), ours, lambda t: ours(t)[0], x, relative=True)
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize("key", LAYERS)
def test_prefill_then_decode_equals_the_reference_cache_path(key):
    attn, rotary, module = reference(key)
    ours = from_hf(attn)
    x = torch.randn(2, 21, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with float64_retyped(module), torch.no_grad():
        cache = transformers.DynamicCache(config=attn.config)
        theirs = [call(attn, rotary, 0, cache)(x[:, :16])]
        theirs += [call(attn, rotary, t, cache)(x[:, t:t + 1]) for t in range(16, 21)]
        y, state = ours(x[:, :16])
        mine = [y]
        for t in range(16, 21):
            y, state = ours(x[:, t:t + 1], state=state)
            mine.append(y)
    torch.testing.assert_close(torch.cat(mine, 1), torch.cat(theirs, 1), atol=1e-10, rtol=0)
    torch.testing.assert_close(state.keys, cache.layers[0].keys, atol=1e-10, rtol=0)
    torch.testing.assert_close(state.values, cache.layers[0].values, atol=1e-10, rtol=0)


@pytest.mark.parametrize("key", LAYERS)
def test_weights_round_trip_bit_for_bit(key):
    attn = reference(key)[0]
    back = to_hf(from_hf(attn), reference(key, seed=9)[0])
    for (name, a), (_, b) in zip(attn.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name


def test_refuses_sliding_window_and_scaled_rope():
    cfg = transformers.Qwen2Config(hidden_size=D, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                                   use_sliding_window=True, sliding_window=8, layer_types=["sliding_attention"])
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention
    with pytest.raises(ValueError, match="sliding_window = 8 is not supported"):
        from_hf(Qwen2Attention(cfg, 0))
    cfg = transformers.LlamaConfig(hidden_size=D, num_attention_heads=4, num_hidden_layers=1,
                                   rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    from transformers.models.llama.modeling_llama import LlamaAttention
    with pytest.raises(ValueError, match="rope_type = 'dynamic' is not supported"):
        from_hf(LlamaAttention(cfg, 0))
