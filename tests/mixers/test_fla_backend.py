"""The fla backend on CPU: FLA's Triton entry points replaced by FLA's own naive references
(external.fla_naive_kernels, injected through FlaEnv.kernels), and FLA's availability rules on
injected device capabilities and versions (mixers/kernels.py)."""
import types
import warnings

import pytest
import torch

from assocmem.memories import GD, L2, NoRetention
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.external import fla_naive_kernels
from assocmem.mixers.kernels import FlaEnv, fla_status
from assocmem.mixers.layer import Mixer, build_mixer, check_backend, set_backend
from assocmem.mixers.lower import choose_backend, fla_kernel, lower
from assocmem.mixers.ops.fla import FLA_KERNELS, fla_op
from assocmem.mixers.presets import list_presets
from assocmem.mixers.verify import cast, make_case, max_abs_error, run

KERNELS = fla_naive_kernels()
pytestmark = pytest.mark.skipif(KERNELS is None, reason="fla-core (FLA's naive references) is not installed")
CPU = FlaEnv(fla=True, kernels=KERNELS, device_type="cpu", float64=True)  # the naive stand-ins pretend to be FLA
HOPPER = dict(fla=True, capability=(9, 0), kernels=KERNELS)
COVERED = [n for n in list_presets() if fla_kernel(get_preset(n))[0] is not None]


def test_the_presets_fla_covers():
    assert COVERED == ["linear_attention", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet",
                       "gated_deltanet_joint", "kda", "gated_deltanet_steps3", "rwkv7", "rwkv7_dplr"]
    assert {fla_kernel(get_preset(n))[0] for n in COVERED} == set(FLA_KERNELS)


@pytest.mark.parametrize("form", ["chunk", "recurrent"])
@pytest.mark.parametrize("name", COVERED)
def test_fla_equals_the_torch_form_float64(name, form):
    """Outputs, final states and input gradients (retnet: its fixed decay enters as FLA's g_gamma)."""
    spec = get_preset(name)
    case = make_case(spec, T=20)
    fla = lower(spec, form, backend="fla", dtype=torch.float64, env=CPU)
    assert fla.backend == "fla" and FLA_KERNELS[fla_kernel(spec)[0]].__getattribute__(
        "step" if form == "recurrent" else "chunk") in fla.why
    grads = ("q", "k", "v") if name == "retnet" else None
    assert max_abs_error(run(lower(spec, form), case), run(fla, case), grads) < 1e-12


@pytest.mark.parametrize("name", ["mamba2", "gla", "gated_deltanet", "kda", "rwkv7"])
def test_fla_equals_the_torch_form_float32(name):
    spec = get_preset(name)
    case = cast(make_case(spec, T=20), torch.float32)
    want, got = run(lower(spec), case), run(lower(spec, backend="fla", env=CPU), case)
    for key in ("output", "state"):
        for a, b in zip(want[key], got[key]):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    for n in want["grad"]:
        torch.testing.assert_close(got["grad"][n], want["grad"][n], rtol=1e-4, atol=1e-4)


