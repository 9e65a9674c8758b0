"""Mixed float dtypes are normal op input (mixers/ops/contract.py, the dtype rule).

torch.autocast on CUDA hands an op q, k in float32 (after an L2 norm or RMSNorm) and v in bf16
(after a linear or the short convolution), gates in either. Every op of every class, called with
such a mix, equals the call with every input cast to the compute dtype (the promotion of the
inputs, bf16 raised to float32): the inputs hold bf16-representable values, so both calls compute
on the same float32 numbers. Outputs (in v's dtype), final states (in the compute dtype) and the
gradients w.r.t. every input (each in its input's dtype) agree at the default tolerance of their
dtype. Integer, bool and complex inputs are still refused, naming the argument.
"""
from __future__ import annotations

import functools

import pytest
import torch
from torch.testing import assert_close

from assocmem.memories import derive
from assocmem.mixers.ops import attention, delta, depth, dplr, hebbian, online, selective, spectral
from assocmem.mixers.ops.chunk_approx import chunk_approx_scan
from assocmem.mixers.ops.contract import compute_dtype
from assocmem.mixers.ops.normalized import normalized
from assocmem.mixers.presets import get_preset

f32, bf16, f64 = torch.float32, torch.bfloat16, torch.float64
B, T, H, K, V = 2, 11, 2, 8, 6
D, M = 4, 3  # spectral: channels and points


def _randn(g, *shape, scale=1.0):
    return (scale * torch.randn(*shape, generator=g)).bfloat16().float()  # bf16-representable values


def matrix_inputs(*, per_key=False, per_entry=False, removal=False, beta_key=False, eta=False, state=True):
    """q, k, v, gates and an initial state of the matrix-state op contract, in float32 (``per_entry``: a
    decay per entry of S, the selective class)."""
    g = torch.Generator().manual_seed(0)
    k = torch.nn.functional.normalize(_randn(g, B, T, H, K), dim=-1).bfloat16().float()
    decay = (B, T, H, K, V) if per_entry else (B, T, H, K) if per_key else (B, T, H)
    x = dict(q=_randn(g, B, T, H, K), k=k, v=_randn(g, B, T, H, V),
             log_alpha=-torch.rand(*decay, generator=g).bfloat16().float(),
             beta=torch.rand(*(B, T, H, K) if beta_key else (B, T, H), generator=g).bfloat16().float())
    if removal:
        x["removal_key"] = torch.nn.functional.normalize(_randn(g, B, T, H, K), dim=-1).bfloat16().float()
    if eta:
        x["eta"] = torch.rand(B, T, H, generator=g).bfloat16().float()
    if state:
        x["initial_state"] = _randn(g, B, H, K, V, scale=0.3)
    return x


def spectral_inputs():
    g = torch.Generator().manual_seed(1)
    return dict(q=_randn(g, B, T, H, D, M, 2), k=_randn(g, B, T, H, D), v=_randn(g, B, T, H, D),
                beta=torch.rand(B, T, H, generator=g).add(0.1).bfloat16().float(),
                theta=torch.rand(H, D, M, generator=g).bfloat16().float(),
                weights=torch.rand(H, D, M, generator=g).bfloat16().float(),
                initial_state=(torch.rand(B, H, generator=g).add(1).bfloat16().float(), _randn(g, B, H, D, M, 2)))


def attention_inputs():
    g = torch.Generator().manual_seed(2)
    return dict(q=_randn(g, B, T, H, K), k=_randn(g, B, T, H, K), v=_randn(g, B, T, H, V),
                initial_state=(_randn(g, B, H, 3, K), _randn(g, B, H, 3, V)))


def _scan(preset, form_fn):
    return form_fn(get_preset(preset))


