"""Delta-rule family: chunkwise (WY/UT) forms against the hand-written recurrences and external oracles."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from assocmem.mixers.ops import delta

B, H, K, V = 2, 2, 8, 12
EXACT = dict(atol=1e-10, rtol=0.0)
# relative RMS error of half-precision inputs (float32 state) against float64, T = 53:
# measured 3.6e-3 (bf16, eps 2^-8) and 4.7e-4 (fp16, eps 2^-11) for o and S; bounds ≈ 3x that
HALF_REL_RMS = {torch.bfloat16: 1e-2, torch.float16: 1.5e-3}

# family -> (recurrent form, chunk form, log_alpha kind)
FAMILIES = {
    "deltanet": (delta.recurrent_delta_rule, delta.chunk_delta_rule, None),
    "gated_deltanet": (delta.recurrent_delta_rule, delta.chunk_delta_rule, "scalar"),
    "longhorn": (delta.recurrent_longhorn, delta.chunk_longhorn, None),
    "gated_longhorn": (delta.recurrent_longhorn, delta.chunk_longhorn, "scalar"),
    "joint_scalar": (delta.recurrent_delta_rule_joint, delta.chunk_delta_rule_joint, "scalar"),
    "joint_key": (delta.recurrent_delta_rule_joint, delta.chunk_delta_rule_joint, "key"),
    "kda": (delta.recurrent_kda, delta.chunk_kda, "key"),
}
# (T, chunk_size): C−1, C, C+1, 3C+5 with C = 16, and T = 65 with the default chunk size
LENGTHS = [(1, 16), (15, 16), (16, 16), (17, 16), (53, 16), (65, 64)]
GRAD_NAMES = ("q", "k", "v", "log_alpha", "beta", "initial_state")


def make_inputs(T, gate, *, seed=0, decay=(-1.0, 0.0), dtype=torch.float64, with_state=True,
                b=B, h=H, dk=K, dv=V):
    """Keyword inputs of the op contract: L2-normalised k, β ∈ (0, 1), log_alpha uniform in `decay`."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    uni = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=g, dtype=torch.float64)  # noqa: E731
    x = dict(q=rnd(b, T, h, dk), k=F.normalize(rnd(b, T, h, dk), dim=-1), v=rnd(b, T, h, dv),
             beta=uni(0.05, 0.95, b, T, h))
    if gate is not None:
        x["log_alpha"] = uni(*decay, *((b, T, h) if gate == "scalar" else (b, T, h, dk)))
    if with_state:
        x["initial_state"] = rnd(b, h, dk, dv)
    return {name: t.to(dtype) for name, t in x.items()}


def run(fn, x, **kw):
    return fn(**x, output_final_state=True, **kw)


