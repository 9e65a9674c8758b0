"""Human-readable closed forms of recognised specs (thesis notation M = Sᵀ ∈ R^{V×K},
f_M(k) = M k, so a per-key decay scales the columns of M: M diag(α_t)). Any other parametric spec
is a generic gradient step, written out from its axes (``composed``): the bias's gradient ∇ℓ,
the retention's step and the optimizer's composition of the two, as memories/optimizer.py takes them."""
from __future__ import annotations

from .algebra import algebra_class, window_of
from .bias import L2, DotProduct, Huber, Lp, RemoveReplace
from .memory import Matrix
from .optimizer import GD, Implicit, Momentum, Newton, RetainThenGD
from .retention import KL, L1, L2Decay, NoRetention, Proximal

GENERIC = "generic gradient step"


def _decay(r) -> str:
    if isinstance(r, L2Decay):
        return "diag(α_t) " if r.gate == "key" else "α_t "
    return ""


def _retained(r, m: str = "M_{t-1}") -> str:
    """The retained memory: α_t M, or M diag(α_t) for a per-key decay (one factor per key, i.e. per
    column of M = Sᵀ), α_t ⊙ M for one decay per entry (gate="entry"), or M."""
    if isinstance(r, L2Decay):
        return {"key": f"{m} diag(α_t)", "entry": f"α_t ⊙ {m}"}.get(r.gate, f"α_t {m}")
    return m


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


def _dplr(spec) -> str:
    a = "diag(α_t)" if isinstance(spec.retention, L2Decay) and spec.retention.gate == "key" else (
        "α_t I" if isinstance(spec.retention, L2Decay) else "I")
    rate = "β_t" if spec.optimizer.rate == "scalar" else "diag(β_t)"
    kappa = "κ_t" if isinstance(spec.bias, RemoveReplace) else "k_t"
    return (f"S_t = ({a} − {rate} {kappa} {kappa}ᵀ) S_{{t-1}} + {rate} k_t v_tᵀ  (S = Mᵀ; diagonal plus low rank: "
            f"RWKV-7 with in-context rate β_t{' and removal key κ_t' if kappa == 'κ_t' else ''})")


def _l1(spec) -> str:
    b = spec.bias
    if isinstance(b, DotProduct):
        step = "β_t v_t k_tᵀ"
    elif isinstance(b, L2):
        step = "β_t (v_t − M_{t-1} k_t) k_tᵀ"
    else:
        return GENERIC
    return (f"M_t = M_{{t-1}} + soft({step}, β_t λ),  soft(x, τ) = sign(x) max(|x| − τ, 0)  "
            f"(one proximal-gradient step on ℓ + λ‖M − M_{{t-1}}‖₁, λ = {spec.retention.lam:g})")


def _scan(spec) -> str:
    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    if not (isinstance(m, Matrix) and m.norm == "none") or getattr(o, "rate", "scalar") == "key":
        return GENERIC
    if isinstance(r, L1):
        return _l1(spec) if getattr(o, "steps", 1) == 1 and o.rate == "scalar" else GENERIC
    err = "(M_{t-1} k_t − v_t)"
    grads = {L2: f"{err} k_tᵀ", Huber: f"clamp({err}, −δ, δ) k_tᵀ", Lp: f"p·sign(e)|e|^(p−1) k_tᵀ, e = {err}"}
    if isinstance(b, Lp) and b.clip is not None:
        grads[Lp] = f"p·sign(e)·min(|e|, c)^(p−1) k_tᵀ, e = {err}, c = {b.clip:g}"
    if isinstance(b, Lp) and b.eps is not None:
        grads[Lp] = grads[Lp].replace(" k_tᵀ, e =", f" k_tᵀ (|e| ≥ ε; p ε^(p−2) e k_tᵀ below, ε = {b.eps:.4g}), e =")
    g = next((txt for cls, txt in grads.items() if isinstance(b, cls)), None)
    if g is None:
        return GENERIC
    if isinstance(o, Momentum) and isinstance(r, (NoRetention, L2Decay)) and not (isinstance(r, L2Decay) and r.gate == "key"):
        return f"m_t = η_t m_{{t-1}} − β_t {g};  M_t = {_retained(r)} + m_t  (Titans)"
    if isinstance(r, KL):
        return GENERIC
    if isinstance(o, RetainThenGD) and not isinstance(b, L2):
        return f"M' = {_retained(r)};  M_t = M' − β_t ∇ℓ(M'),  ∇ℓ(M) = {g.replace('M_{t-1}', 'M')}"
    if isinstance(o, GD) and isinstance(r, NoRetention):
        return f"M_t = M_{{t-1}} − β_t {g}"
    return GENERIC


