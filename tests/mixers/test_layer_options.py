"""LayerOptions: shared fields at the top, ``attention:`` and ``sca:`` sub-models; the flat keys of
earlier releases still load (with a DeprecationWarning), in specs, hybrid configs and checkpoints."""
from __future__ import annotations

import json

import pytest
import torch

from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.spec import FLAT_KEYS

NESTED = dict(num_heads=2, attention=dict(num_kv_heads=1, rope=False, rope_theta=500.0, qk_norm="rmsnorm"),
              sca=dict(expand=2.0, out_expand=2, query_heads=1, maxlen=64))
FLAT = dict(num_heads=2, num_kv_heads=1, rope=False, rope_theta=500.0, qk_rmsnorm=True, sca_expand=2.0,
            sca_out_expand=2, sca_query_heads=1, sca_maxlen=64)


def test_flat_keys_load_as_their_nested_fields_with_a_warning():
    assert set(FLAT_KEYS) == set(FLAT) - {"num_heads"}
    with pytest.warns(DeprecationWarning, match=r"flat keys are deprecated.*qk_rmsnorm -> attention.qk_norm"):
        old = LayerOptions.model_validate(FLAT)
    assert old == LayerOptions.model_validate(NESTED)
    assert LayerOptions.model_validate(old.model_dump()) == old  # written back nested, read without a warning


def test_flat_attributes_read_the_nested_fields_with_a_warning():
    opts = LayerOptions.model_validate(NESTED)
    for key, (sub, new, _) in FLAT_KEYS.items():
        with pytest.warns(DeprecationWarning, match=rf"LayerOptions.{key} is deprecated.*use .{sub}.{new}"):
            value = getattr(opts, key)
        assert value == (True if key == "qk_rmsnorm" else getattr(getattr(opts, sub), new))


def test_a_flat_key_wins_over_the_nested_one_and_unknown_keys_are_refused():
    with pytest.warns(DeprecationWarning):
        opts = LayerOptions.model_validate({"attention": {"rope": False, "rope_theta": 3.0}, "rope_theta": 7.0})
    assert (opts.attention.rope, opts.attention.rope_theta) == (False, 7.0)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        LayerOptions.model_validate({"attention": {"qk_rmsnorm": True}})


def test_a_spec_yaml_with_flat_keys_loads():
    text = get_preset("softmax").to_yaml().replace("layer:\n", "layer:\n  num_kv_heads: 2\n  qk_rmsnorm: true\n", 1)
    with pytest.warns(DeprecationWarning):
        spec = MixerSpec.from_yaml(text)
    assert (spec.layer.attention.num_kv_heads, spec.layer.attention.qk_norm) == (2, "rmsnorm")


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
    with pytest.warns(DeprecationWarning, match="num_kv_heads -> attention.num_kv_heads"):
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 64, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    assert loaded.config.hybrid_config.layer_specs() == hc.layer_specs()
