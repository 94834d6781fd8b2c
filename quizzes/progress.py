"""Local progress of a self-learner: which quick-check questions passed, or were answered (lesson 00).

Auto-graded questions pass or not. A free response is only ever *answered*: the learner compares
it with the model answer (self-assessment), so it is counted apart from the questions that passed.

Stored as JSON in progress.json under $KVCOURSE_PROGRESS, else $XDG_DATA_HOME/kvcourse, else
~/.local/share/kvcourse. Nothing leaves the machine. The file also keeps this learner's seed,
so parameterised questions show the same values every time they are opened.

The file is the learner's, so it is handled with care:
- every change is made under a file lock on the file as it is on disk *now*, so two notebooks
  open at once merge their progress instead of overwriting each other's;
- a file that cannot be read (not JSON, the wrong shape, fields of the wrong type) is copied to
  progress.damaged-<time>.json, never over an earlier copy, and what could be saved is kept;
- a file written by a newer version of the course is left untouched: progress is then kept in
  memory only, and ``notes`` says so.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; each write is still atomic
    fcntl = None

_VERSION = 1
_SEED = re.compile(r"[0-9a-f]{1,64}")
_FLAGS = ("passed", "revealed", "answered")


def progress_dir() -> Path:
    """The folder that holds progress.json."""
    if os.environ.get("KVCOURSE_PROGRESS"):
        return Path(os.environ["KVCOURSE_PROGRESS"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "kvcourse"


def _clean_entry(entry: object) -> tuple[dict | None, str]:
    """A question's record with every field of the right type, and what had to change ("" if nothing)."""
    if not isinstance(entry, dict):
        return None, f"a record is a {type(entry).__name__}, not a table"
    clean: dict = {}
    problem = ""
    for flag in _FLAGS:
        value = entry.get(flag, False)
        clean[flag] = value is True  # only JSON true counts: "no", 1 or "false" do not pass a question
        if not isinstance(value, bool):
            problem = f"{flag} is {_short(value)}, not true/false"
    attempts = entry.get("attempts", 0)
    if type(attempts) is int and 0 <= attempts < 10**9:
        clean["attempts"] = attempts
    else:
        clean["attempts"] = 0
        problem = f"attempts is {_short(attempts)}, not a count"
    if isinstance(entry.get("last"), str) and len(entry["last"]) <= 40:
        clean["last"] = entry["last"]
    elif "last" in entry:
        problem = f"last is {_short(entry['last'])}, not a time"
    return clean, problem


def _short(value: object) -> str:
    from .units import shown

    return shown(value, 40)


