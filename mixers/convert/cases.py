"""Small published layers with random weights: the references of ``verify --layers`` and tests/layers.

Each ``LayerCase`` builds one transformers layer at a small, awkward shape (K ≠ V, grouped heads,
biases where the family has them) and says how to run it, how to open its own cache and which of
the cache's tensors correspond to our decode state. Caches are opened, passed and read through
hf_cache.py, the same way on every transformers release of the declared range. ``build`` is called inside
``float64_retyped(modeling)`` for float64 runs, so what the layer computes at construction (RoPE
frequencies) is re-typed as well.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import types
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from .hf_cache import attention_states, call_with_cache, linear_states, new_cache

D_MODEL = 32


@dataclass
class Reference:
    """A built reference layer: run(x, start, cache) -> y [B, T, d]; new_cache(x) -> its empty cache
    for a batch like x [B, T, d]; states(cache, ours) -> [(name, ours, theirs)] of the decode state
    after the same tokens."""

    layer: nn.Module
    run: Callable[[torch.Tensor, int, object], torch.Tensor]
    new_cache: Callable[[torch.Tensor], object]
    states: Callable[[object, object], list[tuple[str, torch.Tensor, torch.Tensor]]]


@dataclass(frozen=True)
class LayerCase:
    name: str  # the published layer and its shape, as verify prints it
    preset: str  # the assocmem preset it is held to
    modeling: str  # the transformers modeling module (re-typed for float64 runs)
    build: Callable[[torch.dtype, int], Reference]
    # why the installed release's layer is not the published one (None: it is), given its module
    differs: Callable[[types.ModuleType], str | None] = lambda module: None

    def module(self) -> types.ModuleType:
        return importlib.import_module(self.modeling)

    def unavailable(self) -> str | None:
        """Why this case cannot run on the installed transformers, or None."""
        if importlib.util.find_spec(self.modeling.rsplit(".", 1)[0]) is None:
            return f"{self.modeling} is not in the installed transformers"
        return self.differs(self.module())


def randomize_(module: nn.Module, seed: int, std: float = 0.3) -> nn.Module:
    """Every parameter N(0, std²) (norm weights 1 + N(0, std²)): no mapping error hides behind ones or zeros."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * std
            p.copy_(noise + 1 if "norm" in name else noise)
    return module


# ------------------------------------------------------------------ Gated DeltaNet (Qwen3-Next)


def _recurrent_states(conv_size: int):
    def states(cache, ours):
        w = conv_size - 1  # the reference keeps the last conv_size inputs, we keep conv_size − 1
        conv, memory = linear_states(cache, 0)
        return [("memory", ours.memory, memory), ("conv", ours.conv, conv[..., -w:].transpose(1, 2))]
    return states


def _linear_reference(layer: nn.Module, cfg, modeling: str, states) -> Reference:
    """A linear-attention layer run with its cache (if any) and nothing else."""
    module = importlib.import_module(modeling)
    return Reference(layer, lambda x, start, cache: call_with_cache(layer, x, cache=cache),
                     lambda x: new_cache(cfg, module, x), states)


def _qwen3_next(hk: int, hv: int):
    def build(dtype: torch.dtype, seed: int) -> Reference:
        from transformers import Qwen3NextConfig
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

        cfg = Qwen3NextConfig(hidden_size=D_MODEL, linear_num_key_heads=hk, linear_num_value_heads=hv,
                              linear_key_head_dim=8, linear_value_head_dim=6, num_hidden_layers=1,
                              layer_types=["linear_attention"])
        layer = randomize_(Qwen3NextGatedDeltaNet(cfg, 0).to(dtype), seed)
        return _linear_reference(layer, cfg, "transformers.models.qwen3_next.modeling_qwen3_next",
                                 _recurrent_states(cfg.linear_conv_kernel_dim))
    return build


# ------------------------------------------------------------------ Kimi Delta Attention (Kimi Linear)


def _kimi_linear(dtype: torch.dtype, seed: int) -> Reference:
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    cfg = KimiLinearConfig(hidden_size=D_MODEL, linear_num_heads=4, linear_head_dim=8, num_hidden_layers=1,
                           layer_types=["linear_attention"])
    layer = randomize_(KimiLinearDeltaAttention(cfg, 0).to(dtype), seed)
    return _linear_reference(layer, cfg, "transformers.models.kimi_linear.modeling_kimi_linear",
                             _recurrent_states(cfg.linear_conv_kernel_dim))