def test_mixed_dtypes_run_in_the_half_dtype():
    """Autocast's q, k float32 and v bf16: FLA computes in bf16 (q, k cast), gates and state in float32."""
    spec = get_preset("gated_deltanet")
    c = cast(make_case(spec, T=20), torch.float32)
    t = {n: x.detach() for n, x in c.tensors.items()}
    fla = lower(spec, backend="fla", dtype=torch.bfloat16, env=CPU)
    o, S = fla(t["q"], t["k"], t["v"].bfloat16(), log_alpha=t["log_alpha"], beta=t["beta"],
               initial_state=c.initial_state, output_final_state=True)
    want_o, want_S = lower(spec)(t["q"], t["k"], t["v"], log_alpha=t["log_alpha"], beta=t["beta"],
                                 initial_state=c.initial_state, output_final_state=True)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    torch.testing.assert_close(o.float(), want_o, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(S, want_S, rtol=2e-2, atol=5e-2)


def _recording():
    """A kernels namespace that records each call (name, args, kwargs) and returns zeros."""
    calls = []

    def entry(name):
        def call(q, k, v, *args, **kw):
            calls.append((name, args, kw))
            h0 = kw["initial_state"]
            return torch.zeros_like(v), (h0 if kw["output_final_state"] else None)
        return call
    names = {n for row in FLA_KERNELS.values() for n in (row.chunk, row.step)}
    return types.SimpleNamespace(**{n: entry(n) for n in names}), calls


def test_argument_mapping():
    ns, calls = _recording()
    B, T, H, K, V = 1, 5, 2, 4, 3
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V).bfloat16()
    la, beta, h0 = -torch.rand(B, T, H), torch.rand(B, T, H), torch.randn(B, H, K, V).bfloat16()
    fla_op("simple_gla", q, k, v, log_alpha=la, beta=beta, initial_state=h0, kernels=ns)
    name, args, kw = calls[-1]
    assert name == "chunk_simple_gla" and args == ()
    assert kw["g"].dtype == torch.float32 and torch.equal(kw["g"], la)  # log space, not α
    assert kw["scale"] == K ** -0.5 and kw["initial_state"].dtype == torch.float32 and "cu_seqlens" not in kw
    fla_op("retention", q, k, v, log_alpha=la[..., :1].expand(B, T, H), initial_state=None, scale=0.3, kernels=ns)
    name, _, kw = calls[-1]
    assert kw["g_gamma"].shape == (H,) and "g" not in kw and kw["scale"] == 0.3
    fla_op("linear_attn", q, k, v, beta=beta, step=True, kernels=ns)
    name, _, kw = calls[-1]
    assert name == "fused_recurrent_linear_attn" and kw["normalize"] is False
    fla_op("gla", q, k, v, log_alpha=la, kernels=ns)
    name, args, kw = calls[-1]
    assert name == "chunk_gla" and args[0].shape == (B, T, H, K)  # the per-key gate, positional (g / gk)
    fla_op("gated_delta_rule", q, k, v, beta=beta, kernels=ns)
    name, _, kw = calls[-1]
    assert kw["use_qk_l2norm_in_kernel"] is False and torch.equal(kw["g"], torch.zeros(B, T, H))
    fla_op("dplr", q, k, v, beta=beta, log_alpha=la, kernels=ns, cu_seqlens=torch.tensor([0, 2, 5]))
    name, _, kw = calls[-1]
    assert name == "chunk_dplr_delta_rule" and kw["gk"].shape == (B, T, H, K) and kw["cu_seqlens"].tolist() == [0, 2, 5]


def test_beta_folds_into_v():
    ns, calls = _recording()
    q, k, v, beta = torch.randn(1, 3, 2, 4), torch.randn(1, 3, 2, 4), torch.randn(1, 3, 2, 5), torch.rand(1, 3, 2)
    seen = {}
    ns.chunk_linear_attn = lambda q, k, v, **kw: seen.update(v=v) or (torch.zeros_like(v), None)
    fla_op("linear_attn", q, k, v, beta=beta, kernels=ns)
    assert torch.equal(seen["v"], v * beta[..., None])  # β k vᵀ = k (β v)ᵀ


@pytest.mark.parametrize("name", ["gated_deltanet", "mamba2", "kda", "rwkv7"])
def test_cu_seqlens_packing(name):
    """Two sequences packed along T (B = 1) with their own initial states equal two separate calls."""
    spec = get_preset(name)
    kernel = fla_kernel(spec)[0]
    c1, c2 = make_case(spec, B=1, T=7, seed=1), make_case(spec, B=1, T=12, seed=2)
    t1, t2 = ({n: x.detach() for n, x in c.tensors.items()} for c in (c1, c2))
    packed = {n: torch.cat((t1[n], t2[n]), dim=1) for n in t1}
    q, k, v = packed.pop("q"), packed.pop("k"), packed.pop("v")
    h0 = torch.cat((c1.initial_state, c2.initial_state))
    o, S = fla_op(kernel, q, k, v, **packed, initial_state=h0, output_final_state=True, kernels=KERNELS,
                  cu_seqlens=torch.tensor([0, 7, 19]))
    torch_form = lower(spec)
    for (a, b), t, c, i in (((0, 7), t1, c1, 0), ((7, 19), t2, c2, 1)):
        x = dict(t)
        o_i, S_i = torch_form(x.pop("q"), x.pop("k"), x.pop("v"), **x, initial_state=c.initial_state,
                              output_final_state=True)
        assert float((o[:, a:b] - o_i).abs().max()) < 1e-12 and float((S[i:i + 1] - S_i).abs().max()) < 1e-12


