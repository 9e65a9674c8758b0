"""SCALayer against the authors' code (tests/fixtures/sca_reference, its README says how it was made),
plus layer-level checks."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from assocmem.mixers.sca import SCA_FORMS, SCALayer, SCAState

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sca_reference"
VARIANTS = {"main": "sca_layer.safetensors", "gqa": "sca_layer_gqa.safetensors"}
FORMS = list(SCA_FORMS)
EXACT = dict(atol=1e-12, rtol=0.0)
CORE_NAMES = ["k", "s", "q_re", "q_im", "theta", "w_int", "time_weight", "p", "phase", "den",
              "state_re", "state_im", "readout_re", "readout_im", "normed"]


def load_fixture(variant: str):
    """(config dict for SCALayer, all tensors) of one fixture file (shipped with the tests)."""
    path = FIXTURE_DIR / VARIANTS[variant]
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        config = json.loads(f.metadata()["config"])
    assert config.pop("dropout") == 0.0 and config.pop("num_anchor_heads") == 0
    return config, load_file(str(path))


def fixture_layer(variant: str, form: str = "prefix_sum", dtype=torch.float64):
    config, tensors = load_fixture(variant)
    layer = SCALayer(**config, form=form).to(dtype)
    params = {name: tensors[name] for name in layer.state_dict()}
    layer.load_state_dict(params, strict=True)
    return layer, tensors


def decode(layer: SCALayer, x: torch.Tensor, state=None):
    """Token-by-token decode; returns (y [B, T, D], final state)."""
    ys = []
    for t in range(x.shape[1]):
        y, state = layer(x[:, t: t + 1], state=state)
        ys.append(y)
    return torch.cat(ys, dim=1), state


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_output_matches_reference(variant, form):
    layer, ref = fixture_layer(variant, form)
    y, _ = layer(ref["input"])
    assert_close(y, ref["output"], **EXACT)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_step_decode_from_empty_state(variant, form):
    layer, ref = fixture_layer(variant, form)
    y, state = decode(layer, ref["input"])
    assert_close(y, ref["step.output"], **EXACT)
    assert_close(y, ref["output"], **EXACT)
    assert_close(state.pos.double(), ref["state.pos"], atol=0.0, rtol=0.0)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prefill_then_decode(variant):
    layer, ref = fixture_layer(variant)
    prefill = 20
    y0, state = layer(ref["input"][:, :prefill])
    y1, _ = decode(layer, ref["input"][:, prefill:], state)
    assert_close(torch.cat((y0, y1), dim=1), ref["prefill20_step.output"], **EXACT)


def assert_state_matches(state: SCAState, ref) -> None:
    assert_close(state.den, ref["state.den"], **EXACT)
    assert_close(state.num[..., 0], ref["state.re_acc"], **EXACT)
    assert_close(state.num[..., 1], ref["state.im_acc"], **EXACT)
    assert state.pos.dtype == torch.long
    assert_close(state.pos.double(), ref["state.pos"], atol=0.0, rtol=0.0)
    assert_close(state.conv_buffer, ref["state.conv_buffer"], **EXACT)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_final_state(variant):
    layer, ref = fixture_layer(variant)
    _, state = layer(ref["input"])
    assert_state_matches(state, ref)
    _, stepped = decode(layer, ref["input"])
    assert_state_matches(stepped, ref)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_intermediates(variant):
    layer, ref = fixture_layer(variant)
    got = layer.intermediates(ref["input"])
    for name in CORE_NAMES:
        value = got[name]
        if name == "time_weight":  # ours per batch row [B, T, K]; the reference's [T, K]
            assert_close(value[1], value[0], atol=0.0, rtol=0.0)
            value = value[0]
        assert_close(value, ref[f"core.{name}"], **EXACT, msg=lambda m, n=name: f"core.{n}: {m}")
    assert_close(got["output"], ref["output"], **EXACT)
    assert float(ref["core.p"].min()) == pytest.approx(1e-4)  # the lower clip is exercised


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_float32_layer(variant):
    layer, ref = fixture_layer(variant, dtype=torch.float32)
    x = ref["input"].float()
    y, state = layer(x)
    assert y.dtype == torch.float32 and state.num.dtype == torch.float32
    assert_close(y.double(), ref["output"], atol=1e-5, rtol=0.0)
    y_step, _ = decode(layer, x)
    assert_close(y_step.double(), ref["step.output"], atol=1e-5, rtol=0.0)


@pytest.mark.parametrize("form", FORMS)
def test_bfloat16_layer_accumulates_in_float32(form):
    layer, ref = fixture_layer("main", form, dtype=torch.bfloat16)
    x = ref["input"].to(torch.bfloat16)
    y, state = layer(x)
    assert y.dtype == torch.bfloat16 and state.den.dtype == state.num.dtype == torch.float32
    wide, _ = fixture_layer("main", form)  # same bf16-rounded weights and input, in float64
    wide.load_state_dict({n: p.double() for n, p in layer.state_dict().items()})
    y_wide, _ = wide(x.double())
    # bf16 projections and activations round at ~4e-3 relative; outputs have std ≈ 0.56
    assert_close(y.double(), y_wide, atol=5e-2, rtol=0.0)


def random_layer(form="prefix_sum", seed=0, **overrides):
    torch.manual_seed(seed)
    config = dict(d_model=16, num_heads=4, num_query_heads=2, num_thetas=2, conv_kernel_size=4,
                  expand_factor=1.5, out_expand_factor=2, maxlen=8, form=form)
    config.update(overrides)
    return SCALayer(**config).double()


@pytest.mark.parametrize("form", FORMS)
def test_causal_bit_identical(form):
    layer = random_layer(form)
    x = torch.randn(2, 21, 16, dtype=torch.float64)
    y, _ = layer(x)
    for t in (0, 9, 19):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
        y2, _ = layer(x2)
        assert_close(y2[:, : t + 1], y[:, : t + 1], atol=0.0, rtol=0.0)
        assert (y2[:, t + 1:] - y[:, t + 1:]).abs().max() > 1e-6


@pytest.mark.parametrize("form", FORMS)
def test_past_maxlen_forward_equals_prefill_and_decode(form):
    layer = random_layer(form, maxlen=5)
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    y, state = layer(x)
    y0, s = layer(x[:, :7])
    y1, s = decode(layer, x[:, 7:], s)
    assert_close(torch.cat((y0, y1), dim=1), y, **EXACT)
    assert state.pos.tolist() == [12, 12] and s.pos.tolist() == [12, 12]  # pos is not clamped
    tau = layer.intermediates(x)["time_weight"]
    assert_close(tau[:, 4:], torch.ones_like(tau[:, 4:]), atol=0.0, rtol=0.0)  # d(t) = 0 for t ≥ maxlen − 1


def test_gradients_agree_across_forms():
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    cot = torch.randn(2, 9, 16, dtype=torch.float64)
    grads = {}
    for form in FORMS:
        layer = random_layer(form)
        (layer(x)[0] * cot).sum().backward()
        grads[form] = {n: p.grad for n, p in layer.named_parameters()}
    assert set(grads["recurrent"]) == set(grads["prefix_sum"])
    for form in ("prefix_sum", "masked_matmul"):
        for name, g in grads["recurrent"].items():
            assert_close(grads[form][name], g, **EXACT, msg=lambda m, n=name: f"{form} {n}: {m}")


def test_single_theta_uses_theta_raw():
    layer = random_layer(num_thetas=1, expand_factor=1.0)
    names = dict(layer.named_parameters())
    assert "theta_raw" in names and "theta_d_raw" not in names
    with torch.no_grad():
        layer.theta_raw.normal_()
    expected = 0.001 + 2.999 * torch.sigmoid(layer.theta_raw[0, 0])
    assert_close(layer.spectral_grid(), expected, atol=0.0, rtol=0.0)
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    y, _ = layer(x)
    assert_close(decode(layer, x)[0], y, **EXACT)


def test_default_initialisation():
    layer = random_layer(num_heads=4, num_query_heads=4, num_thetas=3)
    H = layer.head_dim
    assert H == int(16 * 1.5) // (4 * 3) == 2
    grid = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) / 3 * 2.999 + 0.001
    assert_close(layer.spectral_grid(), grid.expand(4, H, 3), **EXACT)  # evenly spaced, last = 3
    uniform = torch.full((4, H, 3), 1 / (3 + 1e-6 / math.e), dtype=torch.float64)
    assert_close(layer.integration_weights(), uniform, **EXACT)  # w_int_raw = 1
    lam = torch.nn.functional.softplus(layer.decay_slopes)
    lam_ref = torch.logspace(math.log10(0.003), math.log10(0.15), 4, dtype=torch.float64)
    assert_close(lam, lam_ref, atol=0.0, rtol=3e-7)  # parameters were created in float32
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    assert_close(decode(layer, x)[0], layer(x)[0], **EXACT)


def test_state_size_and_init_state():
    layer = SCALayer(d_model=64, num_heads=4, num_query_heads=4, num_thetas=2, conv_kernel_size=4,
                     expand_factor=1.5, out_expand_factor=3, maxlen=64)  # the fixture's main config
    K, H, M, C = 4, 12, 2, 244
    assert (layer.head_dim, layer.num_channels, layer.out_dim) == (H, C, 36)
    assert layer.state_size() == K + K * H * M * 2 + 3 * C == 928
    state = layer.init_state(3)
    assert state.den.shape == (3, K) and state.num.shape == (3, K, H, M, 2)
    assert state.conv_buffer.shape == (3, 3, C) and state.pos.dtype == torch.long
    held = state.den.numel() + state.num.numel() + state.conv_buffer.numel()
    assert held == 3 * layer.state_size()
    assert all(float(t.abs().sum()) == 0.0 for t in (state.den, state.num, state.pos, state.conv_buffer))


@pytest.mark.parametrize("overrides,match", [
    (dict(maxlen=None), "maxlen must be set"),
    (dict(maxlen=0), "maxlen must be an int >= 1"),
    (dict(num_heads=4, num_query_heads=3), r"num_heads \(4\) must be divisible by num_query_heads \(3\)"),
    (dict(form="chunk"), "form must be one of"),
    (dict(num_thetas=0), "num_thetas must be an int >= 1"),
])
def test_bad_config(overrides, match):
    with pytest.raises(ValueError, match=match):
        random_layer(**overrides)


def test_maxlen_is_required():
    with pytest.raises(TypeError, match="maxlen"):
        SCALayer(16, 4)  # noqa: the keyword-only argument has no default


@pytest.mark.parametrize("shape", [(2, 16), (2, 5, 15), (2, 0, 16), (1, 2, 5, 16)])
def test_bad_x_shape(shape):
    layer = random_layer()
    with pytest.raises(ValueError, match=r"x must have shape \[B, T, d_model=16\]"):
        layer(torch.randn(*shape, dtype=torch.float64))


def test_bad_state():
    layer = random_layer()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"state.den must have shape \[2, 4\]"):
        layer(x, state=layer.init_state(3))
    with pytest.raises(TypeError, match="state must be an SCAState"):
        layer(x, state=(1, 2))
