"""Allocation failures during a run: one line that says what ran out, what is saved and what to lower.

Train, distill and RL wrap each step in ``out_of_memory_guard``; the command line prints
``OutOfMemory``'s line and exits 1.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

import torch

from . import checkpoint as ckpt

__all__ = ["OutOfMemory", "allocation_failure", "out_of_memory_guard"]


class OutOfMemory(RuntimeError):
    """A run stopped by an allocation failure (``torch.OutOfMemoryError`` on the GPU; ``MemoryError`` or the
    CPU allocator's RuntimeError on the host). Its one-line message says what ran out and where, what is
    saved (the newest checkpoint: the step under way is lost) and which settings to lower; ``line(resume)``
    words it for another resume command (``assocmem distill CONFIG``)."""

    def __init__(self, what: str, checkpoint: Path | None, lower: list[str], resume: str):
        self.what, self.checkpoint, self.lower = what, checkpoint, lower
        super().__init__(self.line(resume))

    def line(self, resume: str) -> str:
        if self.checkpoint is None:
            return (f"{self.what}; saved: nothing (no checkpoint yet); lower {' or '.join(self.lower)}, then start "
                    f"again (with --overwrite)")
        return (f"{self.what}; saved: checkpoint {self.checkpoint}; lower {' or '.join(self.lower)}, then resume "
                f"with `{resume}`")


def allocation_failure(err: BaseException) -> str | None:
    """What ran out when ``err`` is an allocation failure ("GPU memory", "host memory"), else None."""
    if isinstance(err, torch.OutOfMemoryError):
        return "GPU memory"
    if isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and "can't allocate memory" in str(err)):
        return "host memory"
    if isinstance(err, RuntimeError) and "out of memory" in str(err).lower():
        return "memory"
    return None


@contextlib.contextmanager
def out_of_memory_guard(run_dir: Path, where: Callable[[], str], lower: Callable[[], list[str]], resume: str):
    """Turn an allocation failure inside the block into ``OutOfMemory`` (where: "in step 3 of 10", at the
    moment it happened; lower: the settings to lower, with their values); other errors pass unchanged."""
    try:
        yield
    except Exception as err:
        kind = allocation_failure(err)
        if kind is None:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise OutOfMemory(f"out of {kind} {where()} ({detail})", ckpt.latest_checkpoint(run_dir), lower(),
                          resume) from err
