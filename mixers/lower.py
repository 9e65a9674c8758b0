"""lower(spec): the executable forms of a spec, chosen from its algebra. THE class table.

Every choice of code by algebra is made here, in ``FAMILIES`` and ``family_of``: which ops a
class has, which form ``auto`` picks, which one is the hand-written (published) recurrence,
the default chunk size and whether the optimizer's base lr scales the step. The class itself
is read off the spec's axes by ``algebra_class`` (memories/algebra.py), never guessed
numerically and never switched by sequence length or environment.

    class          family              forms (first = auto)                      ops             K steps
    hebbian        hebbian             chunk, recurrent                          ops/hebbian.py  K·β
    delta          delta_rule          chunk, recurrent                          ops/delta.py    β_eff (GD)
                   longhorn            chunk, recurrent  (implicit optimizer)    ops/delta.py    β' (proximal)
                   kda                 chunk, recurrent  (per-key decay)         ops/delta.py    β_eff (GD)
    diag_rank1     delta_rule_joint    chunk, recurrent                          ops/delta.py    (class scan)
    dplr           dplr                chunk, recurrent                          ops/dplr.py     (class scan)
    selective      selective           selective_scan, recurrent                 ops/selective.py
    spectral       spectral            prefix_sum, masked_matmul, recurrent      ops/spectral.py
    nonparametric  softmax_attention   sdpa, recurrent                           ops/attention.py
    scan           scan                scan, recurrent, chunk_approx (opt-in)    derive() / ops/chunk_approx.py

The selective class (Mamba, Gu & Dao 2023) has no chunk form: its decay exp(Δ_{t,d} A_{d,n}) is one
number per entry of S (key n, value channel d), so the decay between two tokens does not factor into
the per-head or per-key factors that turn a chunk's intra-chunk term into one C×C matmul per head;
per value channel it would be a C×C matrix of its own, K·V·C² work per chunk against the scan's
K·V·C. Its forms are the exact scan (over blocks of tokens, eager or compiled) and the token loop. A
parallel associative scan (log₂ T doubling steps of T·K·V work) does not pay on CPU: forward and backward
took 2.0× (T=256) and 2.2× (T=1024) the block scan's time at K=16, V=128 (training/bench/selective_scan.py,
one thread), so it is not a form.

"recurrent" is the hand-written recurrence of the published rule (scan: the derived step,
uncompiled; its published rule, where one exists, is in references.py). Every form of a
class has the op contract of the class (mixers/ops/contract.py).
A new family is one ops file, one row here and, if its class is new, one branch of
``family_of``.

Recurrent depth (``steps: K`` on the optimizer, thesis eq. 5.1) is the ``depth`` column: where
K steps equal one step with another β (ops/depth.py), every form of the row runs with that β
and the hand-written form is the unrolled K-step loop; the other classes take K steps in the
derived scan. A normalised read-out (``layer.normalize``, eqs. 2.31–2.36) wraps every form of a
hebbian spec (``readout``, ops/normalized.py).

Kernel backends (mixers/kernels.py): ``lower(spec, form, backend=...)`` runs a form eagerly ("torch"),
through torch.compile ("compiled", forms in ``COMPILABLE``) or as FLA's Triton kernel ("fla"); "auto"
picks by device (``choose_backend``). The ``fla`` column maps the retention gate of a row's spec (None:
no decay, "scalar", "fixed", "key") to FLA's kernel (ops/fla.py FLA_KERNELS), for the chunk form and,
with the fused recurrent kernel, the decode step ("recurrent"):

    family            no decay       scalar            fixed              key
    hebbian           linear_attn    simple_gla        retention          gla              (β folded into v)
    delta_rule        delta_rule     gated_delta_rule  gated_delta_rule   -                (key: row kda)
    kda               -              -                 -                  kda
    delta_rule_joint  dplr           dplr              dplr               dplr
    dplr              dplr           dplr              dplr               dplr

Not FLA (auto takes the compiled form): the other rows (longhorn's implicit step, selective, spectral, attention,
scan: SCA, Huber/ℓp, Titans, TTT, specs outside these classes), the normalised read-out, a per-key
step size outside dplr, the forms other than chunk and recurrent, and whatever ``fla_status`` refuses
(float64, head sizes, the Hopper/Triton guard, FLA not installed).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from assocmem.memories import Implicit, L2Decay, derive, window_of
from assocmem.memories.checks import gate_needs
from assocmem.memories.derive import RecurrentStep

from .feature_maps import feature_width
from .kernels import BACKENDS, FlaEnv, fla_status, warn_once
from .ops import attention, delta, delta_chunk, depth, dplr, hebbian, selective, spectral
from .ops.fla import FLA_KERNELS, fla_op
from .ops.chunk_approx import chunk_approx_scan
from .ops.normalized import normalized
from .references import online_rule
from .spec import MixerSpec

APPROXIMATE = frozenset({"chunk_approx"})  # never chosen by "auto"
# forms with a compiled variant, lower(spec, form, compile=True): the same source fused by torch.compile
# (mixers/ops/compiled.py); the eager form stays the reference. The scan form is compiled already.
COMPILABLE = frozenset({"chunk", "prefix_sum", "selective_scan"})


def _derived_step(spec: MixerSpec, compile: bool) -> Callable:
    derive(spec)  # validates the axes
    # torch.compile does not trace Newton's Hessian-vector products (jvp of grad) under vmap: its scan stays eager
    return RecurrentStep(spec, compile=compile and spec.optimizer.kind != "newton")


@dataclass(frozen=True)
class Depth:
    """K steps per token as one step of the row's ops (ops/depth.py).

    beta: (k [B, T, H, K], β [B, T, H] or None, K) -> the single-step β [B, T, H];
    unrolled: the hand-written K-step recurrence (op contract plus ``steps``), named ``name``."""

    beta: Callable
    unrolled: Callable
    name: str


@dataclass(frozen=True)
class Family:
    """One row of the class table: the ops of a family of published mixers.

    ops: form -> op with the class's op contract (first = auto); for the scan class a factory
    spec -> op. beta: what the ops' β_t is: "step" (the step size η_t of a gradient step),
    "write" (an optional write strength, 1 when None), "weight" (the spectral contribution
    p_t) or "none". bind: the keywords a spec fixes in every op (window, den_floor). lr: the
    optimizer's base lr scales β (``with_lr``). other_order: the family whose recurrence
    composes retention and step in the other order, and what it is (verify shows they differ).
    depth: K steps per token as one step (``Depth``), or None (K > 1 is class scan).
    """

    cls: str
    ops: dict[str, Callable]
    beta: str
    hand_written: str | None = None  # name of the "recurrent" op when it is the published rule
    default_chunk: Callable[[int], int] | None = None  # head width K -> C of the chunk form
    lr: bool = False
    bind: Callable[[MixerSpec], dict] = field(default=lambda spec: {})
    other_order: tuple[str, str] | None = None
    depth: Depth | None = None
    fla: dict[str | None, str] | None = None

    @property
    def forms(self) -> tuple[str, ...]:
        return tuple(self.ops)


def _window(spec: MixerSpec) -> dict:
    return {"window": window_of(spec)}


def _den_floor(spec: MixerSpec) -> dict:
    return {"den_floor": spec.memory.den_floor}


_DELTA = dict(cls="delta", beta="step", lr=True, default_chunk=delta_chunk.default_chunk_size)
_GD_DEPTH = Depth(depth.gd_beta, depth.recurrent_delta_steps, "recurrent_delta_steps")
_DPLR = dict.fromkeys((None, "scalar", "fixed", "key"), "dplr")

FAMILIES: dict[str, Family] = {
    "hebbian": Family(
        cls="hebbian", beta="write", lr=True, default_chunk=hebbian.default_chunk_size,
        ops={"chunk": hebbian.chunk_hebbian, "recurrent": hebbian.recurrent_hebbian},
        hand_written="recurrent_hebbian", depth=Depth(depth.hebbian_beta, depth.recurrent_hebbian_steps, "recurrent_hebbian_steps"),
        fla={None: "linear_attn", "scalar": "simple_gla", "fixed": "retention", "key": "gla"}),
    "delta_rule": Family(
        **_DELTA, ops={"chunk": delta.chunk_delta_rule, "recurrent": delta.recurrent_delta_rule},
        hand_written="recurrent_delta_rule", other_order=("delta_rule_joint", "one joint GD step; must differ"),
        depth=_GD_DEPTH, fla={None: "delta_rule", "scalar": "gated_delta_rule", "fixed": "gated_delta_rule"}),
    "longhorn": Family(
        **_DELTA, ops={"chunk": delta.chunk_longhorn, "recurrent": delta.recurrent_longhorn},
        hand_written="recurrent_longhorn",
        depth=Depth(depth.implicit_beta, functools.partial(depth.recurrent_delta_steps, implicit=True),
                    "recurrent_delta_steps(implicit)")),
    "kda": Family(
        **_DELTA, ops={"chunk": delta.chunk_kda, "recurrent": delta.recurrent_kda},
        hand_written="recurrent_kda", depth=_GD_DEPTH, fla={"key": "kda"}),
    "delta_rule_joint": Family(
        **{**_DELTA, "cls": "diag_rank1"},
        ops={"chunk": delta.chunk_delta_rule_joint, "recurrent": delta.recurrent_delta_rule_joint},
        hand_written="recurrent_delta_rule_joint", other_order=("delta_rule", "published Gated DeltaNet; must differ"),
        fla=_DPLR),
    "dplr": Family(
        **{**_DELTA, "cls": "dplr"}, ops={"chunk": dplr.chunk_dplr, "recurrent": dplr.recurrent_dplr},
        hand_written="recurrent_dplr", fla=_DPLR),
    "selective": Family(
        cls="selective", beta="write", lr=True,
        ops={"selective_scan": selective.scan_selective, "recurrent": selective.recurrent_selective},
        hand_written="recurrent_selective"),
    "spectral": Family(
        cls="spectral", beta="weight", bind=_den_floor,
        ops={"prefix_sum": spectral.prefix_sum_spectral, "masked_matmul": spectral.masked_matmul_spectral,
             "recurrent": spectral.recurrent_spectral},
        hand_written="recurrent_spectral"),
    "softmax_attention": Family(
        cls="nonparametric", beta="none", bind=_window,
        ops={"sdpa": attention.sdpa_softmax_attention, "recurrent": attention.recurrent_softmax_attention},
        hand_written="recurrent_softmax_attention"),
    "scan": Family(  # ops are factories of the spec (the derived step, compiled or not; chunk_approx)
        cls="scan", beta="step",
        ops={"scan": functools.partial(_derived_step, compile=True),
             "recurrent": functools.partial(_derived_step, compile=False),
             "chunk_approx": lambda spec: functools.partial(chunk_approx_scan, spec)}),
}


# class -> its forms (the families of one class share them); first = auto
FORMS: dict[str, tuple[str, ...]] = {fam.cls: fam.forms for fam in FAMILIES.values()}


def family_name(spec: MixerSpec) -> str:
    """The row of ``spec`` in ``FAMILIES``: its class, then (delta class) the optimizer and the decay gate."""
    cls = spec.algebra
    if cls == "delta":
        if isinstance(spec.optimizer, Implicit):
            return "longhorn"
        per_key = isinstance(spec.retention, L2Decay) and spec.retention.gate == "key"
        return "kda" if per_key else "delta_rule"
    return {"diag_rank1": "delta_rule_joint", "nonparametric": "softmax_attention"}.get(cls, cls)


def require_class(spec: MixerSpec, cls: str, module: str, axes: str) -> None:
    """Refuse ``spec`` in a module written for class ``cls`` alone (``axes``: what the class needs)."""
    if spec.algebra != cls:
        raise ValueError(f"the {module} layer runs a {cls}-class spec ({axes}); {spec.name or 'this spec'} is "
                         f"class {spec.algebra!r}")


def family_of(spec: MixerSpec) -> Family:
    """The row of ``spec`` in the class table."""
    return FAMILIES[family_name(spec)]


@dataclass(frozen=True)
class Form:
    """An executable form: ``fn`` has the op contract of the spec's class.

    backend: the code that runs it ("torch", "compiled" or "fla", mixers/kernels.py); why: the reason
    that backend was picked (and, under "auto", why FLA was not)."""

    name: str
    cls: str
    fn: Callable
    exact: bool
    backend: str = "torch"
    why: str = ""

    @property
    def compiled(self) -> bool:
        """The chunk / prefix_sum form through torch.compile (``COMPILABLE``)."""
        return self.backend == "compiled"

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def available_forms(spec: MixerSpec) -> list[str]:
    return list(family_of(spec).forms)


def lower(spec: MixerSpec, form: str = "auto", *, backend: str = "torch", compile: bool = False,
          device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, grad: bool = True,
          env: FlaEnv | None = None) -> Form:
    """The requested form of ``spec`` ("auto" = the fastest exact one for its class), run by ``backend``.

    backend: "torch" (eager), "compiled" (the form's compiled variant: forms in ``COMPILABLE``, the same
    group functions fused by torch.compile, mixers/ops/compiled.py; equal to the eager form to rounding),
    "fla" (FLA's Triton kernel, ops/fla.py) or "auto" (``choose_backend`` for ``device`` and the inputs'
    ``dtype``, with ``grad`` whether gradients will be taken). compile=True is backend="compiled".
    env: what FLA's availability reads (mixers/kernels.py ``FlaEnv``; None: probed for a CUDA device),
    and its ``kernels``, the namespace FLA's entry points are taken from.
    """
    if compile:
        if backend not in ("torch", "compiled"):
            raise ValueError(f"compile=True is backend='compiled'; it cannot combine with backend={backend!r}")
        backend = "compiled"
    fam = family_of(spec)
    name = fam.forms[0] if form == "auto" else form
    if name not in fam.ops:
        raise ValueError(
            f"form {form!r} is not available for {spec.name or 'this spec'}: its class is {fam.cls!r} "
            f"({_why(name)}); available forms: {list(fam.forms)}"
        )
    chosen, why = choose_backend(spec, name, backend, device=device, dtype=dtype, grad=grad, env=env)
    op = fam.ops[name]
    if chosen == "compiled":
        if name not in COMPILABLE:
            raise ValueError(f"backend 'compiled' (compile=True) needs a form with a compiled variant "
                             f"({sorted(COMPILABLE)}), got {name!r} for {spec.name or 'this spec'}"
                             + (" (the scan form is compiled already)" if name == "scan" else ""))
        op = functools.partial(op, compile=True)
    elif chosen == "fla":
        op = functools.partial(fla_op, fla_kernel(spec, name)[0], step=name == "recurrent",
                               kernels=None if env is None else env.kernels)
    return Form(name, fam.cls, _bound(spec, fam, op), exact=name not in APPROXIMATE, backend=chosen, why=why)


def fla_kernel(spec: MixerSpec, form: str = "auto") -> tuple[str | None, str]:
    """(FLA kernel, why) of ``spec``'s ``form``: a row of ops/fla.py's FLA_KERNELS from the class table's
    ``fla`` column, or None with the reason the spec has none (whatever the device)."""
    fam = family_of(spec)
    name = fam.forms[0] if form == "auto" else form
    gate = spec.retention.gate if isinstance(spec.retention, L2Decay) else None
    kernel = (fam.fla or {}).get(gate)
    if kernel is None:
        decay = "" if fam.fla is None else " with " + ("no decay" if gate is None else f"decay gate {gate!r}")
        return None, f"FLA has no kernel for family {family_name(spec)!r} (class {fam.cls!r}){decay}"
    if name not in ("chunk", "recurrent"):
        return None, f"form {name!r} has no FLA kernel (the chunk form and the decode step do)"
    if spec.layer.normalize:
        return None, "the normalised read-out (layer.normalize) has no FLA kernel"
    if gate_needs(spec).beta_key and kernel != "dplr":
        return None, f"FLA's {FLA_KERNELS[kernel].chunk} takes one step size per head, not per key (optimizer rate 'key')"
    return kernel, f"FLA's {FLA_KERNELS[kernel].step if name == 'recurrent' else FLA_KERNELS[kernel].chunk}"


def choose_backend(spec: MixerSpec, form: str = "auto", backend: str = "auto", *, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, grad: bool = True, env: FlaEnv | None = None) -> tuple[str, str]:
    """(backend, why) that runs ``spec``'s ``form`` on ``device`` for inputs of ``dtype`` (mixers/kernels.py).

    "torch" and "compiled" are taken as asked. "fla" raises ValueError, naming the reason and the fix,
    when the spec has no FLA kernel or FLA would refuse the call. "auto": on CUDA (or the device an
    injected ``env`` describes), fla where it runs, else compiled for a form in ``COMPILABLE``, else
    torch, warning once per reason when FLA has the class's kernel but refuses it; on CPU, torch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    fam, device = family_of(spec), torch.device(device)
    name = fam.forms[0] if form == "auto" else form
    if backend == "torch":
        return "torch", "backend 'torch': the eager form"
    if backend == "compiled":
        return "compiled", "backend 'compiled': the form through torch.compile"
    kernel, why_not = fla_kernel(spec, name)
    ok, reason, fix = (False, why_not, "") if kernel is None else fla_status(
        kernel, device, dtype, spec_head_dim(spec), spec_value_dim(spec), grad=grad, step=name == "recurrent", env=env)
    if backend == "fla":
        if not ok:
            raise ValueError(f"backend 'fla' for {spec.name or 'this spec'} on {device.type} ({_name(dtype)}): "
                             f"{reason}" + (f"; fix: {fix}" if fix else ""))
        return "fla", reason
    if ok:
        return "fla", f"auto on {device.type}: {reason}"
    fallback = "compiled" if name in COMPILABLE else "torch"
    if device.type != "cuda" and (env is None or env.device_type != device.type):
        return "torch", (f"auto on {device.type}: the eager form (compiling on a CPU costs tens of seconds per "
                         f"graph; ask for backend 'compiled')")
    what = "its compiled form" if fallback == "compiled" else f"the eager {name} form"
    if kernel is not None:  # FLA has the class's kernel and refuses this call: once per reason, for every layer
        warn_once(f"backend 'auto' on {device.type}: {reason}; the layers FLA would run take their compiled (or "
                  f"eager) forms instead. Fix: {fix}")
    return fallback, f"auto on {device.type}: {what} ({reason})"


