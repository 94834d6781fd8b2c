"""Local progress of a self-learner: which quick-check questions passed (lesson 00).

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

    def record(self, lesson: str, question_id: str, passed: bool, revealed: bool = False) -> None:
        """Note one attempt; a question that passed once stays passed."""
        entry = self.data["lessons"].setdefault(lesson, {}).setdefault(
            question_id, {"passed": False, "attempts": 0, "revealed": False})
        if not revealed:
            entry["attempts"] += 1
        entry["passed"] = entry["passed"] or passed
        entry["revealed"] = entry["revealed"] or revealed
        entry["last"] = datetime.now(UTC).isoformat(timespec="seconds")
        self._write()

    def lesson(self, lesson: str) -> dict[str, dict]:
        """Per question id: passed, attempts, revealed."""
        return self.data["lessons"].get(lesson, {})

    def passed(self, lesson: str) -> set[str]:
        """Ids of the questions of a lesson that passed."""
        return {qid for qid, entry in self.lesson(lesson).items() if entry.get("passed")}


def format_progress(progress: Progress | None = None) -> str:
    """A table: per lesson, how many of its questions passed."""
    from kvcourse.syllabus import load_syllabus

    from .bank import load_quiz

    progress = progress or Progress()
    width = max(len(lesson.title) for lesson in load_syllabus())
    lines = [f"Progress ({progress.path})", f"{'#':<3} {'lesson':<{width}}  passed"]
    total_passed = total = 0
    for lesson in load_syllabus():
        ids = [q.id for q in load_quiz(lesson.number).questions]
        passed = len(progress.passed(lesson.number) & set(ids))
        total_passed, total = total_passed + passed, total + len(ids)
        bar = "#" * passed + "." * (len(ids) - passed)
        lines.append(f"{lesson.number:<3} {lesson.title:<{width}}  {passed}/{len(ids)} {bar}")
    lines.append(f"{'':<3} {'all lessons':<{width}}  {total_passed}/{total}")
    return "\n".join(lines)
