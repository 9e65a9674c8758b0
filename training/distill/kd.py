"""Stage 3 of cross-architecture distillation: logit distillation (thesis §3.4, eqs 3.23-3.24).

Per position, with student logits z, teacher logits z', temperature τ and P = softmax(z/τ), Q = softmax(z'/τ)
(eq. 3.24 applied to both),

    loss = w_kl · τ² · KL + w_ce · CE(softmax(z), label)
    KL   = Σ_i P(i) log(P(i)/Q(i))     direction: reverse (KL(student ‖ teacher), as the thesis writes)
    KL   = Σ_i Q(i) log(Q(i)/P(i))     direction: forward (KL(teacher ‖ student), the MambaInLlama code)

(eq. 3.23 with the two orders). τ² keeps the gradient's scale independent of τ (Hinton et al. 2015).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..objective import IGNORE_INDEX
from .teacher import TeacherObjective


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor, *,
            direction: Literal["reverse", "forward"], temperature: float, w_kl: float, w_ce: float) -> torch.Tensor:
    """Per-position loss [N] from logits [N, V] (student, teacher) and targets [N] (module docstring)."""
    log_p = F.log_softmax(student / temperature, dim=-1)             # [N, V] student
    log_q = F.log_softmax(teacher / temperature, dim=-1)             # [N, V] teacher
    if direction == "reverse":
        kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    elif direction == "forward":
        kl = (log_q.exp() * (log_q - log_p)).sum(-1)
    else:
        raise ValueError(f"direction must be 'reverse' or 'forward', got {direction!r}")
    loss = w_kl * temperature ** 2 * kl
    if w_ce:
        loss = loss + w_ce * F.cross_entropy(student, targets, reduction="none")
    return loss


class KDObjective(TeacherObjective):
    """forward(input_ids, labels) -> (Σ kd_loss over the supervised positions, their count, correct arg-max)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, *, direction: Literal["reverse", "forward"],
                 temperature: float, w_kl: float, w_ce: float):
        super().__init__(student, teacher)
        self.direction, self.temperature, self.w_kl, self.w_ce = direction, temperature, w_kl, w_ce

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        student, targets = self.selected_logits(input_ids, labels, attention_mask)       # [N, V], [N]
        with torch.no_grad():
            supervised = labels[:, 1:] != IGNORE_INDEX
            teacher = self.teacher(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1][supervised]
        dtype = torch.promote_types(student.dtype, torch.float32)  # bf16 autocast: the loss in float32
        loss = kd_loss(student.to(dtype), teacher.to(dtype), targets, direction=self.direction,
                       temperature=self.temperature, w_kl=self.w_kl, w_ce=self.w_ce)
        correct = (student.detach().argmax(-1) == targets).sum()
        return loss.sum(), torch.tensor(targets.numel(), device=loss.device), correct
