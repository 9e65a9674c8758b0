"""Kernel backends: which code runs a lowered form (``lower(spec, form, backend=...)``), and whether FLA's runs.

    backend    runs
    torch      the eager form (mixers/ops/*), on every device
    compiled   the form's compiled variant (chunk / prefix_sum through torch.compile, ops/compiled.py)
    fla        FLA's Triton kernel of the spec's class (ops/fla.py; the class table's ``fla`` column), CUDA only
    auto       on CUDA: fla where the class has an FLA kernel and FLA takes the call (``fla_status``), else
               compiled where the form has a compiled variant, else torch. On CPU: torch, the eager form:
               inductor's compile costs tens of seconds per graph on a CPU for a few percent there
               (docs/performance.md), so a CPU run compiles only when asked (backend="compiled").

When FLA would refuse the call, ``auto`` falls back (compiled, else torch) with one warning per reason
that names the reason and the fix; ``backend="fla"`` raises ValueError with the same words before any
work starts (at layer construction, in a model's ``check_backend``, in train's config check).

``fla_status(kernel, device, dtype, K, V)`` decides, in this order:

1. a CUDA device: FLA's kernels are Triton GPU kernels;
2. fla (flash-linear-attention / fla-core) and triton installed;
3. the dtype: no kernel takes float64; chunk_delta_rule asserts q is not float32 (bf16/fp16 only);
4. the head size: FLA's delta-class state kernels assert K <= 256; FLA's chunk_bwd_dv asserts even
   K and V for 16-bit inputs (odd sizes make Triton read out of bounds);
5. with gradients, a kernel whose backward runs FLA's gated ``chunk_bwd_dqkwg`` (chunk_gated_delta_rule,
   chunk_simple_gla with a per-token g) on Hopper (compute capability 9.x) with 3.4.0 <= Triton < 3.7.1:
   FLA raises "Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated
   chunk_bwd_dqkwg" (FLA issue 640; fla/ops/common/chunk_o.py) unless its tilelang backend takes the
   call (tilelang installed with a usable nvcc and FLA_TILELANG not 0; it takes GDN in any dtype and
   simple_gla in float32 only, fla/ops/common/backends/tilelang). RetNet's fixed decay goes through
   g_gamma, which that kernel does not refuse.

``FlaEnv`` holds what those checks read. For a CUDA device it is probed from the machine
(``probe``), importing fla only then; tests and ``assocmem verify`` pass their own (``env=``), with
``kernels`` a namespace of FLA-signature functions (ops/fla.py) and ``device_type`` the device it
describes, so the whole path runs on CPU with FLA's naive references standing in for its kernels.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .ops.fla import FLA_KERNELS, HALF

__all__ = ["BACKENDS", "FlaEnv", "probe", "fla_status", "warn_once"]

BACKENDS = ("auto", "torch", "compiled", "fla")
INSTALL = "pip install 'assocmem[cuda]' (flash-linear-attention with triton)"
TRITON_FIXED = (3, 7, 1)  # FLA issue 640: the gated chunk_bwd_dqkwg is refused for 3.4.0 <= Triton < 3.7.1 on Hopper
TRITON_BROKEN = (3, 4, 0)


@dataclass(frozen=True)
class FlaEnv:
    """What decides whether FLA's kernels run on a device of type ``device_type``.

    fla: whether fla and triton are importable; triton: Triton's version; capability: the GPU's
    compute capability (9, 0) = Hopper; tilelang: whether FLA's tilelang backend is usable;
    kernels: the namespace of FLA's entry points (None: fla.ops, imported at the first call);
    float64: whether those take float64 (FLA's naive references, re-typed, do; its Triton kernels do not)."""

    fla: bool
    triton: tuple[int, ...] | None = None
    capability: tuple[int, int] | None = None
    tilelang: bool = False
    kernels: Any = None
    device_type: str = "cuda"
    float64: bool = False


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


@functools.lru_cache(maxsize=None)
def probe(index: int = 0) -> FlaEnv:
    """The machine's ``FlaEnv`` for CUDA device ``index`` (imports fla only where it is installed)."""
    installed = all(importlib.util.find_spec(m) is not None for m in ("fla", "triton"))
    if not installed:
        return FlaEnv(fla=False)
    triton = _version(importlib.metadata.version("triton"))
    capability = tuple(torch.cuda.get_device_capability(index)) if torch.cuda.is_available() else None
    return FlaEnv(fla=True, triton=triton, capability=capability, tilelang=_tilelang_usable())


def _tilelang_usable() -> bool:
    """FLA's own answer: its TileLang backend is installed with a usable nvcc and not switched off."""
    try:
        from fla.backends import TileLangBackend
    except Exception:  # noqa: BLE001  (fla present but not importable: then no tilelang either)
        return False
    return TileLangBackend.is_available() and os.environ.get("FLA_TILELANG", "1") != "0"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fla_status(kernel: str, device: torch.device | str, dtype: torch.dtype, head_dim: int, value_dim: int, *,
               grad: bool = True, step: bool = False, env: FlaEnv | None = None) -> tuple[bool, str, str]:
    """(ok, reason, fix): whether FLA's kernel ``kernel`` (a row of ops/fla.py's FLA_KERNELS) runs inputs of
    ``dtype`` with head sizes K = ``head_dim``, V = ``value_dim`` on ``device`` (gradients too, with
    ``grad``; ``step``: its fused recurrent decode kernel, which has neither the chunk kernel's dtype limit
    nor its gated backward). The checks, in order, are the module docstring's; ``env`` None = ``probe``
    for CUDA."""
    device = torch.device(device)
    row = FLA_KERNELS[kernel]
    entry = row.step if step else row.chunk
    dtypes = (torch.bfloat16, torch.float16, torch.float32) if step else row.dtypes
    if env is None or env.device_type != device.type:
        if device.type != "cuda":
            return False, f"FLA's kernels are Triton GPU kernels and the device is {device.type}", \
                "move the model to a CUDA device, or use backend 'torch' or 'compiled'"
        env = probe(device.index or 0)
    if not env.fla:
        return False, "flash-linear-attention (fla) with triton is not installed", INSTALL
    if dtype not in dtypes and not (dtype == torch.float64 and env.float64):
        takes = "/".join(_name(d) for d in dtypes)
        fix = ("train under bf16 autocast (train.precision: bf16)" if torch.float32 not in dtypes
               else "run in float32 or bf16 (backend 'torch' runs float64)")
        return False, f"FLA's {entry} takes {takes} inputs, got {_name(dtype)}", fix
    if row.max_head_dim is not None and head_dim > row.max_head_dim:
        return False, f"FLA's {entry} takes head sizes K <= {row.max_head_dim}, got K={head_dim}", \
            f"a layer head_dim of at most {row.max_head_dim}"
    if dtype in HALF and (head_dim % 2 or value_dim % 2):
        return False, f"FLA's backward asserts even K and V for 16-bit inputs, got K={head_dim}, V={value_dim}", \
            "an even head_dim and value width"
    if grad and not step and row.gated_bwd and _hopper_guard(env) and not (env.tilelang and dtype in row.tilelang_dtypes):
        version = ".".join(map(str, env.triton))
        fix = "install Triton >= 3.7.1"
        if row.tilelang_dtypes:
            only = "" if dtype in row.tilelang_dtypes else f" (it takes {row.chunk} in float32 only)"
            fix += f", or tilelang with nvcc on PATH (pip install tilelang){only}"
        return False, (f"FLA refuses the backward of {row.chunk} on Hopper (compute capability "
                       f"{env.capability[0]}.{env.capability[1]}) with Triton {version}: Triton >= 3.4.0 and < 3.7.1 "
                       f"produces incorrect results for gated chunk_bwd_dqkwg (FLA issue 640)"), fix
    return True, f"FLA's {entry} ({row.paper})", ""


def _hopper_guard(env: FlaEnv) -> bool:
    return (env.capability is not None and env.capability[0] == 9 and env.triton is not None
            and TRITON_BROKEN <= env.triton < TRITON_FIXED)


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """``warnings.warn(message)`` the first time this process meets ``message``."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
