"""Mixer modules: from a MixerSpec to an nn.Module with one interface.

    build_mixer(spec, d_model)  ->  Attention  (NonParametric memory: softmax / sliding window)
                                    LatentAttention (NonParametric, attention.kind 'latent': MLA)
                                    SCALayer   (Spectral memory: the Nautile SCA layer)
                                    Mamba      (the selective class: Mamba's layer, mixers/mamba.py)
                                    Mixer      (every other parametric memory)

Every module is a ``MixerModule``: ``forward(x, *, state=None, mask=None, return_state=True)
-> (y, state)``, ``state_size()`` and ``masks_padding``, which says whether it masks padded
tokens itself (attention) or needs each row's real tokens run on their own (the recurrent
mixers; models/blocks.py does that). A new module kind implements the protocol and gets one
entry in ``MODULE_KINDS`` (keyed by the spec's algebra class or memory kind); models/ needs no branch
for it.

The generic recurrent ``Mixer`` (FLA/GDN-style layer around the spec's op):

    1. q, k, v = x W_q, x W_k, x W_v                      [B, T, Hqk, K], [B, T, Hqk, K], [B, T, H, V]
                                                          (Hqk = layer.num_qk_heads, default H; each q/k
                                                          head serves H / Hqk consecutive value heads)
    2. short causal depthwise conv + SiLU on (q, k, v)   (conv buffer carried in the state)
    3. q, k = φ(q), φ(k); optional L2 norm per head      (layer.feature_map (mixers/feature_maps.py: K → K_φ,
                                                           2K for hedgehog), layer.qk_norm:
                                                           x·rsqrt(‖x‖² + 1e-6), as FLA and transformers)
    4. gates from x:  log α (retention L2Decay), β (layer.lr_gate)
         scalar: log α = −exp(A_log)·softplus(x W_a + dt_bias)     key: log α = logsigmoid(x W_a)/16 (GLA)
         key (kda): log α = −exp(A_log_h)·softplus(x W_a + dt_bias) per head and key (Kimi Linear)
         fixed:  log α_h = log(1 − 2^(−5−h))                        dt: Δ = softplus(x W_dt + dt_bias),
         sigmoid: β = σ(x W_b) ([B, T, H, K_φ] with                      log α = −exp(A_log)·Δ, β = Δ
                  optimizer rate='key')
       removal key (remove_replace bias, RWKV-7): κ = L2norm(k ⊙ ξ), ξ [H·K_φ] learned, 1 at init
    5. o, S = lower(spec, form, backend).fn(q, k, v, log_alpha, beta, [removal_key,] scale, initial_state=S)
       (layer.backend, mixers/kernels.py: lowered per (device, dtype, grad mode) at the first call there;
        on CPU "auto" is the eager form, on CUDA FLA's kernel where FLA takes the call, else the compiled one;
        layer.compile = backend "compiled": the chunk form's compiled variant, mixers/ops/compiled.py)
       (layer.normalize: the op runs on [v, 1] and o = num / (den + 1e-10), ops/normalized.py)
    6. o += D·v (layer.d_skip); o = RMSNorm_head(o) [· act(x W_g)]; y = o W_o   (act: layer.output_gate;
       W_a and W_g of rank K with layer.low_rank_gates; Mamba2's order: RMSNorm_group(o · act(x W_g)))

Decoding: a call with a state and T == 1 is a decode step and runs the class's
"recurrent" form (the hand-written recurrence, equal to every other form; with the
fla backend, FLA's fused recurrent kernel); all other calls run ``form``. Both are
O(1) in the prefix length.

``set_backend(model, backend)`` sets the backend of every recurrent Mixer in a model (train.backend);
``check_backend(model, device, dtype)`` lowers each of them there, so that backend "fla" is refused
before any work starts.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F

from assocmem.memories import GD, L2Decay, Momentum, NonParametric, RemoveReplace, Spectral, window_of

from .attention import Attention
from .boundary import check_mixer_input
from .conv import ShortConv
from .feature_maps import build_feature_map, feature_width
from .kernels import FlaEnv
from .latent_attention import LatentAttention
from .lower import Form, compilable, fla_kernel, lower
from .lowered import Lowered, MixerState, input_dtype
from .mamba import Mamba
from .norm import rms_norm
from .sca import SCALayer
from .spec import MixerSpec


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x · rsqrt(‖x‖² + eps) over the last axis: the epsilon inside the root, as FLA and transformers'
    Qwen3-Next normalise q and k (``F.normalize`` clamps ‖x‖ at 1e-12 instead, a 1e-6-relative difference
    for unit-scale x)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def projection(d_in: int, d_out: int, rank: int | None) -> nn.Module:
    """x W (no bias), or through a rank-``rank`` bottleneck x W_down W_up (Sequential: [0] = down, [1] = up)."""
    if rank is None:
        return nn.Linear(d_in, d_out, bias=False)
    return nn.Sequential(nn.Linear(d_in, rank, bias=False), nn.Linear(rank, d_out, bias=False))


@runtime_checkable
class MixerModule(Protocol):
    """What models/ asks of a mixer module (Mixer, Attention, SCALayer, or a module of your own).

    masks_padding: True if ``forward`` takes ``mask`` [B, T] (True = real token) and keeps padded
    tokens out of every output and state itself; False if it must not be given one (the caller
    then runs each row's real tokens on their own, models/blocks.run_mixer).

    Optional: ``cross_layer_streams`` (int, absent = 0), the number of residual streams the module
    reads besides x (Wiola's GCLA, mixers/wiola/attention.py: the streams entering the previous layer
    and this one). The block then calls ``forward(x, ..., streams=[...])`` with them, newest last.
    """

    masks_padding: bool

    def forward(self, x: torch.Tensor, *, state: Any = None, mask: torch.Tensor | None = None,
                return_state: bool = True) -> tuple[torch.Tensor, Any]:
        """x [B, T, d_model] -> (y [B, T, d_model], the state after the T tokens, or None)."""

    def state_size(self) -> int:
        """Floats held per sequence (compare memories at equal state size)."""


def attention_arguments(spec: MixerSpec, form: str, layer_idx: int | None) -> dict[str, Any]:
    """The keyword arguments (after d_model) of the Attention module of a softmax-attention spec."""
    o, a = spec.layer, spec.layer.attention
    if a.kind != "mha":
        raise ValueError(f"{spec.name or 'this spec'} is attention.kind {a.kind!r}: the multi-head Attention module "
                         f"(and the layers built on it, such as Wiola's) takes kind 'mha' only")
    return dict(num_heads=o.num_heads, head_dim=o.head_dim, num_kv_heads=a.num_kv_heads, value_dim=o.value_dim,
                rope=a.rope, rope_theta=a.rope_theta, qk_rmsnorm=a.qk_norm == "rmsnorm", window=window_of(spec),
                scale=o.scale, bias=a.bias, norm_eps=o.norm_eps, form=lower(spec, form).name, layer_idx=layer_idx,
                short_conv=a.short_conv, conv_size=o.conv_size)


def _latent_attention(spec: MixerSpec, d_model: int, form: str, layer_idx: int | None) -> nn.Module:
    o, a = spec.layer, spec.layer.attention
    if window_of(spec) is not None:
        raise ValueError(f"latent attention keeps its whole latent cache; {spec.name or 'this spec'} has a window "
                         f"({window_of(spec)}): use retention none, or attention.kind 'mha' for a sliding window")
    return LatentAttention(d_model, num_heads=o.num_heads, head_dim=o.head_dim, value_dim=o.value_dim,
                           kv_rank=a.latent.kv_rank, rope_dim=a.latent.rope_dim, q_rank=a.latent.q_rank,
                           rope_theta=a.rope_theta, scale=o.scale, norm_eps=o.norm_eps, form=lower(spec, form).name,
                           absorb=a.latent.absorb, rope_interleave=a.latent.rope_interleave, layer_idx=layer_idx)


# attention.kind -> the module of a softmax-attention spec
ATTENTION_KINDS: dict[str, Callable[[MixerSpec, int, str, int | None], nn.Module]] = {
    "mha": lambda spec, d_model, form, layer_idx: Attention(d_model, **attention_arguments(spec, form, layer_idx)),
    "latent": _latent_attention,
}


def _attention(spec: MixerSpec, d_model: int, form: str, layer_idx: int | None) -> nn.Module:
    return ATTENTION_KINDS[spec.layer.attention.kind](spec, d_model, form, layer_idx)


def _sca(spec: MixerSpec, d_model: int, form: str, layer_idx: int | None) -> nn.Module:
    o, s = spec.layer, spec.layer.sca
    return SCALayer(d_model, o.num_heads, num_query_heads=s.query_heads, num_thetas=spec.memory.points,
                    conv_kernel_size=o.conv_size, expand_factor=s.expand, out_expand_factor=s.out_expand,
                    maxlen=s.maxlen, form=lower(spec, form).name,
                    compile=(o.compile or o.backend == "compiled") and compilable(spec, form))


def _recurrent(spec: MixerSpec, d_model: int, form: str, layer_idx: int | None) -> nn.Module:
    return Mixer(spec, d_model, form=form, layer_idx=layer_idx)


def _mamba(spec: MixerSpec, d_model: int, form: str, layer_idx: int | None) -> nn.Module:
    return Mamba(spec, d_model, form=form, layer_idx=layer_idx)


# algebra class (or memory kind) -> the module that runs it (every other spec: the recurrent Mixer)
MODULE_KINDS: dict[str, Callable[[MixerSpec, int, str, int | None], nn.Module]] = {
    "nonparametric": _attention,
    "spectral": _sca,
    "selective": _mamba,
}


def build_mixer(spec: MixerSpec, d_model: int, *, form: str = "auto", layer_idx: int | None = None) -> nn.Module:
    """The ``MixerModule`` of ``spec`` at width ``d_model`` (see the module docstring); ``form``
    is validated against the spec's class (mixers/lower.py)."""
    if not isinstance(spec, MixerSpec):
        raise TypeError(f"spec must be a MixerSpec, got {type(spec).__name__}")
    kind = MODULE_KINDS.get(spec.algebra) or MODULE_KINDS.get(spec.memory.kind, _recurrent)
    module = kind(spec, d_model, form, layer_idx)
    module.spec = spec  # what the module computes (mixers/convert checks it)
    return module


class Mixer(Lowered, nn.Module):
    """Generic recurrent mixer around the op of a parametric-memory spec (a ``MixerModule``)."""

    masks_padding = False  # a recurrent state has no notion of a padded token

    def __init__(self, spec: MixerSpec, d_model: int, *, form: str = "auto", layer_idx: int | None = None):
        super().__init__()
        o = spec.layer
        self.spec, self.layer_idx = spec, layer_idx
        self.H, self.Hqk, self.K, self.V = o.num_heads, o.qk_heads, o.head_dim, o.value_dim
        self.K_phi = feature_width(o.feature_map, self.K)  # key width of the memory
        self.init_forms(spec, form)
        self.phi_q = build_feature_map(o.feature_map, self.Hqk, self.K, o.cosformer_horizon)
        self.phi_k = build_feature_map(o.feature_map, self.Hqk, self.K, o.cosformer_horizon)
        # RWKV-7's removal key κ = L2norm(k ⊙ ξ) (remove_replace bias); ξ = 1 makes κ the normalised k
        self.removal = nn.Parameter(torch.ones(self.H * self.K_phi)) if isinstance(spec.bias, RemoveReplace) else None
        width = 2 * self.Hqk * self.K + self.H * self.V
        self.qkv_proj = nn.Linear(d_model, width, bias=False)
        self.conv = ShortConv(width, o.conv_size, bias=o.conv_bias) if o.short_conv else None
        self._build_gates(spec, d_model)
        self.D = nn.Parameter(torch.ones(self.H)) if o.d_skip else None
        per_channel = o.output_norm == "gate_then_rmsnorm"  # Mamba2: a weight for every channel of every head
        self.norm_weight = (nn.Parameter(torch.ones(self.H * self.V if per_channel else self.V))
                            if o.output_norm != "none" else None)
        self.g_proj = (projection(d_model, self.H * self.V, self.K if o.low_rank_gates else None)
                       if o.output_norm in ("gated_rmsnorm", "gate_then_rmsnorm") else None)
        self.output_gate = F.silu if o.output_gate == "silu" else torch.sigmoid
        self.o_proj = nn.Linear(self.H * self.V, d_model, bias=False)

    # ------------------------------------------------------------ gates
    def _build_gates(self, spec: MixerSpec, d_model: int) -> None:
        o, r, H = spec.layer, spec.retention, self.H
        self.decay = r.gate if isinstance(r, L2Decay) else None  # None | scalar | key | fixed
        self.a_proj = self.A_log = self.dt_bias = self.b_proj = None
        if self.decay == "scalar" or o.lr_gate == "dt":
            self.a_proj = nn.Linear(d_model, H, bias=False)  # W_a (or W_dt with lr_gate="dt")
            self.A_log = nn.Parameter(torch.empty(H))
            self.dt_bias = nn.Parameter(torch.empty(H))
        elif self.decay == "key":
            self.a_proj = projection(d_model, H * self.K_phi, self.K if o.low_rank_gates else None)
            if o.key_gate == "kda":  # one rate per head, one bias per head and key
                self.A_log = nn.Parameter(torch.empty(H))
                self.dt_bias = nn.Parameter(torch.empty(H * self.K_phi))
        self.rate_per_key = isinstance(spec.optimizer, GD) and spec.optimizer.rate == "key"
        if o.lr_gate == "sigmoid":
            self.b_proj = nn.Linear(d_model, H * self.K_phi if self.rate_per_key else H, bias=False)
        self.reset_gates()

    def reset_gates(self) -> None:
        """Mamba2's init: A ~ U[1, 16], dt ~ logU[1e-3, 1e-1] stored as softplus⁻¹(dt)."""
        if self.A_log is None:
            return
        with torch.no_grad():
            self.A_log.copy_(torch.empty(self.H).uniform_(1.0, 16.0).log())
            dt = torch.exp(torch.empty(self.dt_bias.shape).uniform_(math.log(1e-3), math.log(1e-1)))
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def gates(self, x: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """log_alpha ([B, T, H] or [B, T, H, K_φ]) and beta ([B, T, H], or [B, T, H, K_φ] with a per-key
        rate) from x [B, T, d_model].

        The decay is computed in float32 at least (float64 stays float64), from the projection
        taken in the input dtype, as transformers' Qwen3-Next and Mamba2 layers do: in bf16/fp16,
        exp(A_log) and the softplus would otherwise round log α to a few bits."""
        B, T, _ = x.shape
        gd = torch.promote_types(x.dtype, torch.float32)
        log_alpha = beta = None
        if self.spec.layer.lr_gate == "dt":
            dt = F.softplus(self.a_proj(x).to(gd) + self.dt_bias.to(gd))  # Δ [B, T, H]
            log_alpha, beta = -torch.exp(self.A_log.to(gd)) * dt, dt
        elif self.decay == "scalar":
            log_alpha = -torch.exp(self.A_log.to(gd)) * F.softplus(self.a_proj(x).to(gd) + self.dt_bias.to(gd))
        elif self.decay == "key" and self.A_log is not None:  # KDA: −exp(A_log_h)·softplus(x W_a + dt_bias)
            a = (self.a_proj(x).to(gd) + self.dt_bias.to(gd)).view(B, T, self.H, self.K_phi)
            log_alpha = -torch.exp(self.A_log.to(gd))[:, None] * F.softplus(a)
        elif self.decay == "key":
            log_alpha = F.logsigmoid(self.a_proj(x).to(gd)).view(B, T, self.H, self.K_phi) / 16.0
        elif self.decay == "fixed":
            h = torch.arange(self.H, device=x.device, dtype=gd)
            log_alpha = torch.log1p(-torch.exp2(-5.0 - h)).expand(B, T, self.H)
        if self.b_proj is not None:
            beta = torch.sigmoid(self.b_proj(x))
            beta = beta.view(B, T, self.H, self.K_phi) if self.rate_per_key else beta
        return {"log_alpha": log_alpha, "beta": beta}

    # ------------------------------------------------------------ state
    def state_size(self) -> int:
        """Floats held per sequence: the memory (twice with momentum; + Z_t when normalised) and the conv buffer."""
        per_head = self.spec.memory.state_floats(self.K_phi, self.V + int(self.spec.layer.normalize))
        if isinstance(self.spec.optimizer, Momentum):
            per_head *= 2
        conv = 0 if self.conv is None else (self.conv.size - 1) * self.conv.channels
        return self.H * per_head + conv

    # ------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor, *, state: MixerState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True):
        """x [B, T, d_model] -> (y [B, T, d_model], MixerState or None). No padding ``mask``: run
        padded rows through models.blocks.run_mixer, which calls each row's real tokens on their own."""
        check_mixer_input("Mixer", x, self.qkv_proj.in_features)
        B, T, _ = x.shape
        if mask is not None:
            raise ValueError("Mixer does not mask padding (masks_padding = False); run padded batches through "
                             "assocmem.models.blocks.run_mixer, which calls each row's real tokens")
        if state is not None and not isinstance(state, MixerState):
            raise TypeError(f"state must be a MixerState from this mixer, got {type(state).__name__}")
        qkv = self.qkv_proj(x)  # [B, T, 2·Hqk·K + H·V]
        conv_state = None
        if self.conv is not None:
            qkv, conv_state = self.conv(qkv, None if state is None else state.conv)
        q, k, v = qkv.split([self.Hqk * self.K, self.Hqk * self.K, self.H * self.V], dim=-1)
        pos = self._positions(state, B, T, x.device)  # [B, T] for a map that reads positions, else None
        q = self.phi_q(q.view(B, T, self.Hqk, self.K), pos)  # [B, T, Hqk, K_φ]
        k = self.phi_k(k.view(B, T, self.Hqk, self.K), pos)
        v = v.view(B, T, self.H, self.V)
        if self.spec.layer.qk_norm == "l2":
            q, k = l2_normalize(q), l2_normalize(k)
        if self.Hqk != self.H:  # each q/k head serves H / Hqk consecutive value heads
            q, k = (t.repeat_interleave(self.H // self.Hqk, dim=2) for t in (q, k))  # [B, T, H, K_φ]
        gates = self.gates(x)
        if self.removal is not None:  # κ = L2norm(k ⊙ ξ)
            gates["removal_key"] = l2_normalize(k * self.removal.view(self.H, self.K_phi).to(k.dtype))
        step = state is not None and T == 1
        form, step_form = self.lowered(x.device, input_dtype(x), torch.is_grad_enabled())
        fn = step_form.fn if step else form.fn
        chunk = {"chunk_size": self.spec.layer.chunk_size} if form.name == "chunk" and not step else {}
        with torch.autocast(x.device.type, enabled=False):  # the op computes in the compute dtype of its inputs
            o, memory = fn(q, k, v, **gates, scale=self.spec.layer.scale, **chunk,  # (ops/contract.py; they may differ
                           initial_state=None if state is None else state.memory,  # under autocast), as it does
                           output_final_state=return_state)  # without autocast; o comes back in v's dtype
        y = self.o_proj(self._output(o, v, x).reshape(B, T, self.H * self.V))
        seen = None if pos is None else pos[:, -1] + 1
        return y, (MixerState(memory, conv_state, seen) if return_state else None)

    def _positions(self, state: MixerState | None, B: int, T: int, device: torch.device) -> torch.Tensor | None:
        """Token positions [B, T] counted from the sequence's start (the state's ``pos``), for a feature map
        that reads them (``needs_positions``: cosformer); None for the others."""
        if not self.phi_q.needs_positions:
            return None
        start = torch.zeros(B, dtype=torch.long, device=device) if state is None or state.pos is None else state.pos
        return start[:, None] + torch.arange(T, device=device)

    def _output(self, o: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """D skip, output norm and gate (layer.output_norm): o [B, T, H, V] -> [B, T, H, V]."""
        if self.D is not None:
            o = o + self.D[:, None] * v
        if self.spec.layer.output_norm == "gate_then_rmsnorm":  # Mamba2: gate, then norm over each head group
            B, T = o.shape[:2]
            o = (o * self.output_gate(self.g_proj(x)).view_as(o)).reshape(B, T, self.Hqk, self.H // self.Hqk * self.V)
            o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.spec.layer.norm_eps)  # per group of H/Hqk·V
            return o.reshape(B, T, self.H, self.V) * self.norm_weight.view(self.H, self.V)
        if self.norm_weight is not None:
            o = rms_norm(o, self.norm_weight, self.spec.layer.norm_eps)
        if self.g_proj is not None:
            o = o * self.output_gate(self.g_proj(x)).view_as(o)
        return o


def set_backend(module: nn.Module, backend: str, *, fla_env: FlaEnv | None = None) -> None:
    """Set the backend of every recurrent ``Mixer`` in ``module`` (mixers/kernels.py; train.backend)."""
    for m in module.modules():
        if isinstance(m, Lowered):
            m.set_backend(backend, fla_env)


def check_backend(module: nn.Module, device: torch.device | str, dtype: torch.dtype,
                  grad: bool = True) -> list[tuple[str, Form]]:
    """Lower every recurrent ``Mixer`` in ``module`` for ``device`` and ``dtype`` now: (module name, form) of
    each; ValueError, naming the layer, where backend "fla" is refused (before training starts)."""
    out = []
    for name, m in module.named_modules():
        if isinstance(m, Lowered):
            try:
                out.append((name, m.lowered(torch.device(device), dtype, grad)[0]))
            except ValueError as err:
                raise ValueError(f"layer {name or '(top)'}: {err}") from None
    return out
