"""WiolaRMSNorm (Wiola eq. 9): δ = 0 is torch's RMSNorm, autograd equals central differences, and
the δ-gradient is the corrected form of eq. 10 (the printed one is wrong unless γ ≡ 1)."""
import torch

from assocmem.mixers.wiola import WiolaRMSNorm

D, EPS = 12, 1e-6


def _norm(gamma_one=False, delta_zero=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    norm = WiolaRMSNorm(D, eps=EPS).double()
    with torch.no_grad():
        if not gamma_one:
            norm.weight.copy_(1.0 + 0.5 * torch.randn(D, generator=g, dtype=torch.float64))
        if not delta_zero:
            norm.offset.copy_(0.7 * torch.randn(D, generator=g, dtype=torch.float64))
    return norm


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, D, generator=g, dtype=torch.float64)
    cot = torch.randn(3, 5, D, generator=g, dtype=torch.float64)  # g = ∂L/∂ŷ for L = Σ cot ⊙ ŷ
    return x, cot


def delta_grad_correct(x, gamma, delta, cot, eps):
    """∂L/∂δ_i = (1/r)(γ_i g_i − z_i/(d r²) Σ_k γ_k g_k z_k), summed over rows."""
    z = x + delta
    d = z.shape[-1]
    r = torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    s = (gamma * cot * z).sum(-1, keepdim=True)
    return ((gamma * cot - z * s / (d * r**2)) / r).flatten(0, -2).sum(0)


def delta_grad_eq10(x, gamma, delta, cot, eps):
    """The paper's eq. 10 as printed: γ_i/r · (g_i − z_i/(d r²) Σ_k γ_k g_k z_k)."""
    z = x + delta
    d = z.shape[-1]
    r = torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    s = (gamma * cot * z).sum(-1, keepdim=True)
    return (gamma / r * (cot - z * s / (d * r**2))).flatten(0, -2).sum(0)


def test_zero_offset_equals_torch_rmsnorm():
    norm = _norm(delta_zero=True)
    ref = torch.nn.RMSNorm(D, eps=EPS, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(norm.weight)
    x, _ = _inputs()
    torch.testing.assert_close(norm(x), ref(x), atol=1e-15, rtol=0)


def test_offset_shifts_the_input_before_the_rms():
    """Eq. 9 with δ ≠ 0 is RMSNorm applied to x + δ (not a bias after the norm)."""
    norm = _norm()
    ref = torch.nn.RMSNorm(D, eps=EPS, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(norm.weight)
    x, _ = _inputs()
    torch.testing.assert_close(norm(x), ref(x + norm.offset), atol=1e-15, rtol=0)
    assert (norm(x) - ref(x)).abs().max() > 0.1


def test_autograd_equals_central_differences():
    norm = _norm()
    x, _ = _inputs()
    x.requires_grad_(True)
    fn = lambda x, w, o: torch.func.functional_call(norm, {"weight": w, "offset": o}, (x,))  # noqa: E731
    w = norm.weight.detach().clone().requires_grad_(True)
    o = norm.offset.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (x, w, o), eps=1e-6, atol=1e-8, rtol=1e-7)


def test_delta_gradient_is_the_corrected_eq10_not_the_printed_one():
    norm = _norm()
    x, cot = _inputs()
    (norm(x) * cot).sum().backward()
    gamma, delta = norm.weight.detach(), norm.offset.detach()
    correct = delta_grad_correct(x, gamma, delta, cot, EPS)
    torch.testing.assert_close(norm.offset.grad, correct, atol=1e-12, rtol=0)
    printed = delta_grad_eq10(x, gamma, delta, cot, EPS)
    assert (printed - norm.offset.grad).abs().max() > 1e-2  # the misprint is not a rounding matter


def test_printed_eq10_holds_when_gamma_is_one():
    norm = _norm(gamma_one=True)
    x, cot = _inputs()
    (norm(x) * cot).sum().backward()
    printed = delta_grad_eq10(x, norm.weight.detach(), norm.offset.detach(), cot, EPS)
    torch.testing.assert_close(norm.offset.grad, printed, atol=1e-12, rtol=0)


def test_central_differences_on_delta_match_the_corrected_form():
    """Independent of autograd: (L(δ + h e_i) − L(δ − h e_i)) / 2h for every i."""
    norm = _norm()
    x, cot = _inputs()
    gamma, delta = norm.weight.detach(), norm.offset.detach()
    loss = lambda dl: (gamma * (x + dl) * torch.rsqrt((x + dl).pow(2).mean(-1, keepdim=True) + EPS) * cot).sum()  # noqa: E731
    h = 1e-6
    fd = torch.stack([(loss(delta + h * e) - loss(delta - h * e)) / (2 * h) for e in torch.eye(D, dtype=torch.float64)])
    torch.testing.assert_close(fd, delta_grad_correct(x, gamma, delta, cot, EPS), atol=1e-7, rtol=0)
