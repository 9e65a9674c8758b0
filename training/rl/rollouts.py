"""Rollouts: G completions per prompt through ``generate()`` with the cache, rewards, advantages.

Steps of ``collect``:
  1. each prompt's G completions are drawn by ``sample_completions`` (training/generation.py) with
     the seed ``sample_seed(run seed, step, prompt row)``: a prompt's samples depend on the weights
     and that seed only, not on which other prompts share the process (N processes sample what one
     would);
  2. rewards from the registered reward (rewards.py), minus ``overlong_penalty`` for a completion
     that did not end (no EOS within max_new_tokens);
  3. advantages per group (advantages.py); groups that are mastered (Nautile's rule) are dropped;
  4. tensors for the loss: prompts left-padded, completions right-padded to max_new_tokens with a
     response mask (1 up to and including EOS).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..generation import SamplingSettings, sample_completions, token_logprobs
from ..verifiable import Problem, score_response
from .advantages import group_advantages, mastered_groups
from .rewards import score


TRAIN_STREAM, EVAL_STREAM = 0, 1


def sample_seed(seed: int, step: int, row: int, stream: int = TRAIN_STREAM) -> int:
    """The sampling seed of dataset prompt ``row`` at round ``step`` of a run seeded ``seed`` (``stream``
    keeps training and evaluation draws apart)."""
    return int(np.random.SeedSequence([seed, stream, step, row]).generate_state(1)[0])


@dataclass
class Rollouts:
    """One round's samples on this process: B = kept groups × G rows."""

    prompt_ids: torch.Tensor        # [B, W] left-padded prompts
    prompt_mask: torch.Tensor       # [B, W] 1 on prompt tokens
    completion_ids: torch.Tensor    # [B, T_max] right-padded completions
    completion_mask: torch.Tensor   # [B, T_max] 1 on response tokens (EOS included)
    rewards: torch.Tensor           # [B] float64
    advantages: torch.Tensor        # [B] float64
    all_rewards: np.ndarray         # [P_local, G] rewards of all groups (kept or not)
    correct: np.ndarray             # [P_local, G] bool: the checker's verdict (all groups)
    lengths: np.ndarray             # [P_local, G] response lengths (all groups)
    skipped_groups: int             # mastered groups dropped

    @property
    def sequences(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, W + T_max]: the prompt padding mask, 1 on every completion position (padding after
        EOS is read by no earlier position in a causal model, and masked out of the loss)."""
        return torch.cat([self.prompt_mask, torch.ones_like(self.completion_ids)], dim=1)


def _pad(rows: Sequence[Sequence[int]], width: int, pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.as_tensor(list(row), dtype=torch.long)
        mask[i, span] = 1
    return ids, mask


def collect(model, task, problems: Sequence[Problem], rows: Sequence[int], *, step: int, seed: int, rollout) -> Rollouts:
    """Steps 1-4 of the module docstring for the prompts ``problems[r]``, r in ``rows`` (``rollout``: RolloutConfig)."""
    local = [problems[r] for r in rows]
    G, T = rollout.group_size, rollout.max_new_tokens or task.max_new_tokens
    responses, finished = [], []
    for row, problem in zip(rows, local):                                          # 1.
        settings = SamplingSettings(num_samples=G, temperature=rollout.temperature, top_p=rollout.top_p,
                                    max_new_tokens=T, batch_size=G, seed=sample_seed(seed, step, int(row)))
        out = sample_completions(model, [problem.prompt], settings, eos_token_id=task.eos_id, pad_token_id=task.pad_id)
        responses.append(out.responses[0])
        finished.append(out.finished[0])
    rewards = score(rollout.reward, task, local, responses, rollout.verifiers)     # 2. [P, G]
    rewards = rewards - rollout.overlong_penalty * ~np.asarray(finished)
    rewards_t = torch.as_tensor(rewards, dtype=torch.float64)
    adv = group_advantages(rewards_t, rollout.advantage_scale)                     # 3.
    keep = torch.ones(len(local), dtype=torch.bool)
    if rollout.mastered is not None:
        keep = ~mastered_groups(rewards_t, every_above=rollout.mastered.every_above,
                                min_above=rollout.mastered.min_above)
    correct = np.array([[score_response(task, p, r)[1] for r in group] for p, group in zip(local, responses)])
    kept = [i for i in range(len(local)) if keep[i]]
    prompts = [local[i].prompt for i in kept for _ in range(G)]                    # 4.
    completions = [responses[i][j] for i in kept for j in range(G)]
    width = max((len(p) for p in prompts), default=1)
    prompt_ids, prompt_mask = _pad(prompts, width, task.pad_id, left=True)
    completion_ids, completion_mask = _pad(completions, T, task.pad_id, left=False)
    return Rollouts(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                    completion_mask=completion_mask, rewards=rewards_t[keep].reshape(-1),
                    advantages=adv[keep].reshape(-1), all_rewards=rewards, correct=correct,
                    lengths=np.array([[len(r) for r in group] for group in responses]),
                    skipped_groups=int((~keep).sum()))


def rollout_logprobs(model, batch: Rollouts) -> torch.Tensor:
    """log π(y_t) [B, T_max] of the completion tokens under ``model`` (float32 log-softmax; differentiable)."""
    if batch.prompt_ids.shape[0] == 0:
        return torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
    device = next(model.parameters()).device
    return token_logprobs(model, batch.sequences.to(device), batch.attention_mask.to(device),
                          batch.prompt_ids.shape[1]).float()
