"""Time budgets for the GPU benches: one slow case is cut off and reported, never waited for.

    with Budget(total_s) as run:              the whole bench: ``run.left()`` seconds remain
        with run.case(case_s):                one case: at most min(case_s, run.left()) seconds
            ...                               raises BudgetExceeded when they are spent

A case's limit is enforced two ways: ``check()`` between calls (cheap, always), and SIGALRM (an
interval timer) that raises ``BudgetExceeded`` inside a call that runs Python, such as
torch.compile compiling or Triton autotuning, so a compile that takes minutes stops at its limit.
A single long kernel is not interrupted (the signal lands when it returns). The timer needs the
main thread; elsewhere only ``check()`` applies.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time


class BudgetExceeded(Exception):
    """The time budget of a case or of the whole bench is spent."""


class Budget:
    """The seconds a bench may take (``total_s``) and, per case, at most ``case(case_s)``."""

    def __init__(self, total_s: float):
        self.total_s = float(total_s)
        self.start = time.perf_counter()
        self._deadline: float | None = None

    def __enter__(self) -> "Budget":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def left(self) -> float:
        """Seconds left of the whole bench."""
        return self.total_s - (time.perf_counter() - self.start)

    def check(self) -> None:
        """Raise ``BudgetExceeded`` when the current case's (or the bench's) seconds are spent."""
        now = time.perf_counter()
        if self._deadline is not None and now >= self._deadline:
            raise BudgetExceeded("case budget spent")
        if self.left() <= 0:
            raise BudgetExceeded("bench budget spent")

    @contextlib.contextmanager
    def case(self, case_s: float):
        """At most min(case_s, what is left) seconds for the body (``BudgetExceeded`` past them)."""
        limit = min(float(case_s), self.left())
        if limit <= 0:
            raise BudgetExceeded("bench budget spent")
        self._deadline = time.perf_counter() + limit
        timer = threading.current_thread() is threading.main_thread()
        if timer:
            def alarm(signum, frame):
                raise BudgetExceeded(f"case budget of {limit:.0f} s spent")

            previous = signal.signal(signal.SIGALRM, alarm)
            signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            yield self
        finally:
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            self._deadline = None
