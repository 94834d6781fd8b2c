"""The course map, read from syllabus.toml (lesson 00)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_FIELDS = ("number", "slug", "title", "notebook", "seed", "simulator", "engine", "quiz", "summary")


@dataclass(frozen=True)
class Lesson:
    """One entry of the course map."""

    number: str
    slug: str
    title: str
    notebook: str
    seed: str
    simulator: str
    engine: str
    quiz: str
    summary: str

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d\d", self.number):
            raise ValueError(f"lesson number must be two digits, got {self.number!r}")
        expected = f"lessons/{self.number}_{self.slug}.ipynb"
        if self.notebook != expected:
            raise ValueError(f"lesson {self.number}: notebook must be {expected!r}, got {self.notebook!r}")

    @property
    def notebook_path(self) -> Path:
        return REPO_ROOT / self.notebook


@cache
def load_syllabus() -> tuple[Lesson, ...]:
    """All lessons, in course order."""
    text = resources.files("kvcourse").joinpath("syllabus.toml").read_text(encoding="utf-8")
    entries = tomllib.loads(text)["lesson"]
    lessons = []
    for i, entry in enumerate(entries):
        missing = [f for f in _FIELDS if f not in entry]
        unknown = [f for f in entry if f not in _FIELDS]
        if missing or unknown:
            raise ValueError(f"syllabus.toml entry {i}: missing {missing}, unknown {unknown}")
        lessons.append(Lesson(**entry))
    numbers = [lesson.number for lesson in lessons]
    if numbers != sorted(set(numbers)):
        raise ValueError(f"syllabus.toml: lesson numbers must be unique and ascending, got {numbers}")
    return tuple(lessons)


@dataclass(frozen=True)
class Part:
    """A part of the course: the lessons from ``first`` up to the next part's first."""

    first: str  # the number of its first lesson
    title: str


@cache
def load_parts() -> tuple[Part, ...]:
    """The course's parts, in order: each begins at a lesson of the syllabus, the first at its first lesson."""
    text = resources.files("kvcourse").joinpath("syllabus.toml").read_text(encoding="utf-8")
    parts = tuple(Part(str(entry["first"]), str(entry["title"])) for entry in tomllib.loads(text).get("part", []))
    numbers = [lesson.number for lesson in load_syllabus()]
    firsts = [part.first for part in parts]
    if not parts or firsts[0] != numbers[0] or firsts != sorted(set(firsts)) or not set(firsts) <= set(numbers):
        raise ValueError(f"syllabus.toml: the parts must begin at lessons of the syllabus, the first at {numbers[0]}")
    return parts


def part_of(number: str) -> Part:
    """The part a lesson belongs to."""
    return [part for part in load_parts() if part.first <= number][-1]


def get_lesson(number: str | int) -> Lesson:
    """The lesson with this number ("07" or 7)."""
    key = f"{int(number):02d}" if str(number).isdigit() else str(number)
    for lesson in load_syllabus():
        if lesson.number == key:
            return lesson
    known = ", ".join(lesson.number for lesson in load_syllabus())
    raise KeyError(f"no lesson {number!r}; the lessons are {known}")


def format_syllabus(lessons: tuple[Lesson, ...] | None = None) -> str:
    """The course map as a plain-text table, a line naming each part above its first lesson."""
    lessons = lessons or load_syllabus()
    width = max(len(lesson.title) for lesson in lessons)
    lines = [f"{'#':<3} {'lesson':<{width}}  {'seed':<12} notebook", "-" * (width + 50)]
    starts = {part.first: part.title for part in load_parts()}
    for lesson in lessons:
        if lesson.number in starts:
            lines.append(f"-- {starts[lesson.number]} --")
        seed = lesson.seed or "-"
        lines.append(f"{lesson.number:<3} {lesson.title:<{width}}  {seed:<12} {lesson.notebook}")
    return "\n".join(lines)