def spec_head_dim(spec: MixerSpec) -> int:
    """K of the memory: the layer's head_dim through its feature map (hedgehog doubles it)."""
    return feature_width(spec.layer.feature_map, spec.layer.head_dim)


def spec_value_dim(spec: MixerSpec) -> int:
    return spec.layer.value_dim


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def compilable(spec: MixerSpec, form: str = "auto") -> bool:
    """Whether ``lower(spec, form, backend="compiled")`` exists (the form it picks is in ``COMPILABLE``)."""
    fam = family_of(spec)
    return (fam.forms[0] if form == "auto" else form) in COMPILABLE


def hand_written(spec: MixerSpec) -> tuple[str, Callable] | None:
    """(name, fn) of the published recurrence equal to ``spec``, or None.

    Keyed on the spec's axes (not its name), so a user's spec that happens to be a published
    mixer is checked against that mixer's hand-written recurrence (scan class: references.py).
    """
    fam = family_of(spec)
    if fam.hand_written is None:
        found = online_rule(spec)
        return None if found is None else (found[0], readout(spec, with_lr(found[1], _base_lr(spec))))
    K = steps_of(spec)
    if K > 1:  # the unrolled K-step loop, written by hand (the row's ops take the single-step β)
        unrolled = functools.partial(fam.depth.unrolled, steps=K)
        name = fam.depth.name.replace(")", f", steps={K})") if "(" in fam.depth.name else f"{fam.depth.name}(steps={K})"
        return name, readout(spec, with_lr(unrolled, _base_lr(spec)))
    return fam.hand_written, _bound(spec, fam, fam.ops["recurrent"])


