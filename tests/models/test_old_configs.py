"""Model folders saved in the layout before block extensions load unchanged: the fixtures
(tests/fixtures/old_hybrid, written by assocmem at 8b4863c with make_fixtures.py there) hold a
config.json with foh_layers / steer / block_norm: wiola / mlp_kind: dsff / Wiola options in the
attention specs (or the flat LayerOptions keys of an older layout), the weights, and the logits
that version computed. Loading converts the config (models/upgrade.py) and reproduces those
logits bit for bit."""
import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from assocmem.models import HybridConfig
from assocmem.models.presets import get_model_preset, wiola_config
from assocmem.models.upgrade import upgrade_hybrid

FIXTURES = Path(__file__).parents[1] / "fixtures" / "old_hybrid"
OLD_KEYS = {"foh_layers", "steer"}


@pytest.mark.parametrize("name", ["st1", "wiola"])
@torch.no_grad()
def test_a_saved_folder_of_the_old_layout_gives_the_saved_logits_bit_for_bit(name):
    saved = load_file(str(FIXTURES / name / "logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / name).eval()
    assert torch.equal(model(saved["ids"]).logits, saved["logits"])
    hybrid = model.config.hybrid
    assert not OLD_KEYS & set(hybrid) and hybrid["block_norm"] == "rmsnorm" and hybrid["mlp_kind"] == "swiglu"


def test_the_old_fields_become_these_extensions():
    st1 = json.loads((FIXTURES / "st1" / "config.json").read_text())["hybrid"]
    assert upgrade_hybrid(st1)["extensions"] == [
        {"kind": "foh", "layers": [1], "mode": "causal", "seq_len": 16},
        {"kind": "steer", "layers": [0], "band": "lowpass", "cutoff": 2, "mode": "causal", "seq_len": 16},
        {"kind": "steer", "layers": [2], "band": "highpass", "cutoff": 4, "mode": "circular", "seq_len": 16}]
    wiola = upgrade_hybrid(json.loads((FIXTURES / "wiola" / "config.json").read_text())["hybrid"])
    srpe = {"k_s": 4.0, "a_s": 0.1, "f_s": 0.5}
    gcla = {"mode": "causal", "summaries": 2, "phi_init": -3.0}
    assert wiola["extensions"] == [
        {"kind": "wiola_norm"}, {"kind": "dsff", "hidden_a": 16, "hidden_b": 32},
        {"kind": "wiola_attention", "layers": [0, 2], "output_gate": True, "cross_layer": gcla, "srpe": srpe},
        {"kind": "wiola_attention", "layers": [1], "output_gate": True, "cross_layer": gcla,
         "token_merge": {"mode": "causal", "tau": 0.92}, "srpe": srpe}]
    assert all(spec["layer"]["attention"]["rope"] is True for spec in wiola["layers"])


def test_the_converted_config_is_the_preset_of_today():
    """The wiola folder's config, converted, builds the blocks wiola_config builds now (its layers are
    named specs instead of the pattern 'attn', the same modules)."""
    old = HybridConfig.model_validate(upgrade_hybrid(
        json.loads((FIXTURES / "wiola" / "config.json").read_text())["hybrid"]))
    new = wiola_config(16, 3, 32, 2, 1, 16, 32)
    assert [layer.spec.model_dump(exclude={"name"}) for layer in old.plan] == \
        [layer.spec.model_dump(exclude={"name"}) for layer in new.plan]
    assert [sorted(e.model_dump_json() for e in layer.extensions) for layer in old.plan] == \
        [sorted(e.model_dump_json() for e in layer.extensions) for layer in new.plan]


@pytest.mark.parametrize("preset", ["st1-tiny", "wiola-tiny-as-written", "nautile-tiny"])
def test_a_current_config_passes_unchanged(preset):
    data = get_model_preset(preset).model_dump(mode="json")
    assert upgrade_hybrid(data) == data


def test_only_loading_converts_a_config_built_in_code_must_use_extensions():
    with pytest.raises(ValidationError, match="foh_layers"):
        HybridConfig(d_model=16, vocab_size=32, layers="attn", foh_layers={0: {"mode": "causal", "seq_len": 8}})


def test_wiola_options_inside_a_parallel_branch_are_refused_with_the_reason():
    attention = HybridConfig(d_model=16, vocab_size=32, layers="attn", num_heads=2).layer_specs()[0]
    branch = attention.model_dump(mode="json")
    branch["layer"]["attention"]["output_gate"] = True
    old = {"d_model": 16, "vocab_size": 32, "layers": [{"name": "p", "branches": [branch, branch]}]}
    with pytest.raises(ValueError, match=r"layers\[0\]\.branches\[0\].*a block extension applies to whole layers"):
        upgrade_hybrid(old)


@torch.no_grad()
def test_a_saved_folder_with_the_flat_layer_keys_gives_the_saved_logits_bit_for_bit():
    saved = load_file(str(FIXTURES / "flat_keys" / "logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / "flat_keys").eval()
    assert torch.equal(model(saved["ids"]).logits, saved["logits"])
    assert model.config.hybrid["overrides"] == {
        "attn": {"attention": {"num_kv_heads": 1, "qk_norm": "rmsnorm", "rope_theta": 500.0}}}