def depth(spec) -> str:
    """The single step that K steps per token equal (recurrent depth, thesis eq. 5.1), or ''.

    ℓ2 bias: every GD step on ½‖Sᵀk − v‖² multiplies the error e = v − Sᵀk by (1 − β‖k‖²), so K
    steps write (1 − (1 − β‖k‖²)^K) e along k: one delta step with β_eff. A proximal step
    divides it by (1 + β‖k‖²). Dot product: the gradient does not depend on M, K steps add K·β v kᵀ.
    """
    K = getattr(spec.optimizer, "steps", 1)
    if K == 1:
        return ""
    cls = algebra_class(spec)
    if cls == "hebbian":
        return f"  with β_t → β_eff,t = {K}·β_t  ({K} steps on the dot product = one step)"
    if cls == "delta" and isinstance(spec.optimizer, Implicit):
        return (f"  with β_t → β_eff,t = ((1 + β_t‖k_t‖²)^{K} − 1)/‖k_t‖²  ({K} proximal steps on ℓ2 = one, "
                f"then ε_t = β_eff,t / (1 + β_eff,t ‖k_t‖²))")
    if cls == "delta":
        return f"  with β_t → β_eff,t = (1 − (1 − β_t‖k_t‖²)^{K})/‖k_t‖²  ({K} GD steps on ℓ2 = one delta step)"
    return f"  (the step taken {K} times per token before the read)"


def describe(spec) -> str:
    """The closed form of ``spec``'s write (with its single-step equivalent under recurrent depth); a base
    learning rate lr ≠ 1 shows as lr·β_t (the step is η_t = lr·β_t)."""
    closed = _closed_form(spec)
    text = closed + depth(spec)
    lr = getattr(spec.optimizer, "lr", 1.0)
    return text if lr == 1.0 or closed == GENERIC else text.replace("β_t", f"{lr:g}·β_t")


def _closed_form(spec) -> str:
    closed = _published_form(spec)
    return composed(spec) if closed == GENERIC else closed


def _published_form(spec) -> str:
    cls = algebra_class(spec)
    if cls == "hebbian":
        return _hebbian(spec)
    if cls == "delta":
        return _delta(spec)
    if cls == "diag_rank1":
        return _diag_rank1(spec)
    if cls == "dplr":
        return _dplr(spec)
    if cls == "selective":
        return ("S_t = α_t ⊙ S_{t-1} + β_t k_t v_tᵀ  (S = Mᵀ, one decay per entry: Mamba's selective SSM "
                "h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t x_t with k = B, v = Δ ⊙ x, q = C)")
    if cls == "spectral":
        return ("den_t = den_{t-1} + p_t;  num_t = num_{t-1} + p_t v_t e^{iφ_t},  φ_t = u_t ⊗ θ;  "
                "o_t = scale Σ_m w_m (num_t / max(den_t, ε))_m conj(q_t,m)  (normalised spectral mean, SCA)")
    if cls == "nonparametric":
        w = window_of(spec)
        rng = "i ≤ t" if w is None else f"t − {w} < i ≤ t"
        return f"o_t = Σ_{{{rng}}} softmax_i(scale q_tᵀ k_i) v_i  (Nadaraya–Watson over the KV cache)"
    return _scan(spec)


# ----------------------------------------------------------------- a generic gradient step, from the axes

