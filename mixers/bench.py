"""Deprecated: `assocmem bench mixers` moved to ``assocmem.training.bench.forms`` and its measuring
helpers to ``assocmem.training.bench.timing`` (this path is removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, {
    **names_in("assocmem.training.bench.forms", "FAMILIES", "DERIVED_MAX_T", "PEER_CHUNK", "FAST_REPEATS",
               "BenchRow", "chunk_flops", "implementations", "chunk_size_used", "bench_family", "run_bench",
               "ratio_table", "median_rows", "markdown_table"),
    **names_in("assocmem.training.bench.timing", "measure", "time_round_robin", "measure_round_robin",
               "matmul_peak_gflops")})
