"""Mixer specs, presets, hand-written references, fast forms, verification, modules."""
from .presets import ALIASES, get_preset, list_presets, register_preset
from .references import register_reference
from .spec import LayerOptions, MixerSpec

__all__ = ["MixerSpec", "LayerOptions", "get_preset", "list_presets", "register_preset", "register_reference", "ALIASES"]
