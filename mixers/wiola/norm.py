"""WiolaRMSNorm: RMSNorm of the input shifted by a learned offset (Wiola, seed 002, §V, eq. 9).

    z = x + δ                                   δ ∈ R^d, initialised to 0
    WRMSNorm(x) = γ ⊙ z / RMS(z),   RMS(z) = sqrt((1/d) Σ_i z_i² + ε)          (eq. 9)

δ = 0 gives RMSNorm (eq. 8) exactly. Gradients come from autograd. With
g = ∂L/∂ŷ and r = RMS(z), the gradient of one row with respect to δ is

    ∂L/∂δ_i = (1/r) · (γ_i g_i − z_i/(d r²) · Σ_k γ_k g_k z_k)                  (correct)

Misprint in the paper's eq. 10: it writes γ_i/r · (g_i − z_i/(d r²) Σ_k γ_k g_k z_k),
i.e. it multiplies the second term by γ_i as well. The two agree only when γ ≡ 1
(``tests/mixers/test_wiola_norm.py`` pins the correct form against autograd and
central differences, and measures the misprinted one). The paper's overhead count
(2·L·d offsets; 32,768 for L = 16, d = 1024) holds.
"""
from __future__ import annotations

import torch
import torch.nn as nn


class WiolaRMSNorm(nn.Module):
    """y = γ ⊙ (x + δ) / sqrt(mean((x + δ)²) + eps) over the last axis; x [..., d] -> [..., d]."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))   # γ
        self.offset = nn.Parameter(torch.zeros(dim))  # δ (eq. 9), zero at init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x + self.offset  # [..., d]
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def reset_parameters(self) -> None:
        """γ = 1, δ = 0 (RMSNorm at init)."""
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.offset.zero_()