# ------------------------------------------------------------------ Mamba2


def _mamba2(dtype: torch.dtype, seed: int) -> Reference:
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = Mamba2Config(hidden_size=D_MODEL, num_heads=4, head_dim=8, state_size=6, n_groups=2, expand=1,
                       chunk_size=16, num_hidden_layers=1)
    layer = randomize_(Mamba2Mixer(cfg, 0).to(dtype), seed)
    with torch.no_grad():
        layer.dt_bias.sub_(1.0)  # Δ = softplus(x W_dt + dt_bias − 1), mostly below 1: the state carries over tokens
    inner, gn = layer.intermediate_size, cfg.n_groups * cfg.state_size

    def states(cache, ours):
        """Its state [B, H, P, N] is our S [B, H, N, P] transposed; its conv channels are [x, B, C], ours [C, B, x]."""
        w = cfg.conv_kernel - 1  # it keeps the last conv_kernel inputs, we keep conv_kernel − 1
        conv, memory = linear_states(cache, 0)
        x, b, c = conv[..., -w:].transpose(1, 2).split([inner, gn, gn], dim=-1)
        return [("memory", ours.memory, memory.transpose(-1, -2)), ("conv", ours.conv, torch.cat([c, b, x], dim=-1))]

    return _linear_reference(layer, cfg, "transformers.models.mamba2.modeling_mamba2", states)


def _mamba2_norm_ungrouped(module: types.ModuleType) -> str | None:
    """Before transformers 5.23 Mamba2Mixer's gated RMSNorm normalises all n_groups groups at once;
    mamba_ssm, later releases and assocmem normalise each group (the case has 2)."""
    if "group_size" in inspect.signature(module.MambaRMSNormGated.__init__).parameters:
        return None
    return ("this transformers' Mamba2Mixer normalises its gated output across all groups at once (fixed in "
            "transformers 5.23: one RMSNorm per group, as mamba_ssm); it is no oracle for n_groups > 1")


# ------------------------------------------------------------------ Mamba


def _mamba(dtype: torch.dtype, seed: int) -> Reference:
    from transformers import MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer

    cfg = MambaConfig(hidden_size=D_MODEL, state_size=6, expand=2, conv_kernel=4, time_step_rank=3,
                      num_hidden_layers=1, use_bias=True)
    layer = randomize_(MambaMixer(cfg, 0).to(dtype), seed)
    with torch.no_grad():
        layer.dt_proj.bias.sub_(1.0)  # Δ mostly below 1: the state carries over tokens

    def states(cache, ours):
        """Its state h [B, D, N] is our S [B, 1, N, D] transposed; it keeps the last conv_kernel inputs, we
        keep conv_kernel − 1."""
        w = cfg.conv_kernel - 1
        conv, memory = linear_states(cache, 0)
        return [("memory", ours.memory, memory.transpose(-1, -2)[:, None]),
                ("conv", ours.conv, conv[..., -w:].transpose(1, 2))]

    return _linear_reference(layer, cfg, "transformers.models.mamba.modeling_mamba", states)


# ------------------------------------------------------------------ attention (Llama, Qwen2, Qwen3)


def _rotary_run(layer, rotary):
    """run(x [B, T, d], start, cache) of a transformers attention layer that takes its RoPE as
    position_embeddings: positions start .. start + T - 1."""
    def run(x, start, cache):
        pos = torch.arange(start, start + x.shape[1], device=x.device)[None]
        return call_with_cache(layer, x, position_embeddings=rotary(x, pos), attention_mask=None, cache=cache)[0]
    return run


