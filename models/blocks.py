"""The residual block of every hybrid layer, and padding for recurrent mixers.

    h = x + Mixer(Norm(x))
    h = h + MLP(Norm(h))                (when the block has an MLP)
    y = h                               (or the residual hook of an extension: y = R(x, h))

Norm is RMSNorm or the identity (``NORMS``, ``block_norm``); the MLP is SwiGLU or Nanda et al.
2023's ReLU MLP with biases (``MLP_KINDS``, ``mlp_kind``). The block's extensions
(models/extensions.py) may replace its norms, mixer and MLP when they are built, and add the
residual hook (seed 003's steering).

The mixer is ``build_layer(spec, run=run_mixer)`` (mixers/parallel.py): a MixerSpec's module, or a
ParallelSpec's branches side by side (heads split between mixers, outputs added), each branch's
padding served by ``run_mixer``. A mixer with ``cross_layer_streams`` = n > 0 (Wiola's GCLA) also
reads the last n residual streams entering the blocks up to this one (``streams``, newest last:
the model's embedding output X⁽⁰⁾, then each block's input X⁽ˡ⁾); ``ResidualStreams`` keeps them
for the blocks that read them.

Padding. A mixer module that masks padding itself (``masks_padding``, attention)
gets the mask. One that does not (a recurrent state, parametric or SCA, has no
notion of a padded token) is run by ``run_mixer`` on each row's real tokens only: rows are grouped by their run of real tokens [a, b) (left
padding: a > 0, right padding: b < T) and each group is one call on x[:, a:b].
Padded positions get y = 0 and never touch the state, so a padded batch gives
exactly the outputs and states of the unpadded sequences.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from assocmem.mixers.layer import MixerModule
from assocmem.mixers.norm import RMSNorm
from assocmem.mixers.parallel import ParallelSpec, build_layer
from assocmem.mixers.spec import MixerSpec

from .extensions import Extension, ExtensionSlot

# norm kind -> module(dim, eps=...); "none" is the identity (Nanda et al. 2023's model has no norm)
NORMS = {"rmsnorm": RMSNorm, "none": lambda dim, eps: nn.Identity()}


class SwiGLU(nn.Module):
    """y = (SiLU(x W_gate) ⊙ x W_up) W_down (Shazeer 2020)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ReLUMLP(nn.Module):
    """y = ReLU(x W_in + b_in) W_out + b_out (Nanda et al. 2023, progress-measures-paper's MLP)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.up_proj = nn.Linear(d_model, hidden, bias=True)
        self.down_proj = nn.Linear(hidden, d_model, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.relu(self.up_proj(x)))


# MLP kind -> module(d_model, hidden width)
MLP_KINDS = {"swiglu": SwiGLU, "relu": ReLUMLP}


def build_mlp(kind: str, hidden: int, d_model: int) -> nn.Module | None:
    """A block's MLP: ``kind`` swiglu | relu of width ``hidden``; None when hidden = 0."""
    if kind not in MLP_KINDS:
        raise ValueError(f"mlp_kind must be one of {list(MLP_KINDS)}, got {kind!r}")
    return MLP_KINDS[kind](d_model, hidden) if hidden else None


def build_norm(kind: str, d_model: int, eps: float) -> nn.Module:
    """A norm of kind ``kind`` (a key of ``NORMS``)."""
    if kind not in NORMS:
        raise ValueError(f"block_norm must be one of {sorted(NORMS)}, got {kind!r}")
    return NORMS[kind](d_model, eps=eps)


