"""CUDA autocast's casts, reproduced on CPU: ``cuda_autocast_policy()``.

CPU autocast casts a different set of ops than CUDA autocast: on CUDA, normalisations and
reductions run in float32 while linears and convolutions run in bf16, so a layer's q and k
(after an L2 norm or RMSNorm) and v (after a linear or the short convolution) reach the op in
different dtypes. On CPU they do not, and a test under ``torch.autocast("cpu")`` never sees it.

``cuda_autocast_policy(dtype)`` enters ``torch.autocast("cpu", dtype)`` (so code that turns
autocast off for a region, ``torch.autocast(device, enabled=False)``, is honoured, and the ops
composed of matmuls inside, e.g. einsum's bmm, are cast as on CUDA) and a ``TorchFunctionMode``
that applies CUDA's op lists (torch.amp docs, "CUDA Ops that can autocast to float16 / float32")
while CPU autocast is enabled:

    LOWER_PRECISION   linear, matmul/mm/bmm/addmm/baddbmm/..., conv*, scaled_dot_product_attention:
                      float32/float16 tensor arguments -> ``dtype``
    FLOAT32           layer_norm, group_norm, rms_norm, normalize, norm, softmax, log_softmax,
                      exp, log, pow, rsqrt, sum, cumsum, prod, softplus, the losses, ...:
                      bf16/fp16 tensor arguments -> float32 (not when the call passes dtype=)

Everything else runs as called. float64 tensors are never cast (not eligible, as on CUDA), nor are
in-place variants or calls with ``out=``.
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

__all__ = ["LOWER_PRECISION", "FLOAT32", "CUDAAutocastPolicy", "cuda_autocast_policy"]

LOWER_PRECISION = frozenset({
    "__matmul__", "__rmatmul__", "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "chain_matmul", "multi_dot",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear", "matmul",
    "mm", "mv", "prelu", "scaled_dot_product_attention",
})
FLOAT32 = frozenset({
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits", "cosh",
    "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum", "dist", "erfinv",
    "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm", "log", "log_softmax",
    "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss", "multilabel_margin_loss", "multi_margin_loss",
    "nll_loss", "norm", "normalize", "pdist", "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh",
    "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus", "sum", "renorm", "tan",
    "triplet_margin_loss", "rms_norm", "logsumexp", "vector_norm", "huber_loss",
})


class CUDAAutocastPolicy(TorchFunctionMode):
    """The casts of CUDA autocast to ``dtype`` (module docstring), active while CPU autocast is enabled."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.dtype = dtype
        self.calls = {"lower": 0, "float32": 0}  # how many calls were cast (tests check the mode did something)

    def _cast(self, args, kwargs, to: torch.dtype, eligible: tuple[torch.dtype, ...]):
        def cast(x):
            return x.to(to) if isinstance(x, torch.Tensor) and x.dtype in eligible else x
        return tree_map(cast, args), tree_map(cast, kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if torch.is_autocast_enabled("cpu") and "out" not in kwargs:
            if name in LOWER_PRECISION:
                self.calls["lower"] += 1
                args, kwargs = self._cast(args, kwargs, self.dtype, (torch.float32, torch.float16, torch.bfloat16))
            elif name in FLOAT32 and kwargs.get("dtype") is None:
                self.calls["float32"] += 1
                args, kwargs = self._cast(args, kwargs, torch.float32, (torch.float16, torch.bfloat16))
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_autocast_policy(dtype: torch.dtype = torch.bfloat16):
    """``torch.autocast("cpu", dtype)`` with CUDA's op lists on top (module docstring); yields the mode."""
    mode = CUDAAutocastPolicy(dtype)
    with torch.autocast("cpu", dtype=dtype), mode:
        yield mode
