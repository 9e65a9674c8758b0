"""HybridConfig: patterns, placements, overrides, YAML round trips, errors."""
from __future__ import annotations

import pytest

from assocmem.memories import L2, L2Decay, Lp, Matrix, RetainThenGD
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.models import HybridConfig


def names(hc: HybridConfig) -> list[str]:
    return [s.name for s in hc.layer_specs()]


def test_pattern_repeat_and_counts():
    hc = HybridConfig(layers="sca,sca,attn", n_layers=6)
    assert names(hc) == ["sca", "sca", "softmax"] * 2
    assert names(HybridConfig(layers="gdn*3,attn")) == ["gated_deltanet"] * 3 + ["softmax"]
    assert names(HybridConfig(layers=" gdn*2 , swa ", n_layers=6)) == ["gated_deltanet"] * 2 + ["sliding_window"] + \
        ["gated_deltanet"] * 2 + ["sliding_window"]
    assert HybridConfig(layers="gdn*3,attn", n_layers=12).depth == 12


def test_attention_indices():
    hc = HybridConfig(layers="gdn", n_layers=12, attention_layers=[3, 7, 11])
    got = names(hc)
    assert [i for i, n in enumerate(got) if n == "softmax"] == [3, 7, 11]
    assert got.count("gated_deltanet") == 9


def test_num_heads_and_overrides():
    hc = HybridConfig(d_model=64, layers="gdn,attn", num_heads=4,
                      overrides={"attn": {"attention": {"num_kv_heads": 2, "rope_theta": 500.0}}})
    gdn, attn = hc.layer_specs()
    assert (gdn.layer.num_heads, gdn.layer.head_dim) == (4, 16)
    assert (attn.layer.num_heads, attn.layer.head_dim, attn.layer.attention.num_kv_heads) == (4, 16, 2)
    assert (attn.layer.attention.rope, attn.layer.attention.rope_theta) == (True, 500.0)  # the rest of the preset kept
    assert HybridConfig(d_model=64, layers="attn", head_dim=32).layer_specs()[0].layer.num_heads == 2


def test_user_spec_used_as_is_and_yaml_round_trip():
    mine = MixerSpec(name="lp3", memory=Matrix(), bias=Lp(p=3.0), retention=L2Decay(gate="scalar"),
                     optimizer=RetainThenGD(), layer=LayerOptions(num_heads=3, head_dim=5))
    hc = HybridConfig(d_model=32, vocab_size=100, layers=[mine, "attn"], num_heads=4, n_layers=4,
                      forms={"lp3": "recurrent"}, mlp_layers="attention")
    assert hc.layer_specs()[0] == mine  # num_heads applies to named layers only
    assert hc.layer_forms() == ["recurrent", "auto"] * 2
    assert hc.mlp_flags() == [False, True, False, True]
    back = HybridConfig.from_yaml(hc.to_yaml())
    assert back == hc and back.layer_specs() == hc.layer_specs()


def test_mlp_width_and_flags():
    assert HybridConfig(d_model=64, mlp_ratio=2.5).mlp_width == 160
    assert HybridConfig(d_model=64, mlp_hidden=100).mlp_width == 100
    assert HybridConfig(layers="gdn", n_layers=3, mlp_ratio=0).mlp_flags() == [False] * 3
    assert HybridConfig(layers="gdn", n_layers=3, mlp_layers=[1]).mlp_flags() == [False, True, False]


@pytest.mark.parametrize("kwargs,match", [
    (dict(layers="gdn,nope"), "unknown layer name 'nope'"),
    (dict(layers="sca,sca,attn", n_layers=8), "does not divide n_layers=8"),
    (dict(layers="gdn**2"), "bad layer pattern token"),
    (dict(layers="gdn,,attn"), "bad layer pattern token"),
    (dict(layers=[]), "layers is empty"),
    (dict(layers="gdn", n_layers=4, attention_layers=[4]), r"attention_layers \[4\] out of range"),
    (dict(layers="gdn", n_layers=4, attention_layers=[1, 1]), "duplicates"),
    (dict(layers="gdn", overrides={"attn": {}}), "overrides name layers"),
    (dict(layers="gdn", overrides={"gdn": {"num_head": 3}}), "num_head"),
    (dict(d_model=64, num_heads=5), "does not divide d_model"),
    (dict(d_model=64, num_heads=4, head_dim=8), "must equal d_model"),
    (dict(layers="gdn", bogus=1), "bogus"),
])
def test_bad_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HybridConfig(**kwargs)


def test_unknown_name_lists_choices():
    with pytest.raises(ValueError) as err:
        HybridConfig(layers="gdm")
    assert "gated_deltanet" in str(err.value) and "'gdn'" in str(err.value)


def test_preset_names_resolve_to_registry_specs():
    assert HybridConfig(layers="gdn").layer_specs()[0] == get_preset("gated_deltanet")
    assert isinstance(HybridConfig(layers="deltanet").layer_specs()[0].bias, L2)


def test_an_8_layer_hybrid_resolves_its_pattern_once(monkeypatch):
    """Building the model expands the pattern once and looks each distinct layer name up once,
    however many times the config, the HF config and the model read the layers."""
    from assocmem.models import build_model
    from assocmem.models import config as hybrid_config

    calls = {"expand": 0, "preset": [], "plan": 0}
    expand, preset, plan = hybrid_config.expand_pattern, hybrid_config.get_preset, HybridConfig._resolve_plan
    monkeypatch.setattr(hybrid_config, "expand_pattern",
                        lambda p: calls.__setitem__("expand", calls["expand"] + 1) or expand(p))
    monkeypatch.setattr(hybrid_config, "get_preset", lambda n: calls["preset"].append(n) or preset(n))
    monkeypatch.setattr(HybridConfig, "_resolve_plan",
                        lambda self, e: calls.__setitem__("plan", calls["plan"] + 1) or plan(self, e))
    hc = HybridConfig(d_model=32, vocab_size=64, layers="gdn*3,attn", n_layers=8, num_heads=2, mlp_ratio=1)
    model = build_model(hc)
    assert (calls["expand"], sorted(calls["preset"]), calls["plan"]) == (1, ["attn", "gdn"], 1)
    assert [layer.name for layer in hc.plan] == ["gdn", "gdn", "gdn", "attn"] * 2
    assert [type(b.mixer).__name__ for b in model.model.layers] == ["Mixer", "Mixer", "Mixer", "Attention"] * 2
    model.config.hybrid_config.layer_specs()  # read again through the HF config: still no new resolution
    assert (calls["expand"], calls["plan"]) == (1, 1)


def test_the_plan_follows_a_changed_field():
    hc = HybridConfig(d_model=32, layers="gdn,attn", n_layers=4)
    assert hc.depth == 4
    hc.n_layers = 6
    assert hc.depth == 6 and [s.name for s in hc.layer_specs()] == ["gated_deltanet", "softmax"] * 3
    assert hc.model_copy(update={"n_layers": 2}).depth == 2