# id -> (op, inputs factory, gate names, accumulates a state (bf16 compute raised to float32))
OPS = {
    "chunk_hebbian": (hebbian.chunk_hebbian, matrix_inputs, ("log_alpha", "beta")),
    "recurrent_hebbian": (hebbian.recurrent_hebbian, matrix_inputs, ("log_alpha", "beta")),
    "chunk_hebbian_gla": (hebbian.chunk_hebbian, functools.partial(matrix_inputs, per_key=True), ("log_alpha",)),
    "chunk_delta_rule": (delta.chunk_delta_rule, matrix_inputs, ("log_alpha", "beta")),
    "recurrent_delta_rule": (delta.recurrent_delta_rule, matrix_inputs, ("log_alpha", "beta")),
    "chunk_longhorn": (delta.chunk_longhorn, matrix_inputs, ("log_alpha", "beta")),
    "recurrent_longhorn": (delta.recurrent_longhorn, matrix_inputs, ("log_alpha", "beta")),
    "chunk_delta_rule_joint": (delta.chunk_delta_rule_joint, functools.partial(matrix_inputs, per_key=True),
                               ("log_alpha", "beta")),
    "recurrent_delta_rule_joint": (delta.recurrent_delta_rule_joint, functools.partial(matrix_inputs, per_key=True),
                                   ("log_alpha", "beta")),
    "chunk_kda": (delta.chunk_kda, functools.partial(matrix_inputs, per_key=True), ("log_alpha", "beta")),
    "recurrent_kda": (delta.recurrent_kda, functools.partial(matrix_inputs, per_key=True), ("log_alpha", "beta")),
    "chunk_dplr": (dplr.chunk_dplr, functools.partial(matrix_inputs, per_key=True, removal=True, beta_key=True),
                   ("log_alpha", "beta", "removal_key")),
    "recurrent_dplr": (dplr.recurrent_dplr, functools.partial(matrix_inputs, per_key=True, removal=True,
                                                               beta_key=True), ("log_alpha", "beta", "removal_key")),
    "recurrent_delta_steps": (functools.partial(depth.recurrent_delta_steps, steps=2), matrix_inputs,
                              ("log_alpha", "beta")),
    "recurrent_hebbian_steps": (functools.partial(depth.recurrent_hebbian_steps, steps=2), matrix_inputs,
                                ("log_alpha", "beta")),
    "normalized_chunk_hebbian": (normalized(hebbian.chunk_hebbian), functools.partial(matrix_inputs, state=False),
                                 ("log_alpha", "beta")),
    "recurrent_huber_delta": (online.recurrent_huber_delta, matrix_inputs, ("log_alpha", "beta")),
    "derived_titans": (derive(get_preset("titans_linear")), functools.partial(matrix_inputs, eta=True, state=False),
                       ("log_alpha", "beta", "eta")),
    "chunk_approx_titans": (functools.partial(chunk_approx_scan, get_preset("titans_linear"), chunk_size=4),
                            functools.partial(matrix_inputs, eta=True, state=False), ("log_alpha", "beta", "eta")),
    "scan_selective": (functools.partial(selective.scan_selective, block=4),
                       functools.partial(matrix_inputs, per_entry=True), ("log_alpha", "beta")),
    "recurrent_selective": (selective.recurrent_selective, functools.partial(matrix_inputs, per_entry=True),
                            ("log_alpha", "beta")),
    "prefix_sum_spectral": (spectral.prefix_sum_spectral, spectral_inputs, ("beta", "theta", "weights")),
    "masked_matmul_spectral": (spectral.masked_matmul_spectral, spectral_inputs, ("beta", "theta", "weights")),
    "recurrent_spectral": (spectral.recurrent_spectral, spectral_inputs, ("beta", "theta", "weights")),
    "sdpa_softmax_attention": (attention.sdpa_softmax_attention, attention_inputs, ()),
    "recurrent_softmax_attention": (attention.recurrent_softmax_attention, attention_inputs, ()),
}
COMPILED = {  # the compiled variants (mixers/ops/compiled.py): a first call compiles (slow on CPU)
    "chunk_hebbian_compiled": (functools.partial(hebbian.chunk_hebbian, compile=True), matrix_inputs,
                               ("log_alpha", "beta")),
    "chunk_delta_rule_compiled": (functools.partial(delta.chunk_delta_rule, compile=True), matrix_inputs,
                                  ("log_alpha", "beta")),
    "prefix_sum_spectral_compiled": (functools.partial(spectral.prefix_sum_spectral, compile=True), spectral_inputs,
                                     ("beta", "theta", "weights")),
    "scan_selective_compiled": (functools.partial(selective.scan_selective, block=4, compile=True),
                                functools.partial(matrix_inputs, per_entry=True), ("log_alpha", "beta")),
}


def _mixes(gates):
    """mix id -> {input name or "*" (every other input): dtype}."""
    mixes = {"qk_f32_v_bf16": {"v": bf16, "*": f32},  # what CUDA autocast produces
             "state_f32_rest_bf16": {"initial_state": f32, "*": bf16},
             "q_f64_rest_f32": {"q": f64, "*": f32}}
    if gates:
        mixes["gates_bf16"] = {**{g: bf16 for g in gates}, "*": f32}
    return mixes


CASES = [pytest.param(op_id, mix_id, id=f"{op_id}-{mix_id}", marks=marks)
         for table, marks in ((OPS, ()), (COMPILED, pytest.mark.slow))
         for op_id, (_, _, gates) in table.items() for mix_id in _mixes(gates)]


