"""One user's server under `kvcourse hub`: `python -m kvcourse.hub.singleuser ROLE --course DIR [...]`.

JupyterHub starts this command (kvcourse.hub.config) for every user; it prepares the user's lab
and replaces itself with `jupyterhub-singleuser`, passing on any argument it does not know.

- student: the student's lab of `make lab` (quizzes/INSTRUCTORS.md) on the user's own copy of the
  lessons (copied into their home on first start, never over their edits), plus nbgrader's
  assignment list (fetch, validate, submit); formgrader, Create Assignment and the course list stay off.
- instructor: the instructor's lab of `kvcourse lab --instructor`, on the hub's course folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from kvcourse.lab import NBGRADER_SERVER_EXTENSIONS, QUIET_PLUGINS, find_course, quiet_options, settings_dir
from kvcourse.syllabus import REPO_ROOT, get_lesson

ROLES = ("student", "instructor")
# What a student's lab under the hub leaves out of nbgrader: the instructor's tools.
STUDENT_PLUGINS_OFF = (
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
)
STUDENT_SERVER_EXTENSIONS_OFF = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
assert set(STUDENT_SERVER_EXTENSIONS_OFF) <= set(NBGRADER_SERVER_EXTENSIONS)


def default_url(role: str) -> str:
    """Where a user lands: lesson 00 for a student, the lab on the course for the instructor."""
    return f"/lab/tree/{get_lesson('00').notebook}" if role == "student" else "/lab"


def copy_lessons(home: Path) -> list[str]:
    """Copy the lessons the student does not have yet into ``home``/lessons; return the names copied."""
    source = REPO_ROOT / "lessons"
    target = home / "lessons"
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for notebook in sorted(source.glob("*.ipynb")):
        if not (target / notebook.name).exists():
            shutil.copyfile(notebook, target / notebook.name)
            copied.append(notebook.name)
    return copied


def server_command(role: str, course: Path, home: Path, extra: list[str]) -> tuple[list[str], Path]:
    """The jupyterhub-singleuser command line of a role, and the folder it must run in."""
    if role == "student":
        copy_lessons(home)
        root = home
        options = quiet_options(
            list(STUDENT_SERVER_EXTENSIONS_OFF),
            settings_dir(name="hub-student", plugins=[*QUIET_PLUGINS, *STUDENT_PLUGINS_OFF]),
        )
    else:
        root = find_course(course)  # nbgrader reads nbgrader_config.py from the folder the server runs in
        options = quiet_options([], settings_dir(instructor=True))
    as_root = ["--ServerApp.allow_root=True"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    command = [
        sys.executable,
        "-m",
        "jupyterhub.singleuser",
        f"--ServerApp.root_dir={root}",
        *options,
        *as_root,
        *extra,
    ]
    return command, root


def main(argv: list[str] | None = None) -> None:
    """Prepare the user's lab and replace this process with their single-user server."""
    parser = argparse.ArgumentParser(prog="python -m kvcourse.hub.singleuser")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--course", required=True, type=Path, help="the hub's nbgrader course folder")
    args, extra = parser.parse_known_args(argv)
    home = Path(os.environ.get("HOME") or Path.cwd())
    command, folder = server_command(args.role, args.course, home, extra)
    # The environment's own tools first on PATH: formgrader runs `alembic`, a terminal finds `kvcourse`.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.chdir(folder)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
