"""The labs' reference solutions (lessons 18-20): the instructor's side, hidden in the grading sandbox.

Each ``solution_<lab>.py`` is the code a lab's answer cell holds between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` in the instructor's source notebook, and what a self-learner's ``solution(...)``
reveals. A test checks that each scores full marks on every public and drawn trace.
"""

from __future__ import annotations

from pathlib import Path

CLASS_NAMES = {"block_manager": "MyBlockManager", "eviction": "MyEviction", "scheduler": "MyScheduler"}
LAB_LESSONS = {"block_manager": "18", "eviction": "19", "scheduler": "20"}


def solution_source(lab: str) -> str:
    """The reference solution's code (its imports and its class), as a notebook cell holds it."""
    if lab not in CLASS_NAMES:
        raise ValueError(f"no lab {lab!r}: the labs are {', '.join(CLASS_NAMES)}")
    return (Path(__file__).parent / f"solution_{lab}.py").read_text(encoding="utf-8").strip() + "\n"


def reference(lab: str) -> type:
    """The reference solution's class (a self-learner's notebook shows what a passing run looks like)."""
    namespace: dict = {}
    exec(compile(solution_source(lab), f"<solution of lab {lab}>", "exec"), namespace)  # our own file
    return namespace[CLASS_NAMES[lab]]
