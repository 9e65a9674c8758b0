"""Deprecated: the `assocmem bench` command moved to ``assocmem.training.bench.cli`` (removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, names_in("assocmem.training.bench.cli", "register", "output_problem"))
