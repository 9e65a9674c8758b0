"""Compiled chunk forms (mixers/ops/compiled.py) against the eager forms they fuse.

compile=True runs the same group functions through torch.compile, so it must give the eager
results to rounding: float64 outputs, final states and gradients within 1e-12, float32 at
``assert_close``; bit-exact causality; one graph per configuration whatever the sequence length.
Compiling costs tens of seconds per graph on a small CPU: the default suite compiles one
configuration (Gated DeltaNet, float64, with autograd, shared by the tests below through a
module-scoped fixture); every other family, float32 and the SCA prefix sum are ``slow``.
"""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch.testing import assert_close

from assocmem.mixers import get_preset
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.lower import COMPILABLE, compilable, lower
from assocmem.mixers.ops import delta, dplr, hebbian, spectral
from assocmem.mixers.spec import LayerOptions
from assocmem.mixers.verify import make_case
from assocmem.probes.causality import op_causality
from test_delta import make_inputs

F64 = dict(rtol=0.0, atol=1e-12)
# the default-suite configuration: Gated DeltaNet, B = H = 2, K = 8 ≠ V = 12, C = 16, float64, no initial
# state (as a Mixer layer calls it), strong decay (log α down to −8 per token), with autograd
GDN = dict(gate="scalar", decay=(-8.0, 0.0), with_state=False)


