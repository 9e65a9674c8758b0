"""Numerics at the edges: the parallel forms are finite wherever the recurrences are, accurate under
any decay, and keep a non-finite input out of every earlier output (issue 18, items 3, 4 and 6)."""
from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from assocmem.mixers import get_preset, list_presets
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.lower import lower
from assocmem.mixers.ops import attention, delta, dplr, hebbian
from assocmem.mixers.ops.decay import floor_log_decay, underflow_floor
from test_delta import make_inputs

# family -> (recurrent form, chunk form, log_alpha kind)
FAMILIES = {
    "gated_deltanet": (delta.recurrent_delta_rule, delta.chunk_delta_rule, "scalar"),
    "joint_scalar": (delta.recurrent_delta_rule_joint, delta.chunk_delta_rule_joint, "scalar"),
    "joint_key": (delta.recurrent_delta_rule_joint, delta.chunk_delta_rule_joint, "key"),
    "kda": (delta.recurrent_kda, delta.chunk_kda, "key"),
    "gated_longhorn": (delta.recurrent_longhorn, delta.chunk_longhorn, "scalar"),
    "hebbian_scalar": (hebbian.recurrent_hebbian, hebbian.chunk_hebbian, "scalar"),
    "hebbian_key": (hebbian.recurrent_hebbian, hebbian.chunk_hebbian, "key"),
    "dplr_key": (dplr.recurrent_dplr, dplr.chunk_dplr, "key"),
}
SCALAR = [f for f, (_, _, gate) in FAMILIES.items() if gate == "scalar"]


def _full_range_log_alpha(shape, seed, dtype):
    """log α over the whole gate range: 0, −inf, around the dtype's underflow floor, and magnitudes
    log-uniform in [1e-6, 1e30], shuffled so that weak decay follows strong decay within chunks."""
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    mags = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(math.log(1e-6), math.log(1e30), generator=g))
    floor = underflow_floor(dtype)
    special = torch.tensor([0.0, -math.inf, floor, floor + 0.5, floor - 0.5, -88.0, -89.0, -745.0, -746.0],
                           dtype=torch.float64)
    values = -mags
    values[: len(special)] = special
    return values[torch.randperm(n, generator=g)].reshape(shape).to(dtype)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


# ----------------------------------------------------------------------------- the floor
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_underflow_floor_changes_no_alpha(dtype):
    floor = underflow_floor(dtype)
    assert torch.tensor(floor, dtype=dtype).exp().item() == 0.0
    assert torch.tensor(floor + 1.01, dtype=dtype).exp().item() > 0.0  # the floor is within 1 of the edge
    la = torch.tensor([-math.inf, -1e30, floor - 3, floor, -80.0, -1e-3, 0.0], dtype=dtype)
    floored = floor_log_decay(la)
    assert bool(torch.isfinite(floored).all())
    assert torch.equal(floored.exp(), la.exp())                       # every α unchanged, bit for bit


# ----------------------------------------------------------------------------- finite wherever the recurrence is
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_chunk_is_finite_wherever_the_recurrence_is(family, dtype):
    """Over the full gate range (α from 1 down to exactly 0) and β over [0, 1], with T = 3C + 5."""
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(53, gate, seed=4, dtype=dtype)
    x["log_alpha"] = _full_range_log_alpha(x["log_alpha"].shape, 4, dtype)
    x["beta"] = x["beta"].clone()
    x["beta"][:, ::7] = 0.0
    x["beta"][:, 3::7] = 1.0
    o_r, S_r = rec(**x, output_final_state=True)
    o_c, S_c = chunk(**x, output_final_state=True, chunk_size=16)
    assert bool(torch.isfinite(o_r).all()) and bool(torch.isfinite(S_r).all())
    assert bool(torch.isfinite(o_c).all()) and bool(torch.isfinite(S_c).all())
    if dtype == torch.float64:
        assert_close(o_c, o_r, atol=1e-10, rtol=0)
        assert_close(S_c, S_r, atol=1e-10, rtol=0)
    else:  # float32: against the float64 recurrence (per-key exponents: float32 sums, bound in delta_chunk.py)
        o64, _ = rec(**{n: t.double() for n, t in x.items()}, output_final_state=True)
        assert _rel(o_c, o64) < (2e-6 if gate == "scalar" else 1e-4)


