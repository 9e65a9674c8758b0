"""Next-token objective on supervised positions, as one module DDP can wrap.

For a batch ``input_ids`` [B, T] with HF-aligned ``labels`` [B, T] (−100 =
unsupervised), the logits at position t are scored against labels[t + 1].
``CausalLMObjective.forward`` returns the summed cross-entropy, the number of
supervised positions and the number of correct arg-max predictions, so that
the loop can normalise by the global count (exact under accumulation and any
number of processes).

``logits="supervised"`` applies the LM head only at supervised positions
(decoder → hidden states → lm_head on the selected rows), which on MQAR skips
~94 % of the head's work; ``logits="all"`` calls the model's own forward. The
two give the same loss for models whose logits are ``lm_head(decoder(x))``;
``check_supervised_logits`` verifies this on a batch before training and
refuses models for which it does not hold (e.g. logit soft-capping).

``position_ids`` [B, T] (packed documents, ``data.documents: separate``): each row holds several
documents, positions restarting at each. The model gets them without a cache and without an
attention mask, the call in which transformers reads them as document boundaries: a transformers
model builds a block-diagonal causal mask, an assocmem model runs each document from an empty state
(models/packed.py). ``check_documents_apart`` verifies before training that the model
reads a document without the one before it, and refuses a model that does not.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100


class CausalLMObjective(nn.Module):
    """Wraps a HF causal LM; forward(input_ids, labels, attention_mask) -> (loss_sum, count, correct)."""

    def __init__(self, model: nn.Module, logits: Literal["supervised", "all"] = "all"):
        super().__init__()
        if logits not in ("supervised", "all"):
            raise ValueError(f"logits must be 'supervised' or 'all', got {logits!r}")
        if logits == "supervised" and (not hasattr(model, "get_decoder") or model.get_output_embeddings() is None):
            raise ValueError(f"logits='supervised' needs a model with get_decoder() and an output embedding; "
                             f"{type(model).__name__} has not; use logits='all'")
        self.model, self.logits = model, logits

    def scored(self, labels: torch.Tensor) -> torch.Tensor:
        """bool [B, T-1]: the positions forward() scores (position t predicts labels[t+1]); the training loop
        divides the summed loss by their global count."""
        return labels[:, 1:] != IGNORE_INDEX

    def selected_logits(self, input_ids: torch.Tensor, labels: torch.Tensor,
                        attention_mask: torch.Tensor | None = None,
                        position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [N, vocab] at the N supervised positions and their targets [N]."""
        supervised = CausalLMObjective.scored(self, labels)   # [B, T-1]: position t predicts labels[t+1]
        targets = labels[:, 1:][supervised]                   # [N]
        if self.logits == "all":
            logits = first_output(self.model, input_ids, attention_mask, position_ids)  # [B, T, V]
            return logits[:, :-1][supervised], targets
        hidden = first_output(self.model.get_decoder(), input_ids, attention_mask, position_ids)  # [B, T, d]
        return self.model.get_output_embeddings()(hidden[:, :-1][supervised]), targets            # [N, V]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, targets = self.selected_logits(input_ids, labels, attention_mask, position_ids)
        loss_sum = F.cross_entropy(logits.float(), targets.long(), reduction="sum")
        correct = (logits.detach().argmax(-1) == targets).sum()
        return loss_sum, torch.tensor(targets.numel(), device=loss_sum.device), correct


def first_output(net: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 position_ids: torch.Tensor | None) -> torch.Tensor:
    """The first output of ``net`` (logits of a causal LM, hidden states of a decoder) [B, T, ...];
    with ``position_ids`` each document of a row is read on its own (module docstring)."""
    if position_ids is None:
        return net(input_ids=input_ids, attention_mask=attention_mask)[0]
    if attention_mask is not None:
        raise ValueError("packed documents (position_ids) come without padding: attention_mask must be None")
    return net(input_ids=input_ids, position_ids=position_ids, use_cache=False)[0]


@torch.no_grad()
def check_documents_apart(objective: CausalLMObjective, input_ids: torch.Tensor) -> None:
    """Raise unless the model reads a packed document without the one before it.

    One row of ``input_ids`` [B, T] (T >= 4) is read as two documents (positions 0..h−1, 0..T−h−1);
    the logits of the second must not change when the first is replaced by other tokens.
    Runs in eval mode, drawing no random numbers.
    """
    row = input_ids[:1]
    T = row.shape[1]
    if T < 4:
        return
    h = T // 2
    positions = torch.cat([torch.arange(h), torch.arange(T - h)]).to(row.device)[None]  # [1, T]
    other = row.clone()
    other[0, :h] = row[0, :h].flip(0) + 1
    other[0, :h] %= objective.model.get_output_embeddings().weight.shape[0]
    was_training = objective.training
    objective.eval()
    try:
        a = first_output(objective.model, row, None, positions)[0, h:]
        b = first_output(objective.model, other, None, positions)[0, h:]
    finally:
        objective.train(was_training)
    if not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
        raise ValueError(f"{type(objective.model).__name__} reads a packed document together with the one before "
                         f"it (its logits change with the earlier document's tokens by up to "
                         f"{(a - b).abs().max().item():.3g}): it does not take cu_seqlens or packed position_ids; "
                         f"set data.documents: joined")


@torch.no_grad()
def check_supervised_logits(model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> None:
    """Raise if the supervised-position fast path disagrees with the model's own logits.

    Runs in eval mode (no dropout, so no random numbers are drawn: resuming stays exact).
    """
    was_training = model.training
    model.eval()
    try:
        fast, _ = CausalLMObjective(model, "supervised").selected_logits(input_ids, labels)
        full, _ = CausalLMObjective(model, "all").selected_logits(input_ids, labels)
    finally:
        model.train(was_training)
    if fast.shape != full.shape or not torch.allclose(fast, full, rtol=1e-4, atol=1e-5):
        diff = (fast - full).abs().max().item() if fast.shape == full.shape else float("nan")
        raise ValueError(f"{type(model).__name__}: logits of lm_head(decoder(x)) differ from the model's "
                         f"forward (max |diff| {diff:.3g}); set train.logits: all")
