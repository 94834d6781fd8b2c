"""The labs' reference solutions (lessons 18-20): the instructor's side, hidden in the grading sandbox.

Each ``solution_<lab>.py`` is the module a lab's spec names as its reference (``LabSpec.reference``,
kvcourse.labs.spec): the code a lab's answer cell holds between ``### BEGIN SOLUTION`` and ``### END
SOLUTION`` in the instructor's source notebook, and what a self-learner's ``solution(...)`` reveals. It is
read as text, never imported. A test checks that each scores full marks on every public and drawn trace.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from kvcourse.labs.spec import lab_spec


def solution_path(lab: str) -> Path:
    """The file of the lab's reference solution (found without running it)."""
    module = lab_spec(lab).reference
    found = find_spec(module)
    if found is None or found.origin is None:
        raise FileNotFoundError(f"lab {lab!r}: its reference solution {module} is missing")
    return Path(found.origin)


def solution_source(lab: str) -> str:
    """The reference solution's code (its imports and its class), as a notebook cell holds it."""
    return solution_path(lab).read_text(encoding="utf-8").strip() + "\n"


def reference(lab: str) -> type:
    """The reference solution's class (a self-learner's notebook shows what a passing run looks like)."""
    namespace: dict = {}
    exec(compile(solution_source(lab), f"<solution of lab {lab}>", "exec"), namespace)  # our own file
    return namespace[lab_spec(lab).class_name]