def test_status_rules():
    ok = lambda kernel, dtype=torch.bfloat16, K=128, V=128, **kw: fla_status(  # noqa: E731
        kernel, "cuda", dtype, K, V, env=kw.pop("env", FlaEnv(fla=True, triton=(3, 7, 1), capability=(9, 0))), **kw)
    assert ok("gated_delta_rule")[0]
    assert not fla_status("gated_delta_rule", "cpu", torch.float32, 64, 64)[0]  # no env: CPU has no Triton kernels
    missing = ok("kda", env=FlaEnv(fla=False))
    assert not missing[0] and "not installed" in missing[1] and "assocmem[cuda]" in missing[2]
    assert "float64" in ok("kda", torch.float64)[1]
    refused = ok("delta_rule", torch.float32)
    assert not refused[0] and "chunk_delta_rule" in refused[1] and "bf16" in refused[2]
    assert ok("delta_rule", torch.float32, step=True)[0]  # fused_recurrent_delta_rule takes float32
    assert "K <= 256" in ok("gated_delta_rule", K=512)[1] and ok("gla", K=512)[0]
    assert "even K and V" in ok("gla", V=65)[1] and ok("gla", torch.float32, V=65)[0]


@pytest.mark.parametrize("triton, capability, tilelang, dtype, grad, kernel, expect", [
    ((3, 6, 0), (9, 0), False, torch.bfloat16, True, "gated_delta_rule", False),  # FLA issue 640
    ((3, 4, 0), (9, 0), False, torch.bfloat16, True, "simple_gla", False),
    ((3, 6, 0), (9, 0), True, torch.bfloat16, True, "gated_delta_rule", True),  # tilelang takes GDN's backward
    ((3, 6, 0), (9, 0), True, torch.bfloat16, True, "simple_gla", False),  # ... not simple_gla's in bf16
    ((3, 6, 0), (9, 0), True, torch.float32, True, "simple_gla", True),
    ((3, 6, 0), (9, 0), False, torch.bfloat16, False, "gated_delta_rule", True),  # forward only
    ((3, 6, 0), (9, 0), False, torch.bfloat16, True, "retention", True),  # g_gamma: not the gated kernel
    ((3, 6, 0), (9, 0), False, torch.bfloat16, True, "kda", True),
    ((3, 7, 1), (9, 0), False, torch.bfloat16, True, "gated_delta_rule", True),
    ((3, 3, 1), (9, 0), False, torch.bfloat16, True, "gated_delta_rule", True),
    ((3, 6, 0), (8, 0), False, torch.bfloat16, True, "gated_delta_rule", True),  # A100
])
def test_hopper_triton_guard(triton, capability, tilelang, dtype, grad, kernel, expect):
    env = FlaEnv(fla=True, triton=triton, capability=capability, tilelang=tilelang)
    ok, reason, fix = fla_status(kernel, "cuda", dtype, 128, 128, grad=grad, env=env)
    assert ok == expect
    if not ok:
        assert "issue 640" in reason and "Hopper" in reason and "Triton >= 3.7.1" in fix
        assert ("tilelang" in fix) == bool(FLA_KERNELS[kernel].tilelang_dtypes)


def test_auto_falls_back_with_one_warning_and_fla_refuses_up_front():
    env = FlaEnv(fla=True, triton=(3, 5, 0), capability=(9, 0), kernels=KERNELS)
    spec = get_preset("gated_deltanet")
    with pytest.warns(RuntimeWarning, match=r"issue 640.*Fix: install Triton >= 3\.7\.1") as seen:
        assert choose_backend(spec, device="cuda", dtype=torch.bfloat16, env=env)[0] == "compiled"
    assert len(seen) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason: the second layer is quiet
        backend, why = choose_backend(get_preset("gated_deltanet_steps3"), device="cuda", dtype=torch.bfloat16, env=env)
    assert backend == "compiled" and "issue 640" in why
    assert choose_backend(spec, device="cuda", dtype=torch.bfloat16, grad=False, env=env)[0] == "fla"
    assert choose_backend(spec, "recurrent", device="cuda", dtype=torch.bfloat16, env=env)[0] == "fla"
    with pytest.raises(ValueError, match=r"backend 'fla'.*issue 640.*fix: install Triton >= 3\.7\.1"):
        lower(spec, backend="fla", device="cuda", dtype=torch.bfloat16, env=env)
    with pytest.raises(ValueError, match="FLA has no kernel for family 'longhorn'"):
        build_mixer(get_preset("longhorn").model_copy(
            update={"layer": get_preset("longhorn").layer.model_copy(update={"backend": "fla"})}), 32)
    for name in ("sca", "softmax", "huber_delta"):  # not FLA's: auto on CUDA takes the compiled (or eager) form
        assert choose_backend(get_preset(name), device="cuda", env=env)[0] in ("compiled", "torch")