def steps_of(spec: MixerSpec) -> int:
    """Recurrent depth K of the spec's optimizer (1 for optimizers without steps)."""
    return getattr(spec.optimizer, "steps", 1)


def derived(spec: MixerSpec) -> Callable:
    """The ground truth of ``spec``: ``derive(spec)`` with the layer's read-out (``readout``)."""
    return readout(spec, derive(spec))


def readout(spec: MixerSpec, fn: Callable) -> Callable:
    """``fn`` with the normalised read-out of ``layer.normalize`` (ops/normalized.py), else ``fn``."""
    return normalized(fn) if spec.layer.normalize else fn


def _bound(spec: MixerSpec, fam: Family, op: Callable) -> Callable:
    if fam.cls == "scan":
        return readout(spec, op(spec))
    fn = functools.partial(op, **fam.bind(spec)) if fam.bind(spec) else op
    if steps_of(spec) > 1:
        fn = with_depth(fn, fam.depth.beta, steps_of(spec))
    return readout(spec, with_lr(fn, _base_lr(spec)) if fam.lr else fn)


def with_depth(fn: Callable, beta_of: Callable, steps: int) -> Callable:
    """``fn`` (one step) run with the β of ``steps`` steps: beta_of(k, β, steps) (ops/depth.py)."""

    @functools.wraps(fn)
    def deep(q, k, v, *, beta=None, **kw):
        return fn(q, k, v, beta=beta_of(k, beta, steps), **kw)

    return deep


def _base_lr(spec: MixerSpec) -> float:
    return getattr(spec.optimizer, "lr", 1.0)


def default_chunk_size(spec: MixerSpec, K: int) -> int | None:
    """C of the spec's chunk form at head width K when the caller passes none (None: no chunk form)."""
    fam = family_of(spec)
    return None if fam.default_chunk is None else fam.default_chunk(K)


def with_lr(fn: Callable, lr: float) -> Callable:
    """Hand-written forms take η_t = β_t; an optimizer's base lr makes η_t = lr·β_t."""
    if lr == 1.0:
        return fn

    @functools.wraps(fn)
    def scaled(q, k, v, *, beta=None, **kw):
        beta = q.new_full(q.shape[:3], lr) if beta is None else lr * beta
        return fn(q, k, v, beta=beta, **kw)

    return scaled


def _why(name: str) -> str:
    if name in ("chunk", "prefix_sum", "sdpa", "masked_matmul"):
        return f"a {name} form needs the algebra of another class, which this spec's axes do not have"
    if name == "chunk_approx":
        return "chunk_approx is only offered where no exact parallel form exists (class 'scan')"
    return "unknown form name"
