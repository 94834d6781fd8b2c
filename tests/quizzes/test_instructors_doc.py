"""quizzes/INSTRUCTORS.md against the tools (issue 33): every command it shows exists as written.

Regression: the quick start told instructors to run `nbgrader formgrader`, which is no nbgrader command
(nbgrader prints its list of subcommands and exits 0). Each `nbgrader` and `kvcourse` line of the
document's shell blocks is checked here: an nbgrader subcommand that exists, a kvcourse command line
that the course's own parser accepts. tests/quizzes/test_quiz_nbgrader.py runs the sequence itself.
"""

from __future__ import annotations

import re
import shlex

import pytest
from nbgrader.apps.nbgraderapp import NbGraderApp

from kvcourse.cli import build_parser
from kvcourse.syllabus import REPO_ROOT

DOC = REPO_ROOT / "quizzes" / "INSTRUCTORS.md"


def _commands(tool: str) -> list[str]:
    """Each `tool ...` command in the document's bash blocks, comments cut, chains split."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S):
        for line in block.splitlines():
            for part in re.split(r"&&|;", line.split(" #", 1)[0]):
                text = part.strip().replace("~", "/home/teacher")
                try:
                    words = shlex.split(text)
                except ValueError:  # a quote that a line of a longer snippet opens: no command of ours
                    continue
                words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # PATH=... prefixes
                if words and words[0] == tool:
                    found.append(shlex.join(words))
    return found


def test_the_guide_shows_the_whole_sequence():
    shown = {shlex.split(c)[1] for c in _commands("nbgrader")}
    assert {
        "generate_assignment",
        "release_assignment",
        "fetch_assignment",
        "submit",
        "collect",
        "generate_feedback",
        "release_feedback",
        "fetch_feedback",
    } <= shown


@pytest.mark.parametrize("command", _commands("nbgrader"))
def test_every_nbgrader_command_is_one_nbgrader_has(command):
    assert shlex.split(command)[1] in NbGraderApp.subcommands, f"`{command}` is not an nbgrader command"


@pytest.mark.parametrize("command", _commands("kvcourse"))
def test_every_kvcourse_command_parses(command):
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as err:
        pytest.fail(f"`{command}` is refused by kvcourse's own parser (exit {err.code})")