def test_cpu_auto_is_todays_forms():
    for name in list_presets():
        spec = get_preset(name)
        today, auto = lower(spec), lower(spec, backend="auto", device="cpu")
        assert (auto.name, auto.backend, auto.fn.__class__) == (today.name, "torch", today.fn.__class__)
    mixer = build_mixer(get_preset("gated_deltanet"), 32)
    assert mixer.backend == "auto" and mixer.lowered(torch.device("cpu"), torch.float32) == (mixer.form, mixer.step_form)
    assert check_backend(mixer, "cpu", torch.float32) == [("", mixer.form)]


@pytest.mark.parametrize("name", ["gated_deltanet", "mamba2"])
def test_layer_with_fla_equals_torch(name):
    """The whole Mixer (float64, forward, backward, then a decode step through the fused recurrent kernel)."""
    torch.manual_seed(0)
    spec = get_preset(name).model_copy(update={"layer": get_preset(name).layer.model_copy(
        update={"num_heads": 2, "head_dim": 8})})
    ref = Mixer(spec, 16).double()
    fla = Mixer(spec, 16).double()
    fla.load_state_dict(ref.state_dict())
    set_backend(fla, "fla", fla_env=CPU)
    x = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    (y_ref, s_ref), (y, s) = ref(x), fla(x)
    assert fla.lowered(x.device, torch.float64)[0].backend == "fla"
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    g_ref, = torch.autograd.grad(y_ref.square().sum(), x)
    g, = torch.autograd.grad(y.square().sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-11)
    with torch.no_grad():
        x1 = torch.randn(2, 1, 16, dtype=torch.float64)
        torch.testing.assert_close(fla(x1, state=s)[0], ref(x1, state=s_ref)[0], rtol=0, atol=1e-12)
    assert fla.lowered(x.device, torch.float64, False)[1].why.startswith("FLA's fused_recurrent")
    set_backend(fla, "fla")  # no injected FLA: refused on CPU, naming the layer
    with pytest.raises(ValueError, match="layer .top.: backend 'fla'.*Triton GPU kernels"):
        check_backend(fla, "cpu", torch.float32)


def test_per_key_step_size_goes_to_dplr():
    spec = MixerSpec(bias=L2(), retention=NoRetention(), optimizer=GD(rate="key"))
    assert spec.algebra == "dplr" and fla_kernel(spec)[0] == "dplr"
    case = make_case(spec, T=12)
    fla = lower(spec, backend="fla", dtype=torch.float64, env=CPU)
    assert max_abs_error(run(lower(spec), case), run(fla, case), relative=True) < 1e-13  # gradients reach 300


def test_verify_backends_path_on_cpu():
    """verify --device cuda's comparison, run on CPU with the naive stand-ins (fla and torch backends)."""
    from assocmem.mixers.verify import verify_backends
    env = FlaEnv(fla=True, kernels=KERNELS, device_type="cpu")
    results = verify_backends("gated_deltanet", "cpu", env=env, backends=("fla", "torch"), T=24)
    pairs = [r.pair for r in results]
    assert "derived vs form:chunk [fla, cpu, float32]" in pairs and "layer: backend fla vs torch [cpu, bfloat16]" in pairs
    assert all(r.passed for r in results), [(r.pair, r.max_abs_error) for r in results if not r.passed]
    deltanet = [r.pair for r in verify_backends("deltanet", "cpu", env=env, backends=("fla",), T=8,
                                                dtypes=(torch.float32,))]
    assert deltanet == []  # chunk_delta_rule refuses float32: left out


def test_verify_cuda_refuses_without_a_gpu(capsys):
    import argparse
    from assocmem.cli.mixers import _verify_cuda, derive_main
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit, match="no CUDA device"):
        _verify_cuda([get_preset("gdn")], argparse.Namespace(seq_len=8, seed=0, json=None))
    derive_main(argparse.Namespace(spec="gdn"))
    out = capsys.readouterr().out
    assert "cpu   -> torch: auto on cpu" in out and "cuda  -> " in out


def test_train_backend_fla_is_refused_before_training():
    from assocmem.training.config import ConfigError, TrainLoopConfig
    from assocmem.training.loop import set_mixer_backend
    model = torch.nn.Sequential(build_mixer(get_preset("gated_deltanet"), 32), build_mixer(get_preset("mamba2"), 32))
    with pytest.raises(ConfigError, match=r"train.backend: layer 0: backend 'fla'.*Triton GPU kernels"):
        set_mixer_backend(model, TrainLoopConfig(steps=1, backend="fla"), torch.device("cpu"))
    set_mixer_backend(model, TrainLoopConfig(steps=1, backend="torch"), torch.device("cpu"))
    assert [m.backend for m in model] == ["torch", "torch"]
