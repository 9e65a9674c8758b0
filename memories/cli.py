"""Deprecated: `assocmem derive` moved to ``assocmem.mixers.cli`` (this path is removed in 0.2.0)."""
from .deprecation import moved

__getattr__ = moved(__name__, {"register": "assocmem.mixers.cli.register_derive",
                               "main": "assocmem.mixers.cli.derive_main"})
