"""Attention specifics beyond the shared layer pairs (tests/layers/test_layer_pairs.py): what is refused."""
from __future__ import annotations

import pytest

from assocmem.mixers.convert import from_hf

transformers = pytest.importorskip("transformers")


def test_refuses_sliding_window_and_scaled_rope():
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention

    cfg = transformers.Qwen2Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                                   use_sliding_window=True, sliding_window=8, layer_types=["sliding_attention"])
    with pytest.raises(ValueError, match="sliding_window = 8 is not supported"):
        from_hf(Qwen2Attention(cfg, 0))
    cfg = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                                   rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type = 'dynamic' is not supported"):
        from_hf(LlamaAttention(cfg, 0))
    cfg = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, attention_dropout=0.1)
    with pytest.raises(ValueError, match="attention_dropout = 0.1 is not supported"):
        from_hf(LlamaAttention(cfg, 0))
