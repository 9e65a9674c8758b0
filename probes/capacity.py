"""Memory capacity: retrieval error against the number of stored key-value pairs.

For a memory spec, write N random pairs (k_i, v_i) with the spec's own op (the
lowered form, "auto" by default: every exact form gives the same numbers), then read
every pair back with q = k_i from the final state WITHOUT writing, and report

    rel_mse        = Σ_i ‖r_i − v_i‖² / Σ_i ‖v_i‖²
    rel_mse_scaled = min_c Σ_i ‖c·r_i − v_i‖² / Σ_i ‖v_i‖²     (one gain c per memory and N)

The scaled error forgives a global gain, e.g. the 1/N of a normalised (mean)
memory such as SCA, which a layer's output projection absorbs.

Fixed state size per head (floats), equal budgets by default (K = V = 32):
  matrix memories   (hebbian, delta, diag+rank-1, scan)  S ∈ R^{K×V}: K·V = 1024
  nonparametric     KV cache of the last w pairs: w = K·V / (K+V) = 16 pairs, 1024 floats
  spectral (SCA)    (Σp, Σ p v e^{iuθ}) ∈ R × R^{D×M×2}: D = V, M = K/2 → 1 + 2·D·M = 1025

Writes: keys unit-norm Gaussian k ∈ R^K, values v ~ N(0, I_V); gates neutral (α = 1,
β = write strength, default 1; momentum η left at the optimizer's default).
Reads, per class, use the op with writes switched off:
  matrix classes    q = k_i, k = 0, v = 0, α = 1, η = 0 (every rule's update is then 0; β stays
                    nonzero because the derived L2-decay penalty divides by the learning rate)
                    and scale 1, i.e. r_i = f_S(k_i) (= Sᵀk_i for a plain matrix)
  spectral          key = per-channel phase argument u ∈ U(−1, 1)^D, query spectrum e^{iu_iθ},
                    points θ_m = m·π/2 (m = 0..M−1, no aliasing on |Δu| < 2), uniform weights 1/M,
                    writes p = 1, reads p = 0; r_i = Re Σ_m w_m S[m] conj(e^{iu_iθ_m})
  nonparametric     the op's final state is the windowed cache; the read is its
                    Nadaraya–Watson estimate r = Σ_j softmax_j(s·q·k_j) v_j with s = ``nw_scale``
                    (default K: sharp retrieval of a unit key that is still in the cache).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from assocmem.memories import NonParametric, Spectral, Window
from assocmem.memories.checks import gate_needs
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.lower import lower

DEFAULT_MEMORIES = {"hebbian": "linear_attention", "delta": "deltanet", "spectral": "sca",
                    "nonparametric": "softmax"}
DEFAULT_NUM_PAIRS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class CapacityCurve:
    label: str
    algebra: str
    form: str
    state_floats: int  # per head
    num_pairs: list[int]
    rel_mse: list[float]
    rel_mse_scaled: list[float]

    def to_json(self) -> dict:
        return asdict(self)


def _errors(r: torch.Tensor, v: torch.Tensor) -> tuple[float, float]:
    """Raw and gain-corrected relative MSE of reads r vs values v (any equal shapes)."""
    r, v = r.double(), v.double()
    total = float((v * v).sum())
    raw = float(((r - v) ** 2).sum()) / total
    rr = float((r * r).sum())
    gain = float((r * v).sum()) / rr if rr > 0 else 0.0
    return raw, float(((gain * r - v) ** 2).sum()) / total


def _unit(shape, gen, dtype) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    return x / x.norm(dim=-1, keepdim=True)


def _matrix_gates(spec: MixerSpec, B: int, T: int, K: int, beta: float, dtype, write: bool) -> dict:
    needs = gate_needs(spec)
    gates = {"beta": torch.full((B, T, 1), beta, dtype=dtype)}  # reads: k = 0 makes every write 0
    if needs.log_alpha is not None:
        shape = (B, T, 1, K) if needs.log_alpha == "key" else (B, T, 1)
        gates["log_alpha"] = torch.zeros(shape, dtype=dtype)
    if needs.eta and not write:
        gates["eta"] = torch.zeros(B, T, 1, dtype=dtype)
    return gates


def _matrix_capacity(spec, fn, N, K, V, trials, beta, gen, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    k = _unit((trials, N, 1, K), gen, dtype)  # (B, N, H=1, K)
    v = torch.randn(trials, N, 1, V, generator=gen, dtype=dtype)
    _, S = fn(k, k, v, **_matrix_gates(spec, trials, N, K, beta, dtype, True), scale=1.0, output_final_state=True)
    zk, zv = torch.zeros_like(k), torch.zeros_like(v)
    r, _ = fn(k, zk, zv, **_matrix_gates(spec, trials, N, K, beta, dtype, False), scale=1.0, initial_state=S)
    return r, v


def _spectral_capacity(fn, N, D, M, trials, gen, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    u = 2.0 * torch.rand(trials, N, 1, D, generator=gen, dtype=dtype) - 1.0  # (B, N, H=1, D)
    v = torch.randn(trials, N, 1, D, generator=gen, dtype=dtype)
    theta = (math.pi / 2) * torch.arange(M, dtype=dtype).expand(1, D, M)  # (H, D, M)
    weights = torch.full((1, D, M), 1.0 / M, dtype=dtype)
    phase = u[..., None] * theta  # (B, N, 1, D, M)
    q = torch.stack((torch.cos(phase), torch.sin(phase)), dim=-1)  # (B, N, 1, D, M, 2) = e^{iuθ}
    ones, zeros = torch.ones(trials, N, 1, dtype=dtype), torch.zeros(trials, N, 1, dtype=dtype)
    common = dict(theta=theta, weights=weights, scale=1.0)
    _, S = fn(q, u, v, beta=ones, output_final_state=True, **common)
    r, _ = fn(q, torch.zeros_like(u), torch.zeros_like(v), beta=zeros, initial_state=S, **common)
    return r[..., 0], v  # real part of the Hermitian read-out


def _nonparametric_capacity(fn, N, K, V, trials, nw_scale, gen, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    k = _unit((trials, N, 1, K), gen, dtype)
    v = torch.randn(trials, N, 1, V, generator=gen, dtype=dtype)
    _, (keys, values) = fn(k, k, v, output_final_state=True)  # cache: (B, 1, w, K), (B, 1, w, V)
    logits = nw_scale * torch.einsum("bnhk,bhjk->bnhj", k, keys)  # (B, N, 1, w)
    r = torch.einsum("bnhj,bhjv->bnhv", torch.softmax(logits, dim=-1), values)
    return r, v


def _with_window(spec: MixerSpec, w: int) -> MixerSpec:
    """The nonparametric spec with its cache bounded to the last w pairs (the state budget)."""
    data = spec.model_dump()
    data["memory"] = NonParametric(window=None).model_dump()
    data["retention"] = Window(size=w).model_dump()
    return MixerSpec.model_validate(data)


def memory_capacity(
    spec: MixerSpec | str,
    *,
    num_pairs: tuple[int, ...] = DEFAULT_NUM_PAIRS,
    key_dim: int = 32,
    value_dim: int = 32,
    trials: int = 8,
    form: str = "auto",
    write_strength: float = 1.0,
    nw_scale: float | None = None,
    label: str | None = None,
    seed: int = 0,
) -> CapacityCurve:
    """Retrieval error of ``spec``'s memory against N stored pairs at the state budget K·V."""
    spec = get_preset(spec) if isinstance(spec, str) else spec
    if not isinstance(spec, MixerSpec):
        raise TypeError(f"spec: expected a MixerSpec or preset name, got {type(spec).__name__}")
    if min(num_pairs) < 1 or trials < 1:
        raise ValueError(f"num_pairs and trials must be >= 1, got {num_pairs}, {trials}")
    mem, dtype = spec.memory, torch.float64  # the memory's kind sets the layout of the stored pairs
    K, V = key_dim, value_dim
    if isinstance(mem, NonParametric):
        w = max(1, (K * V) // (K + V))
        spec = _with_window(spec, w)
        state = spec.memory.state_floats(K, V, seq_len=w)
    elif isinstance(mem, Spectral):
        M = max(1, K // 2)
        spec = spec.model_copy(update={"memory": spec.memory.model_copy(update={"points": M})})
        state = spec.memory.state_floats(K, V)
    else:
        state = spec.memory.state_floats(K, V)
    lowered = lower(spec, form)
    gen = torch.Generator().manual_seed(seed)
    raw, scaled = [], []
    for N in num_pairs:
        try:
            if isinstance(mem, Spectral):
                r, v = _spectral_capacity(lowered.fn, N, V, M, trials, gen, dtype)
            elif isinstance(mem, NonParametric):
                r, v = _nonparametric_capacity(lowered.fn, N, K, V, trials, nw_scale or float(K), gen, dtype)
            else:
                r, v = _matrix_capacity(spec, lowered.fn, N, K, V, trials, write_strength, gen, dtype)
        except (MemoryError, RuntimeError) as err:  # torch's failed allocation is a RuntimeError
            if not isinstance(err, MemoryError) and "allocate" not in str(err):
                raise
            raise ValueError(f"num_pairs {N} x trials {trials} x (key_dim {K} + value_dim {V}) float64 values do not "
                             f"fit in memory; use fewer pairs or trials") from None
        a, b = _errors(r, v)
        raw.append(a)
        scaled.append(b)
    return CapacityCurve(label or spec.name or "spec", spec.algebra, lowered.name, int(state), list(num_pairs), raw, scaled)


def capacity_sweep(
    memories: dict[str, MixerSpec | str] | None = None,
    *,
    num_pairs: tuple[int, ...] = DEFAULT_NUM_PAIRS,
    key_dim: int = 32,
    value_dim: int = 32,
    trials: int = 8,
    form: str = "auto",
    seed: int = 0,
    report: Callable[[str], None] | None = None,
) -> list[CapacityCurve]:
    """``memory_capacity`` for each labelled spec (default: hebbian, delta, spectral, nonparametric);
    ``report`` (e.g. training/progress.progress_line) hears "memory m/M LABEL ..." before each."""
    memories = memories or DEFAULT_MEMORIES
    curves = []
    for m, (label, spec) in enumerate(memories.items(), start=1):
        if report is not None:
            report(f"memory {m}/{len(memories)} {label} ...")
        curves.append(memory_capacity(spec, num_pairs=num_pairs, key_dim=key_dim, value_dim=value_dim, trials=trials,
                                      form=form, label=label, seed=seed))
    return curves
