"""The frozen teacher inside a training objective: in eval mode and without gradients for the whole run.

Stages 2 and 3 train the student (``objective.model``) against a teacher held by the objective, so DDP
wraps both and ``Trainer.evaluate`` (which calls ``objective.eval()`` / ``objective.train()``) must not
put the teacher in training mode: ``train()`` is overridden to keep it in eval mode.
"""
from __future__ import annotations

from torch import nn

from ..objective import CausalLMObjective


class TeacherObjective(CausalLMObjective):
    """A student objective that holds a frozen teacher; ``selected_logits`` (evaluation) reads the student."""

    def __init__(self, student: nn.Module, teacher: nn.Module):
        super().__init__(student, "all")
        self.teacher = teacher.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> "TeacherObjective":
        super().train(mode)
        self.teacher.eval()
        return self
