"""Hebbian family (linear attention, RetNet, Mamba2, GLA): chunk vs recurrent, state
passing, precision, gradcheck, and external oracles (FLA naive files, transformers'
mamba2_chunk_scan)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from assocmem.mixers.ops.chunking import chunks
from assocmem.mixers.ops.hebbian import _factorizable, chunk_hebbian, recurrent_hebbian

B, H, K, V = 2, 2, 8, 12
EXACT = dict(atol=1e-10, rtol=0.0)
LENGTHS = [1, 63, 64, 65, 197]
# decay kinds: mild decays take the factorised intra-chunk path, strong ones the explicit one
DECAYS = ["none", "scalar", "key", "scalar_strong", "key_strong"]
F64 = torch.float64


def make_inputs(T, decay, *, beta=True, seed=0, dtype=F64, b=B, h=H, k=K, v=V):
    """q, k [b,T,h,k], v [b,T,h,v], log_alpha per ``decay``, beta in (0, 1], nonzero state."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    uni = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    gate_shape = (b, T, h, k) if decay.startswith("key") else (b, T, h)
    strength = 30.0 if decay.endswith("strong") else 0.5
    x = dict(q=rnd(b, T, h, k), k=rnd(b, T, h, k), v=rnd(b, T, h, v),
             log_alpha=None if decay == "none" else -uni(*gate_shape) * strength,
             beta=uni(b, T, h) * 0.9 + 0.1 if beta else None, initial_state=rnd(b, h, k, v))
    return {n: (t.to(dtype) if t is not None else None) for n, t in x.items()}


def run(form, x, **kw):
    return form(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"], beta=x["beta"],
                initial_state=x["initial_state"], output_final_state=True, **kw)


