"""Quick checks: one question bank, rendered as widgets or as an nbgrader course (lesson 00)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checking import Verdict
    from .widget import QuickCheck

__all__ = ["check_answer", "quick_check"]


def quick_check(lesson: str | int) -> QuickCheck:
    """The lesson's questions as widgets with instant feedback: `quick_check("07")`."""
    from .widget import quick_check as _quick_check  # ipywidgets only where widgets are wanted

    return _quick_check(lesson)


def check_answer(lesson: str | int, question_id: str, answer: Any) -> Verdict:
    """Check one answer in code, e.g. check_answer("07", "per_token_13b", "0.8 MB"); records progress."""
    from .bank import load_quiz
    from .checking import check
    from .progress import Progress

    progress = Progress()
    for note in progress.notes:  # a damaged or newer progress file: say so once, never a traceback
        print(note)
    question = load_quiz(lesson).question(question_id)
    verdict = check(question, answer, progress.seed)
    if not verdict.malformed:
        progress.record(question.lesson, question.id, verdict.passed, answered=verdict.self_assessed)
    return verdict
