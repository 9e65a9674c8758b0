"""MixerSpec: a sequence mixer as data.

A spec is the tuple (memory, attentional bias, retention, optimizer) of the
online-optimization view plus the layer options that say how a Mixer module
produces q, k, v and the gates from its input. Specs round-trip through YAML
and JSON; every axis value is tagged by its ``kind``.

    spec = MixerSpec(memory=Matrix(), bias=Huber(delta=0.5),
                     retention=L2Decay(gate="key"), optimizer=Momentum(eta=0.9))
    MixerSpec.from_yaml(spec.to_yaml()) == spec
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from assocmem.memories import (
    GD, L1, L2, MLP, CharacteristicFunction, ClosedForm, Diagonal, DotProduct, Huber, Implicit, KL, L2Decay,
    Lp, Matrix, Momentum, NadarayaWatson, Newton, NonParametric, NoRetention, Proximal, RemoveReplace, RetainThenGD,
    Spectral, Window, algebra_class, check_axes, sums_keys,
)

from .feature_maps import COSFORMER_HORIZON
from .yaml_text import load_yaml, read_yaml_file

MemoryField = Annotated[Matrix | Diagonal | MLP | NonParametric | Spectral, Field(discriminator="kind")]
BiasField = Annotated[
    DotProduct | L2 | RemoveReplace | Lp | Huber | NadarayaWatson | CharacteristicFunction,
    Field(discriminator="kind")
]
RetentionField = Annotated[NoRetention | L2Decay | Proximal | L1 | KL | Window, Field(discriminator="kind")]
REFERENCE_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"  # package.module:function
OptimizerField = Annotated[GD | RetainThenGD | Implicit | Newton | Momentum | ClosedForm, Field(discriminator="kind")]


class LatentOptions(BaseModel):
    """Options of multi-head latent attention (attention.kind = 'latent'; DeepSeek-V2, mixers/latent_attention.py).
    Its heads: layer.num_heads of width layer.head_dim (d_h, the compressed part of q and k) + rope_dim (d_R),
    values of width layer.value_dim."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    kv_rank: int = Field(64, gt=0, description="d_c, width of the joint KV latent c_KV = W_DKV h (the cache)")
    q_rank: int | None = Field(None, gt=0, description="d_c', width of the query latent c_Q = W_DQ h (None: q = W_Q h)")
    rope_dim: int = Field(16, gt=0, description="d_R, width of the decoupled rotary part (k_R shared by the heads)")
    rope_interleave: bool = Field(False, description="the rotary part's pairs are (2i, 2i + 1), read into the "
                                  "(i, i + d_R/2) layout before RoPE (DeepSeek's checkpoints; transformers' "
                                  "rope_interleave)")
    absorb: bool = Field(True, description="decode steps in the absorbed form: W_UK folded into the query and W_UV "
                         "applied after the read, attending over the cached latents without expanding them")

    @field_validator("rope_dim")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError(f"attention.latent.rope_dim must be even (RoPE rotates pairs), got {value}")
        return value


