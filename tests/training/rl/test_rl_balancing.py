"""Gradient-balanced GRPO on a categorical policy π = softmax(θ), where ∇_θ log π(a) = e_a − π in
closed form: the autograd path (losses → split_gradients → combine, and balance_per_prompt) against
numpy float64; the per-prompt and per-batch readings of Nautile §4.3 give different directions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from assocmem.training.rl.balancing import assign_gradient, balance_per_prompt, combine, split_gradients
from assocmem.training.rl.losses import BatchCounts, policy_loss_terms

K = 5  # actions


def _closed_form(theta: np.ndarray, actions: np.ndarray, adv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g⁺, g⁻) of the Dr. GRPO loss −(1/B) Σ_i A_i log π(a_i) (one token per completion, T_max = 1)."""
    pi = np.exp(theta - theta.max())
    pi /= pi.sum()
    grad_logp = np.eye(K)[actions] - pi[None, :]                               # [B, K]: e_a − π
    per = -(adv[:, None] * grad_logp) / len(actions)
    return per[adv > 0].sum(0), per[adv < 0].sum(0)


def _autograd(theta: np.ndarray, actions: np.ndarray, adv: np.ndarray, *, cap: bool, eps: float = 1e-8):
    param = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(param, -1)[torch.as_tensor(actions)][:, None]     # [B, 1]
    mask = torch.ones_like(logp)
    terms = policy_loss_terms(logp, logp.detach(), None, torch.as_tensor(adv), mask, aggregation="dr_grpo",
                              counts=BatchCounts(sequences=len(actions), tokens=len(actions), max_len=1), beta=0.0,
                              eps_low=0.2, eps_high=0.2)
    g_pos, g_neg, g_kl = split_gradients([terms.positive, terms.negative, terms.kl], [param])
    plain = torch.autograd.grad(policy_loss_terms(
        torch.log_softmax(param, -1)[torch.as_tensor(actions)][:, None], logp.detach(), None, torch.as_tensor(adv),
        mask, aggregation="dr_grpo", counts=BatchCounts(sequences=len(actions), tokens=len(actions), max_len=1),
        beta=0.0, eps_low=0.2, eps_high=0.2).total, param)[0]
    return combine(g_pos, g_neg, g_kl, eps=eps, cap=cap), g_pos, g_neg, plain


