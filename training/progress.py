"""Progress of long commands: the one helper every experiment and multi-model probe reports through.

A command that trains or probes several models prints one line on stderr when a unit of work
starts and one when it ends, with the time it took, the time so far and an estimate of the rest
(the mean time per finished unit times the units left):

    hybrid-experiment [2/6] gdn-25% ...
    hybrid-experiment [2/6] gdn-25% done in 41.2 s (1 min 22 s so far, about 2 min 44 s left)

``progress(items, what)`` wraps a sequential loop; ``Progress.done`` serves work finished out of
order (process pools). Training steps themselves have the tqdm bar of ``train.progress``. A library
call that reports lines of its own (``verify(report=)``, ``trace_graph(report=)``) takes
``progress_line(command)``: each line on stderr at once, after the time since the command started.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def duration(seconds: float) -> str:
    """``41.2 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """Lines ``what [k/total] label ...`` on ``stream`` (stderr by default), flushed at once."""

    def __init__(self, total: int, what: str, *, stream: TextIO | None = None):
        self.total, self.what, self.stream = total, what, stream
        self.finished, self.begun = 0, time.perf_counter()
        self._started: dict[str, float] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.stream if self.stream is not None else sys.stderr, flush=True)

    def say(self, text: str) -> None:
        """A line ``what text`` (e.g. the work handed to a process pool, before any of it ends)."""
        self._print(f"{self.what} {text}")

    def start(self, label: str) -> None:
        """Announce ``label`` (the next unit, numbered after the ones finished and under way)."""
        self._started[label] = time.perf_counter()
        self._print(f"{self.what} [{self.finished + len(self._started)}/{self.total}] {label} ...")

    def done(self, label: str, note: str = "") -> None:
        """``label`` finished (``note``: the unit's result in a few words)."""
        now = time.perf_counter()
        started = self._started.pop(label, None)  # None: run elsewhere (a process pool), no duration of its own
        self.finished += 1
        elapsed = now - self.begun
        left = self.total - self.finished
        took = f" in {duration(now - started)}" if started is not None else ""
        eta = f", about {duration(elapsed / self.finished * left)} left" if left else ""
        extra = f"; {note}" if note else ""
        self._print(f"{self.what} [{self.finished}/{self.total}] {label} done{took}{extra} "
                    f"({duration(elapsed)} so far{eta})")


def progress(items: Iterable[T], what: str, *, label: Callable[[T], str] = str,
             stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items`` one by one, reporting each through a ``Progress`` (start before, done after)."""
    items = list(items)
    tracker = Progress(len(items), what, stream=stream)
    for item in items:
        name = label(item)
        tracker.start(name)
        yield item
        tracker.done(name)


def progress_line(command: str, *, stream: TextIO | None = None) -> Callable[[str], None]:
    """A ``report`` for a long library call: ``verify (12.3 s) gated_deltanet [3/19] ...`` on stderr, flushed."""
    start = time.perf_counter()

    def report(line: str) -> None:
        print(f"{command} ({duration(time.perf_counter() - start)}) {line}",
              file=stream if stream is not None else sys.stderr, flush=True)

    return report