def _tree(fn, x):
    return tuple(_tree(fn, t) for t in x) if isinstance(x, tuple) else fn(x)


def _leaves(x):
    return [t for item in x for t in _leaves(item)] if isinstance(x, (tuple, list)) else [x]


def _run(op, inputs: dict, dtypes: dict, grad_out: tuple):
    """op on the inputs cast to ``dtypes`` (leaves requiring grad) -> (o, state, {name: grads}).

    The loss sums o and the final state against fixed bf16-representable weights ``grad_out``."""
    x = {n: _tree(lambda t, n=n: t.detach().to(dtypes.get(n, dtypes["*"]), copy=True).requires_grad_(), t)
         for n, t in inputs.items()}
    q, k, v = x.pop("q"), x.pop("k"), x.pop("v")
    o, S = op(q, k, v, **x, output_final_state=True)
    loss = (o.double() * grad_out[0]).sum() + sum((s.double() * w).sum() for s, w in zip(_leaves(S), grad_out[1:]))
    loss.backward()
    leaves = {"q": [q], "k": [k], "v": [v], **{n: _leaves(t) for n, t in x.items()}}
    return o, S, {n: [t.grad for t in ts] for n, ts in leaves.items()}


@pytest.mark.parametrize("op_id,mix_id", CASES)
def test_mixed_dtypes_equal_the_call_in_the_compute_dtype(op_id, mix_id):
    op, make, gates = {**OPS, **COMPILED}[op_id]
    inputs = make()
    dtypes = _mixes(gates)[mix_id]
    cd = f64 if mix_id.startswith("q_f64") else f32  # the promotion of the mix (each holds a float32 input)
    g = torch.Generator().manual_seed(3)
    o_ref, S_ref, _ = _run(op, inputs, {"*": cd}, (torch.zeros(1),))  # shapes of o and the state
    grad_out = tuple(_randn(g, *t.shape).double() for t in [o_ref, *_leaves(S_ref)])

    o, S, grads = _run(op, inputs, dtypes, grad_out)
    o_ref, S_ref, grads_ref = _run(op, inputs, {"*": cd}, grad_out)

    v_dtype = dtypes.get("v", dtypes["*"])
    assert o.dtype == v_dtype, "o is returned in v's dtype"
    assert_close(o, o_ref.to(v_dtype))
    for s, s_ref in zip(_leaves(S), _leaves(S_ref), strict=True):
        assert s.dtype == cd, "the final state is returned in the compute dtype"
        assert_close(s, s_ref)
    for name, gs in grads.items():
        for gr, gr_ref in zip(gs, grads_ref[name], strict=True):
            want = dtypes.get(name, dtypes["*"])
            assert gr is not None and gr.dtype == want, f"grad of {name}: {None if gr is None else gr.dtype}"
            assert_close(gr, gr_ref.to(want), msg=lambda m, name=name: f"grad of {name}: {m}")


def test_the_rule():
    """compute_dtype: the promotion of the float inputs, bf16/fp16 raised to float32 where a state is summed."""
    t = {d: torch.zeros(1, dtype=d) for d in (torch.float16, bf16, f32, f64)}
    assert compute_dtype(t[f32], t[bf16]) == f32
    assert compute_dtype(t[bf16], t[bf16], None) == f32
    assert compute_dtype(t[torch.float16], t[bf16]) == f32
    assert compute_dtype(t[f64], (t[f32], t[bf16])) == f64
    assert compute_dtype(t[bf16], t[bf16], accumulate=False) == bf16
    assert compute_dtype(t[f32], t[bf16], accumulate=False) == f32


@pytest.mark.parametrize("op_id", ["chunk_delta_rule", "chunk_hebbian", "chunk_dplr", "sdpa_softmax_attention",
                                   "prefix_sum_spectral", "derived_titans", "scan_selective"])
@pytest.mark.parametrize("name,bad", [("k", torch.int64), ("v", torch.complex64), ("q", torch.bool)])
def test_wrong_dtypes_are_refused_naming_the_argument(op_id, name, bad):
    op, make, _ = OPS[op_id]
    x = make()
    x[name] = x[name].to(bad)
    q, k, v = x.pop("q"), x.pop("k"), x.pop("v")
    accepted = r"must have a floating dtype \(float16, bfloat16, float32 or float64"
    with pytest.raises(TypeError, match=rf"{name}\b.*{accepted}"):
        op(q, k, v, **x)
