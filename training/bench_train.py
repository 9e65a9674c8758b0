"""Deprecated: `assocmem bench train` moved to ``assocmem.training.bench.train`` (removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, {**names_in("assocmem.training.bench.train", "DEFAULT_MIXERS", "run_train_bench"),
                               **names_in("assocmem.training.bench.cli", "register_train")})