class AttentionOptions(BaseModel):
    """Options of the softmax-attention module (NonParametric memory) only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    kind: Literal["mha", "latent"] = Field(
        "mha", description="mha: multi-head attention with GQA (mixers/attention.py); latent: multi-head latent "
        "attention with its compressed cache (DeepSeek-V2, mixers/latent_attention.py; options in `latent`)")
    latent: LatentOptions = Field(default_factory=LatentOptions, description="kind 'latent' only")
    num_kv_heads: int | None = Field(None, gt=0, description="KV heads for GQA (None → num_heads)")
    rope: bool = Field(True, description="rotary map of q and k: true = RoPE, false = none (Wiola's SRPE: the "
                       "block extension wiola_attention, models/extensions.py)")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base θ₀ (also SRPE's)")
    qk_norm: Literal["none", "rmsnorm"] = Field(
        "none", description="'rmsnorm': per-head RMSNorm on q and k before RoPE (QK-norm, eps = norm_eps)")
    bias: Literal["none", "qkv", "all"] = Field(
        "none", description="biases of the projections: none, q/k/v only (Qwen2), or q/k/v and output (Llama's "
        "and Qwen3's attention_bias=True)")
    short_conv: bool = Field(False, description="causal depthwise conv (width conv_size) + SiLU on q, k, v before "
                             "QK-norm and the rotary map, carried in the decode state (off: LlamaAttention's layer)")

    @model_validator(mode="after")
    def _latent_reads_its_own(self) -> "AttentionOptions":
        if self.kind == "latent":
            mha_only = {"num_kv_heads": (self.num_kv_heads, None), "qk_norm": (self.qk_norm, "none"),
                        "bias": (self.bias, "none"), "short_conv": (self.short_conv, False), "rope": (self.rope, True)}
            wrong = {k: v for k, (v, default) in mha_only.items() if v != default}
            if wrong:
                raise ValueError(f"attention.kind 'latent' (MLA) shares its keys through the latent and has its own "
                                 f"rotary part; the mha options {wrong} do not apply to it: leave them at their "
                                 f"defaults {({k: d for k, (_, d) in mha_only.items() if k in wrong})}")
        return self


class SCAOptions(BaseModel):
    """Options of the SCA module (Spectral memory) only; mixers/sca.py names them in its docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    expand: float = Field(1.5, gt=0, description="d_inner = d_model · expand sets the channels per head")
    out_expand: int = Field(3, gt=0, description="readout GLU width E = out_expand · channels per head")
    query_heads: int | None = Field(None, gt=0, description="query heads K_q (None → num_heads)")
    maxlen: int = Field(2048, gt=0, description="boundary of the time weight d(t) = max(maxlen−1−t, 0)")


