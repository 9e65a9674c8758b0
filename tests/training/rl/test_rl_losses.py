"""The GRPO-family losses equal TRL's ``GRPOTrainer._compute_loss`` (loss and gradient, float64, 1e-12), with
TRL's ``use_bias_correction_kl`` equal to our ``kl_bias_correction`` (either value); Nautile's mastered-group
rule reads every completion."""
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


def _ours(logp0, old_logp, ref, adv, mask, *, loss_type, beta, old, correction, max_len=9):
    """(loss, gradient w.r.t. the log-probs) of policy_loss_terms; max_len > T: dr_grpo divides by the budget."""
    ours_in = logp0.clone().requires_grad_(True)
    terms = policy_loss_terms(ours_in, old_logp if old else ours_in.detach(), ref, adv, mask, aggregation=loss_type,
                              counts=BatchCounts(sequences=B, tokens=int(mask.sum()), max_len=max_len), beta=beta,
                              eps_low=0.2, eps_high=0.28, kl_bias_correction=correction)
    terms.total.backward()
    return terms.total.detach(), ours_in.grad


def _trl(logp0, old_logp, ref, adv, mask, *, loss_type, beta, old, correction, max_len=9):
    trl_in = logp0.clone().requires_grad_(True)
    theirs = trl_loss(trl_in, old_logp if old else None, ref if beta else None, adv, mask, loss_type=loss_type,
                      beta=beta, eps_low=0.2, eps_high=0.28, max_completion_length=max_len,
                      num_items_in_batch=float(mask.sum()), use_bias_correction_kl=correction)
    theirs.backward()
    return theirs.detach(), trl_in.grad


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("old", [True, False], ids=["off-policy", "on-policy"])
@pytest.mark.parametrize("correction", [False, True], ids=["plain-kl", "bias-corrected-kl"])
def test_loss_and_gradient_equal_trl(loss_type, beta, old, correction):
    """kl_bias_correction = TRL's use_bias_correction_kl (True is TRL's default)."""
    batch = _batch(0)
    setting = dict(loss_type=loss_type, beta=beta, old=old, correction=correction)
    loss, grad = _ours(*batch, **setting)
    theirs, trl_grad = _trl(*batch, **setting)
    assert abs(float(loss) - float(theirs)) <= 1e-12
    torch.testing.assert_close(grad, trl_grad, rtol=0, atol=1e-12)
    assert float(grad.abs().sum()) > 0  # the comparison is not between two zeros


@pytest.mark.parametrize("old", [True, False], ids=["off-policy", "on-policy"])
def test_bias_corrected_kl_is_another_gradient_even_on_policy(old):
    """The two KL readings give different numbers; each is TRL's with the flag of the same value, and the
    corrected KL per token is ρ·k3 with ρ's gradient (∇ρ = ρ ∇log π), by hand in float64."""
    logp0, old_logp, ref, adv, mask = batch = _batch(2)
    setting = dict(loss_type="dapo", beta=0.5, old=old)
    plain_loss, plain = _ours(*batch, **setting, correction=False)
    corrected_loss, corrected = _ours(*batch, **setting, correction=True)
    torch.testing.assert_close(plain, _trl(*batch, **setting, correction=False)[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(corrected, _trl(*batch, **setting, correction=True)[1], rtol=0, atol=1e-12)
    n = mask.sum()
    delta = ref - logp0
    k3 = torch.exp(delta) - delta - 1
    ratio = torch.exp(logp0 - old_logp) if old else torch.ones_like(logp0)
    dk3 = 1 - torch.exp(delta)                                        # ∂k3/∂logπ
    kl_plain = 0.5 * mask * dk3 / n
    kl_corrected = 0.5 * mask * (ratio * dk3 + ratio * k3) / n        # ∂(ρ k3)/∂logπ = ρ k3' + ρ k3
    torch.testing.assert_close(corrected - plain, kl_corrected - kl_plain, rtol=0, atol=1e-14)
    gap = float(torch.linalg.vector_norm(corrected - plain) / torch.linalg.vector_norm(plain))
    assert gap > 0.05, gap                                             # the readings are apart
    if not old:                                                        # on-policy the loss values agree (ρ = 1)
        assert abs(float(corrected_loss) - float(plain_loss)) <= 1e-15


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
    """"Groups in which every completion receives an overall score above 90 (and a minimum above 85)":
    [86, 99, 99, 99] has mean 95.75 > 90 (a group-mean reading would skip it) but one completion below 90."""
    r = torch.tensor([[95.0, 92, 91, 99], [95, 99, 99, 80], [86, 86, 86, 86], [86, 99, 99, 99], [90, 99, 99, 99]],
                     dtype=torch.float64)
    assert float(r[3].mean()) == 95.75 and float(r[3].min()) > 85   # what the mean reading would have skipped
    assert mastered_groups(r, every_above=90, min_above=85).tolist() == [True, False, False, False, False]
    assert mastered_groups(r, every_above=85, min_above=91).tolist() == [False, False, False, False, False]
    assert mastered_groups(r, every_above=85, min_above=90.5).tolist() == [True, False, False, False, False]


def test_the_group_mean_reading_is_refused_by_name():
    from assocmem.training.rl.config import Mastered

    assert Mastered(every_above=90, min_above=85).every_above == 90
    with pytest.raises(ValueError, match="mean_above .*every completion.*write every_above"):
        Mastered(mean_above=90, min_above=85)
