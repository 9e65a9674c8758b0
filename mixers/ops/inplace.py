"""Forward without autograd: overwrite fresh intermediates instead of allocating new ones.

The chunk forms build many [N, ·, C, ·] intermediates that are used once. When no gradient
is recorded (inference, or inputs that do not require grad), an elementwise product can
overwrite its left operand, provided that operand is a fresh tensor the op made itself (a
chunked copy or a product), never a caller's tensor or a view of one. Under autograd the
out-of-place product keeps the saved tensors intact. The values are the same either way.
"""
from __future__ import annotations

import torch

__all__ = ["records_grad", "scaled"]


def records_grad(*xs) -> bool:
    """Whether autograd records an op on these inputs: grad mode on and some input requires grad."""
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in xs)


def scaled(x: torch.Tensor, y, in_place: bool) -> torch.Tensor:
    """x ⊙ y (broadcast), overwriting x when ``in_place``; x must then be a fresh intermediate."""
    return x.mul_(y) if in_place else x * y
