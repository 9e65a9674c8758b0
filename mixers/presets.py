"""The preset registry: each published mixer is a spec, not separate code.

    get_preset("gated_deltanet")  -> MixerSpec
    list_presets()                -> names in registration order
    register_preset(spec)         -> add your own (duplicate names are refused)

Short aliases ("attn", "gdn", "swa", ...) resolve to preset names for layer patterns.
"""
from __future__ import annotations

from assocmem.memories import (
    GD, L1, L2, CharacteristicFunction, ClosedForm, DotProduct, Huber, Implicit, L2Decay, Lp, Matrix,
    Momentum, NadarayaWatson, NonParametric, NoRetention, RemoveReplace, RetainThenGD, Spectral, Window,
)

from .spec import AttentionOptions, LatentOptions, LayerOptions, MixerSpec

_PRESETS: dict[str, MixerSpec] = {}
ALIASES: dict[str, str] = {
    "attn": "softmax", "attention": "softmax", "gdn": "gated_deltanet", "swa": "sliding_window",
    "la": "linear_attention", "delta": "deltanet",
    "latent": "mla",
}


def register_preset(spec: MixerSpec) -> MixerSpec:
    """Add a named spec to the registry; a name already taken is refused."""
    if not spec.name:
        raise ValueError("register_preset needs a spec with a name")
    if spec.name in _PRESETS or spec.name in ALIASES:
        raise ValueError(f"preset {spec.name!r} is already registered; choose another name")
    _PRESETS[spec.name] = spec
    return spec


def list_presets() -> list[str]:
    return list(_PRESETS)


def get_preset(name: str) -> MixerSpec:
    """The spec registered under ``name`` (or an alias such as 'gdn', 'attn')."""
    key = ALIASES.get(name, name)
    if key not in _PRESETS:
        raise KeyError(f"unknown mixer preset {name!r}; choose one of {sorted(_PRESETS)} "
                       f"or an alias {sorted(ALIASES)}")
    return _PRESETS[key]


# The delta family as FLA and transformers build it (Gated DeltaNet: Yang et al. 2024, §3.3; transformers'
# Qwen3NextGatedDeltaNet): q, k, v through the short conv, whose SiLU is the only nonlinearity on q and k
# (feature_map stays identity: a second SiLU here was a bug), then L2-normalised q and k and β = σ(x W_b).
_DELTA_LAYER = dict(qk_norm="l2", lr_gate="sigmoid")
_ATTN_LAYER = dict(short_conv=False, output_norm="none")  # RoPE on: AttentionOptions' default

