"""Parallel hybrids (thesis Fig. A.4): the heads of one layer split between mixers.

    par(gdn,attn), H heads of width K:   gdn on H/2 heads, attention on the other H/2, both reading x

Each branch b is a whole mixer (its own projections, H_b heads of width K, its own state) and the
layer adds their outputs:

    y = Σ_b y_b = Σ_b o_b W_o^b = [o_1, …, o_n] · [W_o^1; …; W_o^n]

with o_b [B, T, H_b·V] branch b's head outputs (after its norm and gate) and W_o^b its output map
[H_b·V, d_model]. So the layer is exactly the branches run alone, their head outputs concatenated
along the heads and sent through one output map whose rows are the branches' maps stacked: the
layout of Hymba-style parallel heads, with no extra parameter.

    spec = ParallelSpec(branches=[gdn_on_2_heads, attn_on_2_heads])
    mixer = build_layer(spec, d, run=models.blocks.run_mixer)   # ParallelMixer of the branches' modules
    y, state = mixer(x, state=None, mask=None)       # state: ParallelState(branches=(s_gdn, s_attn))

Padding: the layer takes the mask (``masks_padding``) and hands every branch to ``run``
(models/blocks.run_mixer), which gives the mask to a branch that masks padding itself (attention)
and runs each row's real tokens on their own through one that does not (a recurrent state).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import torch
import torch.nn as nn
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .layer import build_mixer
from .spec import MixerSpec

__all__ = ["ParallelSpec", "ParallelState", "ParallelMixer", "build_layer"]


class ParallelSpec(BaseModel):
    """A layer whose heads are split between two or more mixers (each branch carries its own heads)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, description="label, e.g. the pattern token 'par(gdn,attn)'")
    branches: list[MixerSpec] = Field(
        description="the mixers side by side, each with its share of the heads (layer.num_heads); ≥ 2")

    @field_validator("branches")
    @classmethod
    def _two_or_more(cls, value: list[MixerSpec]) -> list[MixerSpec]:
        if len(value) < 2:
            raise ValueError(f"a parallel layer needs at least 2 branches, got {len(value)}; "
                             f"a single mixer is an ordinary layer")
        return value


class ParallelState(NamedTuple):
    """Decode state of a parallel layer: one state per branch, in branch order."""

    branches: tuple[Any, ...]


class ParallelMixer(nn.Module):
    """Branch mixers on the same input, outputs added (a ``MixerModule``; see the module docstring).

    branches: the branch modules (each a MixerModule: forward(x, *, state, mask, return_state) -> (y, state));
    run: calls one branch honouring a padding mask, ``run(module, x, *, state, mask, return_state)``
    (models/blocks.run_mixer)."""

    masks_padding = True  # the mask goes to ``run``, which serves each branch as it needs

    def __init__(self, branches: list[nn.Module], *, run: Callable[..., tuple[torch.Tensor, Any]]):
        super().__init__()
        if len(branches) < 2:
            raise ValueError(f"ParallelMixer needs at least 2 branches, got {len(branches)}")
        self.branches = nn.ModuleList(branches)
        self.run = run

    def forward(self, x: torch.Tensor, *, state: ParallelState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True) -> tuple[torch.Tensor, ParallelState | None]:
        """x [B, T, d_model]; mask [B, T] (True = real token) or None -> (y [B, T, d_model], ParallelState)."""
        n = len(self.branches)
        if state is None:
            states: tuple[Any, ...] = (None,) * n
        elif isinstance(state, ParallelState) and len(state.branches) == n:
            states = state.branches
        else:
            raise TypeError(f"state must be a ParallelState of {n} branch states from this layer, got "
                            f"{type(state).__name__}")
        y, new = None, []
        for branch, s in zip(self.branches, states):
            # 1. each branch on the same x (its share of the heads), 2. outputs added
            y_b, s_b = self.run(branch, x, state=s, mask=mask, return_state=return_state)
            y = y_b if y is None else y + y_b
            new.append(s_b)
        return y, (ParallelState(tuple(new)) if return_state else None)

    def state_size(self, seq_len: int = 1) -> int:
        """Floats held per sequence after ``seq_len`` tokens: the branches' states summed (an attention
        branch's cache grows with seq_len, a recurrent one does not)."""
        return sum(b.state_size(seq_len) if "seq_len" in inspect.signature(b.state_size).parameters
                   else b.state_size() for b in self.branches)


def build_layer(spec: MixerSpec | ParallelSpec, d_model: int, *, form: str | tuple[str, ...] = "auto",
                layer_idx: int | None = None, run: Callable[..., tuple[torch.Tensor, Any]]) -> nn.Module:
    """The mixer module of one layer: ``build_mixer(spec)``, or for a ParallelSpec a ParallelMixer of its
    branches, each in its form (``form``: one per branch, or one for all) and served by ``run``."""
    if not isinstance(spec, ParallelSpec):
        return build_mixer(spec, d_model, form=form, layer_idx=layer_idx)
    forms = (form,) * len(spec.branches) if isinstance(form, str) else tuple(form)
    if len(forms) != len(spec.branches):
        raise ValueError(f"{spec.name or 'parallel layer'}: {len(forms)} forms for {len(spec.branches)} branches")
    return ParallelMixer([build_mixer(b, d_model, form=f, layer_idx=layer_idx) for b, f in zip(spec.branches, forms)],
                         run=run)