def _run(fn, x, compile, **kw):
    """o, S and the gradients of a fixed random projection of both, for every input."""
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in x.items()}
    o, S = fn(**leaves, output_final_state=True, compile=compile, **kw)
    g = torch.Generator().manual_seed(7)
    loss = (o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() \
        + (S * torch.randn(S.shape, generator=g, dtype=S.dtype)).sum()
    loss.backward()
    return o.detach(), S.detach(), {n: t.grad for n, t in leaves.items()}


def _assert_same(got, want, **tol):
    (o, S, g), (o_e, S_e, g_e) = got, want
    assert_close(o, o_e, **tol)
    assert_close(S, S_e, **tol)
    assert g.keys() == g_e.keys()
    for name in g_e:
        assert_close(g[name], g_e[name], **tol, msg=lambda m: f"grad {name}: {m}")


@pytest.fixture(scope="module")
def gdn_compiled():
    """The compiled Gated DeltaNet chunk form, compiled once for this module (T = 37, odd)."""
    x = make_inputs(37, GDN["gate"], seed=0, decay=GDN["decay"], with_state=GDN["with_state"])
    with torch._dynamo.config.patch(recompile_limit=64):
        got = _run(delta.chunk_delta_rule, x, True, chunk_size=16)
    return x, got


def test_compiled_gdn_equals_eager_float64(gdn_compiled):
    x, got = gdn_compiled
    _assert_same(got, _run(delta.chunk_delta_rule, x, False, chunk_size=16), **F64)


def test_compiled_gdn_other_lengths_reuse_the_graphs(gdn_compiled):
    """T = 53 and 100 (several chunks, groups of 2048 tokens): equal to eager, and after at most one
    recompilation (the graphs behind the carry learn that the chunk count varies) no new graph."""
    with torch._dynamo.config.patch(recompile_limit=64):
        before = counters["stats"]["unique_graphs"]
        for T, seed in ((53, 1), (100, 2), (64, 3), (21, 4)):
            x = make_inputs(T, GDN["gate"], seed=seed, decay=GDN["decay"], with_state=False)
            _assert_same(_run(delta.chunk_delta_rule, x, True, chunk_size=16),
                         _run(delta.chunk_delta_rule, x, False, chunk_size=16), **F64)
            if T == 53:
                after_first = counters["stats"]["unique_graphs"]
        assert counters["stats"]["unique_graphs"] == after_first, "a new sequence length compiled a new graph"
        assert after_first - before <= 3


def test_compiled_gdn_is_causal_bit_for_bit(gdn_compiled):
    """The causality probe (probes/causality.py) on the compiled form: perturbing the future changes no
    earlier output, exactly. Inputs require grad, so the probe runs the module's compiled graphs."""
    x, _ = gdn_compiled

    def op(**kw):
        kw = {n: t.detach().requires_grad_(True) for n, t in kw.items()}
        return delta.chunk_delta_rule(**kw, chunk_size=16, compile=True)

    report = op_causality(op, x, cuts=[0, 15, 16, 30])
    assert report.causal and report.max_leak == 0.0


def test_training_with_varying_lengths_compiles_no_graph_per_batch(gdn_compiled):
    """A Gated DeltaNet layer with layer.compile (float64, K = 8, V = 12: the fixture's graphs) trained
    for 6 steps at T = 37, 53, 100, 64, 21, 80: no graph compiled after the second step."""
    spec = get_preset("gated_deltanet")
    spec = spec.model_copy(update={"layer": spec.layer.model_copy(
        update={"num_heads": 2, "head_dim": 8, "expand_v": 1.5, "compile": True})})
    torch.manual_seed(0)
    layer = build_mixer(spec, 16).double()
    assert layer.form.compiled and layer.form.name == "chunk"
    opt = torch.optim.SGD(layer.parameters(), lr=1e-2)
    graphs = []
    with torch._dynamo.config.patch(recompile_limit=64):
        for T in (37, 53, 100, 64, 21, 80):
            x = torch.randn(2, T, 16, dtype=torch.float64)
            y, _ = layer(x, return_state=False)
            y.square().mean().backward()
            opt.step()
            opt.zero_grad()
            graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[2:] == [graphs[1]] * 4, f"graphs compiled per step: {graphs}"


def test_lower_compile_option():
    spec = get_preset("gated_deltanet")
    form = lower(spec, "chunk", compile=True)
    assert form.compiled and form.name == "chunk" and not lower(spec, "chunk").compiled
    assert COMPILABLE == {"chunk", "prefix_sum", "selective_scan"}
    assert compilable(spec) and compilable(get_preset("sca")) and compilable(get_preset("mamba"))
    assert not compilable(get_preset("softmax"))
    with pytest.raises(ValueError, match=r"compile=True\) needs a form with a compiled variant.*'recurrent'"):
        lower(spec, "recurrent", compile=True)
    with pytest.raises(ValueError, match="the scan form is compiled already"):
        lower(get_preset("ttt_linear"), "scan", compile=True)
    assert LayerOptions().compile is False
    assert "torch.compile" in LayerOptions.model_fields["compile"].description
    attn = get_preset("softmax")  # layer.compile leaves forms without a compiled variant as they are
    layer = build_mixer(attn.model_copy(update={"layer": attn.layer.model_copy(update={"compile": True})}), 32)
    assert layer.form == "sdpa"


# ------------------------------------------------------------------------ every chunk family (slow)
# op -> (log_alpha kind, decay range): strong gates (per-token log α down to −8), odd T, K ≠ V
SLOW_OPS = {
    "hebbian_none": (hebbian.chunk_hebbian, None, (-1.0, 0.0)),
    "hebbian_scalar": (hebbian.chunk_hebbian, "scalar", (-8.0, 0.0)),
    "hebbian_key": (hebbian.chunk_hebbian, "key", (-8.0, 0.0)),
    "deltanet": (delta.chunk_delta_rule, None, (-1.0, 0.0)),
    "gated_longhorn": (delta.chunk_longhorn, "scalar", (-8.0, 0.0)),
    "joint_scalar": (delta.chunk_delta_rule_joint, "scalar", (-8.0, 0.0)),
    "joint_key": (delta.chunk_delta_rule_joint, "key", (-8.0, 0.0)),
    "kda": (delta.chunk_kda, "key", (-8.0, 0.0)),
    "dplr_key": (dplr.chunk_dplr, "key", (-8.0, 0.0)),
}


@pytest.mark.slow
@pytest.mark.parametrize("op", list(SLOW_OPS))
def test_compiled_chunk_family_equals_eager_float64(op):
    """Outputs, final states and gradients (initial state included) at T = 37 and 53, float64."""
    fn, gate, decay = SLOW_OPS[op]
    with torch._dynamo.config.patch(recompile_limit=64):
        for T, seed in ((37, 0), (53, 1)):
            x = make_inputs(T, gate, seed=seed, decay=decay)
            _assert_same(_run(fn, x, True, chunk_size=16), _run(fn, x, False, chunk_size=16), **F64)
        report = op_causality(lambda **kw: fn(**kw, chunk_size=16, compile=True),
                              make_inputs(37, gate, seed=2, with_state=False))
        assert report.causal and report.max_leak == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("op", ["gated_deltanet", "hebbian_scalar", "kda"])
def test_compiled_chunk_family_equals_eager_float32(op):
    fn, gate, decay = {**SLOW_OPS, "gated_deltanet": (delta.chunk_delta_rule, "scalar", (-8.0, 0.0))}[op]
    x = make_inputs(37, gate, seed=3, decay=decay, dtype=torch.float32)
    with torch._dynamo.config.patch(recompile_limit=64):
        _assert_same(_run(fn, x, True, chunk_size=16), _run(fn, x, False, chunk_size=16))


@pytest.mark.slow
def test_compiled_sca_prefix_sum_equals_eager():
    case = make_case(get_preset("sca"), T=37, with_state=True)
    inputs = {n: t.detach() for n, t in case.tensors.items()}

    def run(compile):
        leaves = {n: t.clone().requires_grad_(True) for n, t in inputs.items()}
        o, (den, num) = spectral.prefix_sum_spectral(**leaves, initial_state=case.initial_state,
                                                     output_final_state=True, compile=compile)
        (o.square().sum() + num.square().sum()).backward()
        return o.detach(), num.detach(), {n: t.grad for n, t in leaves.items()}

    with torch._dynamo.config.patch(recompile_limit=64):
        _assert_same(run(True), run(False), **F64)


def test_verify_lists_the_compiled_forms_only_when_asked():
    from assocmem.mixers.verify import _pairs

    names = lambda spec, compiled: [p.name for p in _pairs(get_preset(spec), compiled)]  # noqa: E731
    assert "derived vs form:chunk (compiled)" in names("gated_deltanet", True)
    assert "derived vs form:prefix_sum (compiled)" in names("sca", True)
    assert not any("compiled" in n for n in names("gated_deltanet", False) + names("softmax", True))


@pytest.mark.slow
def test_verify_compiled_gdn_passes():
    from assocmem.mixers.verify import verify

    with torch._dynamo.config.patch(recompile_limit=64):
        results = [r for r in verify("gated_deltanet", T=37, compiled=True) if "(compiled)" in r.pair]
    assert len(results) == 3 and all(r.passed for r in results), results
