"""Packed sequences: several documents in one row, split by ``cu_seqlens`` (FLA's varlen convention).

    x [1, total, D], cu_seqlens [N + 1] = (0, b_1, ..., b_N = total): document i is x[0, b_{i-1}:b_i].

Every document starts from an empty state (or from row i of a given state) and sees only its own
tokens, so the result equals running the documents one by one: no state or attention crosses a
boundary. Documents of equal length run as one batch (one call per distinct length).

``packed_boundaries`` reads the boundaries from whichever keywords a caller marks them with
(PACKING_KWARGS): cu_seqlens itself, the flattening collators' flash-attention keywords and sequence
index, or ``position_ids`` restarting at each document (``cu_seqlens_from_positions``, transformers'
rule for packed sequences).
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


# The keywords that mark packed documents (HF's DataCollatorWithFlattening, TRL's padding_free collator,
# FLA's varlen convention) and what each says. All that a caller gives must agree.
PACKING_KWARGS = {
    "cu_seqlens": "[N + 1] document boundaries of the row [1, total] (FLA's varlen convention)",
    "cu_seq_lens_q": "[N + 1] the same boundaries under the flash-attention name (DataCollatorWithFlattening"
                     "(return_flash_attn_kwargs=True), TRL padding_free)",
    "cu_seq_lens_k": "[N + 1] must equal cu_seq_lens_q (the keys are the queries' own documents)",
    "max_length_q": "the longest document's length, checked against the boundaries",
    "max_length_k": "must equal max_length_q",
    "seq_idx": "[1, total] each token's document index (DataCollatorWithFlattening(return_seq_idx=True), TRL "
               "padding_free): a document starts where it changes",
    "position_ids": "[B, T] read only without attention_mask and cache, as transformers does: a document starts "
                    "at each row's first token and wherever p_t != p_{t-1} + 1; rows of one document each are "
                    "not packed",
}


def cu_seqlens_from_seq_idx(seq_idx: torch.Tensor) -> torch.Tensor:
    """cu_seqlens [N + 1] of a row whose tokens carry their document's index, seq_idx [1, total]."""
    if seq_idx.dim() != 2 or seq_idx.shape[0] != 1 or seq_idx.dtype.is_floating_point or seq_idx.shape[1] < 1:
        raise ValueError(f"seq_idx must be an integer tensor [1, total] with total >= 1, got {seq_idx.dtype} "
                         f"{tuple(seq_idx.shape)}")
    row = seq_idx[0]
    starts = torch.ones_like(row, dtype=torch.bool)
    starts[1:] = row[1:] != row[:-1]
    offsets = starts.nonzero().squeeze(1)
    return torch.cat([offsets, offsets.new_tensor([row.numel()])])


def packed_boundaries(kwargs: dict, B: int, T: int, *, padded: bool, cached: bool) -> torch.Tensor | None:
    """cu_seqlens [N + 1] of the input [B, T] laid end to end as one row [1, B·T], read from (and
    removed from) the PACKING_KWARGS in ``kwargs``; None when the input holds no packed documents.

    padded / cached: an attention_mask or a cache came with the call; transformers then leaves
    position_ids unread for packing (masking_utils._preprocess_mask_arguments), and so does this.
    Boundaries given by several keywords must be equal; cu_seqlens, seq_idx and the flash-attention
    keywords describe one row, so they need B = 1.
    """
    given = {name: kwargs.pop(name) for name in list(PACKING_KWARGS) if kwargs.get(name) is not None}
    kwargs.pop("position_ids", None)
    lengths = {name: int(given.pop(name)) for name in ("max_length_q", "max_length_k") if name in given}
    sources = {}
    for name in ("cu_seqlens", "cu_seq_lens_q", "cu_seq_lens_k"):
        if name in given:
            value = torch.as_tensor(given[name])
            if value.dim() != 1 or value.dtype.is_floating_point:
                raise ValueError(f"{name} must be a 1-D integer tensor (0, b_1, ..., total), got {value.dtype} "
                                 f"{tuple(value.shape)}")
            sources[name] = value.to("cpu", torch.long)
    if "seq_idx" in given:
        sources["seq_idx"] = cu_seqlens_from_seq_idx(given["seq_idx"]).cpu()
    if sources and B != 1:
        raise ValueError(f"{sorted(sources)} mark documents in one packed row [1, total], got a batch of {B} rows: "
                         f"lay the documents end to end in one row")
    positions = given.get("position_ids")
    if positions is not None and not (padded or cached):
        if positions.dim() == 2 and positions.shape[0] == 1 and B > 1:  # unsqueezed, not expanded (transformers)
            positions = positions.expand(B, -1)
        if positions.dim() != 2 or tuple(positions.shape) != (B, T):
            raise ValueError(f"position_ids must be [B, T] = [{B}, {T}] (or [1, T]), got {tuple(positions.shape)}")
        cu = cu_seqlens_from_positions(positions).cpu()
        if len(cu) > B + 1 or sources:  # a row holds several documents (otherwise rows are plain sequences)
            sources["position_ids"] = cu
    if not sources:
        if lengths:
            raise ValueError(f"{sorted(lengths)} came without document boundaries: give cu_seq_lens_q / "
                             f"cu_seqlens / seq_idx / packed position_ids with them")
        return None
    (first, cu), *others = sources.items()
    for name, other in others:
        if not torch.equal(cu, other):
            raise ValueError(f"the packed documents disagree: {first} gives boundaries {cu.tolist()}, {name} gives "
                             f"{other.tolist()}")
    longest = int(cu.diff().max()) if len(cu) > 1 else 0
    for name, value in lengths.items():
        if value != longest:
            raise ValueError(f"{name}={value} but the longest document of {first} {cu.tolist()} has {longest} tokens")
    return cu


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