def _attention(family: str, prefix: str, **options):
    def build(dtype: torch.dtype, seed: int) -> Reference:
        import transformers

        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        cfg = getattr(transformers, f"{prefix}Config")(hidden_size=D_MODEL, num_attention_heads=4,
                                                       num_key_value_heads=2, num_hidden_layers=1, rope_theta=500.0,
                                                       rms_norm_eps=1e-5, **options)
        cfg._attn_implementation = "sdpa"
        layer = randomize_(getattr(module, f"{prefix}Attention")(cfg, 0).to(dtype), seed)
        rotary = getattr(module, f"{prefix}RotaryEmbedding")(cfg)
        rotary.inv_freq = rotary.compute_default_rope_parameters(cfg)[0]  # float64 under float64_retyped

        def states(cache, ours):
            keys, values = attention_states(cache, 0)
            return [("keys", ours.keys, keys), ("values", ours.values, values)]

        return Reference(layer, _rotary_run(layer, rotary), lambda x: transformers.DynamicCache(config=cfg), states)
    return build


# ------------------------------------------------------------------ multi-head latent attention (DeepSeek-V3)


def _deepseek_v3(q_rank: int | None, interleave: bool):
    def build(dtype: torch.dtype, seed: int) -> Reference:
        import transformers
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as module

        cfg = transformers.DeepseekV3Config(hidden_size=D_MODEL, num_attention_heads=4, num_key_value_heads=4,
                                            num_hidden_layers=1, q_lora_rank=q_rank, kv_lora_rank=12,
                                            qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
                                            rope_interleave=interleave, rope_theta=500.0)
        cfg._attn_implementation = "sdpa"
        layer = randomize_(module.DeepseekV3Attention(cfg, 0).to(dtype), seed)
        rotary = module.DeepseekV3RotaryEmbedding(cfg)
        rotary.inv_freq = rotary.compute_default_rope_parameters(cfg)[0]  # float64 under float64_retyped

        def states(cache, ours):
            """Its cache keeps [B, 1, N, d_c] latents as keys and [B, 1, N, d_R] rotated keys as values."""
            latent, rope_keys = attention_states(cache, 0)
            return [("latent", ours.latent, latent[:, 0]), ("rope_keys", ours.rope_keys, rope_keys[:, 0])]

        return Reference(layer, _rotary_run(layer, rotary), lambda x: transformers.DynamicCache(config=cfg), states)
    return build


LAYER_CASES: dict[str, LayerCase] = {c.name: c for c in (
    LayerCase("Qwen3NextGatedDeltaNet (Hk=2, Hv=2)", "gated_deltanet",
              "transformers.models.qwen3_next.modeling_qwen3_next", _qwen3_next(2, 2)),
    LayerCase("Qwen3NextGatedDeltaNet (Hk=2, Hv=4)", "gated_deltanet",
              "transformers.models.qwen3_next.modeling_qwen3_next", _qwen3_next(2, 4)),
    LayerCase("KimiLinearDeltaAttention (H=4, K=V=8)", "kda", "transformers.models.kimi_linear.modeling_kimi_linear",
              _kimi_linear),
    LayerCase("MambaMixer (D=64, N=6, dt_rank 3, conv and projection biases)", "mamba",
              "transformers.models.mamba.modeling_mamba", _mamba),
    LayerCase("Mamba2Mixer (H=4, P=8, N=6, 2 groups, conv bias)", "mamba2",
              "transformers.models.mamba2.modeling_mamba2", _mamba2, differs=_mamba2_norm_ungrouped),
    LayerCase("DeepseekV3Attention (MLA, H=4, d_h=8, d_R=4, d_v=6, d_c=12, q_rank 10)", "mla",
              "transformers.models.deepseek_v3.modeling_deepseek_v3", _deepseek_v3(10, False)),
    LayerCase("DeepseekV3Attention (MLA, H=4, d_h=8, d_R=4, d_v=6, d_c=12, no q compression, interleaved RoPE)",
              "mla", "transformers.models.deepseek_v3.modeling_deepseek_v3", _deepseek_v3(None, True)),
    LayerCase("LlamaAttention (GQA, biases)", "softmax", "transformers.models.llama.modeling_llama",
              _attention("llama", "Llama", attention_bias=True)),
    LayerCase("Qwen2Attention (GQA, q/k/v biases)", "softmax", "transformers.models.qwen2.modeling_qwen2",
              _attention("qwen2", "Qwen2")),
    LayerCase("Qwen3Attention (GQA, QK-norm, head_dim 12)", "softmax", "transformers.models.qwen3.modeling_qwen3",
              _attention("qwen3", "Qwen3", head_dim=12)),
)}