def parse_progress(text: str) -> tuple[dict, list[str]]:
    """(data, problems) from the text of a progress file: what could be kept, and why the rest could not.

    Raises ValueError for a file that is not JSON or has no usable shape at all.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"it holds a {type(data).__name__}, not a table")
    if data.get("version") != _VERSION:
        raise ValueError(f"its version is {_short(data.get('version'))}, expected {_VERSION}")
    lessons = data.get("lessons", {})
    if not isinstance(lessons, dict):
        raise ValueError(f"'lessons' is a {type(lessons).__name__}, not a table")
    problems: list[str] = []
    clean: dict = {"version": _VERSION, "lessons": {}}
    seed = data.get("seed")
    if isinstance(seed, str) and _SEED.fullmatch(seed):
        clean["seed"] = seed
    elif "seed" in data:
        problems.append(f"the seed {_short(seed)} is not a hex string (a new one is drawn)")
    for lesson, questions in lessons.items():
        if not isinstance(questions, dict):
            problems.append(f"lesson {_short(lesson)} is a {type(questions).__name__}, not a table")
            continue
        for qid, entry in questions.items():
            entry, problem = _clean_entry(entry)
            if problem:
                problems.append(f"lesson {_short(lesson)}, question {_short(qid)}: {problem}")
            if entry is not None:
                clean["lessons"].setdefault(str(lesson), {})[str(qid)] = entry
    return clean, problems


class Progress:
    """The progress file: read on creation, and every change merged into it under a lock."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or progress_dir() / "progress.json"
        self.notes: list[str] = []  # what the learner should know about the file (shown once)
        self.read_only = False  # a newer version's file: left untouched
        self._repaired = False  # the last _load salvaged a damaged file: write the salvage back
        if self.path.exists():
            with self._locked():
                self.data = self._load()
                if self._repaired and not self.read_only:
                    self._write(self.data)
        else:
            self.data = {"version": _VERSION, "lessons": {}}

    # -- reading -------------------------------------------------------------------------------

    def _load(self) -> dict:
        """The file's data now (salvaged and backed up if damaged); an empty record if there is none."""
        self._repaired = False
        fresh = {"version": _VERSION, "lessons": {}}
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return fresh
        except OSError as err:
            self._note(f"Could not read {self.path} ({err.strerror}); progress is kept in memory only.")
            self.read_only = True
            return fresh
        version = _peek_version(raw)
        if isinstance(version, int) and not isinstance(version, bool) and version > _VERSION:
            self.read_only = True
            self._note(
                f"{self.path} was written by a newer version of the course (file version {version}); "
                "it is left untouched and this session's progress is not saved. Update the course "
                "to keep saving progress."
            )
            return fresh
        try:
            data, problems = parse_progress(raw.decode("utf-8"))
        except (ValueError, UnicodeError) as err:  # JSONDecodeError is a ValueError
            backup = self._backup(raw)
            self._note(
                f"{self.path} could not be read ({_short(str(err))}); it was kept as {backup.name} "
                "and progress starts afresh."
            )
            self._repaired = True
            return fresh
        if problems:
            backup = self._backup(raw)
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self._note(
                f"{self.path} had fields of the wrong type: {problems[0]}{more}. The rest was kept; "
                f"the original is saved as {backup.name}."
            )
            self._repaired = True
        return data

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _backup(self, raw: bytes) -> Path:
        """Copy a damaged file aside under a new, timestamped name; an earlier backup is never overwritten."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        for n in range(1000):
            suffix = f"-{n}" if n else ""
            target = self.path.with_name(f"{self.path.stem}.damaged-{stamp}{suffix}.json")
            try:
                with open(target, "xb") as f:  # "x": fails if the name is taken
                    f.write(raw)
                return target
            except FileExistsError:
                continue
        raise OSError(f"too many damaged copies of {self.path} this second")

    # -- writing -------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    def _update(self, change) -> None:
        """Apply ``change(data)`` to the file as it is on disk now, under the lock, and write it back."""
        if self.read_only:
            change(self.data)
            return
        with self._locked():
            data = self._load()
            if self.read_only:  # the file became a newer version's while we were open
                change(self.data)
                return
            change(data)
            self._write(data)
            self.data = data

    def _write(self, data: dict) -> None:
        """Replace the file (the caller holds the lock)."""
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)  # atomic: a crash never leaves half a file

    @property
    def seed(self) -> str:
        """This learner's seed for parameterised questions, created on first use."""
        if "seed" not in self.data:
            self._update(lambda data: data.setdefault("seed", secrets.token_hex(8)))
        return self.data["seed"]

    def record(
        self, lesson: str, question_id: str, passed: bool, revealed: bool = False, answered: bool = False
    ) -> None:
        """Note one attempt; a question that passed once stays passed.

        ``answered`` marks a free response written and compared with the model answer (self-assessed).
        """
        now = datetime.now(UTC).isoformat(timespec="seconds")

        def change(data: dict) -> None:
            entry = (
                data["lessons"]
                .setdefault(lesson, {})
                .setdefault(question_id, {"passed": False, "attempts": 0, "revealed": False})
            )
            if not revealed:
                entry["attempts"] = entry.get("attempts", 0) + 1
            entry["passed"] = entry.get("passed") is True or passed is True
            entry["revealed"] = entry.get("revealed") is True or revealed is True
            entry["answered"] = entry.get("answered") is True or answered is True
            entry["last"] = now

        self._update(change)

    def lesson(self, lesson: str) -> dict[str, dict]:
        """Per question id: passed, attempts, revealed, answered."""
        return self.data["lessons"].get(lesson, {})

    def passed(self, lesson: str) -> set[str]:
        """Ids of the questions of a lesson that passed."""
        return {qid for qid, entry in self.lesson(lesson).items() if entry.get("passed") is True}

    def answered(self, lesson: str) -> set[str]:
        """Ids of the free responses of a lesson that were written and self-assessed."""
        return {qid for qid, entry in self.lesson(lesson).items() if entry.get("answered") is True}


def _peek_version(raw: bytes) -> object:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeError):
        return None
    return data.get("version") if isinstance(data, dict) else None


def format_progress(progress: Progress | None = None) -> str:
    """A table: per lesson, how many auto-graded questions passed and how many free responses were answered."""
    from kvcourse.syllabus import load_syllabus

    from .bank import load_quiz

    progress = progress or Progress()
    width = max(len(lesson.title) for lesson in load_syllabus())
    lines = [
        *progress.notes,
        f"Progress ({progress.path})",
        f"{'#':<3} {'lesson':<{width}}  passed       self-assessed",
    ]
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
    lines.append(
        "passed: checked questions you got right. answered: free responses you wrote and compared "
        "with the model answer yourself; nothing grades them here."
    )
    return "\n".join(lines)