class MambaOptions(BaseModel):
    """Options of the Mamba layer (selective class: retention l2_decay with gate='entry') only; mixers/mamba.py
    names them in its docstring. The state size N is ``layer.head_dim``; the conv is ``layer.conv_size``
    wide with a bias when ``layer.conv_bias``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    expand: float = Field(2.0, gt=0, description="d_inner = int(expand · d_model) channels")
    dt_rank: int | Literal["auto"] = Field("auto", description="rank R of the Δ projection (x_proj → R → dt_proj); "
                                           "auto = ceil(d_model / 16)")
    dt_min: float = Field(1e-3, gt=0, description="Δ at init is log-uniform in [dt_min, dt_max]")
    dt_max: float = Field(0.1, gt=0, description="Δ at init is log-uniform in [dt_min, dt_max]")
    dt_init_floor: float = Field(1e-4, gt=0, description="floor on the initial Δ before its inverse softplus")
    dt_init: Literal["random", "constant"] = Field(
        "random", description="dt_proj weight at init: U[−s, s] (random) or s (constant), s = dt_scale · R^(−1/2)")
    dt_scale: float = Field(1.0, gt=0, description="scale s of dt_proj's initial weight")
    bias: bool = Field(False, description="biases of in_proj and out_proj (transformers' use_bias)")
    dt_limit: tuple[float, float] | None = Field(
        None, description="(low, high): Δ clamped to [low, high] after the softplus, every step (mamba_ssm's "
        "dt_limit; a positive low keeps every write and decay step away from 0: the dt clipping of Zuo et al. "
        "2025); None: no clamp (Mamba's and transformers' MambaMixer)")

    @model_validator(mode="after")
    def _dt_range(self) -> "MambaOptions":
        if self.dt_limit is not None and not 0.0 <= self.dt_limit[0] < self.dt_limit[1]:
            raise ValueError(f"mamba.dt_limit = {self.dt_limit} must be (low, high) with 0 <= low < high")
        if self.dt_rank != "auto" and self.dt_rank < 1:
            raise ValueError(f"mamba.dt_rank must be 'auto' or a positive int, got {self.dt_rank}")
        if self.dt_min > self.dt_max:
            raise ValueError(f"mamba.dt_min = {self.dt_min} must not exceed dt_max = {self.dt_max}")
        return self

    def rank(self, d_model: int) -> int:
        """R: dt_rank, or ceil(d_model / 16) for 'auto' (Mamba's default)."""
        return -(-d_model // 16) if self.dt_rank == "auto" else self.dt_rank


class LayerOptions(BaseModel):
    """How a mixer module turns x [B, T, d_model] into q, k, v and gates.

    The fields at the top are shared by the module kinds (heads, widths, convolution, norms);
    those of the recurrent Mixer (parametric memories) are the rest of the top level, and
    the options read by one other kind only sit in its sub-model: ``attention`` (softmax
    attention), ``sca`` (SeqCond attention) and ``mamba`` (the selective SSM). A saved model whose config has the flat keys of
    the earlier layout (``num_kv_heads``, ``qk_rmsnorm``, ``sca_*``, ...) is converted when it is
    loaded (models/upgrade.py).

    The decay gate's parameterisation follows the retention axis:
    L2Decay(gate="scalar") → log α = −exp(A_log)·softplus(x W_a + dt_bias) (Mamba2/GDN);
    gate="key" → log α = logsigmoid(x W_a)/16 per key (GLA); gate="fixed" →
    log α_h = log(1 − 2^(−5−h)) (RetNet). With lr_gate="dt", β = Δ and
    log α = Δ·A share Mamba2's Δ.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    # shared by every module kind
    num_heads: int = Field(4, gt=0, description="H, memory heads")
    head_dim: int = Field(64, gt=0, description="K, key/query width per head")
    expand_v: float = Field(1.0, gt=0, description="V = int(K · expand_v), value width per head")
    conv_size: int = Field(4, gt=0, description="short conv width (recurrent mixers, SCA, attention with "
                           "attention.short_conv)")
    scale: float | None = Field(None, description="query scale; None → K**-0.5")
    norm_eps: float = Field(1e-6, gt=0, description="epsilon of the output RMSNorm (recurrent mixers) and of the "
                            "QK-norm (attention)")
    # the recurrent Mixer (every parametric memory)
    feature_map: Literal["identity", "silu", "elu_plus_one", "relu", "hedgehog", "favor", "cosformer"] = Field(
        "identity", description="feature map φ applied to q and k after the short conv (whose output already "
        "passed a SiLU: the published delta-rule layers use identity here); 'hedgehog': the learnable "
        "φ(x) = [softmax(x W), softmax(−x W)] per head (Zhang et al. 2024; W: K×K, identity at init), so the "
        "memory's key width is 2·head_dim; 'favor': Performer's positive random features "
        "exp(ω x − ‖x‖²/2)/√K with orthogonal ω, redrawable by seed (Choromanski et al. 2021); 'cosformer': "
        "[ReLU(x) cos(πi/2M), ReLU(x) sin(πi/2M)] at token position i, M = cosformer_horizon (Qin et al. "
        "2022), key width 2·head_dim (mixers/feature_maps.py)")
    cosformer_horizon: int = Field(COSFORMER_HORIZON, gt=0, description="M of the cosformer feature map's "
                                   "re-weighting cos(π/2 · (i − j)/M) (tokens further apart than M weigh < 0)")
    normalize: bool = Field(
        False, description="normalised linear attention (thesis eqs. 2.31–2.36): o = M_t φ(q) / (Z_t φ(q) + 1e-10), "
        "Z_t the Hebbian sum of the keys, kept as one more value column of the state; hebbian specs only")
    qk_norm: Literal["none", "l2"] = Field("none", description="'l2': unit-norm q and k per head (delta rule)")
    short_conv: bool = Field(True, description="causal depthwise conv on q, k, v (+SiLU), carried in the decode state")
    conv_bias: bool = Field(False, description="a bias per channel in the short conv (Mamba2's use_conv_bias)")
    chunk_size: int | None = Field(
        None, gt=0, description="tokens per chunk of the chunk forms; None → the op's default for its family "
        "(hebbian: min(64, max(16, head_dim)); delta: min(64, max(16, head_dim // 2)), measured on CPU)")
    compile: bool = Field(
        False, description="run the chunk form (recurrent mixers) or the prefix_sum form (SCA) through "
        "torch.compile: the same source fused by inductor, equal to the eager form to rounding "
        "(mixers/ops/compiled.py); each new (shape, dtype) compiles once, tens of seconds on a CPU. "
        "Other forms (sdpa, the scan form, compiled already) are unaffected. compile: true is backend: compiled")
    backend: Literal["auto", "torch", "compiled", "fla"] = Field(
        "auto", description="the code that runs the recurrent mixer's op (mixers/kernels.py), chosen per device "
        "and dtype at call time: torch (eager), compiled (as compile: true), fla (FLA's Triton kernel of the "
        "spec's class; refused up front where FLA would refuse) or auto (CUDA: fla where FLA takes the call, "
        "else the compiled form, warning once per reason; CPU: the eager form). SCA reads compiled only; "
        "softmax attention always runs SDPA")
    lr_gate: Literal["none", "sigmoid", "dt"] = Field(
        "none", description="β_t: none → 1, sigmoid → σ(x W_b), dt → Mamba2's Δ = softplus(x W + dt_bias)")
    output_norm: Literal["none", "rmsnorm", "gated_rmsnorm", "gate_then_rmsnorm"] = Field(
        "gated_rmsnorm", description="rmsnorm: per-head RMSNorm of o (one weight per value channel, shared by "
        "the heads); gated_rmsnorm: that times the output gate act(x W_g) (FLA, Qwen3-Next, Kimi); "
        "gate_then_rmsnorm: o · act(x W_g), then RMSNorm over each group of the heads that share a q/k head, "
        "one weight per channel of every head (Mamba2's norm_before_gate=False)")
    output_gate: Literal["silu", "sigmoid"] = Field(
        "silu", description="act of the output gate of gated_rmsnorm: silu (FLA, Qwen3-Next) or sigmoid (Kimi Linear)")
    key_gate: Literal["gla", "kda"] = Field(
        "gla", description="per-key decay (retention l2_decay gate=key): gla → log α = logsigmoid(x W_a)/16; "
        "kda → log α = −exp(A_log_h)·softplus(x W_a + dt_bias) per head and key (Kimi Linear)")
    low_rank_gates: bool = Field(
        False, description="the per-key decay and output-gate projections through a rank-K bottleneck, "
        "W = W_up W_down with d → K → width (Kimi Linear)")
    d_skip: bool = Field(False, description="Mamba2's D·x skip")
    num_qk_heads: int | None = Field(
        None, gt=0, description="recurrent mixers: q/k heads, each shared by num_heads / num_qk_heads consecutive "
        "value heads (Qwen3-Next's linear_num_key_heads, Mamba2's n_groups); None → num_heads")
    # one other module kind each
    attention: AttentionOptions = Field(default_factory=AttentionOptions, description="softmax attention only")
    sca: SCAOptions = Field(default_factory=SCAOptions, description="SCA only")
    mamba: MambaOptions = Field(default_factory=MambaOptions, description="Mamba (selective SSM) only")

    @model_validator(mode="after")
    def _compile_is_a_backend(self) -> "LayerOptions":
        if self.compile and self.backend not in ("auto", "compiled"):
            raise ValueError(f"compile: true is backend: compiled; it contradicts backend: {self.backend}")
        return self

    @model_validator(mode="after")
    def _heads(self) -> "LayerOptions":
        if self.num_qk_heads is not None and self.num_heads % self.num_qk_heads:
            raise ValueError(f"num_qk_heads={self.num_qk_heads} must divide num_heads={self.num_heads} (each q/k "
                             f"head serves num_heads / num_qk_heads value heads)")
        return self

    @property
    def value_dim(self) -> int:
        return int(self.head_dim * self.expand_v)

    @property
    def qk_heads(self) -> int:
        """Heads of q and k (recurrent mixers): num_qk_heads, or num_heads."""
        return self.num_heads if self.num_qk_heads is None else self.num_qk_heads


class MixerSpec(BaseModel):
    """A sequence mixer: four axes of the online objective plus layer options."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    name: str | None = Field(None, description="optional label (preset name or your own)")
    memory: MemoryField = Field(default_factory=Matrix, description="memory representation M")
    bias: BiasField = Field(default_factory=DotProduct, description="attentional bias ℓ(M; k, v)")
    retention: RetentionField = Field(default_factory=NoRetention, description="retention regularizer R")
    optimizer: OptimizerField = Field(default_factory=GD, description="how the per-token argmin is solved")
    layer: LayerOptions = Field(default_factory=LayerOptions, description="projections, gates, norms")
    reference: str | None = Field(
        None, description="your hand-written update of this spec, 'package.module:function' (a function with the op "
        "contract's signature, importable from PYTHONPATH or an installed package): `assocmem verify` imports it "
        "and holds it to the derivation and every lowered form as it holds the built-in rules. Only verify "
        "imports it (never a model load), and never from a model folder or a Hub id "
        "(docs/verification.md#your-own-reference)")

    @field_validator("reference")
    @classmethod
    def _reference_is_a_python_name(cls, ref: str | None) -> str | None:
        if ref is not None and not re.fullmatch(REFERENCE_PATTERN, ref):
            raise ValueError(f"reference must be 'package.module:function', an importable Python name (not a file "
                             f"path, a model folder or a Hub id), got {ref!r}")
        return ref

    @model_serializer(mode="wrap")
    def _without_empty_reference(self, handler) -> dict:
        data = handler(self)
        if data.get("reference") is None:  # saved specs and configs stay as they were without one
            data.pop("reference", None)
        return data

    @model_validator(mode="after")
    def _compose(self) -> "MixerSpec":
        check_axes(self)
        square = isinstance(self.memory, Diagonal) or getattr(self.memory, "norm", "none") != "none"
        if square and self.layer.value_dim != self.layer.head_dim:
            raise ValueError(f"memory {self.memory.kind!r} needs V == K: layer.expand_v must be 1.0, "
                             f"got {self.layer.expand_v}")
        if self.layer.lr_gate == "dt" and not (isinstance(self.retention, L2Decay) and self.retention.gate == "scalar"):
            raise ValueError("layer.lr_gate='dt' (Mamba2's shared Δ) needs retention l2_decay with gate='scalar'")
        if self.layer.lr_gate == "dt" and getattr(self.optimizer, "rate", "scalar") == "key":
            raise ValueError("layer.lr_gate='dt' gives one Δ per head; optimizer.rate='key' needs lr_gate "
                             "'sigmoid' (one rate per key) or 'none'")
        if self.layer.normalize and not sums_keys(self):
            raise ValueError(
                f"layer.normalize=True (the normaliser Z_t of thesis eqs. 2.31–2.36) needs a hebbian spec: bias "
                f"dot_product, retention none or l2_decay, optimizer gd or retain_then_gd (Z_t sums the keys as "
                f"M_t sums v kᵀ); this spec is class {self.algebra!r} (bias {self.bias.kind!r}, optimizer "
                f"{self.optimizer.kind!r})")
        return self

    @property
    def algebra(self) -> str:
        """Lowering class, read off the axes (memories/algebra.py); its forms: mixers/lower.py FAMILIES."""
        return algebra_class(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, source: str | Path) -> "MixerSpec":
        """Parse YAML text or a path to a .yaml/.yml/.json file."""
        data = read_yaml_file(source) if _is_path(source) else load_yaml(str(source), source="the MixerSpec YAML")
        if not isinstance(data, dict):
            raise ValueError(f"a MixerSpec document must be a mapping, got {type(data).__name__}")
        return cls.model_validate(data)


def _is_path(source: str | Path) -> bool:
    if isinstance(source, Path):
        return True
    return "\n" not in source and source.endswith((".yaml", ".yml", ".json"))
