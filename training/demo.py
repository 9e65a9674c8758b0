"""Deprecated: `assocmem demo` moved to ``assocmem.probes.demo`` (removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, names_in("assocmem.probes.demo", "USER_SPEC", "register", "fresh_dir", "main"))
