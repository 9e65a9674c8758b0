"""Specs: YAML/JSON round trips, presets, and clear errors for invalid compositions."""
import json

import pytest
import torch
from pydantic import ValidationError

from assocmem.memories import (
    GD, L2, ClosedForm, Huber, KL, L2Decay, Lp, Matrix, Momentum, NadarayaWatson, NonParametric,
    Proximal, RetainThenGD, Spectral, Window, derive,
)
from assocmem.mixers import LayerOptions, MixerSpec, get_preset, list_presets, register_preset
from assocmem.mixers.lower import available_forms, lower

PRESETS = list_presets()


@pytest.mark.parametrize("name", PRESETS)
def test_yaml_and_json_round_trip(name):
    spec = get_preset(name)
    assert MixerSpec.from_yaml(spec.to_yaml()) == spec
    assert MixerSpec.model_validate(json.loads(spec.model_dump_json())) == spec


def test_preset_registry_lists_the_issue_presets():
    expected = {"linear_attention", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet",
                "gated_deltanet_joint", "longhorn", "softmax", "sliding_window", "sca", "titans_linear",
                "huber_delta", "lp_delta", "ttt_linear", "kda",
                # issue 24: recurrent depth, RWKV-7 (Table 2.1 and DPLR), normalised Hedgehog, ℓ1 retention
                "gated_deltanet_steps3", "huber_delta_steps3", "rwkv7", "rwkv7_dplr", "hedgehog", "l1_deltanet",
                "mamba", "mla"}  # issue 37: Mamba's selective SSM, multi-head latent attention
    assert set(PRESETS) == expected
    assert get_preset("gdn") == get_preset("gated_deltanet")


def test_registry_refuses_duplicates_and_lists_choices_on_miss():
    with pytest.raises(ValueError, match="already registered"):
        register_preset(get_preset("gla"))
    with pytest.raises(KeyError, match="choose one of"):
        get_preset("gatted_deltanet")


@pytest.mark.parametrize("name,cls", [
    ("linear_attention", "hebbian"), ("retnet", "hebbian"), ("mamba2", "hebbian"), ("gla", "hebbian"),
    ("deltanet", "delta"), ("gated_deltanet", "delta"), ("longhorn", "delta"),
    ("gated_deltanet_joint", "diag_rank1"), ("sca", "spectral"), ("softmax", "nonparametric"),
    ("sliding_window", "nonparametric"), ("titans_linear", "scan"), ("huber_delta", "scan"),
    ("lp_delta", "scan"), ("ttt_linear", "scan"),
])
def test_algebra_class_of_presets(name, cls):
    assert get_preset(name).algebra == cls


def test_unknown_axis_value_names_the_field_and_the_choices():
    with pytest.raises(ValidationError) as err:
        MixerSpec.model_validate({"memory": {"kind": "tensor"}})
    msg = str(err.value)
    assert "memory" in msg and "matrix" in msg and "spectral" in msg


def test_lp_needs_p_above_one():
    with pytest.raises(ValidationError, match="greater than 1"):
        Lp(p=1.0)
    with pytest.raises(ValidationError, match="p"):
        MixerSpec.from_yaml("bias: {kind: lp, p: 0.5}\n")


def test_window_on_a_matrix_memory_is_refused():
    with pytest.raises(ValidationError, match="window.*matrix.*nonparametric"):
        MixerSpec(memory=Matrix(), bias=L2(), retention=Window(size=8), optimizer=GD())


@pytest.mark.parametrize("kwargs,match", [
    (dict(memory=NonParametric(), bias=L2(), optimizer=GD()), "nadaraya_watson"),
    (dict(memory=Matrix(), bias=NadarayaWatson(), optimizer=ClosedForm()), "nonparametric"),
    (dict(memory=Spectral(), bias=L2(), optimizer=GD()), "characteristic_function"),
    (dict(memory=Matrix(), bias=L2(), optimizer=ClosedForm()), "closed_form"),
    (dict(memory=Matrix(), bias=L2(), retention=Proximal(lam=1.0), optimizer=GD()), "implicit"),
    (dict(memory=Matrix(), bias=L2(), retention=KL(), optimizer=RetainThenGD()), "mirror descent"),
    (dict(memory=Matrix(), bias=L2(), layer=LayerOptions(lr_gate="dt")), "lr_gate"),
])
def test_invalid_compositions_name_the_problem(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        MixerSpec(**kwargs)


def test_unknown_keys_are_rejected():
    with pytest.raises(ValidationError, match="extra"):
        MixerSpec.from_yaml("memory: {kind: matrix}\nlearning_rate: 3\n")


def test_a_form_the_class_does_not_admit_is_refused_with_the_alternatives():
    with pytest.raises(ValueError, match=r"class is 'delta'.*available forms: \['chunk', 'recurrent'\]"):
        lower(get_preset("gated_deltanet"), "sdpa")
    with pytest.raises(ValueError, match="chunk_approx"):
        lower(get_preset("gated_deltanet"), "chunk_approx")
    assert available_forms(get_preset("huber_delta")) == ["scan", "recurrent", "chunk_approx"]
    assert lower(get_preset("huber_delta")).name == "scan"  # auto never picks the approximation


def _qkv(B=1, T=4, H=2, K=3, V=2, dtype=torch.float64):
    return torch.randn(B, T, H, K, dtype=dtype), torch.randn(B, T, H, K, dtype=dtype), torch.randn(B, T, H, V, dtype=dtype)


def test_call_time_errors_name_the_argument():
    step = derive(get_preset("gated_deltanet"))
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"log_alpha is required.*\[B, T, H\]"):
        step(q, k, v, beta=torch.rand(1, 4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"log_alpha has shape \(1, 4, 2, 3\).*\[B, T, H\]"):
        step(q, k, v, log_alpha=-torch.rand(1, 4, 2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="q must have a floating dtype"):
        step(q.long(), k, v, log_alpha=-torch.rand(1, 4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"v has shape"):
        step(q, k, v[:, :3], log_alpha=-torch.rand(1, 4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="eta was given but only the momentum optimizer"):
        step(q, k, v, log_alpha=-torch.rand(1, 4, 2, dtype=torch.float64), eta=torch.rand(1, 4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="theta is required"):
        derive(get_preset("sca"))(torch.randn(1, 2, 1, 3, 2, 2), torch.randn(1, 2, 1, 3), torch.randn(1, 2, 1, 3))
