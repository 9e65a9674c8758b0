"""Hybrid language models from composed specs: blocks, HF integration, caches, presets.

Importing this package registers AssocMemConfig / AssocMemForCausalLM with
transformers' AutoConfig / AutoModel / AutoModelForCausalLM (model_type "assocmem").
"""
from .blocks import Block, SwiGLU
from .cache import AssocMemCache
from .config import HybridConfig
from .hf_kwargs import output_cache
from .modeling import AssocMemConfig, AssocMemForCausalLM, AssocMemModel, AssocMemPreTrainedModel
from .packed import cu_seqlens_from_positions
from .presets import build_model, get_model_preset, list_model_presets

__all__ = [
    "HybridConfig", "AssocMemConfig", "AssocMemModel", "AssocMemForCausalLM", "AssocMemPreTrainedModel",
    "AssocMemCache", "Block", "SwiGLU", "output_cache", "cu_seqlens_from_positions", "build_model",
    "get_model_preset", "list_model_presets",
]
