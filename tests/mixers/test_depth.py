"""Recurrent depth (thesis §5.2, eq. 5.1): ``steps: K`` on gd / retain_then_gd / implicit.

K steps derived with autograd == the hand-written unrolled loop == the lowered form (one step with
β_eff), outputs, final states and input gradients in float64; the single-step identities to 5e-15;
K = 1 is today's presets bit for bit; what is not exact runs the derived scan."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from assocmem.memories import GD, L2, Huber, Implicit, L2Decay, Matrix, RetainThenGD, derive
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.lower import hand_written, lower
from assocmem.mixers.ops import delta, depth
from assocmem.mixers.verify import EXACT_ATOL, make_case, max_abs_error, run, verify

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/mixers/conftest.py
F64 = torch.float64


def with_steps(name: str, steps: int) -> MixerSpec:
    data = get_preset(name).model_dump()
    data["optimizer"]["steps"] = steps
    data["name"] = f"{name}_steps{steps}"
    return MixerSpec.model_validate(data)


def _unit(x):
    return torch.nn.functional.normalize(x, dim=-1)


@pytest.mark.parametrize("norm", [1.0, 0.3])
@pytest.mark.parametrize("K", [1, 2, 5])
def test_k_gd_steps_on_l2_are_one_delta_step_with_beta_eff(K, norm):
    """K steps S ← S + β k (v − Sᵀk)ᵀ equal ONE step with β_eff = (1 − (1 − β‖k‖²)^K)/‖k‖², to 5e-15
    (the delta family's regime: β ∈ (0, 1), ‖k‖ ≤ 1, so 0 ≤ 1 − β‖k‖² < 1)."""
    g = torch.Generator().manual_seed(K)
    S0 = torch.randn(64, 8, 6, generator=g, dtype=F64)
    k = norm * _unit(torch.randn(64, 8, generator=g, dtype=F64))
    v = torch.randn(64, 6, generator=g, dtype=F64)
    beta = torch.rand(64, generator=g, dtype=F64)
    S = S0.clone()
    for _ in range(K):  # the K steps, one by one
        S = S + beta[:, None, None] * k[:, :, None] * (v - torch.einsum("nkv,nk->nv", S, k))[:, None, :]
    n = (k * k).sum(-1)
    closed = (1 - (1 - beta * n) ** K) / n
    b_eff = depth.gd_beta(k[:, None, None], beta[:, None, None], K)[:, 0, 0]  # the op: a geometric sum
    assert (b_eff - closed).abs().max() <= 5e-15
    one = S0 + b_eff[:, None, None] * k[:, :, None] * (v - torch.einsum("nkv,nk->nv", S0, k))[:, None, :]
    assert (one - S).abs().max() <= 5e-15


@pytest.mark.parametrize("K", [1, 2, 5])
def test_k_proximal_steps_are_one_with_beta_prime(K):
    """K Longhorn steps (ε = β/(1 + β‖k‖²) each) equal one with β' = ((1 + β‖k‖²)^K − 1)/‖k‖²."""
    g = torch.Generator().manual_seed(10 + K)
    S0 = torch.randn(64, 8, 6, generator=g, dtype=F64)
    k = _unit(torch.randn(64, 8, generator=g, dtype=F64))
    v = torch.randn(64, 6, generator=g, dtype=F64)
    beta = torch.rand(64, generator=g, dtype=F64)
    n = (k * k).sum(-1)
    step = lambda S, b: S + (b / (1 + b * n))[:, None, None] * k[:, :, None] * (  # noqa: E731
        v - torch.einsum("nkv,nk->nv", S, k))[:, None, :]
    S = S0.clone()
    for _ in range(K):
        S = step(S, beta)
    b_prime = depth.implicit_beta(k[:, None, None], beta[:, None, None], K)[:, 0, 0]
    # the closed form's own rounding is ~eps·(1 + βn)^K (β' grows to 2^K − 1): held to that scale
    assert ((b_prime - ((1 + beta * n) ** K - 1) / n).abs() / (1 + beta * n) ** K).max() <= 5e-15
    assert (step(S0, b_prime) - S).abs().max() <= 5e-15


CASES = [(name, K) for name in ("deltanet", "gated_deltanet", "longhorn") for K in (1, 2, 5)]


@pytest.mark.parametrize("name,K", CASES, ids=[f"{n}-K{k}" for n, k in CASES])
def test_derived_equals_unrolled_and_lowered(name, K):
    """derived (K autograd steps) vs the hand-written unrolled loop vs the chunk form with β_eff."""
    spec = with_steps(name, K)
    assert spec.algebra == "delta" and lower(spec).name == "chunk"
    case = make_case(spec, B=2, T=37, H=2, K=8, V=5, seed=K)
    truth = run(derive(spec), case)
    hw_name, hw = hand_written(spec)
    unrolled = f"recurrent_delta_steps(implicit, steps={K})" if name == "longhorn" else f"recurrent_delta_steps(steps={K})"
    assert hw_name == (unrolled if K > 1 else {"longhorn": "recurrent_longhorn"}.get(name, "recurrent_delta_rule"))
    for fn, extra in ((hw, {}), (lower(spec, "chunk").fn, {"chunk_size": 16}), (lower(spec, "recurrent").fn, {})):
        assert max_abs_error(truth, run(fn, case, extra=extra)) <= EXACT_ATOL


def test_depth_changes_the_update():
    """The depth is not a no-op: K = 3 differs from K = 1 on the same inputs."""
    case = make_case(get_preset("gated_deltanet"), T=20, seed=3)
    one, three = run(derive(get_preset("gated_deltanet")), case), run(derive(with_steps("gated_deltanet", 3)), case)
    assert max_abs_error(one, three) > 1e-2


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "longhorn", "linear_attention", "gla"])
def test_one_step_is_todays_preset_bit_for_bit(name):
    """steps: 1 (the default) inserts nothing: the lowered op is the row's op itself, and the derived
    update of an explicit steps=1 spec equals the preset's bit for bit."""
    preset, explicit = get_preset(name), with_steps(name, 1)
    assert explicit.optimizer == preset.optimizer and "steps" not in derive(preset).describe()
    case = make_case(preset, T=21, seed=1)
    a, b = run(derive(preset), case), run(derive(explicit), case)
    assert all(torch.equal(x, y) for x, y in zip(a["output"] + a["state"], b["output"] + b["state"]))
    assert all(torch.equal(a["grad"][n], b["grad"][n]) for n in a["grad"])
    raw = {"deltanet": delta.chunk_delta_rule, "gated_deltanet": delta.chunk_delta_rule,
           "longhorn": delta.chunk_longhorn}.get(name)
    if raw is not None:  # no β_eff wrapper at K = 1
        got, want = run(lower(explicit, "chunk").fn, case), run(raw, case)
        assert all(torch.equal(x, y) for x, y in zip(got["output"] + got["state"], want["output"] + want["state"]))