@pytest.mark.parametrize("successes", [1, 2, 6])
def test_balanced_gradient_matches_closed_form(successes):
    rng = np.random.default_rng(successes)
    theta = rng.normal(size=K)
    rewards = np.array([1.0] * successes + [0.0] * (8 - successes))
    actions = rng.integers(0, K, size=8)
    adv = rewards - rewards.mean()                                             # Dr. GRPO
    want_pos, want_neg = _closed_form(theta, actions, adv)
    out, g_pos, g_neg, plain = _autograd(theta, actions, adv, cap=False, eps=0.0)  # ε = 0: ‖s g⁻‖ = ‖g⁺‖ exactly
    np.testing.assert_allclose(g_pos.numpy(), want_pos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(g_neg.numpy(), want_neg, rtol=0, atol=1e-12)
    s = np.linalg.norm(want_pos) / np.linalg.norm(want_neg)
    np.testing.assert_allclose(out.gradient.numpy(), want_pos + s * want_neg, rtol=0, atol=1e-12)
    assert abs(float(torch.linalg.vector_norm(out.gradient - g_pos)) - np.linalg.norm(want_pos)) <= 1e-12
    np.testing.assert_allclose(plain.numpy(), want_pos + want_neg, rtol=0, atol=1e-12)  # plain = g⁺ + g⁻
    assert out.norm_positive == pytest.approx(np.linalg.norm(want_pos), abs=1e-12)
    assert out.scale == pytest.approx(s, abs=1e-12)


def test_low_success_rate_shrinks_the_negative_part_and_cap_keeps_a_small_one():
    theta = np.array([2.0, 0.0, 0.0, 0.0, 0.0])                  # the rewarded action is already likely:
    actions = np.array([0, 1, 1, 1, 1, 1, 1, 1])                   # ‖e_0 − π‖ is small, ‖e_1 − π‖ is not
    low = np.array([1.0] + [0.0] * 7)
    out, *_ = _autograd(theta, actions, low - low.mean(), cap=True)
    assert out.norm_negative > out.norm_positive and out.scale < 1  # 1 success in 8: g⁻ dominates, is scaled down
    actions = np.array([1, 1, 1, 1, 1, 1, 1, 0])                   # 7 successes on action 1, a failure on 0
    high = np.array([1.0] * 7 + [0.0])
    up, *_ = _autograd(theta, actions, high - high.mean(), cap=False)
    capped, *_ = _autograd(theta, actions, high - high.mean(), cap=True)
    assert up.scale > 1 and capped.scale == 1.0  # as written the rule scales a smaller g⁻ up; cap does not
    _, g_pos, g_neg, plain = _autograd(theta, actions, high - high.mean(), cap=True)
    np.testing.assert_allclose(capped.gradient.numpy(), plain.numpy(), rtol=0, atol=1e-15)


def test_all_positive_group_equals_plain_dr_grpo():
    rng = np.random.default_rng(3)
    theta, actions = rng.normal(size=K), rng.integers(0, K, size=6)
    adv = rng.uniform(0.1, 1.0, size=6)
    out, g_pos, g_neg, plain = _autograd(theta, actions, adv, cap=False)
    assert float(g_neg.abs().max()) == 0.0
    np.testing.assert_allclose(out.gradient.numpy(), plain.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.gradient.numpy(), _closed_form(theta, actions, adv)[0], rtol=0, atol=1e-12)


def test_assign_gradient_writes_each_parameter():
    a, b = torch.zeros(2, 3, requires_grad=True), torch.zeros(4, requires_grad=True)
    assign_gradient([a, b], torch.arange(10, dtype=torch.float32))
    assert a.grad.tolist() == [[0, 1, 2], [3, 4, 5]] and b.grad.tolist() == [6, 7, 8, 9]
    with pytest.raises(ValueError, match="11 entries"):
        assign_gradient([a, b], torch.zeros(11))


def _per_prompt_case():
    """3 prompts × G = 4 on one categorical policy: 1, 2 and 3 successes (Dr. GRPO advantages per group)."""
    rng = np.random.default_rng(11)
    theta = rng.normal(size=K)
    rewards = np.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    actions = rng.integers(0, K, size=(3, 4))
    adv = rewards - rewards.mean(1, keepdims=True)
    return theta, actions, adv


def test_per_prompt_balance_matches_closed_form_and_differs_from_the_batch_reading():
    theta, actions, adv = _per_prompt_case()
    B = actions.size
    param = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(param, -1)[torch.as_tensor(actions.reshape(-1))][:, None]      # [B, 1]
    terms = policy_loss_terms(logp, logp.detach(), None, torch.as_tensor(adv.reshape(-1)), torch.ones_like(logp),
                              aggregation="dr_grpo", counts=BatchCounts(sequences=B, tokens=B, max_len=1), beta=0.0,
                              eps_low=0.2, eps_high=0.2)
    positives, negatives = terms.by_group(4)
    out = balance_per_prompt(list(positives), list(negatives), terms.kl, [param], eps=0.0, cap=False)
    # closed form: the dr_grpo loss −(1/B) Σ_i A_i log π(a_i), one prompt's rows at a time
    pi = np.exp(theta - theta.max())
    pi /= pi.sum()
    per = -(adv.reshape(-1, 1) * (np.eye(K)[actions.reshape(-1)] - pi)) / B                 # [B, K]
    pos = [per[4 * x:4 * x + 4][adv[x] > 0].sum(0) for x in range(3)]
    neg = [per[4 * x:4 * x + 4][adv[x] < 0].sum(0) for x in range(3)]
    scales = [np.linalg.norm(p) / np.linalg.norm(n) for p, n in zip(pos, neg)]
    want = sum(p + s * n for p, n, s in zip(pos, neg, scales))
    np.testing.assert_allclose(out.gradient.numpy(), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out.positive.numpy(), sum(pos), rtol=0, atol=1e-15)
    np.testing.assert_allclose(out.negative.numpy(), sum(neg), rtol=0, atol=1e-15)
    assert out.scale == pytest.approx(np.linalg.norm(sum(s * n for n, s in zip(neg, scales)))
                                      / np.linalg.norm(sum(neg)), abs=1e-12)
    # the batch reading: one scale for the summed parts
    s_batch = np.linalg.norm(sum(pos)) / np.linalg.norm(sum(neg))
    batch = combine(out.positive, out.negative, torch.zeros_like(out.positive), eps=0.0, cap=False)
    np.testing.assert_allclose(batch.gradient.numpy(), sum(pos) + s_batch * sum(neg), rtol=0, atol=1e-15)
    cosine = float(want @ batch.gradient.numpy()) / (np.linalg.norm(want) * np.linalg.norm(batch.gradient.numpy()))
    assert cosine < 0.999 and float(np.linalg.norm(want - batch.gradient.numpy())) > 0.01 * np.linalg.norm(want)


def test_per_prompt_balance_of_one_prompt_is_the_batch_rule_and_cap_applies_per_prompt():
    theta, actions, adv = _per_prompt_case()
    param = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(param, -1)[torch.as_tensor(actions[:1].reshape(-1))][:, None]
    terms = policy_loss_terms(logp, logp.detach(), None, torch.as_tensor(adv[:1].reshape(-1)), torch.ones_like(logp),
                              aggregation="dapo", counts=BatchCounts(sequences=4, tokens=4, max_len=1), beta=0.0,
                              eps_low=0.2, eps_high=0.2)
    for cap in (False, True):
        positives, negatives = terms.by_group(4)
        one = balance_per_prompt(list(positives), list(negatives), terms.kl, [param], eps=1e-8, cap=cap)
        g_pos, g_neg, g_kl = split_gradients([terms.positive, terms.negative, terms.kl], [param])
        batch = combine(g_pos, g_neg, g_kl, eps=1e-8, cap=cap)
        torch.testing.assert_close(one.gradient, batch.gradient, rtol=0, atol=1e-15)
        assert one.scale == pytest.approx(batch.scale, rel=1e-12)
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        terms.by_group(3)
