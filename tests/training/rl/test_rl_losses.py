"""The GRPO-family losses equal TRL's ``GRPOTrainer._compute_loss`` (loss and gradient, float64, 1e-12)."""
from __future__ import annotations

import pytest
import torch

from assocmem.training.rl.advantages import group_advantages, mastered_groups
from assocmem.training.rl.losses import BatchCounts, k3_kl, policy_loss_terms
from trl_oracle import trl_loss

B, T = 6, 7  # 3 prompts × G = 2... rows of varied length, one of them empty


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, generator=g, dtype=torch.float64)
    logp = torch.nn.functional.logsigmoid(logits)                   # valid log-probabilities (< 0)
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)  # ratios inside and outside the clip
    ref = logp + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 5, 1, 6, 0])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    adv[2] = 0.0
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("old", [True, False], ids=["off-policy", "on-policy"])
def test_loss_and_gradient_equal_trl(loss_type, beta, old):
    logp0, old_logp, ref, adv, mask = _batch(0)
    max_len = 9  # > T: dr_grpo divides by the budget, not by the padded width
    ours_in = logp0.clone().requires_grad_(True)
    terms = policy_loss_terms(ours_in, old_logp if old else ours_in.detach(), ref, adv, mask, aggregation=loss_type,
                              counts=BatchCounts(sequences=B, tokens=int(mask.sum()), max_len=max_len), beta=beta,
                              eps_low=0.2, eps_high=0.28)
    terms.total.backward()
    trl_in = logp0.clone().requires_grad_(True)
    theirs = trl_loss(trl_in, old_logp if old else None, ref if beta else None, adv, mask, loss_type=loss_type,
                      beta=beta, eps_low=0.2, eps_high=0.28, max_completion_length=max_len,
                      num_items_in_batch=float(mask.sum()))
    theirs.backward()
    assert abs(float(terms.total.detach()) - float(theirs.detach())) <= 1e-12
    torch.testing.assert_close(ours_in.grad, trl_in.grad, rtol=0, atol=1e-12)
    assert float(ours_in.grad.abs().sum()) > 0  # the comparison is not between two zeros


def test_terms_split_by_the_sign_of_the_advantage():
    logp, old, ref, adv, mask = _batch(1)
    counts = BatchCounts(sequences=B, tokens=int(mask.sum()), max_len=T)
    both = policy_loss_terms(logp, old, ref, adv, mask, aggregation="dapo", counts=counts, beta=0.1,
                             eps_low=0.2, eps_high=0.2)
    only_pos = policy_loss_terms(logp, old, ref, adv.clamp(min=0), mask, aggregation="dapo", counts=counts,
                                 beta=0.0, eps_low=0.2, eps_high=0.2)
    only_neg = policy_loss_terms(logp, old, ref, adv.clamp(max=0), mask, aggregation="dapo", counts=counts,
                                 beta=0.0, eps_low=0.2, eps_high=0.2)
    assert float(both.positive) == float(only_pos.total) and float(both.negative) == float(only_neg.total)
    kl = 0.1 * float((k3_kl(logp, ref) * mask).sum() / mask.sum())
    assert abs(float(both.kl) - kl) < 1e-14


def test_k3_is_zero_at_the_reference_and_positive_elsewhere():
    x = torch.linspace(-3, 0, 7, dtype=torch.float64)
    assert float(k3_kl(x, x).abs().max()) == 0.0
    assert bool((k3_kl(x, x - 0.5) > 0).all())


def test_advantages_equal_trl_formulas():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    centred = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [0.75, -0.25, -0.25, -0.25]], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(r, "none"), centred, rtol=0, atol=1e-15)
    std = torch.tensor([[(1 / 3) ** 0.5], [0.0], [0.5]], dtype=torch.float64)   # Bessel-corrected, by hand
    torch.testing.assert_close(group_advantages(r, "group"), centred / (std + 1e-4), rtol=0, atol=1e-13)
    batch_std = float(r.flatten().std())
    torch.testing.assert_close(group_advantages(r, "batch"), centred / (batch_std + 1e-4), rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="G >= 2"):
        group_advantages(r[:, :1], "none")


def test_mastered_groups_follow_nautile_rule():
    r = torch.tensor([[95.0, 92, 91, 99], [95, 99, 99, 80], [86, 86, 86, 86]])
    assert mastered_groups(r, mean_above=90, min_above=85).tolist() == [True, False, False]
