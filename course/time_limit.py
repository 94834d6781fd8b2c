"""A time limit on a block of code that runs a learner's function or policy (quick checks, labs)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after `seconds` (main thread on Unix; elsewhere no limit)."""
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _stop(signum, frame):
        raise TimeoutError(f"it ran for more than {seconds:g} s; is there an endless loop?")

    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
