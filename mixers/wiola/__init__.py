"""The five components of the Wiola SLM (seed 002), each as written and, where the written form
sees the future, as a causal variant.

    WiolaRMSNorm   norm.py   γ ⊙ (x + δ) / RMS(x + δ)                               (eq. 9)
    SRPE           srpe.py   RoPE with (cos, sin) → r(p)·(cos, sin) of Θ = pω(1 + 1/k_s)  (eqs. 11–18)
    DSFF           dsff.py   α ⊙ SwiGLU_A(x) + (1 − α) ⊙ GELU-MLP_B(x), α = σ(W_f[a; b])  (eqs. 34–37)
    GCLA           gcla.py   attention to summaries of the residual streams entering layers m−1, m  (eqs. 20–27)
    ATM            atm.py    greedy merge of adjacent tokens with cosine > τ (Algorithm 1, eqs. 30–33)

WiolaAttention (attention.py) is softmax attention with SRPE, GCLA, ATM and the output gate; a
model takes the components as block extensions (models/extensions.py).
"""
from .atm import (
    ATMOptions, causal_merged_attention, causal_visibility, merge_ratio, merge_starts, merge_tokens, unmerge,
)
from .attention import WiolaAttention, WiolaAttentionOptions, WiolaAttentionState
from .dsff import DSFF, DSFFOptions
from .gcla import ContextState, CrossLayerContext, GCLAOptions, stream_summaries
from .norm import WiolaRMSNorm
from .srpe import SRPEOptions, srpe_angles

__all__ = [
    "WiolaRMSNorm", "SRPEOptions", "srpe_angles", "DSFF", "DSFFOptions",
    "GCLAOptions", "ContextState", "CrossLayerContext", "stream_summaries",
    "ATMOptions", "merge_starts", "merge_tokens", "unmerge", "merge_ratio", "causal_visibility",
    "causal_merged_attention", "WiolaAttention", "WiolaAttentionOptions", "WiolaAttentionState",
]
