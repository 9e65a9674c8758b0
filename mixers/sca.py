"""SeqCond Attention (SCA): the spectral-memory mixer of Nautile-370M.

Nautile-370M §2.2.4, Algorithm 1, as implemented in the authors' code and pinned by
their reference fixture (``tests/fixtures/sca_reference``, loaded by
tests/mixers/test_sca_fixture.py), whose steps 1–16 this module follows step by step.
Sizes: D = d_model, K memory heads, K_q query heads
(n_rep = K / K_q), M spectral points, H = max(1, ⌊int(D·expand)/(K·M)⌋) channels
per head, C = K·H + K + K_q·H·M·2 projection channels, E = out_expand·H.

    z_t = W_in x_t;  a_t = SiLU(DWConv_causal(z)_t)              steps 1–3
    k_t [K, H], s_t [K], q_t [K_q, H, M, 2] = split(a_t)          step 4
    p_t = clip(softplus(γ s_t + β) · exp(−λ d(t)), 1e-4, 5000)    steps 7–8
    o_t = spectral op(q, u = softsign(η k), v = k, p, θ, w)       steps 9–12 (mixers/ops/spectral.py)
    y_t = W_out GLU_σ(W_read · GatedRMSNorm([o_re; o_im], SiLU(W_g x_t)))   steps 13–16

Conventions (where the paper's Algorithm 1 and the authors' code differ; this
module follows the code, as the fixture requires):

1. Clip on α: p_t is clipped to [1e-4, 5000] AFTER the time factor; the paper
   has no clip. The floor changes the output whenever it binds.
2. Denominator floor: S = num / max(den, 1e-4); the paper divides by Z_t. With
   the clip the floor never binds.
3. d(t) = max(maxlen − 1 − t, 0) with a FIXED configuration constant maxlen and
   0-based absolute positions t (the paper leaves d unspecified, with 1-based τ).
   ``maxlen`` is therefore required: the authors' forward (L − 1 − t) and step
   (2047 − t) disagree when it is unset. Through the normalisation d(t) acts
   only via the clip.
4. θ is learned per (head, channel, point), K×H×M, as cumulative softplus
   increments mapped onto (0.001, 3.0] with the last point pinned at 3.0
   (M = 1: θ = 0.001 + 2.999·σ(theta_raw)). The paper only says "learned grid".
5. Integration weights: w = exp(w_int_raw) / (Σ_m exp(w_int_raw) + 1e-6), a
   softmax over M per (query head g, repeat r, channel) — i.e. per MEMORY head,
   K×H×M, not the paper's ω ∈ R^{K'×H×M}; independent of the θ spacing.
6. Readout scale 1/√H (Algorithm 1 has it; the text of step 5 omits it).
7. The key k is the amplitude (the paper's h_τ) and ψ(h) = softsign(η k): no
   separate value projection. The theoretical summary's factor i (S = ∇φ_X =
   i E[X e^{iθX}]) is dropped, as in the paper's practical running sum (§2.2.3).
8. GQA: memory head k reads query head ⌊k / n_rep⌋.
9. Readout layout: per head the real block then the imaginary block (2H), and
   ONE RMS norm over all 2KH channels, gated by SiLU(W_g x) from the layer input,
   eps 1e-6 (the JAX docstring says sigmoid; the code uses SiLU).
10. The paper's "SwiGLU" is a sigmoid GLU, per head, through a block-diagonal
    W_readout [K, 2H, 2E]: value = first E, gate = last E.
11. No biases, no dropout, no attention mask, no anchor heads (Nautile uses
    none; ``num_anchor_heads`` is not supported here).
12. Decode position: ``pos`` counts the tokens consumed, is an int64 tensor
    (the authors' port uses a float) and is NOT clamped (the torch port clamps it
    at maxlen − 1, the JAX port does not; equal for decay heads because d(t) is
    already 0 there).
13. Precision: sums accumulate in float32 for float32/bf16 layers (float64 for
    float64), like the JAX training code; the authors' torch port computes in the
    module dtype.

Default initialisation (when not loading weights): Linear layers keep torch's
default; conv taps U(±1/√k_w) like nn.Conv1d; theta_d_raw = 0 (evenly spaced
grid θ_m = 0.001 + 2.999·(m+1)/M; M = 1: theta_raw = 0); w_int_raw = 1 (as the
JAX code; uniform w); λ = geomspace(0.003, 0.15, K) stored as inverse
softplus (the fixture's draw without its jitter); γ = 1, β = 0, η = 1;
gated_norm.weight = 1; W_readout ~ N(0, 1/(2H)).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .boundary import check_mixer_input
from .lower import FAMILIES
from .norm import rms_norm
from .ops.spectral import spectral_running_state

__all__ = ["SCALayer", "SCAState", "SCA_FORMS"]

SCA_FORMS = FAMILIES["spectral"].ops  # form -> op, from the class table (lower.py)
P_MIN, P_MAX = 1e-4, 5000.0  # clip on the contribution weight (step 8)
DEN_FLOOR = 1e-4  # floor on Σp before normalising (step 11)
NORM_EPS = 1e-6  # GatedRMSNorm eps (step 14)
THETA_MIN, THETA_SPAN = 0.001, 2.999  # θ ∈ (0.001, 3.0] (step 5)


@dataclass
class SCAState:
    """Decode state of one SCA layer (fixture README, "Decode (step) state layout").

    den:         [B, K]           Σ p over consumed tokens (unnormalised)
    num:         [B, K, H, M, 2]  Σ p·k·(cos φ, sin φ) (the fixture's re_acc, im_acc)
    pos:         [B] int64        tokens consumed = absolute position of the next token
    conv_buffer: [B, k_w − 1, C]  last k_w − 1 PRE-conv projections W_in x, oldest first
    """

    den: Tensor
    num: Tensor
    pos: Tensor
    conv_buffer: Tensor


class GatedRMSNorm(nn.Module):
    """n = e / sqrt(mean(e²) + eps) ⊙ weight with e = v ⊙ SiLU(g), over the last dim."""

    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, v: Tensor, g: Tensor) -> Tensor:
        e = (v * F.silu(g)).to(_compute_dtype(v.dtype))
        return rms_norm(e, self.weight.to(e.dtype), self.eps).to(v.dtype)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class SCALayer(nn.Module):
    """SeqCond Attention layer; ``forward(x, *, state=None) -> (y, state)`` (a ``MixerModule``).

    Args:
        d_model: D, input and output width.
        num_heads: K, memory heads.
        num_query_heads: K_q, query heads (K divisible by K_q); default K.
        num_thetas: M, spectral points per channel.
        conv_kernel_size: k_w, causal depthwise conv width.
        expand_factor: d_inner = int(D · expand_factor) sets H.
        out_expand_factor: E = out_expand_factor · H, the per-head GLU width.
        maxlen: the fixed boundary of d(t) = max(maxlen − 1 − t, 0); required.
        form: "prefix_sum" (cumsum) | "masked_matmul" (L×L, short sequences) | "recurrent".
        compile: run the prefix_sum form through torch.compile (mixers/ops/compiled.py; other forms: refused).
    """

    masks_padding = False  # the running sums have no notion of a padded token (models/blocks.run_mixer)

    def __init__(self, d_model: int, num_heads: int, *, num_query_heads: int | None = None,
                 num_thetas: int = 2, conv_kernel_size: int = 4, expand_factor: float = 2.0,
                 out_expand_factor: int = 3, maxlen: int | None, form: str = "prefix_sum", compile: bool = False):
        super().__init__()
        self._check_config(d_model, num_heads, num_query_heads, num_thetas, conv_kernel_size,
                           expand_factor, out_expand_factor, maxlen, form)
        K, Kq, M = num_heads, num_query_heads or num_heads, num_thetas
        H = max(1, int(d_model * expand_factor) // (K * M))
        self.d_model, self.num_heads, self.num_query_heads, self.n_rep = d_model, K, Kq, K // Kq
        self.num_thetas, self.head_dim, self.conv_kernel_size = M, H, conv_kernel_size
        self.out_dim, self.maxlen, self.form = out_expand_factor * H, maxlen, form
        if compile and form != "prefix_sum":
            raise ValueError(f"compile=True runs the prefix_sum form through torch.compile; form {form!r} has no "
                             f"compiled variant")
        self.op = functools.partial(SCA_FORMS[form], compile=True) if compile else SCA_FORMS[form]
        self.num_channels = K * H + K + Kq * H * M * 2  # C
        C, E = self.num_channels, self.out_dim
        self.in_proj = nn.Linear(d_model, C, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(C, 1, conv_kernel_size))
        if M > 1:
            self.theta_d_raw = nn.Parameter(torch.zeros(1, 1, K, H, M))
        else:
            self.theta_raw = nn.Parameter(torch.zeros(1, 1, K, H, 1))
        self.w_int_raw = nn.Parameter(torch.ones(1, 1, Kq, self.n_rep, H, M))
        self.decay_slopes = nn.Parameter(torch.empty(K))
        self.score_scale = nn.Parameter(torch.ones(K))
        self.score_bias = nn.Parameter(torch.zeros(K))
        self.phase_scale = nn.Parameter(torch.ones(K))
        self.gate_proj = nn.Linear(d_model, 2 * K * H, bias=False)
        self.gated_norm = GatedRMSNorm(2 * K * H)
        self.W_readout = nn.Parameter(torch.empty(K, 2 * H, 2 * E))
        self.out_proj = nn.Linear(K * E, d_model, bias=False)
        self.reset_parameters()

    @staticmethod
    def _check_config(d_model, num_heads, num_query_heads, num_thetas, conv_kernel_size,
                      expand_factor, out_expand_factor, maxlen, form) -> None:
        if maxlen is None:
            raise ValueError("maxlen must be set (an int >= 1): d(t) = max(maxlen - 1 - t, 0) needs a "
                             "fixed boundary; without it the authors' forward (L - 1 - t) and step "
                             "(2047 - t) disagree (fixture README, step 7)")
        for name, value in (("d_model", d_model), ("num_heads", num_heads), ("maxlen", maxlen),
                            ("num_thetas", num_thetas), ("conv_kernel_size", conv_kernel_size),
                            ("out_expand_factor", out_expand_factor)):
            _positive_int(name, value)
        if num_query_heads is not None:
            _positive_int("num_query_heads", num_query_heads)
            if num_heads % num_query_heads:
                raise ValueError(f"num_heads ({num_heads}) must be divisible by num_query_heads "
                                 f"({num_query_heads})")
        if not isinstance(expand_factor, (int, float)) or expand_factor <= 0:
            raise ValueError(f"expand_factor must be a positive number, got {expand_factor!r}")
        if form not in SCA_FORMS:
            raise ValueError(f"form must be one of {sorted(SCA_FORMS)}, got {form!r}")

    def reset_parameters(self) -> None:
        """Default initialisation; see the module docstring."""
        K, H = self.num_heads, self.head_dim
        for lin in (self.in_proj, self.gate_proj, self.out_proj):
            lin.reset_parameters()
        bound = 1.0 / math.sqrt(self.conv_kernel_size)
        with torch.no_grad():
            nn.init.uniform_(self.conv_weight, -bound, bound)
            (self.theta_d_raw if self.num_thetas > 1 else self.theta_raw).zero_()
            self.w_int_raw.fill_(1.0)
            lam = torch.logspace(math.log10(0.003), math.log10(0.15), K, dtype=torch.float64)
            self.decay_slopes.copy_(torch.log(torch.expm1(lam)))  # inverse softplus
            self.score_scale.fill_(1.0)
            self.score_bias.zero_()
            self.phase_scale.fill_(1.0)
            self.gated_norm.weight.fill_(1.0)
            nn.init.normal_(self.W_readout, std=(2 * H) ** -0.5)

    # ------------------------------------------------------------------ parameters

    def spectral_grid(self) -> Tensor:
        """θ [K, H, M] (step 5)."""
        if self.num_thetas == 1:
            return THETA_MIN + THETA_SPAN * torch.sigmoid(self.theta_raw[0, 0])
        delta = F.softplus(self.theta_d_raw[0, 0]) + 1e-4  # [K, H, M] increments δ
        cum = delta.cumsum(dim=-1)  # Δ
        return THETA_MIN + THETA_SPAN * cum / cum[..., -1:]

    def integration_weights(self) -> Tensor:
        """w [K, H, M]: softmax over M with +1e-6 in the denominator (step 6)."""
        raw = self.w_int_raw[0, 0]  # [K_q, n_rep, H, M]
        top = raw.amax(dim=-1, keepdim=True).detach()  # shift for stability (exact algebra)
        e = torch.exp(raw - top)
        w = e / (e.sum(dim=-1, keepdim=True) + 1e-6 * torch.exp(-top))
        return w.reshape(self.num_heads, self.head_dim, self.num_thetas)  # k = g·n_rep + r

    def contribution(self, s: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Time weight τ and clipped contribution p (steps 7–8).

        s: [B, T, K] scores; t: [B, T] absolute positions  ->  (τ, p), each [B, T, K].
        """
        d = torch.clamp(self.maxlen - 1 - t, min=0).to(s.dtype)  # distance to boundary
        lam = F.softplus(self.decay_slopes)  # [K]
        tau = torch.exp(-lam * d[..., None])
        p = F.softplus(self.score_scale * s + self.score_bias) * tau
        return tau, torch.clamp(p, P_MIN, P_MAX)

    # ------------------------------------------------------------------ state

    def init_state(self, batch_size: int, *, device=None, dtype=None) -> SCAState:
        """The empty state (all zeros, matching the conv's zero padding)."""
        dtype = dtype or self.in_proj.weight.dtype
        device = device or self.in_proj.weight.device
        acc, K, H, M = _compute_dtype(dtype), self.num_heads, self.head_dim, self.num_thetas
        return SCAState(
            den=torch.zeros(batch_size, K, dtype=acc, device=device),
            num=torch.zeros(batch_size, K, H, M, 2, dtype=acc, device=device),
            pos=torch.zeros(batch_size, dtype=torch.long, device=device),
            conv_buffer=torch.zeros(batch_size, self.conv_kernel_size - 1, self.num_channels,
                                    dtype=dtype, device=device),
        )

    def state_size(self) -> int:
        """Floats held per sequence: den, num and the conv buffer (the int pos is not counted)."""
        K, H, M = self.num_heads, self.head_dim, self.num_thetas
        return K + K * H * M * 2 + (self.conv_kernel_size - 1) * self.num_channels

    def _check_state(self, state: SCAState, B: int) -> None:
        if not isinstance(state, SCAState):
            raise TypeError(f"state must be an SCAState (see init_state), got {type(state).__name__}")
        K, H, M, C = self.num_heads, self.head_dim, self.num_thetas, self.num_channels
        expected = {"den": (B, K), "num": (B, K, H, M, 2), "pos": (B,),
                    "conv_buffer": (B, self.conv_kernel_size - 1, C)}
        for name, shape in expected.items():
            got = tuple(getattr(state, name).shape)
            if got != shape:
                raise ValueError(f"state.{name} must have shape {list(shape)}, got {list(got)}")

    # ------------------------------------------------------------------ forward

    def _streams(self, x: Tensor, state: SCAState):
        """Steps 1–4: projection, causal conv (carried buffer), SiLU, split."""
        B, T, _ = x.shape
        K, Kq, H, M = self.num_heads, self.num_query_heads, self.head_dim, self.num_thetas
        z = self.in_proj(x)  # [B, T, C]
        window = torch.cat((state.conv_buffer.to(z.dtype), z), dim=1)  # [B, k_w − 1 + T, C]
        u = F.conv1d(window.transpose(1, 2), self.conv_weight, groups=self.num_channels)  # [B, C, T]
        a = F.silu(u.transpose(1, 2))  # [B, T, C]
        k = a[..., : K * H].reshape(B, T, K, H)
        s = a[..., K * H: K * H + K]  # [B, T, K]
        q = a[..., K * H + K:].reshape(B, T, Kq, H, M, 2)  # re/im interleaved in the last dim
        buffer = window[:, window.shape[1] - (self.conv_kernel_size - 1):]  # [B, k_w − 1, C]
        return k, s, q, buffer

    def _memory_inputs(self, x: Tensor, state: SCAState):
        """Steps 1–9: everything the spectral op needs, plus the new conv buffer."""
        B, T, _ = x.shape
        k, s, q, buffer = self._streams(x, state)
        t = state.pos[:, None] + torch.arange(T, device=x.device)  # [B, T] absolute positions
        tau, p = self.contribution(s, t)
        u = F.softsign(self.phase_scale[:, None] * k)  # [B, T, K, H] phase argument
        q_mem = q.repeat_interleave(self.n_rep, dim=2)  # [B, T, K, H, M, 2], head k -> ⌊k/n_rep⌋
        return dict(k=k, s=s, q=q, q_mem=q_mem, tau=tau, p=p, u=u, buffer=buffer)

    def _fuse(self, o: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """Steps 13–16: concat, GatedRMSNorm, per-head sigmoid GLU, out_proj."""
        B, T, K, H, _ = o.shape
        E = self.out_dim
        v = o.transpose(-1, -2).reshape(B, T, 2 * K * H)  # per head [re block, im block]
        normed = self.gated_norm(v, self.gate_proj(x))  # [B, T, 2KH]
        y = torch.einsum("btkj,kje->btke", normed.reshape(B, T, K, 2 * H), self.W_readout)
        glu = y[..., :E] * torch.sigmoid(y[..., E:])  # [B, T, K, E]
        return normed, self.out_proj(glu.reshape(B, T, K * E))

    def _check_x(self, x: Tensor) -> None:
        check_mixer_input("SCALayer", x, self.d_model)

    def forward(self, x: Tensor, *, state: SCAState | None = None, mask: Tensor | None = None,
                return_state: bool = True) -> tuple[Tensor, SCAState | None]:
        """x: [B, T, D] -> (y [B, T, D], state after the T tokens, or None when not return_state).
        T = 1 is a decode step. No padding ``mask`` (``masks_padding``)."""
        if mask is not None:
            raise ValueError("SCALayer does not mask padding (masks_padding = False); run padded batches through "
                             "assocmem.models.blocks.run_mixer, which calls each row's real tokens")
        self._check_x(x)
        B, T, _ = x.shape
        state = self.init_state(B, device=x.device, dtype=x.dtype) if state is None else state
        self._check_state(state, B)
        m = self._memory_inputs(x, state)
        o, (den, num) = self.op(
            m["q_mem"], m["u"], m["k"], beta=m["p"], theta=self.spectral_grid(),
            weights=self.integration_weights(), scale=self.head_dim ** -0.5, den_floor=DEN_FLOOR,
            initial_state=(state.den, state.num), output_final_state=True)  # o: [B, T, K, H, 2]
        _, y = self._fuse(o, x)
        return y, (SCAState(den=den, num=num, pos=state.pos + T, conv_buffer=m["buffer"]) if return_state else None)

    @torch.no_grad()
    def intermediates(self, x: Tensor) -> dict[str, Tensor]:
        """Named intermediate tensors of one forward from the empty state (for tests and probes).

        Keys follow the fixture's ``core.*`` names: k, s, q_re, q_im, theta, w_int [K_q, n_rep, H, M],
        time_weight [B, T, K], p, phase, den (before the floor), state_re, state_im,
        readout_re, readout_im, normed, and output.
        """
        self._check_x(x)
        m = self._memory_inputs(x, self.init_state(x.shape[0], device=x.device, dtype=x.dtype))
        theta, w = self.spectral_grid(), self.integration_weights()
        den_t, num_t = spectral_running_state(m["u"], m["k"], beta=m["p"], theta=theta)
        S = num_t / torch.clamp(den_t, min=DEN_FLOOR)[..., None, None, None]  # [B, T, K, H, M, 2]
        o, _ = self.op(m["q_mem"], m["u"], m["k"], beta=m["p"], theta=theta, weights=w,
                                    scale=self.head_dim ** -0.5, den_floor=DEN_FLOOR)
        normed, y = self._fuse(o, x)
        w_int = w.reshape(self.num_query_heads, self.n_rep, self.head_dim, self.num_thetas)
        return {"k": m["k"], "s": m["s"], "q_re": m["q"][..., 0], "q_im": m["q"][..., 1],
                "theta": theta, "w_int": w_int, "time_weight": m["tau"], "p": m["p"],
                "phase": m["u"][..., None] * theta, "den": den_t, "state_re": S[..., 0],
                "state_im": S[..., 1], "readout_re": o[..., 0], "readout_im": o[..., 1],
                "normed": normed, "output": y}
