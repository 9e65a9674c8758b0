"""Scored self-distillation: its gradient is the positive part of the Dr. GRPO / dapo loss (β = 0, one
inner iteration); unweighted it is plain cross-entropy on the kept completions."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assocmem.training.rl.losses import BatchCounts, policy_loss_terms
from assocmem.training.rl.self_distillation import kept_completions, self_distillation_loss

B, T, V = 6, 5, 7


def _policy(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, V, (B, T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor([5, 2, 4, 5, 1, 3])[:, None]).to(torch.float64)
    adv = torch.tensor([0.6, -0.2, 0.0, 0.9, -0.4, 0.3], dtype=torch.float64)
    return logits, targets, mask, adv


def _logp(logits, targets):
    return torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]    # [B, T]


@pytest.mark.parametrize("aggregation", ["dr_grpo", "dapo"])
def test_weighted_gradient_is_the_positive_part_of_the_policy_loss(aggregation):
    logits, targets, mask, adv = _policy(0)
    counts = BatchCounts(sequences=B, tokens=int(mask.sum()), max_len=T + 2)
    sd = self_distillation_loss(_logp(logits, targets), adv, mask, weighting="advantage", aggregation=aggregation,
                                counts=counts, kept_tokens=0)
    (g_sd,) = torch.autograd.grad(sd, logits)
    logp = _logp(logits, targets)
    terms = policy_loss_terms(logp, logp.detach(), None, adv, mask, aggregation=aggregation, counts=counts, beta=0.0,
                              eps_low=0.2, eps_high=0.28)
    (g_pos,) = torch.autograd.grad(terms.positive, logits)
    torch.testing.assert_close(g_sd, g_pos, rtol=0, atol=1e-12)
    assert float(g_sd.abs().sum()) > 0


def test_unweighted_is_cross_entropy_on_the_kept_set():
    logits, targets, mask, adv = _policy(1)
    keep = kept_completions(adv)
    kept_tokens = int(mask[keep].sum())
    sd = self_distillation_loss(_logp(logits, targets), adv, mask, weighting="none", aggregation="dapo",
                                counts=BatchCounts(sequences=B, tokens=int(mask.sum()), max_len=T),
                                kept_tokens=kept_tokens)
    labels = torch.where(mask.bool(), targets, torch.full_like(targets, -100))[keep]   # torch's own CE as oracle
    ce = F.cross_entropy(logits[keep].reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    assert abs(float(sd.detach()) - float(ce.detach())) <= 1e-13
    (g_sd,) = torch.autograd.grad(sd, logits)
    (g_ce,) = torch.autograd.grad(ce, logits)
    torch.testing.assert_close(g_sd, g_ce, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="advantage or none"):
        self_distillation_loss(_logp(logits, targets), adv, mask, weighting="all", aggregation="dapo",
                               counts=BatchCounts(sequences=B, tokens=1, max_len=T), kept_tokens=1)
