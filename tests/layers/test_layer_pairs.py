"""Every published layer of mixers/convert/cases.py against its preset layer, weight for weight
(mixers/verify_layers.py: float64 re-typed ≤ 1e-10, float32 as published ≤ 2e-5 relative, prefill +
decode through the reference's cache, bit-exact weight round trip)."""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers.convert import from_hf
from assocmem.mixers.convert.cases import LAYER_CASES
from assocmem.mixers.verify_layers import build_reference, compare, verify_layers

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", LAYER_CASES)
def test_layer_pairs(name):
    case = LAYER_CASES[name]
    if case.unavailable():
        pytest.skip(case.unavailable())
    results = [r for r in verify_layers([case.preset]) if name in r.pair]
    assert len(results) == 4
    for r in results:
        assert r.passed, (r.pair, r.max_abs_error, r.tolerance)


@pytest.mark.parametrize("name", LAYER_CASES)
def test_every_parameter_gradient_is_compared(name):
    case = LAYER_CASES[name]
    if case.unavailable():
        pytest.skip(case.unavailable())
    ref = build_reference(case, torch.float32, 0)
    errors = compare(ref.layer, lambda t: ref.run(t, 0, None), from_hf(ref.layer), torch.randn(1, 5, 32))
    assert sorted(errors) == sorted(["output", "grad:x"] + [f"grad:{n}" for n, _ in ref.layer.named_parameters()])


def test_a_wrong_weight_fails_the_pairs():
    """The checks can fail: one permuted head in the mapped weights breaks float64 and decode."""
    case = LAYER_CASES["Qwen3NextGatedDeltaNet (Hk=2, Hv=4)"]
    ref = build_reference(case, torch.float64, 0)
    ours = from_hf(ref.layer)
    with torch.no_grad():
        ours.a_proj.weight.copy_(ours.a_proj.weight.flip(0))  # value heads' decay gates swapped
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    from assocmem.mixers.retype import float64_retyped
    with float64_retyped(case.module()):
        errors = compare(ref.layer, lambda t: ref.run(t, 0, None), ours, x)
    assert errors["output"] > 1e-3


def test_verify_cli_layers(capsys, tmp_path):
    from assocmem.cli import main as cli

    assert cli(["verify", "gated_deltanet", "--layers"]) == 0
    out = capsys.readouterr().out
    assert "8 of 8 pairs pass (0 op pairs, 8 layer pairs)" in out and "Qwen3NextGatedDeltaNet (Hk=2, Hv=4)" in out
    with pytest.raises(SystemExit, match="no published layer is held to the named presets"):
        cli(["verify", "gla", "--layers"])


def test_every_preset_names_what_its_layer_is_held_to(capsys):
    """Each preset says which published layer it equals (and then a layer case checks it) or how it differs."""
    from assocmem.mixers import list_presets
    from assocmem.mixers.presets import PUBLISHED_LAYERS
    from assocmem.cli import main as cli

    assert set(PUBLISHED_LAYERS) == set(list_presets())
    checked = {c.preset for c in LAYER_CASES.values()} | {"sca"}  # sca: tests/mixers/test_sca_fixture.py
    assert {n for n, text in PUBLISHED_LAYERS.items() if text.startswith("=")} == checked
    assert cli(["derive", "mamba2"]) == 0
    assert "layer:     = transformers Mamba2Mixer" in capsys.readouterr().out
