"""Deprecated: `assocmem verify` moved to ``assocmem.mixers.cli`` (this path is removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, {"register": "assocmem.mixers.cli.register_verify",
                               "main": "assocmem.mixers.cli.verify_main",
                               **names_in("assocmem.mixers.cli", "print_table")})
