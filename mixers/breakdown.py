"""Deprecated: `assocmem bench breakdown` moved to ``assocmem.training.bench.breakdown`` (removed in 0.2.0)."""
from assocmem.memories.deprecation import moved, names_in

__getattr__ = moved(__name__, names_in(
    "assocmem.training.bench.breakdown", "MATMUL_OPS", "SOLVE_OPS", "COPY_OPS", "NO_WORK_OPS", "REST", "FUSED",
    "KINDS", "COMPILED_FORMS", "KindRow", "product_flops", "kind_of", "profile_kinds", "breakdown",
    "format_breakdown"))
