"""An idle engine that cannot start anyone: which waiting sequence it refuses, and the words for why (lab C).

``add_request`` refuses what could never fit alone, so this is a safety net for a scheduling policy or
a block manager (the labs') that admits no one while nothing runs: without it, no step would ever
change anything and the engine would spin. A sequence that has begun its answer is never refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvcourse.kernels.engine.sequence import Sequence

STUCK = "nothing else was running and it could not start"  # how such a refusal begins (lab C's grader reads it)


def stuck_sequence(waiting: Iterable[Sequence], stopped_at: Sequence | None) -> Sequence | None:
    """The sequence to refuse: the one admission stopped at, else the first waiting; never one already begun."""
    if stopped_at is not None and not stopped_at.num_completion_tokens:
        return stopped_at
    return next((s for s in waiting if not s.num_completion_tokens), None)


def short_of_blocks(seq_id: int, needed: int, free: int, total: int, anything_running: bool) -> str:
    """Why a sequence could not be admitted: the blocks it needs against the blocks the manager reports."""
    why = f"sequence {seq_id} needs {needed} free blocks to start and the block manager reports {free} of {total}"
    if free < total and not anything_running:
        why += f" with nothing running ({total - free} never given back)"
    return why