class Block(nn.Module):
    """Pre-norm residual block: mixer, then an optional MLP; ``extensions`` plug in at their hooks."""

    def __init__(self, spec: MixerSpec | ParallelSpec, d_model: int, *, mlp_hidden: int, norm_eps: float,
                 layer_idx: int, form: str | tuple[str, ...] = "auto", mlp_kind: str = "swiglu",
                 norm: str = "rmsnorm", extensions: tuple[Extension, ...] = ()):
        super().__init__()
        self.layer_idx = layer_idx
        hooks = ExtensionSlot(extensions, f"layer {layer_idx}")  # the parts its extensions build instead

        def new_norm() -> nn.Module:
            return hooks.norm(d_model, norm_eps, default=lambda: build_norm(norm, d_model, norm_eps))

        self.mixer_norm = new_norm()
        self.mixer = hooks.mixer(spec, d_model, form=form, layer_idx=layer_idx, default=lambda: build_layer(
            spec, d_model, form=form, layer_idx=layer_idx, run=run_mixer))
        self.mlp = (hooks.mlp(d_model, mlp_hidden, default=lambda: build_mlp(mlp_kind, mlp_hidden, d_model))
                    if mlp_hidden else None)
        self.mlp_norm = new_norm() if self.mlp is not None else None
        self.residual = hooks.residual()  # y = residual(x, h), or y = h
        self.reads_streams = getattr(self.mixer, "cross_layer_streams", 0)

    def forward(self, x: torch.Tensor, *, state=None, mask: torch.Tensor | None = None, return_state: bool = True,
                streams: list[torch.Tensor] | None = None):
        """x [B, T, d_model]; mask [B, T] bool (True = real token) or None; streams: the residual
        streams entering the blocks up to this one, newest last (when ``reads_streams``) -> (y, state).

        With a residual hook the state is a BlockState (the mixer's, the hook's)."""
        mixer_state, residual_state = self._split(state)
        y, mixer_state = run_mixer(self.mixer, self.mixer_norm(x), state=mixer_state, mask=mask,
                                   return_state=return_state, streams=self._streams(streams))
        h = x + y
        if self.mlp is not None:
            h = h + self.mlp(self.mlp_norm(h))
        if self.residual is None:
            return h, mixer_state
        h, residual_state = self.residual(x, h, state=residual_state, mask=mask, return_state=return_state)
        return h, (BlockState(mixer_state, residual_state) if return_state else None)

    def _split(self, state):
        """(the mixer's state, the residual hook's) of a block state."""
        if self.residual is None or state is None:
            return state, None
        self.residual.check_continue(self.layer_idx)
        return state.mixer, state.residual

    def _streams(self, streams: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
        """The last ``reads_streams`` of ``streams`` (None when the mixer reads none)."""
        if not self.reads_streams:
            return None
        if not streams:
            raise ValueError(f"block {self.layer_idx}: its mixer reads the residual streams of earlier layers "
                             f"(cross_layer); pass streams=[..., x]")
        return list(streams)[-self.reads_streams:]


class BlockState(NamedTuple):
    """The decode state of a block with a residual hook: its mixer's state and the hook's."""

    mixer: object
    residual: object


class ResidualStreams:
    """The residual streams entering the blocks so far, kept as deep as the deepest reader needs
    (a block's ``reads_streams``; Wiola's GCLA reads the streams entering the previous block and its own)."""

    def __init__(self, blocks: list[Block]):
        self.depth = max((block.reads_streams for block in blocks), default=0)
        self.kept: list[torch.Tensor] = []

    def enter(self, block: Block, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Record h [B, T, d], the stream entering ``block``; return the streams it reads, newest last
        (h included), or () when it reads none."""
        if not self.depth:
            return ()
        self.kept = (self.kept + [h])[-self.depth:]
        return tuple(self.kept[-block.reads_streams:]) if block.reads_streams else ()


def run_mixer(mixer: MixerModule, x: torch.Tensor, *, state, mask: torch.Tensor | None, return_state: bool,
              streams: list[torch.Tensor] | None = None):
    """Call ``mixer`` on x [B, T, D], honouring a padding mask [B, T] (see the module docstring);
    ``streams`` goes to a mixer that reads earlier residual streams (it must mask padding itself)."""
    if streams is not None:
        if not mixer.masks_padding:
            raise ValueError(f"{type(mixer).__name__} reads residual streams but does not mask padding itself")
        return mixer(x, state=state, mask=mask, return_state=return_state, streams=streams)
    if mixer.masks_padding:
        return mixer(x, state=state, mask=mask, return_state=return_state)
    if mask is None or bool(mask.all()):
        return mixer(x, state=state, return_state=return_state)
    B, T, _ = x.shape
    start, length = _runs(mask)
    y = None  # allocated like the mixer's output (its dtype under autocast may differ from x's)
    pieces: list[tuple[torch.Tensor, object]] = []
    for (a, n) in sorted(set(zip(start.tolist(), length.tolist()))):
        rows = torch.nonzero((start == a) & (length == n)).flatten()
        if n == 0:
            if state is None:
                raise ValueError(f"attention_mask rows {rows.tolist()} have no real token and there is no cache; "
                                 "every sequence needs at least one unmasked token")
            pieces.append((rows, select_rows(state, rows)))
            continue
        yg, sg = mixer(x[rows, a:a + n], state=None if state is None else select_rows(state, rows), return_state=True)
        if y is None:
            y = yg.new_zeros((B, T) + tuple(yg.shape[2:]))
        y[rows, a:a + n] = yg.to(y.dtype)
        pieces.append((rows, sg))
    y = x.new_zeros(x.shape) if y is None else y
    return y, (merge_rows(pieces, B) if return_state else None)


def _runs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First index and length of the single run of True in each row of mask [B, T]."""
    m = mask.bool()
    length = m.sum(1)
    start = torch.where(length > 0, m.int().argmax(1), torch.zeros_like(length))
    idx = torch.arange(m.shape[1], device=m.device)[None]
    contiguous = (idx >= start[:, None]) & (idx < (start + length)[:, None])
    if not bool((contiguous == m).all()):
        raise ValueError("attention_mask: each row must hold one contiguous run of real tokens (left or right "
                         "padding); padding in the middle of a sequence is not supported for recurrent layers")
    return start, length


# ---------------------------------------------------------------- state pytrees (batch-first leaves)
def map_state(fn, state):
    """Apply fn to every tensor of a state (tensor, tuple, NamedTuple, dataclass or None)."""
    if state is None:
        return None
    if torch.is_tensor(state):
        return fn(state)
    if dataclasses.is_dataclass(state):
        return type(state)(**{f.name: map_state(fn, getattr(state, f.name)) for f in dataclasses.fields(state)})
    if isinstance(state, tuple):
        items = [map_state(fn, s) for s in state]
        return type(state)(*items) if hasattr(state, "_fields") else tuple(items)
    raise TypeError(f"unsupported state leaf of type {type(state).__name__}")


def state_tensors(state) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    map_state(lambda t: out.append(t) or t, state)
    return out


def select_rows(state, rows: torch.Tensor):
    """The rows ``rows`` of every tensor of a state (batch-first leaves)."""
    return map_state(lambda t: t.index_select(0, rows), state)


def merge_rows(pieces, B: int):
    """One state of B rows from per-group states: pieces = [(rows [n], state of n rows)]. A leaf whose
    groups differ in dtype (a carried state next to one computed under autocast) takes their promotion."""
    leaves = [state_tensors(s) for _, s in pieces]
    merged = []
    for i, leaf in enumerate(leaves[0]):
        dtype = functools.reduce(torch.promote_types, (group[i].dtype for group in leaves))
        out = leaf.new_empty((B,) + tuple(leaf.shape[1:]), dtype=dtype)
        for (rows, _), group in zip(pieces, leaves):
            out[rows] = group[i].to(dtype)
        merged.append(out)
    it = iter(merged)
    return map_state(lambda _: next(it), pieces[0][1])
