"""Local progress of a self-learner: which quick-check questions passed, or were answered (lesson 00).

Auto-graded questions pass or not. A free response is only ever *answered*: the learner compares
it with the model answer (self-assessment), so it is counted apart from the questions that passed.

Stored as JSON in progress.json under $KVCOURSE_PROGRESS, else $XDG_DATA_HOME/kvcourse, else
~/.local/share/kvcourse. Nothing leaves the machine. The file also keeps this learner's seed,
so parameterised questions show the same values every time they are opened.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

_VERSION = 1


def progress_dir() -> Path:
    """The folder that holds progress.json."""
    if os.environ.get("KVCOURSE_PROGRESS"):
        return Path(os.environ["KVCOURSE_PROGRESS"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "kvcourse"


class Progress:
    """The progress file, read on creation and written after every change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or progress_dir() / "progress.json"
        self.data = self._read()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError):
            # A damaged file must not stop the lesson: keep it aside and start again.
            self.path.replace(self.path.with_suffix(".damaged.json"))
            data = {}
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            data = {}
        data.setdefault("version", _VERSION)
        data.setdefault("lessons", {})
        return data

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)  # atomic: a crash never leaves half a file

    @property
    def seed(self) -> str:
        """This learner's seed for parameterised questions, created on first use."""
        if "seed" not in self.data:
            self.data["seed"] = secrets.token_hex(8)
            self._write()
        return self.data["seed"]

    def record(self, lesson: str, question_id: str, passed: bool, revealed: bool = False,
               answered: bool = False) -> None:
        """Note one attempt; a question that passed once stays passed.

        ``answered`` marks a free response written and compared with the model answer (self-assessed).
        """
        entry = self.data["lessons"].setdefault(lesson, {}).setdefault(
            question_id, {"passed": False, "attempts": 0, "revealed": False})
        if not revealed:
            entry["attempts"] += 1
        entry["passed"] = entry["passed"] or passed
        entry["revealed"] = entry["revealed"] or revealed
        entry["answered"] = entry.get("answered", False) or answered
        entry["last"] = datetime.now(UTC).isoformat(timespec="seconds")
        self._write()

    def lesson(self, lesson: str) -> dict[str, dict]:
        """Per question id: passed, attempts, revealed, answered."""
        return self.data["lessons"].get(lesson, {})

    def passed(self, lesson: str) -> set[str]:
        """Ids of the questions of a lesson that passed."""
        return {qid for qid, entry in self.lesson(lesson).items() if entry.get("passed")}

    def answered(self, lesson: str) -> set[str]:
        """Ids of the free responses of a lesson that were written and self-assessed."""
        return {qid for qid, entry in self.lesson(lesson).items() if entry.get("answered")}


def format_progress(progress: Progress | None = None) -> str:
    """A table: per lesson, how many auto-graded questions passed and how many free responses were answered."""
    from kvcourse.syllabus import load_syllabus

    from .bank import load_quiz

    progress = progress or Progress()
    width = max(len(lesson.title) for lesson in load_syllabus())
    lines = [f"Progress ({progress.path})",
             f"{'#':<3} {'lesson':<{width}}  passed       self-assessed"]
    totals = [0, 0, 0, 0]  # passed, auto-graded, answered, free
    for lesson in load_syllabus():
        questions = load_quiz(lesson.number).questions
        graded = {q.id for q in questions if q.auto_graded}
        free = {q.id for q in questions if not q.auto_graded}
        passed = len(progress.passed(lesson.number) & graded)
        # A free response counts as answered; a file from before this rule may say "passed" for it.
        answered = len((progress.answered(lesson.number) | progress.passed(lesson.number)) & free)
        for i, n in enumerate((passed, len(graded), answered, len(free))):
            totals[i] += n
        bar = "#" * passed + "." * (len(graded) - passed)
        line = f"{lesson.number:<3} {lesson.title:<{width}}  {f'{passed}/{len(graded)} {bar}':<12}"
        if free:
            line += f" {answered}/{len(free)} answered"
        lines.append(line.rstrip())
    lines.append(f"{'':<3} {'all lessons':<{width}}  {f'{totals[0]}/{totals[1]}':<12} {totals[2]}/{totals[3]} answered")
    lines.append("passed: checked questions you got right. answered: free responses you wrote and compared "
                 "with the model answer yourself; nothing grades them here.")
    return "\n".join(lines)