def outputs_and_grads(fn, x, **kw):
    """o, final S and the gradients of a random-cotangent loss w.r.t. every input."""
    x = {n: t.detach().clone().requires_grad_(True) for n, t in x.items()}
    o, S = run(fn, x, **kw)
    g = torch.Generator().manual_seed(123)
    loss = (o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() \
        + (S * torch.randn(S.shape, generator=g, dtype=S.dtype)).sum()
    loss.backward()
    return o.detach(), S.detach(), {n: x[n].grad for n in GRAD_NAMES if n in x}


# ----------------------------------------------------------------------------- chunk == recurrent

@pytest.mark.parametrize("T,C", LENGTHS, ids=[f"T{T}_C{C}" for T, C in LENGTHS])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_chunk_matches_recurrent(family, T, C):
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(T, gate, seed=T)
    o_r, S_r, g_r = outputs_and_grads(rec, x)
    o_c, S_c, g_c = outputs_and_grads(chunk, x, chunk_size=C)
    assert_close(o_c, o_r, **EXACT)
    assert_close(S_c, S_r, **EXACT)
    assert g_c.keys() == g_r.keys()
    for name in g_r:
        assert_close(g_c[name], g_r[name], **EXACT, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("family", ["gated_deltanet", "joint_scalar", "joint_key", "kda"])
def test_strong_decay_is_stable(family):
    """log α ≈ −5 per token (and −20 for the per-key form: e^{−G} would overflow over a chunk of 64)."""
    rec, chunk, gate = FAMILIES[family]
    for decay, T, C in [((-6.0, -4.0), 53, 16), ((-25.0, -15.0), 70, 64)]:
        x = make_inputs(T, gate, seed=1, decay=decay)
        o_r, S_r, g_r = outputs_and_grads(rec, x)
        o_c, S_c, g_c = outputs_and_grads(chunk, x, chunk_size=C)
        assert torch.isfinite(o_c).all() and all(torch.isfinite(g).all() for g in g_c.values())
        assert_close(o_c, o_r, **EXACT)
        assert_close(S_c, S_r, **EXACT)
        for name in g_r:
            assert_close(g_c[name], g_r[name], **EXACT, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("family", ["gated_deltanet", "joint_key"])
def test_chunk_groups_match_recurrent(family, monkeypatch):
    """Chunks are processed in groups of ~GROUP_TOKENS tokens; several groups (one ragged) == recurrent."""
    from assocmem.mixers.ops import delta_chunk
    monkeypatch.setattr(delta_chunk, "GROUP_TOKENS", 40)  # C = 16: groups of 2 chunks = 32 tokens
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(83, gate, seed=2)
    o_r, S_r, g_r = outputs_and_grads(rec, x)
    o_c, S_c, g_c = outputs_and_grads(chunk, x, chunk_size=16)
    assert_close(o_c, o_r, **EXACT)
    assert_close(S_c, S_r, **EXACT)
    for name in g_r:
        assert_close(g_c[name], g_r[name], **EXACT, msg=lambda m: f"grad {name}: {m}")


def test_long_sequence_default_groups():
    """T = 1100 > the default group size (1024 tokens), float64, chunk_size 64."""
    x = make_inputs(1100, "scalar", seed=3, b=1, h=1, dk=4, dv=3)
    o_r, S_r = run(delta.recurrent_delta_rule, x)
    o_c, S_c = run(delta.chunk_delta_rule, x)
    assert_close(o_c, o_r, **EXACT)
    assert_close(S_c, S_r, **EXACT)


# ----------------------------------------------------------------------------- state passing

@pytest.mark.parametrize("form", ["recurrent", "chunk"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_state_passing(family, form):
    """f(x) == f(x[:, t:], initial_state=f(x[:, :t]).state), t not on a chunk boundary."""
    fn = FAMILIES[family][0 if form == "recurrent" else 1]
    kw = {} if form == "recurrent" else dict(chunk_size=16)
    x = make_inputs(45, FAMILIES[family][2], seed=7)
    o, S = run(fn, x, **kw)
    head = {n: (t[:, :21] if n != "initial_state" else t) for n, t in x.items()}
    o1, S1 = run(fn, head, **kw)
    tail = {n: t[:, 21:] for n, t in x.items() if n != "initial_state"}
    o2, S2 = run(fn, {**tail, "initial_state": S1}, **kw)
    assert_close(torch.cat([o1, o2], dim=1), o, **EXACT)
    assert_close(S2, S, **EXACT)


# ----------------------------------------------------------------------------- gradcheck

@pytest.mark.parametrize("family", list(FAMILIES))
def test_gradcheck_chunk(family):
    _, chunk, gate = FAMILIES[family]
    x = make_inputs(7, gate, seed=3, b=1, h=2, dk=3, dv=2)  # three chunks of 3, the last one padded
    names = list(x)

    def f(*ts):
        o, S = chunk(**dict(zip(names, ts)), output_final_state=True, chunk_size=3)
        return o, S

    assert torch.autograd.gradcheck(f, tuple(t.requires_grad_(True) for t in x.values()), fast_mode=True)


@pytest.mark.parametrize("family", ["gated_deltanet", "joint_key"])
def test_gradcheck_chunk_full_jacobian(family):
    """Element-wise (slow-mode) gradcheck on the smallest shapes: three chunks of 2, the last one padded."""
    _, chunk, gate = FAMILIES[family]
    x = make_inputs(5, gate, seed=5, b=1, h=1, dk=2, dv=2)
    names = list(x)
    f = lambda *ts: chunk(**dict(zip(names, ts)), output_final_state=True, chunk_size=2)  # noqa: E731
    assert torch.autograd.gradcheck(f, tuple(t.requires_grad_(True) for t in x.values()))


def test_gradcheck_recurrent_joint_key():
    x = make_inputs(4, "key", seed=4, b=1, h=2, dk=3, dv=2)
    names = list(x)
    f = lambda *ts: delta.recurrent_delta_rule_joint(**dict(zip(names, ts)), output_final_state=True)  # noqa: E731
    assert torch.autograd.gradcheck(f, tuple(t.requires_grad_(True) for t in x.values()), fast_mode=True)


# ----------------------------------------------------------------------------- the equations themselves

def test_longhorn_is_the_exact_proximal_step():
    """S_1 = argmin ½‖Sᵀk − v‖² + 1/(2β)‖S − S_0‖²: (S_1 − S_0)/β + k (S_1ᵀ k − v)ᵀ = 0."""
    x = make_inputs(1, None, seed=5)
    x["k"] = x["k"] * 1.7  # ‖k‖ ≠ 1, so ε differs from β
    _, S1 = run(delta.recurrent_longhorn, x)
    k, v, beta, S0 = x["k"][:, 0], x["v"][:, 0], x["beta"][:, 0, :, None, None], x["initial_state"]
    residual = torch.einsum("bhkv,bhk->bhv", S1, k) - v  # (B, H, V)
    grad = (S1 - S0) / beta + k[..., :, None] * residual[..., None, :]
    assert_close(grad, torch.zeros_like(grad), **EXACT)


def test_joint_scalar_equals_joint_per_key_broadcast_and_differs_from_gated():
    x = make_inputs(37, "scalar", seed=6)
    o_s, S_s = run(delta.chunk_delta_rule_joint, x, chunk_size=16)
    xk = {**x, "log_alpha": x["log_alpha"][..., None].expand(B, 37, H, K)}
    o_k, S_k = run(delta.chunk_delta_rule_joint, xk, chunk_size=16)
    assert_close(o_k, o_s, **EXACT)
    assert_close(S_k, S_s, **EXACT)
    o_g, _ = run(delta.recurrent_delta_rule, x)
    assert (o_g - o_s).abs().max() > 1e-2  # α(I − βkkᵀ)S ≠ (αI − βkkᵀ)S


def test_deltanet_by_hand_one_step_and_beta_default():
    x = make_inputs(1, None, seed=8)
    x.pop("beta")
    o, S = run(delta.recurrent_delta_rule, x)
    k, v, q, S0 = x["k"][:, 0], x["v"][:, 0], x["q"][:, 0], x["initial_state"]
    eye = torch.eye(K, dtype=torch.float64)
    S_ref = (eye - k[..., :, None] * k[..., None, :]) @ S0 + k[..., :, None] * v[..., None, :]
    assert_close(S, S_ref, **EXACT)
    assert_close(o[:, 0], torch.einsum("bhkv,bhk->bhv", S_ref, q * K ** -0.5), **EXACT)
    o_c, S_c = run(delta.chunk_delta_rule, x, chunk_size=16)
    assert_close(o_c, o, **EXACT)
    assert_close(S_c, S, **EXACT)


# ----------------------------------------------------------------------------- precision

@pytest.mark.parametrize("family", ["gated_deltanet", "longhorn", "joint_key"])
def test_float32_matches_float64(family):
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(53, gate, seed=9)
    o64, S64 = run(rec, x)
    o32, S32 = run(chunk, {n: t.float() for n, t in x.items()}, chunk_size=16)
    assert o32.dtype == S32.dtype == torch.float32
    assert_close(o32, o64.float())
    assert_close(S32, S64.float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("family", ["gated_deltanet", "joint_key"])
def test_half_inputs_float32_state(family, dtype):
    rec, chunk, gate = FAMILIES[family]
    x = make_inputs(53, gate, seed=10)
    o64, S64 = run(rec, x)
    for fn, kw in [(rec, {}), (chunk, dict(chunk_size=16))]:
        o, S = run(fn, {n: t.to(dtype) for n, t in x.items()}, **kw)
        assert o.dtype == dtype and S.dtype == torch.float32
        rel = lambda a, b: ((a.double() - b).square().mean() / b.square().mean()).sqrt().item()  # noqa: E731
        assert rel(o, o64) < HALF_REL_RMS[dtype] and rel(S, S64) < HALF_REL_RMS[dtype]


# ----------------------------------------------------------------------------- external oracles

def _qwen3_next(name):
    m = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    fn = getattr(m, name)
    return getattr(fn, "__wrapped__", fn)


def _fla_naive(family):
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        pytest.skip("fla-core not installed")
    pytest.importorskip("einops")
    path = Path(spec.origin).parent / "ops" / family / "naive.py"
    mod_spec = importlib.util.spec_from_file_location(f"_fla_naive_{family}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["chunk", "recurrent"])
def test_transformers_qwen3_next_gated_delta(kind):
    """transformers casts to float32 inside: compare at float32 tolerance (fixed scale K**-0.5)."""
    ref = _qwen3_next(f"torch_{kind}_gated_delta_rule")
    x = make_inputs(53, "scalar", seed=11)
    o64, S64 = run(delta.recurrent_delta_rule, x)
    x32 = {n: t.float() for n, t in x.items()}
    kw = dict(chunk_size=16) if kind == "chunk" else {}
    o_ref, S_ref = ref(x32["q"], x32["k"], x32["v"], g=x32["log_alpha"], beta=x32["beta"],
                       initial_state=x32["initial_state"], output_final_state=True, **kw)
    assert_close(o_ref, o64.float())
    assert_close(S_ref, S64.float())
    o32, S32 = run(delta.chunk_delta_rule, x32, chunk_size=16)
    assert_close(o32, o_ref)
    assert_close(S32, S_ref)


@pytest.mark.parametrize("kind", ["chunk", "recurrent"])
def test_transformers_kimi_delta_attention(kind):
    """transformers kimi_linear KDA references (per-key decay, float32 inside, scale K**-0.5)."""
    m = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    ref = getattr(m, f"{kind}_kimi_delta_attention")
    ref = getattr(ref, "__wrapped__", ref)
    x = make_inputs(53, "key", seed=15)
    o64, S64 = run(delta.recurrent_kda, x)
    x32 = {n: t.float() for n, t in x.items()}
    kw = dict(chunk_size=16) if kind == "chunk" else {}
    o_ref, S_ref = ref(x32["q"], x32["k"], x32["v"], x32["log_alpha"], x32["beta"],
                       initial_state=x32["initial_state"], output_final_state=True, **kw)
    assert_close(o_ref, o64.float())
    assert_close(S_ref, S64.float())


def test_kda_differs_from_joint_per_key():
    x = make_inputs(20, "key", seed=16)
    o_kda, _ = run(delta.chunk_kda, x, chunk_size=16)
    o_joint, _ = run(delta.chunk_delta_rule_joint, x, chunk_size=16)
    assert (o_kda - o_joint).abs().max() > 1e-2  # (I − βkkᵀ) diag(α) S ≠ (diag(α) − βkkᵀ) S


def test_fla_naive_delta_rule():
    """fla delta_rule naive, [B, H, T, D] layout: the chunkwise one keeps float64 (T % C == 0, zero state)."""
    mod = _fla_naive("delta_rule")
    x = make_inputs(48, None, seed=12, with_state=False)
    o, S = run(delta.recurrent_delta_rule, x)
    bh = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731  [B, T, H, ·] -> [B, H, T, ·]
    o_ref, S_ref = mod.delta_rule_chunkwise(bh(x["q"]), bh(x["k"]), bh(x["v"]), bh(x["beta"]), chunk_size=16)
    assert o_ref.dtype == torch.float64
    assert_close(o_ref.transpose(1, 2), o, **EXACT)
    assert_close(S_ref, S, **EXACT)
    S0 = make_inputs(48, None, seed=13)["initial_state"]
    o, S = run(delta.chunk_delta_rule, {**x, "initial_state": S0}, chunk_size=16)
    o_ref, S_ref = mod.delta_rule_recurrence(bh(x["q"]), bh(x["k"]), bh(x["v"]), bh(x["beta"]),
                                             initial_state=S0, output_final_state=True)  # computes in float32
    assert_close(o_ref.transpose(1, 2).float(), o.float())
    assert_close(S_ref, S.float())


def test_fla_naive_gated_delta_rule():
    """fla gated_delta_rule naive (recurrent takes beta, g; chunk takes g, beta); both compute in float32."""
    mod = _fla_naive("gated_delta_rule")
    x = make_inputs(53, "scalar", seed=14)
    a = dict(q=x["q"], k=x["k"], v=x["v"], scale=0.3, initial_state=x["initial_state"], output_final_state=True)
    o, S = run(delta.chunk_delta_rule, {**x, "scale": 0.3}, chunk_size=16)
    o_r, S_r = mod.naive_recurrent_gated_delta_rule(beta=x["beta"], g=x["log_alpha"], **a)
    o_c, S_c = mod.naive_chunk_gated_delta_rule(g=x["log_alpha"], beta=x["beta"], chunk_size=16, **a)
    for o_ref, S_ref in [(o_r, S_r), (o_c, S_c)]:
        assert_close(o_ref, o.float())
        assert_close(S_ref, S.float())


# ----------------------------------------------------------------------------- bad input

def test_per_key_log_alpha_rejected_by_scalar_forms():
    x = make_inputs(5, "key")
    for fn in (delta.recurrent_delta_rule, delta.chunk_delta_rule, delta.chunk_longhorn):
        with pytest.raises(ValueError, match=r"log_alpha must be None or \[B, T, H\] = \(2, 5, 2\)"):
            fn(**x)


@pytest.mark.parametrize("fn", [delta.recurrent_delta_rule_joint, delta.chunk_delta_rule])
def test_bad_shapes_and_dtypes(fn):
    x = make_inputs(5, "scalar")
    cases = [
        (dict(k=x["k"][:, :4]), ValueError, "k must have the shape of q"),
        (dict(v=x["v"][:, :, :1]), ValueError, r"v must be \[B, T, H, V\]"),
        (dict(q=x["q"][0]), ValueError, r"q must be \[B, T, H, K\] \(rank 4\)"),
        (dict(beta=x["beta"][..., None]), ValueError, r"beta must be \[B, T, H\] \(rank 3\)"),
        (dict(beta=x["beta"][:, :4]), ValueError, r"beta must be None or \[B, T, H\]"),
        (dict(log_alpha=x["log_alpha"][:, :, :1]), ValueError, "log_alpha must be None or"),
        (dict(initial_state=x["initial_state"][..., :3]), ValueError, r"initial_state must be \[B, H, K, V\]"),
        (dict(q=x["q"].long()), TypeError, r"q \[B, T, H, K\] must have a floating dtype"),
        (dict(v=x["v"].int()), TypeError, r"v \[B, T, H, V\] must have a floating dtype"),
        (dict(log_alpha=x["log_alpha"].long()), TypeError, "log_alpha must be None or a floating tensor"),
        (dict(k=torch.complex(x["k"], x["k"])), TypeError,
         r"k \[B, T, H, K\] must have a floating dtype \(float16, bfloat16, float32 or float64.*got torch.complex128"),
        (dict(beta=x["beta"].bool()), TypeError, r"beta \[B, T, H\] must have a floating dtype"),
        (dict(initial_state=x["initial_state"].long()), TypeError,
         r"initial_state \[B, H, K, V\] must have a floating"),
        (dict(scale="big"), TypeError, "scale must be a number"),
    ]
    for change, err, msg in cases:
        with pytest.raises(err, match=msg):
            fn(**{**x, **change})
    o, _ = fn(**{**x, "v": x["v"].float()})  # a float v of another dtype is accepted (contract.py's dtype rule)
    assert o.dtype == torch.float32
    with pytest.raises(TypeError):
        fn(x["q"], x["k"], x["v"], x["log_alpha"])  # gates are keyword-only


def test_bad_chunk_size():
    x = make_inputs(5, None)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"chunk_size must be None \(the op's default\) or a positive int"):
            delta.chunk_delta_rule(**x, chunk_size=bad)


def test_default_chunk_size_is_the_ops_choice():
    """chunk_size=None runs at default_chunk_size(K) and gives the same result as passing it."""
    x = make_inputs(70, "scalar")
    K = x["q"].shape[-1]
    a, Sa = delta.chunk_delta_rule(**x, output_final_state=True)
    b, Sb = delta.chunk_delta_rule(**x, output_final_state=True, chunk_size=delta.default_chunk_size(K))
    assert torch.equal(a, b) and torch.equal(Sa, Sb)


@pytest.mark.parametrize("b,h", [(1, 1), (2, 3)])
@pytest.mark.parametrize("fn", [delta.chunk_delta_rule, delta.chunk_delta_rule_joint])
def test_forward_without_grad_overwrites_only_its_own_copies(fn, b, h):
    """The no-grad forward works in place on its chunked copies: the caller's tensors are unchanged
    (also at B = H = 1, where chunking is a pure reshape) and the result is the autograd path's
    (to rounding: its carry keeps the decay folded, ``carry_read`` with a ``fold_plan``)."""
    x = make_inputs(37, "scalar", b=b, h=h)
    before = {n: t.clone() for n, t in x.items()}
    with torch.no_grad():
        o, S = fn(**x, chunk_size=8, output_final_state=True)
    for n, t in x.items():
        assert torch.equal(t, before[n]), n
    xg = {n: t.clone().requires_grad_() for n, t in x.items()}
    og, Sg = fn(**xg, chunk_size=8, output_final_state=True)
    torch.testing.assert_close(o, og.detach(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(S, Sg.detach(), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_folded_carry_with_segments_and_explicit_chunks(dtype):
    """No-grad carry (``carry_read`` with a ``fold_plan``) on a decay that makes every kind of step: multi-chunk
    segments with rescaling at their ends, and chunks too strong to fold (explicit multiply)."""
    from assocmem.mixers.ops.delta_carry import fold_plan

    x = make_inputs(200, "scalar", decay=(-3.0, 0.0))
    x["log_alpha"][:, 64:80] *= 40.0  # two chunks of 8 tokens decay by up to e^-960: explicit
    c = x["log_alpha"].reshape(B, 25, 8, H).sum(2).permute(1, 0, 2).reshape(25, B * H)  # chunk log decays
    plan = fold_plan(c.to(dtype))
    explicit, rescale = plan.explicit, plan.rescale
    assert any(explicit) and sum(rescale) > 1 and not all(rescale)  # all three kinds of step occur
    ref, S_ref = delta.recurrent_delta_rule(**x, output_final_state=True)
    xd = {n: t.to(dtype) for n, t in x.items()}
    with torch.no_grad():
        o, S = delta.chunk_delta_rule(**xd, chunk_size=8, output_final_state=True)
    tol = EXACT if dtype == torch.float64 else {}
    torch.testing.assert_close(o, ref.to(dtype), **tol)
    torch.testing.assert_close(S, S_ref.to(dtype), **tol)


def test_fold_plan_is_causal_and_consistent():
    """``fold_plan``: a chunk's log decays depend on the chunks up to it only (bit for bit), and within
    a segment each chunk starts where the previous one ended (d_in[n + 1] == d_out[n] exactly)."""
    from assocmem.mixers.ops.delta_carry import fold_plan

    g = torch.Generator().manual_seed(0)
    c = -30.0 * torch.rand(40, 6, generator=g, dtype=torch.float64)  # float64: limit 177, several segments
    plan = fold_plan(c)
    assert sum(plan.rescale) > 2 and not any(plan.explicit)
    for n in range(39):
        if not plan.rescale[n]:
            assert torch.equal(plan.d_in[n + 1], plan.d_out[n])
        else:
            assert torch.equal(plan.d_in[n + 1], torch.zeros(6, dtype=c.dtype))
        assert plan.d_out[n].min() >= -math.log(torch.finfo(c.dtype).max) / 4
    for cut in (5, 17, 33):
        later = c.clone()
        later[cut:] -= torch.rand(40 - cut, 6, generator=g, dtype=c.dtype)
        other = fold_plan(later)
        assert torch.equal(other.d_in[:cut], plan.d_in[:cut]) and torch.equal(other.d_out[:cut], plan.d_out[:cut])
        assert other.rescale[:cut - 1] == plan.rescale[:cut - 1]
