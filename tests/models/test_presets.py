"""Model presets: parameter counts on the meta device, layer placements, tiny versions run."""
from __future__ import annotations

import pytest
import torch

from assocmem.models import build_model, get_model_preset, list_model_presets, output_cache
from assocmem.models.presets import TABLE_4_1


def n_params(name: str) -> tuple[int, int]:
    with torch.device("meta"):
        model = build_model(name)
    total = sum(p.numel() for p in model.parameters())
    return total, total - model.model.embed_tokens.weight.numel()


def test_nautile_370m_parameter_count():
    total, _ = n_params("nautile-370m")
    assert abs(total - 371e6) / 371e6 < 0.01, total
    hc = get_model_preset("nautile-370m")
    kinds = [s.algebra for s in hc.layer_specs()]
    assert kinds.count("spectral") == 16 and kinds.count("nonparametric") == 8
    assert [i for i, k in enumerate(kinds) if k == "nonparametric"] == [i for i in range(24) if (i + 1) % 3 == 0]
    attn = hc.layer_specs()[2].layer
    assert (attn.num_heads, attn.attention.num_kv_heads, attn.attention.qk_norm, attn.attention.rope) == \
        (16, 4, "rmsnorm", True)
    assert hc.mlp_flags() == [k == "nonparametric" for k in kinds] and hc.tie_embeddings


def test_thesis_transformer_non_embedding_count():
    """Thesis §3.3: 137.8M non-embedding parameters for the pure-attention 150M model."""
    _, non_emb = n_params("thesis-150m-transformer")
    assert abs(non_emb - 137.8e6) / 137.8e6 < 0.001, non_emb


@pytest.mark.parametrize("mixer", ["gdn", "mamba2", "mamba"])
@pytest.mark.parametrize("pct", sorted(TABLE_4_1))
def test_thesis_hybrid_placements(mixer, pct):
    for size in ("150m", "tiny"):
        specs = get_model_preset(f"thesis-{size}-{mixer}-{pct}").layer_specs()
        assert len(specs) == 12
        attn = [i for i, s in enumerate(specs) if s.name == "softmax"]
        assert attn == TABLE_4_1[pct]
        recurrent = {s.name for s in specs if s.name != "softmax"}
        assert recurrent == {{"gdn": "gated_deltanet"}.get(mixer, mixer)}
        assert round(100 * (12 - len(attn)) / 12) == pct


# st1-tiny is seed 003's ST-1 as written: its circular FOH fits one length and has no decode (test below)
@pytest.mark.parametrize("name", [n for n in list_model_presets() if "tiny" in n and n != "st1-tiny"])
@torch.no_grad()
def test_tiny_presets_run(name):
    torch.manual_seed(0)
    model = build_model(name).eval()
    x = torch.randint(0, model.config.vocab_size, (1, 6))
    out = model(x)
    assert out.logits.shape == (1, 6, model.config.vocab_size) and torch.isfinite(out.logits).all()
    if name.endswith("as-written"):  # Wiola's GCLA as written: a mean over all T, no decode
        with pytest.raises(ValueError, match="cannot continue from a cache"):
            model(x[:, :1], cache=output_cache(out))
        return
    step = model(x[:, :1], cache=output_cache(out))
    assert torch.isfinite(step.logits).all()


@torch.no_grad()
def test_st1_tiny_as_written_runs_at_its_length_and_refuses_decode():
    torch.manual_seed(0)
    model = build_model("st1-tiny").eval()
    x = torch.randint(0, model.config.vocab_size, (1, 128))
    out = model(x)
    assert torch.isfinite(out.logits).all()
    with pytest.raises(ValueError, match="exceed the learned position table"):  # the first refusal on the way
        model(x[:, :1], cache=output_cache(out))
    with pytest.raises(ValueError, match="tied to T=128"):
        model(x[:, :6])


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model preset 'nautile'"):
        get_model_preset("nautile")
    with pytest.raises(TypeError, match="preset name"):
        build_model(3)
