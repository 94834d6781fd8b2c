"""The thread policy: how many CPU threads torch may use while the engine runs (lesson 14).

torch's thread count belongs to the whole process. A small model on a busy CPU can decode
faster on one thread: each parallel region is a barrier, and on oversubscribed cores a barrier
can wait a whole scheduler slice. So ``LLMEngine`` (``EngineConfig.num_threads``) and
``generate`` (``num_threads=``) take the choice as a setting and hold it around each step or
call with ``thread_policy``, restoring what they found; never inside an attention call.
``None`` leaves torch's setting alone. (``apply_thread_policy`` sets it for good: the test
suite's conftest uses it, once, for the whole process.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kvcourse.kernels.checks import check_positive_int


def check_num_threads(num_threads: int | None) -> None:
    check_positive_int("num_threads", num_threads, optional=True)


def apply_thread_policy(num_threads: int | None) -> None:
    """Set torch's process-wide CPU thread count, or leave it when ``num_threads`` is None (LLMEngine)."""
    check_num_threads(num_threads)
    if num_threads is not None and torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)


@contextmanager
def thread_policy(num_threads: int | None) -> Iterator[None]:
    """Use ``num_threads`` CPU threads inside the block and restore the previous count after (generate)."""
    previous = torch.get_num_threads()
    apply_thread_policy(num_threads)
    try:
        yield
    finally:
        apply_thread_policy(previous if num_threads is not None else None)