@pytest.mark.parametrize("family", ["gated_deltanet", "joint_scalar", "hebbian_scalar"])
def test_gradients_are_finite_and_match_under_extreme_decay(family):
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(37, gate, seed=6)
    x["log_alpha"] = _full_range_log_alpha(x["log_alpha"].shape, 6, torch.float64)
    grads = []
    for fn, kw in ((rec, {}), (chunk, {"chunk_size": 16})):
        leaves = {n: t.clone().requires_grad_(n != "log_alpha") for n, t in x.items()}
        o, S = fn(**leaves, output_final_state=True, **kw)
        (o.square().sum() + S.sum()).backward()
        grads.append({n: t.grad for n, t in leaves.items() if t.grad is not None})
    for name in grads[0]:
        assert bool(torch.isfinite(grads[1][name]).all()), name
        assert_close(grads[1][name], grads[0][name], atol=1e-9, rtol=1e-9, msg=name)


@pytest.mark.parametrize("family", SCALAR)
def test_float32_accuracy_does_not_depend_on_the_decay(family):
    """Strong decay followed by weak decay inside a chunk: float32 exponents as differences of float32
    prefix sums lost 2.6e-4 (log α down to −1e4) and 1.5e-2 (down to −1e6) relative; the float64
    segment sums keep the chunk form at the recurrence's own float32 error (~1e-7) for any decay."""
    rec, chunk, gate = FAMILIES[family]
    for L in (1e2, 1e4, 1e6):
        x = make_inputs(256, gate, seed=3)
        g = torch.Generator().manual_seed(5)
        u = torch.rand(x["log_alpha"].shape, generator=g, dtype=torch.float64)
        x["log_alpha"] = -torch.exp(u * (math.log(L) + 6.9) - 6.9)        # |log α| log-uniform in [1e-3, L]
        o64, _ = rec(**x)
        x32 = {n: t.float() for n, t in x.items()}
        err_chunk, err_rec = _rel(chunk(**x32, chunk_size=32)[0], o64), _rel(rec(**x32)[0], o64)
        with torch.no_grad():  # the in-place forward with the folded carry
            err_fold = _rel(chunk(**x32, chunk_size=32)[0], o64)
        assert err_chunk < 3 * err_rec and err_fold < 3 * err_rec, (L, err_chunk, err_fold, err_rec)


