"""What every recurrent mixer module shares: its decode state and its lowered ops.

    MixerState(memory, conv)    the decode state of a recurrent module (Mixer, Mamba)
    Lowered                     the spec's form and decode step, lowered per (device, dtype, grad mode)
                                by the module's backend (layer.backend; mixers/kernels.py)
    input_dtype(x)              the dtype the op's inputs arrive in (autocast's or x's)
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .kernels import BACKENDS, FlaEnv
from .lower import Form, compilable, fla_kernel, lower
from .spec import MixerSpec

__all__ = ["Lowered", "MixerState", "input_dtype"]


class MixerState(NamedTuple):
    """Decode state of a recurrent Mixer: the op's memory state, the conv buffer (or None) and, for a feature
    map that reads positions (cosformer), the tokens seen per row (else None)."""

    memory: Any  # [B, H, K_φ, V (+1 if normalised)] or a tuple of tensors (MLP / momentum memories)
    conv: torch.Tensor | None  # [B, conv_size − 1, 2·Hqk·K + H·V]
    pos: torch.Tensor | None = None  # [B] int64


class Lowered:
    """The ops a recurrent module runs: its spec's form and decode step ("recurrent"), lowered per (device,
    dtype, grad mode) by the module's backend (``layer.backend``; mixers/kernels.py). Shared by ``Mixer``
    and the Mamba layer (mixers/mamba.py); ``set_backend`` and ``check_backend`` reach every one."""

    spec: MixerSpec

    def init_forms(self, spec: MixerSpec, form: str) -> None:
        """The backend of ``spec.layer`` and the forms on CPU (what "auto" and "torch" run there); other
        devices: ``lowered``. Backend "fla" without an FLA kernel is refused now, whatever the device."""
        o = spec.layer
        self.form_name = form
        self.backend, self.fla_env = ("compiled" if o.compile else o.backend), None
        if self.backend == "fla" and fla_kernel(spec, form)[0] is None:
            raise ValueError(f"backend 'fla' for {spec.name or 'this spec'}: {fla_kernel(spec, form)[1]}")
        self.form = lower(spec, form, compile=self.backend == "compiled" and compilable(spec, form))
        self.step_form = lower(spec, "recurrent")
        self._lowered: dict[tuple, tuple[Form, Form]] = {}

    def lowered(self, device: torch.device, dtype: torch.dtype, grad: bool = True) -> tuple[Form, Form]:
        """(form, step form) that run on ``device`` for inputs of ``dtype`` (``grad``: with gradients), by
        ``self.backend``; lowered once per (device, dtype, grad). On CPU without an injected ``fla_env``
        the backends "auto" and "torch" run the forms built at construction."""
        key = (str(device), dtype, grad)
        if key not in self._lowered:
            cpu = device.type == "cpu" and (self.fla_env is None or self.fla_env.device_type != "cpu")
            if cpu and self.backend in ("auto", "torch", "compiled"):
                self._lowered[key] = (self.form, self.step_form)
            else:
                where = dict(device=device, dtype=dtype, grad=grad, env=self.fla_env)
                backend = self.backend
                if backend == "compiled" and not compilable(self.spec, self.form_name):
                    backend = "torch"  # forms without a compiled variant (as layer.compile always did)
                step = "torch" if self.backend == "compiled" else self.backend
                self._lowered[key] = (lower(self.spec, self.form_name, backend=backend, **where),
                                      lower(self.spec, "recurrent", backend=step, **where))
        return self._lowered[key]

    def set_backend(self, backend: str, fla_env: FlaEnv | None = None) -> None:
        """Run this mixer by ``backend`` from the next call (``fla_env``: what FLA's availability reads, and
        the namespace its kernels come from; None: the machine's)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        if backend == "fla" and fla_kernel(self.spec, self.form_name)[0] is None:
            raise ValueError(f"backend 'fla' for {self.spec.name or 'this spec'}: "
                             f"{fla_kernel(self.spec, self.form_name)[1]}")
        self.backend, self.fla_env = backend, fla_env
        self._lowered.clear()


def input_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the op's inputs arrive in: autocast's where it is on for x's device, else x's."""
    on = torch.is_autocast_enabled(x.device.type)
    return torch.get_autocast_dtype(x.device.type) if on and x.is_floating_point() else x.dtype
