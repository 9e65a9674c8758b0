"""Adaptive Token Merging, ATM (Wiola, seed 002, §VIII, eqs. 30–33 and Algorithm 1).

In the middle third of the layers, during training only, adjacent tokens whose normalised
hidden states are nearly parallel are merged before attention:

    1. ρ_t = x̂_t · x̂_{t+1},  x̂ = x / ‖x‖  (x = the attention layer's normalised input X̃)     (eq. 30)
    2. scan left to right; where ρ_t > τ (τ = 0.92), merge t with t + 1 and skip t + 1
       (Algorithm 1: greedy, non-overlapping pairs)
    3. x'_k = (x_t + x_{t+1}) / 2 for a pair, x_t otherwise                                  (eq. 31)
    4. attention on the T' merged tokens, then unmerge by copy: x̂_t = x̂'_k for t ∈ G_k     (eq. 32)

The saving claimed is ΔC = 1 − (1 − μ)² = μ(2 − μ) of a layer's attention FLOPs, with the merge
ratio μ = 1 − T'/T ≈ 0.08–0.14 at τ = 0.92 (eq. 33).

As written (``mode='as_written'``) the merge sees the future twice: the decision at t reads
x_{t+1}, and the merged token's output is copied back to t. The causality probe flags it at the
first position t that starts a pair. Step 2 here is vectorised: in each run of consecutive
ρ_t > τ that starts at a, Algorithm 1 takes the pairs starting at a, a + 2, a + 4, ...

The causal variant (``mode='causal'``) merges keys and values only: every token keeps its own
query, and a merged slot (k_t + k_{t+1})/2, (v_t + v_{t+1})/2 stands in for its two sources for
the queries t' ≥ t + 1 (both sources in the past); query t still sees its own pair (k_t, v_t).
So query t attends over exactly the merge of its own prefix x_{≤t}. Keys and values are merged
after the rotary map, each at its own position. Its saving is μ of the score FLOPs (T·T' pairs).

Implementation: both modes run at full length with masks (the as-written one marks the second
token of each pair as padding, so positions count merged tokens, as in a length-T' call). The
FLOPs are those of an unmerged layer; the savings above are computed from μ, not realised.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field


class ATMOptions(BaseModel):
    """Token merging inside an attention layer (eqs. 30–32, Algorithm 1); active in training only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    mode: Literal["as_written", "causal"] = Field(
        ..., description="'as_written' = merge hidden states, attend, copy back (sees the future); 'causal' = "
        "merge keys/values only, a merged slot visible once both its tokens are in the past")
    tau: float = Field(0.92, description="merge threshold on the cosine ρ_t (eq. 30); τ > 1 never merges")


def merge_starts(x: torch.Tensor, tau: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Steps 1–2: starts [B, T] bool, True where token t is merged with t + 1. x [B, T, d]; mask [B, T]
    (True = real token; padding never merges)."""
    B, T, _ = x.shape
    unit = F.normalize(x, dim=-1)
    rho = (unit[:, :-1] * unit[:, 1:]).sum(-1)                            # 1. ρ_t, t < T − 1   [B, T − 1]
    want = F.pad(rho > tau, (0, 1), value=False)                          # [B, T]
    if mask is not None:
        want = want & mask.bool() & F.pad(mask.bool()[:, 1:], (0, 1), value=False)
    idx = torch.arange(T, device=x.device).expand(B, T)
    run_start = want & ~F.pad(want[:, :-1], (1, 0), value=False)          # first t of each run of ρ > τ
    last = torch.where(run_start, idx, torch.full_like(idx, -1)).cummax(1).values
    return want & ((idx - last) % 2 == 0)                                 # 2. a, a + 2, ... in each run


def second_of_pair(starts: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: token t is the second source of a pair (t − 1 starts it)."""
    return F.pad(starts[:, :-1], (1, 0), value=False)


def merge_tokens(x: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 3 (as written): x [B, T, d] -> (x' [B, T, d], keep [B, T] bool).

    x' holds (x_t + x_{t+1})/2 at each pair start and x_t at every other token; keep is False at
    the second token of each pair (a slot that no longer exists: T' = keep.sum(1))."""
    nxt = F.pad(x[:, 1:], (0, 0, 0, 1))
    merged = torch.where(starts[..., None], 0.5 * (x + nxt), x)
    return merged, ~second_of_pair(starts)


def unmerge(y: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Step 4 (eq. 32): y [B, T, ...] computed on merged slots -> the second token of each pair gets
    its pair's output."""
    prev = torch.cat([y[:, :1], y[:, :-1]], dim=1)
    second = second_of_pair(starts).view(*starts.shape, *([1] * (y.dim() - 2)))
    return torch.where(second, prev, y)


def merge_ratio(starts: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """μ = 1 − T'/T over the batch (real tokens only): merged pairs / tokens."""
    tokens = starts.numel() if mask is None else int(mask.sum())
    return float(starts.sum()) / max(tokens, 1)


def causal_visibility(starts: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T, 2T] bool: which keys query t reads in the causal variant. Keys 0..T−1 are the tokens'
    own pairs, keys T..2T−1 the merged slots (slot T + s merges s and s + 1).

    own pair s: s ≤ t, real (or s = t), not replaced by a merged slot already visible to t
    merged slot s: s starts a pair and s + 1 ≤ t."""
    B, T = starts.shape
    t = torch.arange(T, device=starts.device)
    past = t[None, :] <= t[:, None]                                         # [T(q), T(k)]: s ≤ t
    real = torch.ones_like(starts) if key_mask is None else key_mask.bool()
    own = past & (real[:, None, :] | torch.eye(T, dtype=torch.bool, device=starts.device))
    own = own & ~second_of_pair(starts)[:, None, :]
    own = own & ~(starts[:, None, :] & (t[None, :] < t[:, None]))            # s starts a complete pair
    merged = starts[:, None, :] & (t[None, :] < t[:, None])                  # s + 1 ≤ t
    return torch.cat([own, merged], dim=2)


def causal_merged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, starts: torch.Tensor, *,
                            scale: float | None = None, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The causal variant's attention. q [B, T, H, K], k [B, T, Hkv, K], v [B, T, Hkv, V] (after the
    rotary map), starts [B, T] -> o [B, T, H, V]."""
    H, Hkv = q.shape[2], k.shape[2]
    nk, nv = F.pad(k[:, 1:], (0, 0, 0, 0, 0, 1)), F.pad(v[:, 1:], (0, 0, 0, 0, 0, 1))
    keys = torch.cat([k, 0.5 * (k + nk)], dim=1).repeat_interleave(H // Hkv, dim=2)   # [B, 2T, H, K]
    values = torch.cat([v, 0.5 * (v + nv)], dim=1).repeat_interleave(H // Hkv, dim=2)  # [B, 2T, H, V]
    visible = causal_visibility(starts, key_mask)[:, None]                           # [B, 1, T, 2T]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                       attn_mask=visible, scale=scale)                 # [B, H, T, V]
    return o.transpose(1, 2)
