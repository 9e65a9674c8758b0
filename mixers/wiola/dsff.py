"""Dual-Stream Feed-Forward, DSFF (Wiola, seed 002, §IX, eqs. 34–37).

    1. a = D_A(SiLU(G_A x) ⊙ U_A x)         stream A: narrow SwiGLU, width d_A        (eq. 34)
    2. b = D_B(GELU(U_B x))                  stream B: wide GELU MLP, width d_B ≫ d_A  (eq. 35)
    3. α = σ(W_f [a; b]) ∈ (0, 1)^d          per-dimension, input-dependent gate      (eq. 36)
    4. DSFF(x) = α ⊙ a + (1 − α) ⊙ b                                                  (eq. 37)

No biases (the equations have none); GELU is the exact (erf) one of Hendrycks & Gimpel.
Limits (tested in ``tests/mixers/test_wiola_dsff.py``): W_f = 0 gives α = ½ and the average of
the two streams (the paper's remark after eq. 37); a gate saturated at α → 1 gives stream A,
i.e. SwiGLU (transformers' ``LlamaMLP``), and α → 0 gives a plain GELU MLP. The widths d_A, d_B
of the paper's Table I are missing from the text, so both are required.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field


class DSFFOptions(BaseModel):
    """DSFF as a block's MLP (the block extension ``dsff``, models/extensions.py): the two stream widths."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["dsff"] = Field("dsff", description="tag of the MLP kind")
    hidden_a: int = Field(..., gt=0, description="d_A, width of the narrow SwiGLU stream A (eq. 34)")
    hidden_b: int = Field(..., gt=0, description="d_B, width of the wide GELU stream B (eq. 35), d_B ≫ d_A")


class DSFF(nn.Module):
    """x [..., d_model] -> [..., d_model]: two dense streams fused by a learned per-dimension gate."""

    def __init__(self, d_model: int, hidden_a: int, hidden_b: int):
        super().__init__()
        for name, width in (("d_model", d_model), ("hidden_a", hidden_a), ("hidden_b", hidden_b)):
            if width < 1:
                raise ValueError(f"DSFF: {name} must be >= 1, got {width}")
        self.gate_a = nn.Linear(d_model, hidden_a, bias=False)   # G_A
        self.up_a = nn.Linear(d_model, hidden_a, bias=False)     # U_A
        self.down_a = nn.Linear(hidden_a, d_model, bias=False)   # D_A
        self.up_b = nn.Linear(d_model, hidden_b, bias=False)     # U_B
        self.down_b = nn.Linear(hidden_b, d_model, bias=False)   # D_B
        self.fuse = nn.Linear(2 * d_model, d_model, bias=False)  # W_f

    def streams(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 1–2: a, b [..., d_model]."""
        a = self.down_a(F.silu(self.gate_a(x)) * self.up_a(x))
        b = self.down_b(F.gelu(self.up_b(x)))
        return a, b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.streams(x)
        alpha = torch.sigmoid(self.fuse(torch.cat([a, b], dim=-1)))  # 3. α [..., d_model]
        return alpha * a + (1 - alpha) * b                            # 4.
