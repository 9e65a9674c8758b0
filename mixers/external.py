"""External references written by others, used as independent oracles.

Adapters map the project's op contract (q, k, v [B, T, H, D]; log_alpha;
beta; scale; initial_state [B, H, K, V]) onto each reference's own layout and
conventions. Nothing here is copied: the references are imported from their
installed packages (transformers; fla-core's pure-torch naive files, loaded by
path because ``import fla.ops`` needs triton).

Precision: every reference here computes in float32 internally (``x.float()``,
``x.to(torch.float32)``). With float64 inputs it is run re-typed to float64
(``mixers/retype.py``: the names float/float32 in its module's code read as
double/float64 while it runs), so every operation runs in float64 in the
reference's own order and the pair is held to the float64 tolerance. The same
technique the SCA fixture's author used on the original SCA code.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from assocmem.memories import L2Decay, NoRetention, window_of

from .lower import family_name, family_of, steps_of, with_depth
from .ops.normalized import normalized
from .retype import float64_retyped
from .spec import MixerSpec

F64_ATOL = 1e-12  # every reference, run in (or re-typed to) float64


@dataclass(frozen=True)
class ExternalRef:
    name: str
    fn: Callable  # op contract
    atol: float
    initial_state: bool  # supports initial_state / final state
    grad_inputs: tuple[str, ...] | None = None  # inputs whose gradients are comparable (None: all)


def _float64_when_asked(module: types.ModuleType, fn: Callable) -> Callable:
    """``fn`` (which calls into ``module``) run inside ``float64_retyped(module)`` when q is float64."""

    @functools.wraps(fn)
    def call(q, *args, **kwargs):
        if q.dtype != torch.float64:
            return fn(q, *args, **kwargs)
        with float64_retyped(module):
            return fn(q, *args, **kwargs)

    return call


def _fla_naive(family: str) -> types.ModuleType | None:
    """Load fla/ops/<family>/naive.py by path (None when fla-core is not installed)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / family / "naive.py"
    if not path.exists():
        return None
    mod_spec = importlib.util.spec_from_file_location(f"_assocmem_fla_naive_{family.replace('/', '_')}", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _rescale_q(q: torch.Tensor, scale: float | None) -> torch.Tensor:
    """References with a fixed K**-0.5 scale: fold our scale into q."""
    return q if scale is None else q * (scale / q.shape[-1] ** -0.5)


def _fold_beta(v: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    """β k vᵀ = k (β v)ᵀ for hebbian references without a β argument."""
    return v if beta is None else v * beta[..., None]


# ------------------------------------------------------------------ transformers


def _transformers_delta(model: str, name: str) -> Callable | None:
    """A transformers gated-delta reference ``name`` of ``models/<model>`` (qwen3_next: scalar decay g
    [B, T, H]; kimi_linear: per-key g [B, T, H, K]), both (query, key, value, g, beta, [chunk_size],
    initial_state, output_final_state) with a fixed K**-0.5 scale, adapted to the op contract."""
    try:
        module = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    except ImportError:
        return None
    ref = getattr(module, name, None)
    if ref is None:
        return None
    body = getattr(ref, "__wrapped__", ref)  # the plain torch function under the kernel-hub decorator

    @functools.partial(_float64_when_asked, module)
    def call(q, k, v, log_alpha, beta, scale, initial_state, output_final_state, **chunking):
        g = q.new_zeros(q.shape[:3]) if log_alpha is None else log_alpha
        return body(_rescale_q(q, scale), k, v, g=g, beta=beta, initial_state=initial_state,
                    output_final_state=output_final_state, **chunking)

    def chunk(q, k, v, *, log_alpha=None, beta=None, scale=None, initial_state=None, output_final_state=False,
              chunk_size=64):
        return call(q, k, v, log_alpha, beta, scale, initial_state, output_final_state, chunk_size=chunk_size)

    def recurrent(q, k, v, *, log_alpha=None, beta=None, scale=None, initial_state=None, output_final_state=False):
        return call(q, k, v, log_alpha, beta, scale, initial_state, output_final_state)

    return chunk if "chunk" in name else recurrent


def _mamba2_chunk_scan() -> Callable | None:
    try:
        from transformers.models.mamba2 import modeling_mamba2
        from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan
    except ImportError:
        return None

    @functools.partial(_float64_when_asked, modeling_mamba2)
    def fn(q, k, v, *, log_alpha, beta, scale=None, initial_state=None, output_final_state=False, chunk_size=64):
        """Mamba2 = hebbian with q=C, k=B, write Δ·x (β = Δ, v = x), log a = Δ·A, scale 1 (Dao & Gu 2024)."""
        A = (log_alpha / beta)[0, 0]  # (H,): constant per head by construction of Mamba2's gates
        eps = torch.finfo(log_alpha.dtype).eps
        if not torch.allclose(log_alpha, beta * A, atol=100 * eps, rtol=100 * eps):
            raise ValueError("mamba2_chunk_scan needs log_alpha = beta·A with A constant per head")
        sc = 1.0 if scale is None else scale
        init = None if initial_state is None else initial_state.transpose(-1, -2)  # (B, H, V, K)
        # our write β_t k_t v_tᵀ with β = Δ is Mamba2's B_t (Δ_t x_t)ᵀ with x = v
        out = mamba2_chunk_scan(v, beta, A, k, q * sc, chunk_size, initial_states=init,
                                return_final_states=output_final_state)
        if output_final_state:
            y, final = out
            return y, final.transpose(-1, -2)
        return (out[0] if isinstance(out, tuple) else out), None

    return fn


# ------------------------------------------------------------------ FLA naive


def _fla_ref(module: types.ModuleType, name: str, fn: Callable) -> ExternalRef:
    """An FLA naive reference (float32 inside), re-typed to float64 for float64 inputs."""
    return ExternalRef(f"fla:{name}", _float64_when_asked(module, fn), F64_ATOL, True)


def _fla_refs(spec: MixerSpec, family: str) -> list[ExternalRef]:
    r = spec.retention
    out: list[ExternalRef] = []
    if family == "hebbian" and spec.layer.normalize:  # FLA's own normalised linear attention in place of the plain one
        out += _fla_normalized(r) + [ref for ref in _fla_hebbian(r) if "linear_attn" not in ref.name]
    elif family == "hebbian":
        out += _fla_hebbian(r)
    elif family in ("dplr", "delta_rule_joint"):
        out += _fla_dplr()
    elif family == "delta_rule":
        out += _fla_delta(r)
    elif family == "kda" and (kmod := _fla_naive("kda")) is not None:
        def g(log_alpha, q):  # KDA's decay is per key; a scalar or absent one is broadcast over the keys
            la = q.new_zeros(q.shape[:3]) if log_alpha is None else log_alpha
            return la if la.dim() == 4 else la[..., None].expand(q.shape)

        def kr(q, k, v, *, log_alpha=None, beta, scale=None, initial_state=None, output_final_state=False):
            return kmod.naive_recurrent_kda(q, k, v, g(log_alpha, q), beta, scale=scale, initial_state=initial_state,
                                            output_final_state=output_final_state)

        def kc(q, k, v, *, log_alpha=None, beta, scale=None, initial_state=None, output_final_state=False,
               chunk_size=64):
            # it needs T % chunk_size == 0: pad the end with q = k = v = 0, β = 0, log α = 0 (writes nothing,
            # keeps the state), which leaves the first T outputs and the final state as they are
            T, pad = q.shape[1], -q.shape[1] % chunk_size
            end = lambda t: torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))  # noqa: E731  pad dim 1
            o, S = kmod.naive_chunk_kda(end(q), end(k), end(v), end(g(log_alpha, q)), end(beta), scale=scale,
                                        initial_state=initial_state, output_final_state=output_final_state,
                                        chunk_size=chunk_size)
            return o[:, :T], S

        out += [_fla_ref(kmod, "kda/naive_recurrent_kda", kr), _fla_ref(kmod, "kda/naive_chunk_kda", kc)]
    elif family == "softmax_attention":
        mod = _fla_naive("attn")
        if mod is not None:
            w = window_of(spec)

            def attn(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
                o = mod.naive_parallel_attn(q, k, v, scale=scale, window_size=w, causal=True)
                return (o[0] if isinstance(o, tuple) else o), None

            out.append(ExternalRef("fla:attn/naive_parallel_attn", _float64_when_asked(mod, attn), F64_ATOL, False))
    return out


def _fla_hebbian(r) -> list[ExternalRef]:
    out = []
    if isinstance(r, NoRetention) and (lmod := _fla_naive("linear_attn")) is not None:
        def la(q, k, v, *, beta=None, scale=None, initial_state=None, output_final_state=False):
            return lmod.naive_recurrent_linear_attn(q, k, _fold_beta(v, beta), scale=scale, initial_state=initial_state,
                                                   output_final_state=output_final_state)

        out.append(_fla_ref(lmod, "linear_attn/naive_recurrent_linear_attn", la))
    if isinstance(r, L2Decay) and r.gate != "key" and (smod := _fla_naive("simple_gla")) is not None:
        def sg(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False):
            o, S = smod.naive_recurrent_simple_gla(q, k, _fold_beta(v, beta), log_alpha, scale=scale,
                                                  initial_state=initial_state, output_final_state=True)
            return o, (S if output_final_state else None)

        def sgc(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False,
                chunk_size=64):
            return smod.naive_chunk_simple_gla(q, k, _fold_beta(v, beta), log_alpha, initial_state=initial_state,
                                              output_final_state=output_final_state, chunk_size=chunk_size, scale=scale)

        out += [_fla_ref(smod, "simple_gla/naive_recurrent_simple_gla", sg),
                _fla_ref(smod, "simple_gla/naive_chunk_simple_gla", sgc)]
    if isinstance(r, L2Decay) and r.gate == "key" and (kmod := _fla_naive("gla")) is not None:
        def gla(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False):
            return kmod.naive_recurrent_gla(_rescale_q(q, scale), k, _fold_beta(v, beta), log_alpha,
                                           initial_state=initial_state, output_final_state=output_final_state)

        out.append(_fla_ref(kmod, "gla/naive_recurrent_gla", gla))
    return out


def _fla_normalized(r) -> list[ExternalRef]:
    """Normalised linear attention: FLA's naive recurrence with normalize=True, state (S, Σ k)."""
    mod = _fla_naive("linear_attn") if isinstance(r, NoRetention) else None
    if mod is None:
        return []
    ref = _float64_when_asked(mod, mod.naive_recurrent_linear_attn)

    def nla(q, k, v, *, beta=None, scale=None, initial_state=None, output_final_state=False):
        if beta is not None:  # FLA's normaliser sums unweighted keys
            raise ValueError("naive_recurrent_linear_attn(normalize=True) has no write strength beta")
        init = None
        if initial_state is not None:  # our [S, z] -> FLA's (S [B, H, K, V], z [B, 1, H, K])
            init = (initial_state[..., :-1], initial_state[..., -1].unsqueeze(1))
        o, S = ref(q, k, v, scale=scale, initial_state=init, output_final_state=True, normalize=True)
        S = torch.cat((S[0], S[1].squeeze(1).unsqueeze(-1)), dim=-1)  # (B, H, K, V + 1)
        return o, (S if output_final_state else None)

    return [ExternalRef("fla:linear_attn/naive_recurrent_linear_attn(normalize=True)", nla, F64_ATOL, True)]


def _fla_dplr() -> list[ExternalRef]:
    """RWKV-7's transition through FLA's generalized delta rule (dplr): S_t = S diag(e^{gk}) + b (aᵀ S)
    + k vᵀ in our [K, V] layout, with a = −κ, b = β ⊙ κ, k_FLA = β ⊙ k, fixed scale K**-0.5."""
    mod = _fla_naive("generalized_delta_rule/dplr")
    if mod is None:
        return []
    ref = _float64_when_asked(mod, mod.dplr_recurrence)

    def dplr(q, k, v, *, removal_key=None, log_alpha=None, beta=None, scale=None, initial_state=None,
             output_final_state=False):
        B, T, H, K = q.shape
        full = lambda x, fill: (q.new_full((B, T, H, K), fill) if x is None  # noqa: E731
                                else x if x.dim() == 4 else x[..., None].expand(B, T, H, K))
        kappa, beta, gk = (k if removal_key is None else removal_key), full(beta, 1.0), full(log_alpha, 0.0)
        t = lambda x: x.transpose(1, 2)  # noqa: E731  (B, T, H, D) <-> (B, H, T, D)
        o, S = ref(t(_rescale_q(q, scale)), t(beta * k), t(v), t(-kappa), t(beta * kappa), t(gk),
                   initial_state=initial_state, output_final_state=True)
        return t(o), (S if output_final_state else None)

    return [ExternalRef("fla:generalized_delta_rule/dplr/dplr_recurrence", dplr, F64_ATOL, True)]


def _fla_delta(r) -> list[ExternalRef]:
    out = []
    if isinstance(r, NoRetention) and (dmod := _fla_naive("delta_rule")) is not None:
        def dr(q, k, v, *, beta, scale=None, initial_state=None, output_final_state=False):
            t = lambda x: x.transpose(1, 2)  # noqa: E731  (B, T, H, D) <-> (B, H, T, D)
            o, S = dmod.delta_rule_recurrence(t(_rescale_q(q, scale)), t(k), t(v), t(beta),
                                             initial_state=initial_state, output_final_state=True)
            return t(o), (S if output_final_state else None)

        out.append(_fla_ref(dmod, "delta_rule/delta_rule_recurrence", dr))
    if (gmod := _fla_naive("gated_delta_rule")) is not None:
        def g(log_alpha, q):
            return q.new_zeros(q.shape[:3]) if log_alpha is None else log_alpha

        def gdr(q, k, v, *, log_alpha=None, beta, scale=None, initial_state=None, output_final_state=False):
            return gmod.naive_recurrent_gated_delta_rule(q, k, v, beta, g(log_alpha, q), scale=scale,
                                                        initial_state=initial_state,
                                                        output_final_state=output_final_state)

        def gdc(q, k, v, *, log_alpha=None, beta, scale=None, initial_state=None, output_final_state=False,
                chunk_size=64):
            return gmod.naive_chunk_gated_delta_rule(q, k, v, g(log_alpha, q), beta, chunk_size=chunk_size, scale=scale,
                                                    initial_state=initial_state, output_final_state=output_final_state)

        out += [_fla_ref(gmod, "gated_delta_rule/naive_recurrent_gated_delta_rule", gdr),
                _fla_ref(gmod, "gated_delta_rule/naive_chunk_gated_delta_rule", gdc)]
    return out


def external_references(spec: MixerSpec) -> list[ExternalRef]:
    """Every installed external reference that computes ``spec``'s recurrence.

    Recurrent depth K > 1: the references of the row run with the single-step β of K steps
    (lower.py's depth column), so they check the K-step derivation through ops written by others.
    A normalised read-out wraps every reference but FLA's own normalize=True (ops/normalized.py)."""
    refs: list[ExternalRef] = []
    family = family_name(spec)  # the row of the class table (lower.py)
    K = steps_of(spec)
    delta_refs = {"delta_rule": ("qwen3_next", ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")),
                  "kda": ("kimi_linear", ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"))}
    if family in delta_refs:
        model, names = delta_refs[family]
        for name in names:
            if (fn := _transformers_delta(model, name)) is not None:
                refs.append(ExternalRef(f"transformers:{model}.{name}", fn, F64_ATOL, True))
    if family == "hebbian" and spec.layer.lr_gate == "dt" and K == 1 and (fn := _mamba2_chunk_scan()) is not None:
        # it takes (Δ, A) where we take (β, log α = β·A): gradients are comparable for q, k, v only
        refs.append(ExternalRef("transformers:mamba2.mamba2_chunk_scan", fn, F64_ATOL, True, ("q", "k", "v")))
    refs += _fla_refs(spec, family)
    if K > 1:
        refs = [dataclasses.replace(r, name=f"{r.name} (β_eff of {K} steps)",
                                    fn=with_depth(r.fn, family_of(spec).depth.beta, K)) for r in refs]
    if spec.layer.normalize:
        refs = [r if "normalize=True" in r.name else dataclasses.replace(r, name=f"{r.name} (normalised)",
                                                                          fn=normalized(r.fn)) for r in refs]
    return refs


# ------------------------------------------------------------------ FLA's entry points, naive


def _varlen(call: Callable, tensors: list[torch.Tensor], initial_state, cu_seqlens) -> tuple:
    """``call(*tensors, h0) -> (o, S)`` once, or once per sequence of ``cu_seqlens`` [N + 1] (FLA's varlen
    packing: B = 1, sequence i is tokens cu_seqlens[i]:cu_seqlens[i+1], its initial state initial_state[i])."""
    if cu_seqlens is None:
        return call(*tensors, initial_state)
    if tensors[0].shape[0] != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got "
                         f"{tensors[0].shape[0]}")
    bounds = cu_seqlens.tolist()
    runs = [call(*(t[:, a:b] for t in tensors), None if initial_state is None else initial_state[i:i + 1])
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    states = [S for _, S in runs]
    return torch.cat([o for o, _ in runs], dim=1), (None if states[0] is None else torch.cat(states))


def _no_options(name: str, options: dict) -> None:
    """The stand-ins model FLA's arguments that ops/fla.py passes; any other option switched on is refused."""
    on = sorted(k for k, v in options.items() if v not in (None, False))
    if on:
        raise ValueError(f"the naive stand-in of {name} models none of FLA's options {on}")


def _bhtd(fn: Callable) -> Callable:
    """A [B, H, T, D] reference called with [B, T, H, D] tensors (o comes back [B, T, H, V])."""
    def call(*xs, **kw):
        o, S = fn(*(x.transpose(1, 2) for x in xs), **kw)
        return o.transpose(1, 2), S
    return call


def _l2(use: bool, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FLA's use_qk_l2norm_in_kernel: q, k · rsqrt(‖·‖² + 1e-6)."""
    norm = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)  # noqa: E731
    return (norm(q), norm(k)) if use else (q, k)


def fla_naive_kernels() -> types.SimpleNamespace | None:
    """FLA's pure-torch naive references (fla/ops/<family>/naive.py) under the names and leading parameters of
    its Triton entry points (chunk_linear_attn, ..., fused_recurrent_dplr_delta_rule; ops/fla.py), or None
    when fla-core is not installed. The ``kernels`` namespace that runs the fla backend without a GPU
    (``FlaEnv(kernels=...)``, mixers/kernels.py): the call ops/fla.py makes, arguments and all, reaches FLA's
    own reference. Each loops over the sequences of ``cu_seqlens``; the chunk and fused recurrent entry
    points share one reference (FLA's naive files hold one recurrence per family); float64 inputs run
    re-typed to float64. As in FLA, chunk_delta_rule refuses float32 inputs."""
    mods = {f: _fla_naive(f) for f in ("linear_attn", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "kda",
                                       "generalized_delta_rule/dplr")}
    if any(m is None for m in mods.values()):
        return None
    lin, sgla, gla, dr, gdr, kda, dplr = mods.values()
    fixed = lambda q, scale: _rescale_q(q, scale if scale is not None else q.shape[-1] ** -0.5)  # noqa: E731

    def linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=False,
                    cu_seqlens=None, reverse=False):
        _no_options("linear_attn", dict(reverse=reverse))
        return _varlen(lambda q, k, v, h0: lin.naive_recurrent_linear_attn(
            q, k, v, scale=scale, initial_state=h0, output_final_state=output_final_state, normalize=normalize),
            [q, k, v], initial_state, cu_seqlens)

    def simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                   state_v_first=False, cu_seqlens=None, reverse=False, **options):
        _no_options("simple_gla", dict(options, state_v_first=state_v_first, reverse=reverse))
        if g is None:  # a fixed decay per head is the same decay at every token
            g = q.new_zeros(q.shape[:3], dtype=torch.float32) if g_gamma is None else g_gamma.expand(q.shape[:3])

        def run(q, k, v, g, h0):
            o, S = sgla.naive_recurrent_simple_gla(q, k, v, g, scale=scale, initial_state=h0, output_final_state=True)
            return o, (S if output_final_state else None)
        return _varlen(run, [q, k, v, g], initial_state, cu_seqlens)

    def gla_(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
             cu_seqlens=None, reverse=False, **options):
        _no_options("gla", dict(options, state_v_first=state_v_first, reverse=reverse))
        return _varlen(lambda q, k, v, g, h0: gla.naive_recurrent_gla(
            fixed(q, scale), k, v, g, initial_state=h0, output_final_state=output_final_state),
            [q, k, v, g], initial_state, cu_seqlens)

    def delta(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **options):
        _no_options("delta_rule", options)
        q, k = _l2(use_qk_l2norm_in_kernel, q, k)
        beta = q.new_ones(q.shape[:3]) if beta is None else beta

        def run(q, k, v, beta, h0):
            o, S = _bhtd(dr.delta_rule_recurrence)(fixed(q, scale), k, v, beta, initial_state=h0,
                                                   output_final_state=True)
            return o, (S if output_final_state else None)
        return _varlen(run, [q, k, v, beta], initial_state, cu_seqlens)

    def chunk_delta(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                    use_qk_l2norm_in_kernel=False, cu_seqlens=None, **options):
        if q.dtype == torch.float32:  # FLA: "ChunkDeltaRuleFunction does not support float32. Please use bfloat16."
            raise AssertionError("ChunkDeltaRuleFunction does not support float32. Please use bfloat16.")
        return delta(q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens,
                     **options)

    def gated(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **options):
        _no_options("gated_delta_rule", dict(options, gk=gk, gv=gv))
        q, k = _l2(use_qk_l2norm_in_kernel, q, k)
        return _varlen(lambda q, k, v, g, beta, h0: gdr.naive_recurrent_gated_delta_rule(
            q, k, v, beta, g, scale=scale, initial_state=h0, output_final_state=output_final_state),
            [q, k, v, g, beta], initial_state, cu_seqlens)

    def chunk_gated(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                    use_qk_l2norm_in_kernel=False, cu_seqlens=None, **options):
        return gated(q, k, v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                     cu_seqlens=cu_seqlens, **options)

    def kda_(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
             use_qk_l2norm_in_kernel=False, cu_seqlens=None, **options):
        _no_options("kda", options)
        q, k = _l2(use_qk_l2norm_in_kernel, q, k)
        return _varlen(lambda q, k, v, g, beta, h0: kda.naive_recurrent_kda(
            q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=output_final_state),
            [q, k, v, g, beta], initial_state, cu_seqlens)

    def dplr_(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              **options):
        _no_options("dplr_delta_rule", options)

        def run(q, k, v, a, b, gk, h0):
            o, S = _bhtd(dplr.dplr_recurrence)(fixed(q, scale), k, v, a, b, gk, initial_state=h0,
                                               output_final_state=True)
            return o, (S if output_final_state else None)
        return _varlen(run, [q, k, v, a, b, gk], initial_state, cu_seqlens)

    f64 = _float64_when_asked
    return types.SimpleNamespace(
        chunk_linear_attn=f64(lin, linear_attn), fused_recurrent_linear_attn=f64(lin, linear_attn),
        chunk_simple_gla=f64(sgla, simple_gla), fused_recurrent_simple_gla=f64(sgla, simple_gla),
        chunk_gla=f64(gla, gla_), fused_recurrent_gla=f64(gla, gla_),
        chunk_delta_rule=f64(dr, chunk_delta), fused_recurrent_delta_rule=f64(dr, delta),
        chunk_gated_delta_rule=f64(gdr, chunk_gated), fused_recurrent_gated_delta_rule=f64(gdr, gated),
        chunk_kda=f64(kda, kda_), fused_recurrent_kda=f64(kda, kda_),
        chunk_dplr_delta_rule=f64(dplr, dplr_), fused_recurrent_dplr_delta_rule=f64(dplr, dplr_),
    )