def test_dot_product_depth_is_k_beta():
    """Hebbian: K steps on −⟨Sᵀk, v⟩ write K·β v kᵀ (retention once with retain_then_gd)."""
    spec = MixerSpec(name="gla_steps3", memory=Matrix(), bias=get_preset("gla").bias, retention=L2Decay(gate="key"),
                     optimizer=RetainThenGD(steps=3), layer=get_preset("gla").layer)
    assert spec.algebra == "hebbian" and "3·β_t" in derive(spec).describe()
    case = make_case(spec, T=30, seed=2)
    truth = run(derive(spec), case)
    assert hand_written(spec)[0] == "recurrent_hebbian_steps(steps=3)"
    for fn in (hand_written(spec)[1], lower(spec, "chunk").fn):
        assert max_abs_error(truth, run(fn, case)) <= EXACT_ATOL


def test_not_exact_runs_the_scan():
    """K joint steps (decay K times) and non-quadratic biases have no single-step form: class scan,
    with the hand-written unrolled Huber loop as the reference."""
    joint = with_steps("gated_deltanet_joint", 2)
    assert joint.algebra == "scan" and lower(joint).name == "scan"
    mamba = with_steps("mamba2", 2)  # GD with decay: α^K and Σ α^j, not K·β
    assert mamba.algebra == "scan"
    huber = with_steps("huber_delta", 3)
    assert huber.algebra == "scan" and "the step taken 3 times per token" in derive(huber).describe()
    case = make_case(huber, T=25, seed=4)
    name, fn = hand_written(huber)
    assert name == "recurrent_huber_delta(steps=3)"
    assert max_abs_error(run(derive(huber), case), run(fn, case)) <= EXACT_ATOL
    one = run(hand_written(get_preset("huber_delta"))[1], case)
    assert max_abs_error(run(fn, case), one) > 1e-2


def test_steps_zero_is_refused_with_the_field():
    for opt in (GD, RetainThenGD, Implicit):
        with pytest.raises(ValueError, match="steps") as err:
            opt(steps=0)
        assert "greater than or equal to 1" in str(err.value)
    with pytest.raises(ValueError, match="steps"):
        MixerSpec.model_validate({"bias": {"kind": "l2"}, "optimizer": {"kind": "retain_then_gd", "steps": 0}})


def test_verify_covers_the_depth_preset():
    """gated_deltanet_steps3: hand-written unrolled, chunk with β_eff and the transformers / FLA
    references run with β_eff, all within their tolerance; transformers' float64 pairs to 1e-12."""
    results = verify("gated_deltanet_steps3", T=40)
    assert all(r.passed for r in results), [(r.pair, r.max_abs_error) for r in results if not r.passed]
    pairs = {r.pair: r for r in results}
    assert "derived vs recurrent_delta_steps(steps=3) (hand-written)" in pairs
    tf = [r for p, r in pairs.items() if "transformers:qwen3_next" in p and "β_eff of 3 steps" in p]
    assert tf and all(r.max_abs_error <= 1e-12 or r.tolerance > 1e-10 for r in tf)


def test_derive_cli_shows_beta_eff(tmp_path):
    spec = with_steps("deltanet", 4)
    path = tmp_path / "deep.yaml"
    path.write_text(spec.to_yaml())
    out = subprocess.run([sys.executable, "-m", "assocmem.cli", "derive", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "β_eff,t = (1 − (1 − β_t‖k_t‖²)^4)/‖k_t‖²" in out and "class:     delta" in out
    assert "forms:     chunk, recurrent" in out
