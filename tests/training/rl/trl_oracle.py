"""TRL's own ``GRPOTrainer._compute_loss`` called on given tensors, without building a trainer.

The method reads only attributes of ``self``; a bare instance (``object.__new__``) gets the ones it
reads, an accelerator of one process (gather / reduce are the identity) and a log-prob function
that returns the given tensor instead of running a model. Everything else — the ratio, the clip,
the k3 KL, the four aggregations — is TRL's code as installed (trl 1.16.0).
"""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import torch
from trl import GRPOTrainer


class _OneProcess:
    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(x):
        return x

    gather_for_metrics = gather

    @staticmethod
    def reduce(x, reduction="sum"):
        return x


def trl_loss(logp: torch.Tensor, old_logp: torch.Tensor | None, ref_logp: torch.Tensor | None,
             advantages: torch.Tensor, mask: torch.Tensor, *, loss_type: str, beta: float, eps_low: float,
             eps_high: float, max_completion_length: int, num_items_in_batch: float | None = None,
             use_bias_correction_kl: bool = False) -> torch.Tensor:
    """TRL's loss for per-token log-probs ``logp`` [B, T] (a tensor in the autograd graph); TRL's own default
    of ``use_bias_correction_kl`` is True, the oracle's False unless asked."""
    trainer = object.__new__(GRPOTrainer)
    fields = dict(
        top_entropy_quantile=1.0, aux_loss_enabled=False, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=beta, loss_type=loss_type, epsilon_low=eps_low,
        epsilon_high=eps_high, use_vllm=False, vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        accelerator=_OneProcess(), _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list)},
        max_completion_length=max_completion_length,
        args=SimpleNamespace(use_bias_correction_kl=use_bias_correction_kl, delta=None, steps_per_generation=1),
    )
    for key, value in fields.items():
        object.__setattr__(trainer, key, value)
    object.__setattr__(trainer, "_get_per_token_logps_and_entropies",
                       lambda *a, **k: (logp, torch.zeros_like(logp), None))
    inputs = {"prompt_ids": torch.zeros(logp.shape[0], 1, dtype=torch.long),
              "prompt_mask": torch.ones(logp.shape[0], 1, dtype=torch.long),
              "completion_ids": torch.zeros(logp.shape, dtype=torch.long), "completion_mask": mask,
              "advantages": advantages}
    if old_logp is not None:
        inputs["old_per_token_logps"] = old_logp
    if ref_logp is not None:
        inputs["ref_per_token_logps"] = ref_logp
    if num_items_in_batch is not None:
        inputs["num_items_in_batch"] = torch.tensor(float(num_items_in_batch), dtype=logp.dtype)
    return GRPOTrainer._compute_loss(trainer, None, inputs)
