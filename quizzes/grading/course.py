"""An nbgrader course's instructor-only settings: where they live and what they draw (quizzes/INSTRUCTORS.md).

`kvcourse grade init` writes instructor/course.json (nbgrader_export.py); grading reads it back as a
``Course`` (decide.py, gradebook.py, report.py). The folder's name, the file's name and how many hidden
cases the course's secret draws per student for a code question live here, below both, so that writing a
course and grading one never import each other. How many hidden traces a lab draws is the lab's own
(``LabSpec.num_hidden_traces``, kvcourse.labs.spec).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path

INSTRUCTOR_DIR = "instructor"  # the course's secret lives here: never inside source/ or release/
COURSE_FILE = "course.json"
NUM_HIDDEN_CASES = 3  # per code question, drawn per student, beside the bank's public cases


@dataclass(frozen=True)
class Course:
    """An nbgrader course written by `kvcourse grade init`, with its instructor-only settings."""

    directory: Path
    course_id: str
    salt: str
    secret: str = field(repr=False)
    exchange: str

    @classmethod
    def load(cls, directory: Path) -> Course:
        path = Path(directory) / INSTRUCTOR_DIR / COURSE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise ValueError(
                f"{path.resolve()} cannot be read ({why}). Is {Path(directory).resolve()} a course written "
                "by `kvcourse grade init`? cd into the course folder or pass --course DIR"
            ) from None
        return cls(Path(directory).resolve(), data["course_id"], data["salt"], data["secret"], data["exchange"])

    def seed(self, student: str) -> str:
        """The seed of a student's parameterised values (the same draw as the notebook's set-up cell)."""
        return f"{self.salt}/{student}"

    def draw(self, *parts: str) -> int:
        """A number only the course's secret can predict (hidden test cases)."""
        digest = hmac.new(bytes.fromhex(self.secret), "|".join(parts).encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big")
