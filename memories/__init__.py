"""The four axes of a sequence mixer and the autograd derivation of its update.

    memory representation   Matrix, Diagonal, MLP, NonParametric, Spectral
    attentional bias        DotProduct, L2, RemoveReplace, Lp, Huber, NadarayaWatson, CharacteristicFunction
    retention regularizer   NoRetention, L2Decay, Proximal, L1, KL, Window
    memory optimizer        GD, RetainThenGD, Implicit, Newton, Momentum, ClosedForm

``derive(spec)`` returns the exact per-token recurrence (torch.func.grad of
ℓ + R applied by the optimizer), the ground truth for every faster form.
"""
from .algebra import algebra_class, check_axes, sums_keys, window_of
from .bias import L2, Bias, CharacteristicFunction, DotProduct, Huber, Lp, NadarayaWatson, RemoveReplace
from .derive import RecurrentStep, derive
from .memory import MLP, Diagonal, Matrix, Memory, NonParametric, Spectral
from .optimizer import GD, ClosedForm, Implicit, Momentum, Newton, Optimizer, RetainThenGD
from .retention import KL, L1, L2Decay, NoRetention, Proximal, Retention, Window

__all__ = [
    "Matrix", "Diagonal", "MLP", "NonParametric", "Spectral", "Memory",
    "DotProduct", "L2", "RemoveReplace", "Lp", "Huber", "NadarayaWatson", "CharacteristicFunction", "Bias",
    "NoRetention", "L2Decay", "Proximal", "L1", "KL", "Window", "Retention",
    "GD", "RetainThenGD", "Implicit", "Newton", "Momentum", "ClosedForm", "Optimizer",
    "derive", "RecurrentStep", "algebra_class", "check_axes", "sums_keys", "window_of",
]
