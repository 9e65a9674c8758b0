"""Human-readable closed forms of recognised specs (thesis notation M = Sᵀ ∈ R^{V×K},
f_M(k) = M k). Unrecognised specs are described as 'generic gradient step'."""
from __future__ import annotations

from .algebra import algebra_class, window_of
from .bias import L2, Huber, Lp
from .memory import Matrix
from .optimizer import GD, Implicit, Momentum, RetainThenGD
from .retention import KL, L2Decay, NoRetention

GENERIC = "generic gradient step"


def _decay(r) -> str:
    if isinstance(r, L2Decay):
        return "diag(α_t) " if r.gate == "key" else "α_t "
    return ""


def _hebbian(spec) -> str:
    d = _decay(spec.retention)
    m = "M_{t-1} diag(α_t)" if d.startswith("diag") else f"{d}M_{{t-1}}"
    return f"M_t = {m} + β_t v_t k_tᵀ"


def _delta(spec) -> str:
    r, o = spec.retention, spec.optimizer
    a = _decay(r)
    if isinstance(o, Implicit):
        return (f"M_t = {a}M_{{t-1}}(I − ε_t k_t k_tᵀ) + ε_t v_t k_tᵀ,  ε_t = β_t / (1 + β_t ‖k_t‖²)"
                "  (exact proximal step, Longhorn)")
    if a.startswith("diag"):  # S_t = (I − β k kᵀ) diag(α) S_{t−1} + β k vᵀ with M = Sᵀ
        return "M_t = M_{t-1} diag(α_t)(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ  (Kimi Delta Attention)"
    return f"M_t = {a}M_{{t-1}}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ"


def _diag_rank1(spec) -> str:
    a = "diag(α_t)" if spec.retention.gate == "key" else "α_t I"
    return (f"M_t = M_{{t-1}}({a} − β_t k_t k_tᵀ) + β_t v_t k_tᵀ"
            "  (one GD step on ℓ2 + ℓ2-decay taken jointly at M_{t-1})")


def _scan(spec) -> str:
    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    if not (isinstance(m, Matrix) and m.norm == "none"):
        return GENERIC
    err = "(M_{t-1} k_t − v_t)"
    grads = {L2: f"{err} k_tᵀ", Huber: f"clamp({err}, −δ, δ) k_tᵀ", Lp: f"p·sign(e)|e|^(p−1) k_tᵀ, e = {err}"}
    g = next((txt for cls, txt in grads.items() if isinstance(b, cls)), None)
    if g is None:
        return GENERIC
    if isinstance(o, Momentum) and isinstance(r, (NoRetention, L2Decay)) and not (isinstance(r, L2Decay) and r.gate == "key"):
        return f"m_t = η_t m_{{t-1}} − β_t {g};  M_t = {_decay(r)}M_{{t-1}} + m_t  (Titans)"
    if isinstance(r, KL):
        return GENERIC
    if isinstance(o, RetainThenGD) and not isinstance(b, L2):
        return f"M' = {_decay(r)}M_{{t-1}};  M_t = M' − β_t ∇ℓ(M'),  ∇ℓ(M) = {g.replace('M_{t-1}', 'M')}"
    if isinstance(o, GD) and isinstance(r, NoRetention):
        return f"M_t = M_{{t-1}} − β_t {g}"
    return GENERIC


def describe(spec) -> str:
    cls = algebra_class(spec)
    if cls == "hebbian":
        return _hebbian(spec)
    if cls == "delta":
        return _delta(spec)
    if cls == "diag_rank1":
        return _diag_rank1(spec)
    if cls == "spectral":
        return ("den_t = den_{t-1} + p_t;  num_t = num_{t-1} + p_t v_t e^{iφ_t},  φ_t = u_t ⊗ θ;  "
                "o_t = scale Σ_m w_m (num_t / max(den_t, ε))_m conj(q_t,m)  (normalised spectral mean, SCA)")
    if cls == "nonparametric":
        w = window_of(spec)
        rng = "i ≤ t" if w is None else f"t − {w} < i ≤ t"
        return f"o_t = Σ_{{{rng}}} softmax_i(scale q_tᵀ k_i) v_i  (Nadaraya–Watson over the KV cache)"
    return _scan(spec)