for _spec in [
    MixerSpec(name="linear_attention", memory=Matrix(), bias=DotProduct(), retention=NoRetention(),
              optimizer=GD(), layer=LayerOptions(feature_map="elu_plus_one", output_norm="rmsnorm")),
    MixerSpec(name="retnet", memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="fixed"),
              optimizer=GD(), layer=LayerOptions()),
    # Mamba2 (Dao & Gu 2024) as mamba_ssm and transformers' Mamba2Mixer build it: q = C, k = B, v = x through
    # one short conv with a bias; B and C shared by all heads (ngroups = 1); y = RMSNorm(o · SiLU(z)) with a
    # weight per channel (norm_before_gate=False), eps 1e-5
    MixerSpec(name="mamba2", memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="scalar"),
              optimizer=GD(), layer=LayerOptions(lr_gate="dt", scale=1.0, d_skip=True, num_qk_heads=1,
                                                 conv_bias=True, output_norm="gate_then_rmsnorm", norm_eps=1e-5)),
    # Mamba (Gu & Dao 2023) as mamba_ssm and transformers' MambaMixer build it (mixers/mamba.py): the selective
    # SSM h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t, one decay per entry of the state (class selective); N = 16
    # state entries per channel (head_dim), conv 4 with a bias, d_inner = 2·d_model, dt_rank = ceil(d_model/16)
    MixerSpec(name="mamba", memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="entry"), optimizer=GD(),
              layer=LayerOptions(num_heads=1, head_dim=16, scale=1.0, conv_bias=True, output_norm="none")),
    MixerSpec(name="gla", memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="key"),
              optimizer=GD(), layer=LayerOptions()),
    MixerSpec(name="deltanet", memory=Matrix(), bias=L2(), retention=NoRetention(),
              optimizer=GD(), layer=LayerOptions(**_DELTA_LAYER)),
    MixerSpec(name="gated_deltanet", memory=Matrix(), bias=L2(), retention=L2Decay(gate="scalar"),
              optimizer=RetainThenGD(), layer=LayerOptions(**_DELTA_LAYER)),
    MixerSpec(name="gated_deltanet_joint", memory=Matrix(), bias=L2(), retention=L2Decay(gate="scalar"),
              optimizer=GD(), layer=LayerOptions(**_DELTA_LAYER)),
    # Kimi Delta Attention (Kimi Linear, 2025; transformers' KimiLinearDeltaAttention): Gated DeltaNet with
    # one decay per key, S_t = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ, its decay and output gate
    # through rank-K projections, a sigmoid output gate
    MixerSpec(name="kda", memory=Matrix(), bias=L2(), retention=L2Decay(gate="key"), optimizer=RetainThenGD(),
              layer=LayerOptions(**_DELTA_LAYER, key_gate="kda", low_rank_gates=True, output_gate="sigmoid")),
    MixerSpec(name="longhorn", memory=Matrix(), bias=L2(), retention=NoRetention(),
              optimizer=Implicit(), layer=LayerOptions(**_DELTA_LAYER)),
    MixerSpec(name="softmax", memory=NonParametric(), bias=NadarayaWatson(), retention=NoRetention(),
              optimizer=ClosedForm(), layer=LayerOptions(**_ATTN_LAYER)),
    MixerSpec(name="sliding_window", memory=NonParametric(), bias=NadarayaWatson(), retention=Window(size=64),
              optimizer=ClosedForm(), layer=LayerOptions(**_ATTN_LAYER)),
    # Multi-head latent attention (DeepSeek-V2 §2.1; transformers' DeepseekV3Attention): keys and values from one
    # latent c_KV of width 4·d_h per token (the cache), a decoupled rotary part of width d_h/2 shared by the heads,
    # no query compression (DeepSeek-V2-Lite); mixers/latent_attention.py
    MixerSpec(name="mla", memory=NonParametric(), bias=NadarayaWatson(), retention=NoRetention(),
              optimizer=ClosedForm(), layer=LayerOptions(**_ATTN_LAYER, attention=AttentionOptions(
                  kind="latent", latent=LatentOptions(kv_rank=256, rope_dim=32)))),
    MixerSpec(name="sca", memory=Spectral(points=2), bias=CharacteristicFunction(), retention=NoRetention(),
              optimizer=ClosedForm(), layer=LayerOptions(output_norm="gated_rmsnorm")),
    MixerSpec(name="titans_linear", memory=Matrix(), bias=L2(), retention=L2Decay(gate="scalar"),
              optimizer=Momentum(eta=0.9), layer=LayerOptions(**_DELTA_LAYER)),
    MixerSpec(name="huber_delta", memory=Matrix(), bias=Huber(delta=1.0), retention=L2Decay(gate="scalar"),
              optimizer=RetainThenGD(), layer=LayerOptions(**_DELTA_LAYER)),
    MixerSpec(name="lp_delta", memory=Matrix(), bias=Lp(p=3.0, clip=2 / 3), retention=L2Decay(gate="scalar"),
              optimizer=RetainThenGD(), layer=LayerOptions(**_DELTA_LAYER)),  # clip: Lp docstring
    MixerSpec(name="ttt_linear", memory=Matrix(norm="layernorm_residual"), bias=L2(), retention=NoRetention(),
              optimizer=GD(), layer=LayerOptions(lr_gate="sigmoid", output_norm="rmsnorm")),
    # Recurrent depth (thesis §5.2, eq. 5.1): three GD steps on ℓ2 per token after the decay; exactly one
    # delta step with β_eff = (1 − (1 − β‖k‖²)³)/‖k‖² (ops/depth.py), so it runs the delta chunk form
    MixerSpec(name="gated_deltanet_steps3", memory=Matrix(), bias=L2(), retention=L2Decay(gate="scalar"),
              optimizer=RetainThenGD(steps=3), layer=LayerOptions(**_DELTA_LAYER)),
    # ... and with the Huber bias, where three steps are not one: the non-quadratic bias gains from depth (scan)
    MixerSpec(name="huber_delta_steps3", memory=Matrix(), bias=Huber(delta=1.0), retention=L2Decay(gate="scalar"),
              optimizer=RetainThenGD(steps=3), layer=LayerOptions(**_DELTA_LAYER)),
    # RWKV-7 as thesis Table 2.1 writes it: M_t = (diag(α_t) − β_t k_t k_tᵀ) M_{t−1} + β_t v_t k_tᵀ, the joint
    # GD step with per-key decay (class diag_rank1: the per-key delta chunk form)
    MixerSpec(name="rwkv7", memory=Matrix(), bias=L2(), retention=L2Decay(gate="key"),
              optimizer=GD(), layer=LayerOptions(**_DELTA_LAYER)),
    # RWKV-7 with its vector in-context rate a_t and separate removal key κ_t (Peng et al. 2025):
    # S_t = (diag(α_t) − (a_t ⊙ κ_t) κ_tᵀ) S_{t−1} + (a_t ⊙ k_t) v_tᵀ (class dplr, ops/dplr.py)
    MixerSpec(name="rwkv7_dplr", memory=Matrix(), bias=RemoveReplace(), retention=L2Decay(gate="key"),
              optimizer=GD(rate="key"), layer=LayerOptions(**_DELTA_LAYER)),
    # Normalised linear attention with Hedgehog's learnable feature map (thesis eqs. 2.31–2.36; Zhang et al.
    # 2024): the linear-attention student of attention distillation (no conv, no output norm)
    MixerSpec(name="hedgehog", memory=Matrix(), bias=DotProduct(), retention=NoRetention(), optimizer=GD(),
              layer=LayerOptions(feature_map="hedgehog", normalize=True, short_conv=False, output_norm="none")),
    # ℓ1 retention (thesis §2.4.3): one proximal-gradient step on ℓ2 + λ‖M − M_{t−1}‖₁ (sparse updates)
    MixerSpec(name="l1_deltanet", memory=Matrix(), bias=L2(), retention=L1(lam=0.01), optimizer=GD(),
              layer=LayerOptions(**_DELTA_LAYER)),
]:
    register_preset(_spec)