def outputs_and_grads(form, x, seed=1, **kw):
    """o, S and the input gradients of ⟨o, do⟩ + ⟨S, dS⟩ for random cotangents."""
    x = {n: (t.detach().clone().requires_grad_() if t is not None else None) for n, t in x.items()}
    o, S = run(form, x, **kw)
    g = torch.Generator().manual_seed(seed)
    loss = (o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() \
        + (S * torch.randn(S.shape, generator=g, dtype=S.dtype)).sum()
    leaves = [t for t in x.values() if t is not None]
    return o.detach(), S.detach(), torch.autograd.grad(loss, leaves)


def test_decay_strengths_cover_both_intra_paths():
    for C in (16, 64):
        for decay, want in [("scalar", True), ("key", True), ("scalar_strong", False), ("key_strong", False)]:
            g = chunks(make_inputs(197, decay)["log_alpha"], C).cumsum(dim=3)  # as chunk_hebbian does
            assert _factorizable(g) is want, (C, decay)


@pytest.mark.parametrize("C", [64, 16])
@pytest.mark.parametrize("beta", [False, True], ids=["nobeta", "beta"])
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("T", LENGTHS)
def test_chunk_matches_recurrent(T, decay, beta, C):
    x = make_inputs(T, decay, beta=beta)
    o_r, S_r, g_r = outputs_and_grads(recurrent_hebbian, x)
    o_c, S_c, g_c = outputs_and_grads(chunk_hebbian, x, chunk_size=C)
    assert_close(o_c, o_r, **EXACT)
    assert_close(S_c, S_r, **EXACT)
    for a, b in zip(g_c, g_r):
        assert_close(a, b, **EXACT)


@pytest.mark.parametrize("decay", ["none", "scalar", "key"])
def test_chunk_groups_match_recurrent(decay, monkeypatch):
    """Long sequences run in groups of ~GROUP_TOKENS tokens: several groups (one ragged) and a
    decay that is mild in one group and strong in another (each group picks its own exact
    intra-chunk path) equal the recurrence, outputs, state and gradients."""
    from assocmem.mixers.ops import groups
    monkeypatch.setattr(groups, "GROUP_TOKENS", 40)  # C = 16: groups of 2 chunks = 32 tokens
    x = make_inputs(83, decay)
    if decay != "none":
        x["log_alpha"][:, 32:64] *= 60.0  # the second group only: strong decay, explicit path
        g = x["log_alpha"].cumsum(1)
        assert _factorizable(g[:, :16]) and not _factorizable(g[:, 32:48] - g[:, 31:32])
    o_r, S_r, g_r = outputs_and_grads(recurrent_hebbian, x)
    o_c, S_c, g_c = outputs_and_grads(chunk_hebbian, x, chunk_size=16)
    assert_close(o_c, o_r, **EXACT)
    assert_close(S_c, S_r, **EXACT)
    for a, b in zip(g_c, g_r):
        assert_close(a, b, **EXACT)


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("form", [recurrent_hebbian, chunk_hebbian], ids=["recurrent", "chunk"])
def test_state_passing(form, decay):
    x, t = make_inputs(100, decay), 37
    kw = dict(chunk_size=16) if form is chunk_hebbian else {}
    o, S = run(form, x, **kw)
    first = {n: (a[:, :t] if a is not None and n != "initial_state" else a) for n, a in x.items()}
    o1, S1 = run(form, first, **kw)
    second = {n: (a[:, t:] if a is not None and n != "initial_state" else a) for n, a in x.items()}
    o2, S2 = run(form, second | {"initial_state": S1}, **kw)
    assert_close(torch.cat([o1, o2], dim=1), o, **EXACT)
    assert_close(S2, S, **EXACT)


def test_defaults_no_state_and_scale():
    """initial_state None = zeros; scale None = K**-0.5; S is None unless asked for."""
    x = make_inputs(65, "scalar")
    o, S = chunk_hebbian(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"])
    assert S is None
    ref, _ = recurrent_hebbian(x["q"] * K ** -0.5, x["k"], x["v"], log_alpha=x["log_alpha"],
                               scale=1.0, initial_state=torch.zeros(B, H, K, V, dtype=F64))
    assert_close(o, ref, **EXACT)


@pytest.mark.parametrize("decay", DECAYS)
def test_float32_chunk_vs_float64_recurrent(decay):
    x = make_inputs(197, decay)
    o64, S64 = run(recurrent_hebbian, x)
    o32, S32 = run(chunk_hebbian, {n: (a.float() if a is not None else None) for n, a in x.items()})
    assert o32.dtype == S32.dtype == torch.float32
    assert_close(o32, o64.float())
    assert_close(S32, S64.float())


def rel_rms(a, ref):
    return ((a.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


# bf16 output rounding alone is ≤ 2^-9 relative (RMS ≈ 2^-9/√3 ≈ 1.1e-3); the float32
# accumulation adds ~1e-6, so 4e-3 leaves room for the rounding but not for a bf16 state.
BF16_REL_RMS = 4e-3


@pytest.mark.parametrize("decay", ["none", "scalar", "key"])
@pytest.mark.parametrize("form", [recurrent_hebbian, chunk_hebbian], ids=["recurrent", "chunk"])
def test_bf16_accumulates_in_float32(form, decay):
    x = make_inputs(197, decay, dtype=torch.bfloat16)
    o_ref, S_ref = run(recurrent_hebbian, {n: (a.double() if a is not None else None) for n, a in x.items()})
    o, S = run(form, x)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    assert rel_rms(o, o_ref) < BF16_REL_RMS
    assert rel_rms(S, S_ref) < 1e-5  # the state is never rounded to bf16


@pytest.mark.parametrize("decay", ["none", "scalar", "key", "scalar_strong", "key_strong"])
@pytest.mark.parametrize("form", [recurrent_hebbian, chunk_hebbian], ids=["recurrent", "chunk"])
def test_gradcheck(form, decay):
    x = make_inputs(5, decay, b=1, h=2, k=3, v=4)
    names = [n for n, a in x.items() if a is not None]
    kw = dict(chunk_size=2) if form is chunk_hebbian else {}

    def f(*args):
        return run(form, dict(x, **dict(zip(names, args))), **kw)

    inputs = tuple(x[n].clone().requires_grad_() for n in names)
    # fast mode (random projections of the Jacobian) keeps the many small chunk ops under a second
    assert torch.autograd.gradcheck(f, inputs, fast_mode=form is chunk_hebbian)


@pytest.mark.parametrize("bad, match", [
    (dict(q=torch.zeros(2, 5, 2)), r"q must be \[B, T, H, K\] \(rank 4\)"),
    (dict(k=torch.zeros(2, 6, 2, 8)), "k must have the shape of q"),
    (dict(v=torch.zeros(2, 5, 3, 12)), "v must be"),
    (dict(v=torch.zeros(1, 5, 2, 12)), "v must be"),
    (dict(log_alpha=torch.zeros(2, 5, 2, 9)), "log_alpha must be"),
    (dict(log_alpha=torch.zeros(2, 5)), r"log_alpha must be None or \[B, T, H\] or \[B, T, H, K\]"),
    (dict(beta=torch.zeros(2, 5, 3)), "beta must be"),
    (dict(initial_state=torch.zeros(2, 2, 12, 8)), "initial_state must be"),
    (dict(q=torch.zeros(2, 5, 2, 8, dtype=torch.int64)), r"q \[B, T, H, K\] must have a floating dtype"),
    (dict(log_alpha=torch.zeros(2, 5, 2, dtype=torch.int32)), "log_alpha must be None or a floating tensor"),
    (dict(scale="1"), "scale must be a number"),
    (dict(chunk_size=0), r"chunk_size must be None \(the op's default\) or a positive int"),
    (dict(chunk_size=1.5), r"chunk_size must be None \(the op's default\) or a positive int"),
], ids=lambda p: str(p)[:40] if isinstance(p, str) else None)
def test_bad_inputs(bad, match):
    good = dict(q=torch.zeros(2, 5, 2, 8), k=torch.zeros(2, 5, 2, 8), v=torch.zeros(2, 5, 2, 12))
    args = good | bad
    with pytest.raises((ValueError, TypeError), match=match):
        chunk_hebbian(args.pop("q"), args.pop("k"), args.pop("v"), **args)
    if "chunk_size" not in bad:
        args = good | bad
        with pytest.raises((ValueError, TypeError), match=match):
            recurrent_hebbian(args.pop("q"), args.pop("k"), args.pop("v"), **args)


# ---------------------------------------------------------------- external oracles
# FLA's naive files cast to float32 internally (except naive_chunk_linear_attn), and so
# does transformers' mamba2_chunk_scan: against those, our float64 result is compared
# with float32 assert_close defaults; naive_chunk_linear_attn keeps float64 (EXACT).


def fla_naive(family):
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / family / "naive.py"
    mod_spec = importlib.util.spec_from_file_location(f"fla_naive_{family}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


def f32(*xs):
    return [x.float() for x in xs]


def test_fla_linear_attn():
    fla = fla_naive("linear_attn")
    x = make_inputs(128, "none", beta=False)
    o, S = run(chunk_hebbian, x | {"initial_state": None})
    assert_close(fla.naive_chunk_linear_attn(x["q"], x["k"], x["v"]), o, **EXACT)  # float64 inside
    o, S = run(chunk_hebbian, x)
    o_ref, S_ref = fla.naive_recurrent_linear_attn(*f32(x["q"], x["k"], x["v"]), initial_state=x["initial_state"].float(),
                                                   output_final_state=True)
    assert_close(o_ref, o.float())
    assert_close(S_ref, S.float())


@pytest.mark.parametrize("T", [64, 197])
def test_fla_simple_gla(T):
    fla = fla_naive("simple_gla")
    x = make_inputs(T, "scalar", beta=False)
    o, S = run(chunk_hebbian, x, chunk_size=32)
    args = f32(x["q"], x["k"], x["v"], x["log_alpha"])
    o_ref, S_ref = fla.naive_recurrent_simple_gla(*args, initial_state=x["initial_state"].float(),
                                                  output_final_state=True)
    assert_close(o_ref, o.float())
    assert_close(S_ref, S.float())
    o_ref, S_ref = fla.naive_chunk_simple_gla(*args, initial_state=x["initial_state"].float(),
                                              output_final_state=True)
    assert_close(o_ref, o.float())
    assert_close(S_ref, S.float())


def test_fla_gla():
    fla = fla_naive("gla")
    x = make_inputs(197, "key", beta=False)
    o, S = run(chunk_hebbian, x)
    o_ref, S_ref = fla.naive_recurrent_gla(*f32(x["q"], x["k"], x["v"], x["log_alpha"]),
                                           initial_state=x["initial_state"].float(), output_final_state=True)
    assert_close(o_ref, o.float())
    assert_close(S_ref, S.float())


def test_fla_retention():
    """RetNet: fixed decay γ_h = 1 − 2^(−5−h); FLA's naive_retention takes [B, H, T, D]."""
    fla = fla_naive("retention")
    x = make_inputs(197, "none", beta=False, h=4)
    gamma = 1 - 2.0 ** (-5 - torch.arange(4, dtype=F64))  # (H,)
    log_alpha = gamma.log().expand(B, 197, 4)
    o, _ = chunk_hebbian(x["q"], x["k"], x["v"], log_alpha=log_alpha)
    o_ref = fla.naive_retention(*[t.transpose(1, 2) for t in f32(x["q"], x["k"], x["v"])]).transpose(1, 2)
    assert_close(o_ref, o.float())


@pytest.mark.parametrize("T", [64, 197])
def test_transformers_mamba2_chunk_scan(T):
    """Mamba2 = hebbian with q=C, k=B, v=x·dt (or v=x, beta=dt), log α = dt·A, scale 1, plus D·x."""
    m2 = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
    if not hasattr(m2, "mamba2_chunk_scan"):  # a module-level function since transformers 5.15
        pytest.skip("this transformers release has no module-level mamba2_chunk_scan (added in 5.15)")
    scan = getattr(m2.mamba2_chunk_scan, "__wrapped__", m2.mamba2_chunk_scan)
    g = torch.Generator().manual_seed(3)
    h, P, N = 4, 12, 8  # heads, head dim (V), state size (K)
    x, Bm, Cm = (torch.randn(1, T, *s, generator=g, dtype=F64) for s in ((h, P), (1, N), (1, N)))
    dt = torch.rand(1, T, h, generator=g, dtype=F64) * 0.5 + 0.01
    A, D = -torch.rand(h, generator=g, dtype=F64) * 4 - 0.5, torch.randn(h, generator=g, dtype=F64)
    S0 = torch.randn(1, h, N, P, generator=g, dtype=F64)  # ours [B, H, K, V]; theirs [B, H, P, N]
    y_ref, S_ref = scan(*f32(x, dt, A, Bm, Cm), chunk_size=64, D=D.float(), initial_states=S0.transpose(-1, -2).float(),
                        return_final_states=True)
    q, k = Cm.expand(1, T, h, N), Bm.expand(1, T, h, N)
    for v, beta in ((x * dt[..., None], None), (x, dt)):
        y, S = chunk_hebbian(q, k, v, log_alpha=dt * A, beta=beta, scale=1.0, initial_state=S0,
                             output_final_state=True)
        assert_close(y_ref, (y + D[:, None] * x).float())
        assert_close(S_ref, S.transpose(-1, -2).float())


def test_growth_on_the_explicit_path():
    """Positive log_alpha (growth) is accepted: a float32 chunk whose cumulative log growth exceeds
    the factorised path's bound (22) takes the explicit path, whose weights e^{segment sum} exceed 1."""
    x = make_inputs(100, "scalar")
    x["log_alpha"] = 0.3 + x["log_alpha"].abs()  # growth e^{0.3 … 0.8} per token
    x32 = {n: (t.float() if t is not None else None) for n, t in x.items()}
    assert not _factorizable(chunks(x32["log_alpha"], 64).cumsum(3))  # explicit path
    o_r, S_r = run(recurrent_hebbian, x)
    o_c, S_c = run(chunk_hebbian, x32, chunk_size=64)
    # values reach e^{55} and cancel, so compare normwise: float32 recurrence 2.6e-7, chunk 1.0e-6
    # (clamping the exponents at 0, as for decay, gives 0.76)
    for a, ref in ((o_c, o_r), (S_c, S_r)):
        assert ((a.double() - ref).norm() / ref.norm()).item() < 1e-5
