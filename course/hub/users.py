"""The class list of `kvcourse hub`: who may log in, and who is an instructor (quizzes/INSTRUCTORS.md).

One user a line, a name and a role; a name alone is a student; `#` starts a comment:

    # KV cache, spring term
    teacher   instructor
    alice     student
    bob

Every bad line is reported at once, with its number, so a long class list is fixed in one pass.
The passwords of `--password-file` (read_passwords) are the class's shared logins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROLES = ("instructor", "student")
# JupyterHub lower-cases names at login and nbgrader's student ids cannot hold '+' or '*': a name is what a
# Unix login name may be (so the same list works with real accounts), and the same in all three places.
NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


@dataclass(frozen=True)
class Roster:
    """The class: instructors (hub admins, formgrader) and students (the lessons and the assignment list)."""

    instructors: tuple[str, ...]
    students: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.instructors:
            raise ValueError("the class needs an instructor: add a line such as `teacher instructor`")
        both = sorted(set(self.instructors) & set(self.students))
        if both:
            raise ValueError(f"{', '.join(both)}: listed both as instructor and as student")
        for name in (*self.instructors, *self.students):
            if not NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid user name (see kvcourse.hub.users.NAME)")

    @property
    def users(self) -> tuple[str, ...]:
        """Everyone who may log in, instructors first."""
        return (*self.instructors, *self.students)

    def role(self, name: str) -> str:
        """ "instructor" or "student"; a name not in the class is an error."""
        if name in self.instructors:
            return "instructor"
        if name in self.students:
            return "student"
        raise KeyError(f"{name!r} is not in the class list")

    def to_text(self) -> str:
        """The roster as a users file (what `parse_users` reads back)."""
        lines = [f"{name} instructor" for name in self.instructors] + [f"{name} student" for name in self.students]
        return "\n".join(lines) + "\n"


def _bad_name(name: str) -> str:
    if name != name.lower() and NAME.fullmatch(name.lower()):
        return f"{name!r} has capital letters: write {name.lower()!r} (JupyterHub lower-cases names at login)"
    return (
        f"{name!r} is not a valid user name: use lower-case letters, digits, '_', '.' and '-', "
        "starting with a letter or '_', at most 32 characters"
    )


def parse_users(text: str, source: str = "users file") -> Roster:
    """Read a users file's text; every bad line is named in one ValueError."""
    instructors: list[str] = []
    students: list[str] = []
    first_line: dict[str, int] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{source} line {number}"
        if len(fields) > 2:
            errors.append(f"{where}: {line!r} has {len(fields)} words; write a name and a role (instructor or student)")
            continue
        name, role = fields[0], (fields[1] if len(fields) == 2 else "student")
        if not NAME.fullmatch(name):
            errors.append(f"{where}: {_bad_name(name)}")
            continue
        if role.lower() not in ROLES:
            errors.append(f"{where}: unknown role {role!r} for {name}; the roles are {' and '.join(ROLES)}")
            continue
        if name in first_line:
            errors.append(f"{where}: {name} is already listed on line {first_line[name]}")
            continue
        first_line[name] = number
        (instructors if role.lower() == "instructor" else students).append(name)
    if errors:
        raise ValueError("\n".join(errors))
    if not instructors:
        raise ValueError(f"{source}: no instructor; add a line such as `teacher instructor`")
    return Roster(tuple(instructors), tuple(students))


def load_users(path: Path | str) -> Roster:
    """Read and check a users file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(
            f"no users file at {path}: write one user a line, e.g. `teacher instructor` and `alice student`"
        )
    return parse_users(path.read_text(encoding="utf-8"), source=str(path))


def read_passwords(path: Path | str) -> tuple[str, str]:
    """The students' shared password and the instructors' from a file of `student: ...` and `instructor: ...`."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"no password file at {path}")
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        role, sep, password = line.partition(":")
        role, password = role.strip(), password.strip()
        if not sep or role not in ("student", "instructor"):
            raise ValueError(f"{path} line {number}: write `student: PASSWORD` or `instructor: PASSWORD`")
        found[role] = password
    student, instructor = found.get("student", ""), found.get("instructor", "")
    if len(student) < 8:
        raise ValueError(f"{path}: the students' password (`student: ...`) needs at least 8 characters")
    if len(instructor) < 32 or instructor == student:
        raise ValueError(
            f"{path}: the instructors' password (`instructor: ...`) needs at least 32 characters and "
            "must differ from the students' (JupyterHub's rule for an admin's shared password)"
        )
    return student, instructor