def test_joint_layer_with_large_inputs_is_finite():
    """The audit's case: gated_deltanet_joint as a layer with input ×25 (log α far below −88.7) gave 2,560
    NaN outputs of 8,192 in its chunk form; now it is finite and equals the layer's recurrent form."""
    torch.manual_seed(0)
    spec = get_preset("gated_deltanet_joint")
    chunk = build_mixer(spec, 64)
    rec = build_mixer(spec, 64, form="recurrent")
    rec.load_state_dict(chunk.state_dict())
    x = 25 * torch.randn(2, 64, 64)
    with torch.no_grad():
        y_c, y_r = chunk(x)[0], rec(x)[0]
    assert bool(torch.isfinite(y_c).all())
    assert_close(y_c, y_r, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- isolation of non-finite inputs
OPS = {
    "gated_deltanet": (delta.chunk_delta_rule, "scalar"),
    "joint_scalar": (delta.chunk_delta_rule_joint, "scalar"),
    "joint_key": (delta.chunk_delta_rule_joint, "key"),
    "kda": (delta.chunk_kda, "key"),
    "longhorn": (delta.chunk_longhorn, None),
    "hebbian_scalar": (hebbian.chunk_hebbian, "scalar"),
    "hebbian_key": (hebbian.chunk_hebbian, "key"),
    "dplr_key": (dplr.chunk_dplr, "key"),
}


CASES = [(op, field) for op, (_, gate) in OPS.items() for field in ("k", "v", "beta", "log_alpha")
         if field != "log_alpha" or gate is not None]


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("op,field", CASES, ids=[f"{op}-{field}" for op, field in CASES])
def test_a_non_finite_input_never_reaches_earlier_outputs(op, field, bad):
    """p = 21 lies inside the second chunk (C = 16): products with masked weights (0 · NaN) used to spread
    it over outputs 16..20. (log α = −inf is α = 0, in range: the finiteness tests cover it.)"""
    fn, gate = OPS[op]
    x = make_inputs(40, gate, seed=0, dtype=torch.float32)
    clean, _ = fn(**x, chunk_size=16)
    x[field] = x[field].clone()
    x[field][1, 21] = bad            # batch element 1 only (log α = +inf is growth, out of range like NaN)
    o, S = fn(**x, chunk_size=16, output_final_state=True)
    assert_close(o[:, :21], clean[:, :21], rtol=0, atol=0)
    assert_close(o[0], clean[0])          # the other sequence (to rounding: a path may be chosen per call)
    assert not bool(torch.isfinite(S[1]).all())                            # the state itself is not cleaned


@pytest.mark.parametrize("field", ["k", "v"])
@pytest.mark.parametrize("window", [None, 8])
def test_a_non_finite_key_or_value_never_reaches_earlier_attention_outputs(field, window):
    g = torch.Generator().manual_seed(1)
    x = {n: torch.randn(2, 40, 4, 8, generator=g) for n in "qkv"}
    x["k"], x["v"] = x["k"][:, :, :2], x["v"][:, :, :2]                   # GQA: 2 kv heads
    clean, _ = attention.sdpa_softmax_attention(**x, window=window)
    reference, _ = attention.recurrent_softmax_attention(**x, window=window)
    x[field] = x[field].clone()
    x[field][0, 21, 1] = math.nan
    o, _ = attention.sdpa_softmax_attention(**x, window=window)
    assert bool(torch.isfinite(o[:, :21]).all())
    assert_close(o[:, :21], clean[:, :21])
    assert_close(o[:, :21], reference[:, :21])


PARALLEL = [n for n in list_presets() if lower(get_preset(n), "auto").name != "scan"]  # scans are sequential


@pytest.mark.parametrize("name", PARALLEL)
def test_every_parallel_preset_layer_keeps_a_non_finite_token_out_of_earlier_outputs(name):
    """Before: a NaN/inf token at 21 changed outputs 16..20 of every chunk form and all outputs of SDPA."""
    torch.manual_seed(0)
    layer = build_mixer(get_preset(name), 32).eval()
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        clean, _ = layer(x)
        for bad in (math.nan, math.inf):
            x_bad = x.clone()
            x_bad[:, 21] = bad
            out, _ = layer(x_bad)
            assert_close(out[:, :21], clean[:, :21], msg=lambda m: f"{name}, {bad}: {m}")


# ----------------------------------------------------------------------------- ℓp steps (item 5)
def test_clipped_lp_gradient_is_the_clipped_power():
    """Lp(clip=c): ∇ℓ = p·sign(e)·min(|e|, c)^(p−1) (autograd of the loss, float64), and the loss is
    continuous at |e| = c."""
    from assocmem.memories import Lp

    bias = Lp(p=3.0, clip=2 / 3)
    e = torch.tensor([-5.0, -0.7, -2 / 3, -0.1, 0.0, 0.3, 2 / 3, 0.9, 40.0], dtype=torch.float64)
    pred = e.clone().requires_grad_(True)
    bias.loss(pred, torch.zeros_like(e)).backward()
    assert_close(pred.grad, 3.0 * torch.sign(e) * e.abs().clamp(max=2 / 3) ** 2, rtol=0, atol=1e-15)
    c = torch.tensor([2 / 3], dtype=torch.float64)
    left, right = (bias.loss(c + d, torch.zeros(1, dtype=torch.float64)) for d in (-1e-9, 1e-9))
    assert abs(float(right - left)) < 1e-8


@pytest.mark.parametrize("scale", [1.0, 5.0])
def test_the_lp_delta_preset_stays_finite_where_plain_lp_diverges(scale):
    """The audit's case: lp_delta as a layer on unit-scale inputs went NaN in some seeds (plain p = 3; all
    seeds at ×5). The preset clips the error at 2/3 (Lp docstring: no step increases |e| while β ≤ 1)."""
    from assocmem.memories import Lp

    spec = get_preset("lp_delta")
    assert spec.bias == Lp(p=3.0, clip=2 / 3)
    plain = spec.model_copy(update={"bias": Lp(p=3.0)})
    diverged = 0
    for seed in range(3):
        torch.manual_seed(seed)
        layer = build_mixer(spec, 32).double()
        unclipped = build_mixer(plain, 32).double()
        unclipped.load_state_dict(layer.state_dict())
        x = scale * torch.randn(1, 100, 32, dtype=torch.float64)
        with torch.no_grad():
            y, state = layer(x)
            diverged += not bool(torch.isfinite(unclipped(x)[0]).all())
        assert bool(torch.isfinite(y).all()) and bool(torch.isfinite(state.memory).all())
    if scale > 1:
        assert diverged == 3  # the test can fail: without the clip these inputs give NaN
