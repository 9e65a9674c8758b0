"""Rollouts: per-prompt seeding (what N processes draw equals what one draws), rewards with the overlong
penalty, mastered groups dropped, and the tensors the loss reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from assocmem.models import AssocMemConfig, AssocMemForCausalLM, HybridConfig
from assocmem.training.rl import REWARDS, register_reward
from assocmem.training.rl.config import Mastered, RolloutConfig
from assocmem.training.rl.rollouts import collect
from assocmem.training.verifiable import ChainSum

TASK = ChainSum(num_digits=3)
PROBLEMS = TASK.problems(6, seed=0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, layers="gdn,attn", num_heads=2, mlp_ratio=0, vocab_size=TASK.vocab_size)
    return AssocMemForCausalLM(AssocMemConfig(hybrid=hc.model_dump(mode="json"))).eval()


def _by_row(batch, rows, G):
    """{prompt row: [its G completions as token tuples]} of a batch without dropped groups."""
    out = {}
    for i, row in enumerate(rows):
        ids, mask = batch.completion_ids[i * G:(i + 1) * G], batch.completion_mask[i * G:(i + 1) * G]
        out[row] = [tuple(int(t) for t, m in zip(r, mr) if m) for r, mr in zip(ids, mask)]
    return out


def test_a_prompt_draws_the_same_samples_whichever_prompts_share_its_process(model):
    rollout = RolloutConfig(group_size=4, reward="states_an_answer", max_new_tokens=6)
    together = collect(model, TASK, PROBLEMS, [1, 4, 5], step=3, seed=7, rollout=rollout)
    alone = collect(model, TASK, PROBLEMS, [4], step=3, seed=7, rollout=rollout)
    assert _by_row(together, [1, 4, 5], 4)[4] == _by_row(alone, [4], 4)[4]
    other_step = collect(model, TASK, PROBLEMS, [4], step=4, seed=7, rollout=rollout)
    assert _by_row(other_step, [4], 4)[4] != _by_row(alone, [4], 4)[4]


def test_tensors_rewards_and_advantages(model):
    rollout = RolloutConfig(group_size=4, reward="states_an_answer", max_new_tokens=6, overlong_penalty=0.5)
    batch = collect(model, TASK, PROBLEMS, [0, 2], step=0, seed=0, rollout=rollout)
    assert batch.completion_ids.shape == (8, 6) and batch.prompt_ids.shape == (8, 4)
    np.testing.assert_array_equal(batch.completion_mask.sum(1).numpy(), batch.lengths.reshape(-1))
    ends = [int(r[int(m.sum()) - 1]) for r, m in zip(batch.completion_ids, batch.completion_mask)]
    finished = np.array([e == TASK.eos_id for e in ends])
    completions = [tuple(int(t) for t, m in zip(r, mr) if m) for r, mr in zip(batch.completion_ids,
                                                                             batch.completion_mask)]
    stated = np.array([float(bool(TASK.candidates(c))) for c in completions])
    np.testing.assert_allclose(batch.rewards.numpy(), stated - 0.5 * ~finished, rtol=0, atol=0)
    groups = batch.rewards.view(2, 4)
    np.testing.assert_allclose(batch.advantages.view(2, 4).numpy(), (groups - groups.mean(1, keepdim=True)).numpy(),
                               rtol=0, atol=1e-15)
    assert bool((batch.attention_mask[:, 4:] == 1).all())


def test_mastered_groups_are_dropped_and_counted(model):
    """Prompt 0 scores 1 everywhere (mastered), prompt 1 [0.6, 1, 1, 1] (mean 0.9 > 0.85, one completion below:
    kept, as every completion must be above), prompt 2 alternates 0 and 1."""
    if "test_mastered_rows" not in REWARDS:
        register_reward("test_mastered_rows", lambda t, problems, responses: [
            [1.0] * len(g) if p is PROBLEMS[0] else [0.6] + [1.0] * (len(g) - 1) if p is PROBLEMS[1]
            else [float(j % 2) for j in range(len(g))] for p, g in zip(problems, responses)])
    rollout = RolloutConfig(group_size=4, reward="test_mastered_rows", max_new_tokens=6,
                            mastered=Mastered(every_above=0.85, min_above=0.5))
    batch = collect(model, TASK, PROBLEMS, [0, 1, 2], step=0, seed=0, rollout=rollout)
    assert batch.skipped_groups == 1 and batch.completion_ids.shape[0] == 8
    assert batch.rewards.tolist() == [0.6, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0] and batch.all_rewards.shape == (3, 4)
    np.testing.assert_allclose(batch.advantages[:4].numpy(), [-0.3, 0.1, 0.1, 0.1], rtol=0, atol=1e-15)
    assert batch.correct.shape == (3, 4)  # the checker's verdict is kept for every group
