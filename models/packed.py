"""Packed sequences: several documents in one row, split by ``cu_seqlens`` (FLA's varlen convention).

    x [1, total, D], cu_seqlens [N + 1] = (0, b_1, ..., b_N = total): document i is x[0, b_{i-1}:b_i].

Every document starts from an empty state (or from row i of a given state) and sees only its own
tokens, so the result equals running the documents one by one: no state or attention crosses a
boundary. Documents of equal length run as one batch (one call per distinct length).

``cu_seqlens_from_positions`` reads the boundaries of a batch of packed rows from their
``position_ids`` (transformers' convention for packed sequences: positions restart at each document).
"""
from __future__ import annotations

from typing import Callable

import torch

from .blocks import merge_rows, select_rows, state_tensors


def documents(cu_seqlens: torch.Tensor, total: int) -> list[tuple[torch.Tensor, int]]:
    """Groups of documents of equal length: [(start offsets [n] of the n documents, length)], after
    checking that cu_seqlens is an increasing int tensor from 0 to ``total``."""
    if cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be a 1-D integer tensor (0, b_1, ..., total), got {cu_seqlens.dtype} "
                         f"{tuple(cu_seqlens.shape)}")
    bounds = cu_seqlens.cpu().long()
    lengths = bounds.diff()
    if int(bounds[0]) != 0 or int(bounds[-1]) != total or bool((lengths <= 0).any()):
        raise ValueError(f"cu_seqlens must increase strictly from 0 to the packed length {total}, got "
                         f"{bounds.tolist()}")
    starts = bounds[:-1]
    return [(starts[lengths == n], int(n)) for n in sorted(set(lengths.tolist()))]


def cu_seqlens_from_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """cu_seqlens [N + 1] of the rows of position_ids [B, T] laid end to end in one row [1, B·T].

    A document starts at each row's first token and wherever the positions do not continue,
    p_t ≠ p_{t−1} + 1 (the rule transformers applies to packed ``position_ids``, masking_utils.py
    ``find_packed_sequence_indices``); it ends where the next one starts or the row ends.
    """
    if position_ids.dim() != 2 or position_ids.dtype.is_floating_point or position_ids.shape[1] < 1:
        raise ValueError(f"position_ids must be an integer tensor [B, T] with T >= 1, got {position_ids.dtype} "
                         f"{tuple(position_ids.shape)}")
    B, T = position_ids.shape
    starts = torch.ones(B, T, dtype=torch.bool, device=position_ids.device)     # [B, T]
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    offsets = starts.flatten().nonzero().squeeze(1)                             # [N] in the row [1, B·T]
    return torch.cat([offsets, offsets.new_tensor([B * T])])


def gather(x: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """The documents starting at ``starts`` in x [1, total, ...] as a batch [n, length, ...]."""
    index = (starts[:, None] + torch.arange(length)).to(x.device)
    return x[0, index]


def scatter(out: torch.Tensor, starts: torch.Tensor, length: int, y: torch.Tensor) -> None:
    """Write the batch y [n, length, ...] back at ``starts`` into out [1, total, ...]."""
    index = (starts[:, None] + torch.arange(length)).to(out.device)
    out[0, index] = y.to(out.dtype)


def run_packed(call: Callable, x: torch.Tensor, cu_seqlens: torch.Tensor, *, state=None, return_state: bool = True):
    """y [1, total, D] and the final states (one row per document, in document order) of
    ``call(x_group [n, L, D], state_group) -> (y_group, state_group)`` run per group of documents.

    state: None (every document starts empty) or a state whose rows are the N documents.
    """
    if x.shape[0] != 1:
        raise ValueError(f"packed input is one row [1, total, D] split by cu_seqlens, got batch {x.shape[0]}")
    groups = documents(cu_seqlens, x.shape[1])
    document = {start: i for i, start in enumerate(cu_seqlens[:-1].tolist())}
    y = None
    pieces = []
    for starts, length in groups:
        rows = torch.tensor([document[s] for s in starts.tolist()])
        yg, sg = call(gather(x, starts, length), None if state is None else select_rows(state, rows))
        if y is None:
            y = yg.new_zeros((1, x.shape[1]) + tuple(yg.shape[2:]))
        scatter(y, starts, length, yg)
        pieces.append((rows, sg))
    if return_state:
        _check_same_size(pieces)
    return y, (merge_rows(pieces, len(cu_seqlens) - 1) if return_state else None)


def _check_same_size(pieces) -> None:
    """States of different documents stack only if they have one size (recurrent and SCA states do;
    attention's keys and values grow with the document)."""
    shapes = {tuple(tuple(t.shape[1:]) for t in state_tensors(s)) for _, s in pieces}
    if len(shapes) > 1:
        raise ValueError("the final states of these documents differ in size (a key/value cache grows with the "
                         "document), so they cannot be returned as one state with a row per document: call "
                         "with use_cache=False, or run documents of one length, or pad them into a batch")

