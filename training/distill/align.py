"""Stage 2 of cross-architecture distillation: attention alignment (thesis §3.4, eqs 3.21-3.22).

Teacher forcing, layers independent: every replaced layer m's mixer gets the teacher's normed input at
layer m (the input of its ``self_attn``, after ``input_layernorm``) and is trained to reproduce what the
teacher's attention made of it. Per position n, with H heads of width d (``target: heads``, eq. 3.22),

    ℓ_2(n) = 1/(M·H) Σ_m Σ_h (1/d) ‖y_n^{h,m} − ŷ_n^{h,m}‖²

where y^{h,m} is head h of the teacher's attention before o_proj and ŷ^{h,m} the student mixer's value
at the same place (the input of its o_proj: for a gated-norm mixer, after the gate and the norm). With
``target: output`` the comparison is after o_proj, (1/M) Σ_m (1/d_model) ‖y_n^m − ŷ_n^m‖², for any mixer.
The thesis takes eq. 3.21 "for all n ∈ {1, …, T} where T is the sequence length": the objective returns
Σ_n ℓ_2(n) over every labelled position n (labels[n] ≠ −100; stage 2's data labels each row up to its
last supervised token, stages.py ``label_all_positions``, so right padding stays out) and their count,
and the training loop's division gives the mean of eq. 3.22 over positions. Unlike next-token losses
it does not shift by one: stage 2 predicts no token, and the last position is compared like the others.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Sequence

import torch
from torch import nn

from ..objective import IGNORE_INDEX
from .teacher import TeacherObjective


class AttentionIO(NamedTuple):
    """One teacher attention layer: its input x [B, T, d_model], its heads before o_proj [B, T, H·D]
    and its output after o_proj [B, T, d_model]."""

    x: torch.Tensor
    heads: torch.Tensor
    out: torch.Tensor


@torch.no_grad()
def teacher_attention(teacher: nn.Module, input_ids: torch.Tensor, layers: Sequence[int]) -> dict[int, AttentionIO]:
    """The AttentionIO of each of ``layers`` in one forward of a transformers Llama / Qwen2 / Qwen3 teacher."""
    seen: dict[int, dict[str, torch.Tensor]] = {i: {} for i in layers}
    hooks = []
    for i in layers:
        attn = teacher.model.layers[i].self_attn

        def take_input(module, args, kwargs, i=i):
            seen[i]["x"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

        hooks += [attn.register_forward_pre_hook(take_input, with_kwargs=True),
                  attn.o_proj.register_forward_pre_hook(lambda m, args, i=i: seen[i].__setitem__("heads", args[0])),
                  attn.register_forward_hook(lambda m, args, out, i=i: seen[i].__setitem__("out", out[0]))]
    try:
        teacher(input_ids=input_ids)
    finally:
        for hook in hooks:
            hook.remove()
    return {i: AttentionIO(v["x"], v["heads"], v["out"]) for i, v in seen.items()}


def student_attention(mixer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A student mixer on x [B, T, d_model]: (the input of its o_proj [B, T, H·V], its output [B, T, d_model])."""
    seen: dict[str, torch.Tensor] = {}
    hook = mixer.o_proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("heads", args[0]))
    try:
        out, _ = mixer(x, return_state=False)
    finally:
        hook.remove()
    return seen["heads"], out


def alignment_error(student: tuple[torch.Tensor, torch.Tensor], teacher: AttentionIO, *, num_heads: int,
                    target: Literal["heads", "output"]) -> torch.Tensor:
    """Per position [B, T]: (1/H) Σ_h (1/d) ‖y^h − ŷ^h‖² (heads) or (1/d_model) ‖y − ŷ‖² (output), one layer."""
    if target == "output":
        return (student[1] - teacher.out).pow(2).mean(-1)
    y, y_hat = teacher.heads, student[0]
    if y_hat.shape != y.shape:
        raise ValueError(f"target: heads compares the student's o_proj input {tuple(y_hat.shape)} with the teacher's "
                         f"heads {tuple(y.shape)}; the layouts differ: use target: output")
    B, T, _ = y.shape
    diff = (y_hat - y).view(B, T, num_heads, -1)                       # [B, T, H, d]
    return diff.pow(2).mean(-1).mean(-1)                               # [B, T]


class AlignmentObjective(TeacherObjective):
    """forward(input_ids, labels) -> (Σ over selected positions of ℓ_2 (eq. 3.22), their count, 0).

    The selected positions are every n with labels[n] ≠ −100 (module docstring: all n ∈ {1..T}); the third
    value, the count of correct predictions, is 0: stage 2 predicts no token (evaluation reads the
    student's logits).
    """

    def __init__(self, student: nn.Module, teacher: nn.Module, layers: Sequence[int],
                 target: Literal["heads", "output"]):
        super().__init__(student, teacher)
        self.layers, self.target = list(layers), target
        self.num_heads = teacher.config.num_attention_heads

    def per_position(self, input_ids: torch.Tensor) -> torch.Tensor:
        """ℓ_2 [B, T] averaged over the replaced layers."""
        io = teacher_attention(self.teacher, input_ids, self.layers)
        errors = [alignment_error(student_attention(self.model.model.layers[i].mixer, io[i].x), io[i],
                                  num_heads=self.num_heads, target=self.target) for i in self.layers]
        return torch.stack(errors).mean(0)

    def scored(self, labels: torch.Tensor) -> torch.Tensor:
        """bool [B, T]: every labelled position n (eq. 3.21's n ∈ {1..T}; no shift, nothing is predicted)."""
        return labels != IGNORE_INDEX

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        selected = self.scored(labels)                                  # [B, T]
        loss_sum = self.per_position(input_ids)[selected].sum()
        zero = torch.zeros((), dtype=torch.long, device=loss_sum.device)
        return loss_sum, selected.sum(), zero
