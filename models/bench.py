"""Deprecated: `assocmem bench decode` moved to ``assocmem.training.bench.decode`` (removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, {
    **names_in("assocmem.training.bench.decode", "MODELS", "bench_config", "prepared_cache", "time_decode",
               "run_decode_bench", "ratios"),
    **names_in("assocmem.training.bench.cli", "register_decode")})