# What each preset's layer is held to (``assocmem derive NAME`` prints it). "=" means equal weight for
# weight to that published layer (tests/layers/, ``assocmem verify --layers``); otherwise the difference.
_GDN_LAYER = "the Gated DeltaNet layer (short conv + SiLU, L2-normalised q and k, gated output norm)"
PUBLISHED_LAYERS: dict[str, str] = {
    "gated_deltanet": "= transformers Qwen3NextGatedDeltaNet (grouped value heads: layer.num_qk_heads)",
    "kda": "= transformers KimiLinearDeltaAttention",
    "mamba": "= transformers MambaMixer, PyTorch path (mixers/mamba.py)",
    "mamba2": "= transformers Mamba2Mixer, PyTorch path (its n_groups: layer.num_qk_heads, 1 here as in mamba_ssm)",
    "mla": "= transformers DeepseekV3Attention (MLA; its rope_interleave: attention.latent.rope_interleave)",
    "softmax": "= transformers LlamaAttention / Qwen2Attention / Qwen3Attention (layer.attention.bias, .qk_norm)",
    "sca": "= the authors' SCA layer (the SCA reference fixture, tests/mixers/test_sca_fixture.py)",
    **{name: f"{_GDN_LAYER} around this update; no published layer of this kind is compared"
       for name in ("deltanet", "gated_deltanet_joint", "longhorn", "titans_linear", "huber_delta", "lp_delta",
                    "gated_deltanet_steps3", "huber_delta_steps3", "l1_deltanet")},
    **{name: f"the RWKV-7 recurrence in {_GDN_LAYER}; RWKV-7's own time-mix block (token shift, LoRA gates, "
             "bonus term, group norm) is not built, so no published layer is compared (the recurrence is: "
             "assocmem verify rwkv7_dplr, FLA's dplr_recurrence)"
       for name in ("rwkv7", "rwkv7_dplr")},
    "hedgehog": "normalised linear attention with the Hedgehog feature map (Zhang et al. 2024), no conv and no "
                "output norm; not compared with a published layer",
    **{name: "not compared with a published layer: the short conv on q, k, v and the output norm are this "
             "library's defaults (FLA's layers of this family may omit them)"
       for name in ("linear_attention", "retnet", "gla", "ttt_linear")},
    "sliding_window": "softmax attention with a window of 64; not compared with a published layer",
}