def _loss_gradient(b) -> str | None:
    """g = ∂ℓ/∂f at the retrieval f = f_M(k_t), e = f − v_t (memories/bias.py), or None."""
    if isinstance(b, DotProduct):
        return "−v_t"
    if isinstance(b, L2):
        return "e"
    if isinstance(b, Huber):
        return f"clamp(e, −δ, δ), δ = {b.delta:g}"
    if isinstance(b, Lp):
        inner = "" if b.eps is None else f" for |e| ≥ ε, p ε^(p−2) e below, ε = {b.eps:.4g}"
        if b.clip is None:
            return f"p·sign(e)|e|^(p−1){inner}, p = {b.p:g}"
        return f"p·sign(e)·min(|e|, c)^(p−1){inner}, p = {b.p:g}, c = {b.clip:g}"
    return None


def _bias_gradient(spec) -> str | None:
    """∇ℓ(M) written out: for f_M(k) = M k the outer product with k_t, else through f's Jacobian."""
    b, m = spec.bias, spec.memory
    plain = isinstance(m, Matrix) and m.norm == "none"
    if isinstance(b, RemoveReplace):
        return "∇ℓ(M) = M κ_t κ_tᵀ − v_t k_tᵀ  (removal key κ_t)" if plain else None
    g = _loss_gradient(b)
    if g is None:
        return None
    error = "" if "e" not in g.split(",")[0] else (",  e = M k_t − v_t" if plain else ",  e = f_M(k_t) − v_t")
    if plain:
        return f"∇ℓ(M) = g k_tᵀ,  g = {g}{error}"
    norm = getattr(m, "norm", "none")
    kind = m.kind if norm == "none" else f"{m.kind}({norm})"
    return f"∇ℓ(M) = (∂f_M(k_t)/∂M)ᵀ g,  g = {g}{error}  (f_M: the {kind} memory)"


def composed(spec) -> str:
    """The gradient step of ``spec`` written from its axes: ∇ℓ of the bias, the retention's step (α_t M
    for ℓ2 decay) and the optimizer's order (memories/optimizer.py); GENERIC where an axis has no text."""
    r, o = spec.retention, spec.optimizer
    grad = _bias_gradient(spec)
    if grad is None:
        return GENERIC
    rate = "∇ℓ(M_{t-1}) diag(β_t)" if getattr(o, "rate", "scalar") == "key" else "β_t ∇ℓ(M_{t-1})"
    if isinstance(r, KL):
        step = "S_t = softmax_V(α_t log S_{t-1} − β_t ∇ℓ(M_{t-1})ᵀ)  (mirror descent on each key row of S = Mᵀ)"
    elif isinstance(r, L1):
        step = (f"M_t = M_{{t-1}} + soft(−{rate}, β_t λ),  soft(x, τ) = sign(x) max(|x| − τ, 0), "
                f"λ = {r.lam:g}  (proximal gradient)")
    elif isinstance(o, Momentum):
        step = f"m_t = η_t m_{{t-1}} − {rate};  M_t = {_retained(r)} + m_t"
    elif isinstance(o, RetainThenGD):
        step = f"M' = {_retained(r)};  M_t = M' − {rate.replace('M_{t-1}', chr(39).join(['M', '']))}"
    elif isinstance(o, Implicit):
        prox = f" + {r.lam:g}/2 ‖M − M'‖²" if isinstance(r, Proximal) else ""
        step = f"M' = {_retained(r)};  M_t = argmin_M ℓ(M) + ‖M − M'‖²/(2β_t){prox}  (Newton–CG)"
    elif isinstance(o, Newton):
        damping = f" + {o.damping:g} I" if o.damping else ""
        step = f"M_t = M_{{t-1}} − β_t (∇²[ℓ + R]{damping})⁻¹ ∇[ℓ + R](M_{{t-1}})  (Newton–CG)"
    elif isinstance(o, GD):
        step = f"M_t = {_retained(r)} − {rate}"
    else:
        return GENERIC
    return f"{GENERIC}: {step};  {grad}"
