"""LayerOptions: shared fields at the top, ``attention:`` and ``sca:`` sub-models; the flat keys of
the earlier layout are refused in code and YAML, and converted when a saved model is loaded
(models/upgrade.py), a flat key winning over the nested one as it did."""
from __future__ import annotations

import json

import pytest
import torch

from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.models.upgrade import FLAT_KEYS, upgrade_hybrid

NESTED = dict(num_heads=2, attention=dict(num_kv_heads=1, rope=False, rope_theta=500.0, qk_norm="rmsnorm"),
              sca=dict(expand=2.0, out_expand=2, query_heads=1, maxlen=64))
FLAT = dict(num_heads=2, num_kv_heads=1, rope=False, rope_theta=500.0, qk_rmsnorm=True, sca_expand=2.0,
            sca_out_expand=2, sca_query_heads=1, sca_maxlen=64)


def test_flat_keys_are_refused_in_code_and_yaml():
    with pytest.raises(ValueError, match="qk_rmsnorm\n  Extra inputs are not permitted"):
        LayerOptions.model_validate(FLAT)
    text = get_preset("softmax").to_yaml().replace("layer:\n", "layer:\n  num_kv_heads: 2\n", 1)
    with pytest.raises(ValueError, match="num_kv_heads\n  Extra inputs are not permitted"):
        MixerSpec.from_yaml(text)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        LayerOptions.model_validate({"attention": {"qk_rmsnorm": True}})


def test_a_saved_config_with_flat_keys_converts_to_the_nested_fields():
    assert set(FLAT_KEYS) == set(FLAT) - {"num_heads"}
    spec = get_preset("softmax").model_dump(mode="json")
    spec["layer"] = FLAT
    old = {"d_model": 16, "vocab_size": 32, "layers": [spec], "overrides": {"attn": {"sca_maxlen": 8}}}
    new = upgrade_hybrid(old)
    assert LayerOptions.model_validate(new["layers"][0]["layer"]) == LayerOptions.model_validate(NESTED)
    assert new["overrides"] == {"attn": {"sca": {"maxlen": 8}}}
    assert old["layers"][0]["layer"] == FLAT  # the saved dict is left as it was


def test_a_flat_key_wins_over_the_nested_one():
    old = {"layers": "attn", "overrides": {"attn": {"attention": {"rope": False, "rope_theta": 3.0}, "rope_theta": 7.0}}}
    assert upgrade_hybrid(old)["overrides"]["attn"] == {"attention": {"rope": False, "rope_theta": 7.0}}


def test_a_checkpoint_saved_with_flat_keys_loads_with_the_same_logits(tmp_path):
    """config.json of a model saved before the sub-models (flat override keys) loads and gives the
    same logits as the model that was saved."""
    from transformers import AutoModelForCausalLM

    from assocmem.models import HybridConfig, build_model

    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, vocab_size=64, layers="sca,attn", mlp_ratio=1,
                      overrides={"attn": {"num_heads": 4, "head_dim": 8, "attention": {"num_kv_heads": 2}},
                                 "sca": {"num_heads": 2, "sca": {"expand": 1.0, "maxlen": 32}}})
    model = build_model(hc).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["hybrid"]["overrides"] = {"attn": {"num_heads": 4, "head_dim": 8, "num_kv_heads": 2},
                                     "sca": {"num_heads": 2, "sca_expand": 1.0, "sca_maxlen": 32}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 64, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    assert loaded.config.hybrid_config.layer_specs() == hc.layer_specs()
