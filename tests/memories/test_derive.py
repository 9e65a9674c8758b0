"""derive(): closed forms it must reproduce, gradients, state passing, causality."""
import pytest
import torch

from assocmem.memories import (
    GD, L2, Diagonal, DotProduct, Huber, Implicit, KL, L2Decay, MLP, Matrix, Momentum, Proximal, derive,
)
from assocmem.mixers import MixerSpec, get_preset, list_presets
from assocmem.mixers.lower import derived
from assocmem.mixers.verify import make_case



@pytest.fixture(autouse=True)
def float64_default():
    """float64 by default inside this module only (a global default would leak into other tests)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _call(step, case, **over):
    kw = {n: t.detach() for n, t in case.tensors.items()}
    kw.update(over)
    q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
    return step(q, k, v, **kw, scale=case.scale, initial_state=case.initial_state, output_final_state=True)


def test_joint_gd_step_is_alpha_m_plus_beta_error_k():
    """One GD step on ℓ2 + ℓ2-decay at M_{t-1}: S_t = α S + β k (v − Sᵀk)ᵀ (thesis eq. 2.60)."""
    spec = get_preset("gated_deltanet_joint")
    case = make_case(spec, B=1, T=5, H=2, K=4, V=3)
    o, S = _call(derive(spec), case)
    t = {n: x.detach() for n, x in case.tensors.items()}
    ref = case.initial_state.clone()
    for i in range(5):
        k, v, a, b = t["k"][:, i], t["v"][:, i], t["log_alpha"][:, i].exp(), t["beta"][:, i]
        err = v - torch.einsum("bhk,bhkv->bhv", k, ref)
        ref = a[..., None, None] * ref + b[..., None, None] * k[..., :, None] * err[..., None, :]
    torch.testing.assert_close(S, ref, atol=1e-13, rtol=0)


def test_gdn_orderings_differ():
    """RetainThenGD (published GDN) and the joint GD step are different updates."""
    a, b = get_preset("gated_deltanet"), get_preset("gated_deltanet_joint")
    case = make_case(a, B=1, T=6, H=1, K=4, V=3)
    assert (_call(derive(a), case)[0] - _call(derive(b), case)[0]).abs().max() > 1e-3


def test_proximal_implicit_step_is_exact_for_l2():
    """argmin ½‖Sᵀk − v‖² + ½(1/η + λ)‖S − S_prev‖² in closed form (Sherman–Morrison)."""
    lam = 0.7
    spec = MixerSpec(memory=Matrix(), bias=L2(), retention=Proximal(lam=lam), optimizer=Implicit())
    case = make_case(spec, B=1, T=4, H=2, K=3, V=2)
    _, S = _call(derive(spec), case)
    t = {n: x.detach() for n, x in case.tensors.items()}
    ref = case.initial_state.clone()
    for i in range(4):
        k, v = t["k"][:, i], t["v"][:, i]
        c = 1 / t["beta"][:, i] + lam  # curvature of the proximal term
        eps = 1 / (c + (k * k).sum(-1))
        err = torch.einsum("bhk,bhkv->bhv", k, ref) - v
        ref = ref - eps[..., None, None] * k[..., :, None] * err[..., None, :]
    torch.testing.assert_close(S, ref, atol=1e-12, rtol=0)


def test_kl_retention_keeps_rows_normalised():
    spec = MixerSpec(memory=Matrix(), bias=DotProduct(), retention=KL(), optimizer=GD())
    case = make_case(spec, B=1, T=5, H=2, K=3, V=4, with_state=False)
    _, S = _call(derive(spec), case, log_alpha=None)
    torch.testing.assert_close(S.sum(-1), torch.ones(1, 2, 3), atol=1e-13, rtol=0)
    assert (S > 0).all()


def test_diagonal_and_mlp_memories_run_and_match_a_manual_step():
    spec = MixerSpec(memory=Diagonal(), bias=L2(), optimizer=GD())
    case = make_case(spec, B=1, T=1, H=1, K=3, V=3, with_state=False)
    o, S = _call(derive(spec), case)
    t = {n: x.detach() for n, x in case.tensors.items()}
    k, v, b = t["k"][0, 0, 0], t["v"][0, 0, 0], t["beta"][0, 0, 0]
    torch.testing.assert_close(S[0, 0], b * k * v, atol=1e-14, rtol=0)  # s = 0 − β (0·k − v) ⊙ k
    mlp = MixerSpec(memory=MLP(hidden=5, act="tanh"), bias=L2(), optimizer=GD())
    case = make_case(mlp, B=1, T=3, H=1, K=3, V=3, with_state=False)
    o, (w1, w2) = _call(derive(mlp), case)
    assert w1.shape == (1, 1, 3, 5) and w2.shape == (1, 1, 5, 3) and w2.abs().sum() > 0


@pytest.mark.parametrize("name", ["gated_deltanet", "huber_delta", "titans_linear", "sca", "softmax", "gla"])
def test_gradcheck_tiny(name):
    spec = get_preset(name)
    case = make_case(spec, B=1, T=3, H=1, K=2, V=2, seed=3)
    names = list(case.tensors)
    step = derive(spec)

    def f(*xs):
        kw = dict(zip(names, xs))
        q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
        o, _ = step(q, k, v, **kw, scale=case.scale, initial_state=case.initial_state)
        return o

    assert torch.autograd.gradcheck(f, tuple(case.tensors.values()), atol=1e-7)


def _split(case, t):
    def part(sl):
        return {n: (x.detach()[:, sl] if x.dim() > 2 and n not in ("theta", "weights") else x.detach())
                for n, x in case.tensors.items()}
    return part(slice(None, t)), part(slice(t, None))


@pytest.mark.parametrize("name", list_presets())
def test_state_passing(name):
    """f(x) == f(x[:, t:], initial_state=f(x[:, :t]).state)."""
    spec = get_preset(name)
    case = make_case(spec, B=2, T=9, H=2, K=4, V=3, seed=1)
    step = derived(spec)  # derive(spec) with the layer's read-out (normalised linear attention)
    o, S = _call(step, case)
    first, second = _split(case, 4)
    q, k, v = first.pop("q"), first.pop("k"), first.pop("v")
    o1, S1 = step(q, k, v, **first, scale=case.scale, initial_state=case.initial_state, output_final_state=True)
    q, k, v = second.pop("q"), second.pop("k"), second.pop("v")
    o2, S2 = step(q, k, v, **second, scale=case.scale, initial_state=S1, output_final_state=True)
    torch.testing.assert_close(torch.cat([o1, o2], 1), o, atol=1e-13, rtol=0)
    for a, b in zip(S2 if isinstance(S2, tuple) else (S2,), S if isinstance(S, tuple) else (S,)):
        torch.testing.assert_close(a, b, atol=1e-13, rtol=0)


@pytest.mark.parametrize("name", list_presets())
def test_causality_bit_identical(name):
    """Perturbing every input at positions > t leaves o[:, :t+1] bit-identical."""
    spec = get_preset(name)
    case = make_case(spec, B=1, T=8, H=2, K=4, V=3, seed=2)
    step = derived(spec)
    o, _ = _call(step, case)
    t = 4
    changed = {}
    for n, x in case.tensors.items():
        x = x.detach().clone()
        if n not in ("theta", "weights"):
            x[:, t + 1:] = x[:, t + 1:] + torch.rand_like(x[:, t + 1:])
        changed[n] = x
    o2, _ = _call(step, case, **changed)
    assert torch.equal(o[:, : t + 1], o2[:, : t + 1])
    assert not torch.equal(o[:, t + 1:], o2[:, t + 1:])


def test_momentum_with_per_key_decay_and_huber_user_spec():
    """A combination no preset covers derives, runs and keeps state passing."""
    spec = MixerSpec(memory=Matrix(), bias=Huber(delta=0.5), retention=L2Decay(gate="key"),
                     optimizer=Momentum(eta=0.8))
    assert derive(spec).describe().startswith("generic gradient step: m_t = η_t m_{t-1} − β_t ∇ℓ(M_{t-1});")
    case = make_case(spec, B=1, T=6, H=2, K=4, V=3)
    o, (S, m) = _call(derive(spec), case)
    assert torch.isfinite(o).all() and S.shape == m.shape == (1, 2, 4, 3)
