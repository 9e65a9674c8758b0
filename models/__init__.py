"""Hybrid language models from composed specs: blocks, HF integration, caches, presets.

Importing this package registers AssocMemConfig / AssocMemForCausalLM with
transformers' AutoConfig / AutoModel / AutoModelForCausalLM (model_type "assocmem").
"""
from .blocks import Block, SwiGLU
from .cache import AssocMemCache
from .config import HybridConfig
from .modeling import AssocMemConfig, AssocMemForCausalLM, AssocMemModel, output_cache
from .presets import build_model, get_model_preset, list_model_presets

__all__ = [
    "HybridConfig", "AssocMemConfig", "AssocMemModel", "AssocMemForCausalLM", "AssocMemCache",
    "Block", "SwiGLU", "output_cache", "build_model", "get_model_preset", "list_model_presets",
]
