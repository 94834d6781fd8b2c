"""Text that points where it should (issue 41): every repository path the code and the lessons name exists.

A docstring, a comment, a message or a lesson's markdown that says "see kernels/attention/paged.py" sends a
reader there; a file that moved or never was in the repository sends them nowhere. Two kinds of name are read,
both chosen so that they cannot be anything but a path in this repository:

* a path from the repository's root that starts with one of its top folders and ends in a file with a known
  extension, or in a ``/`` (a folder): ``kernels/costs.py``, ``docs/architecture.md``, ``tests/browser/``.
  A name right after ``/``, ``~``, ``.`` or a letter is part of another path (``~/kv-cache-course/lessons``,
  a URL) and is not read. The course's placeholders (``NN``, ``NAME``, ``{...}``, ``<...>``, ``*``) match
  any name: ``quizzes/bank/NN.toml`` must match at least one file. Files under ``benchmarks/results/``
  are written by running a benchmark (some only on a GPU), so there only the folder must exist;
* a Markdown file's name: a bare one (``INSTRUCTORS.md``) names one of the repository's documents; one
  with a folder (``quizzes/INSTRUCTORS.md``) is found from the repository's root, or from the naming
  file's folder or a folder above it.

Read are the code (every .py file of the package, tests and benchmarks: its strings, comments and
docstrings), the lessons (every cell) and the Markdown and TOML files beside them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_FOLDERS = ("benchmarks", "course", "docs", "kernels", "lessons", "quizzes", "simulators", "tests")
EXTENSIONS = ("py", "md", "ipynb", "toml", "json", "txt", "yml", "csv", "html", "png", "svg")
READ_SUFFIXES = (".py", ".ipynb", ".md", ".toml")
WRITTEN_BY_RUNS = ("benchmarks/results/",)  # a benchmark names the file it will write
PLACEHOLDERS = re.compile(r"\{[^}/]*\}|<[^>/]*>|\*|(?<![A-Za-z0-9])(?:NN|NAME)(?![A-Za-z0-9])")

_NAME = r"[\w.*{}<>-]"  # a path's part: letters, digits, "_.-", and the placeholders' "*{}<>"
_TOPS, _EXTS = "|".join(TOP_FOLDERS), "|".join(EXTENSIONS)
REPO_PATH = re.compile(rf"(?<![\w./~$@-])((?:{_TOPS})/(?:{_NAME}+/)*(?:{_NAME}+\.(?:{_EXTS})|))(?![\w/-])")
DOCUMENT = re.compile(r"(?<![\w./~$@-])((?:[\w-]+/)*[\w-]+\.md)(?![\w/-])")


def named_paths(text: str) -> list[tuple[int, str]]:
    """(line, name) for every repository path and Markdown file the text names."""
    found = []
    for pattern in (REPO_PATH, DOCUMENT):
        for match in pattern.finditer(text):
            found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return sorted(set(found))


def _exists(root: Path, name: str, named_in: Path, documents: set[str]) -> bool:
    if any(name.startswith(folder) for folder in WRITTEN_BY_RUNS):
        return (root / name).parent.is_dir()
    if PLACEHOLDERS.search(name):
        return any(root.glob(PLACEHOLDERS.sub("*", name).rstrip("/")))
    if (root / name).exists():
        return True
    if "/" not in name:
        return name in documents
    folders = [folder for folder in [named_in.parent, *named_in.parent.parents] if root in folder.parents]
    return name.endswith(".md") and any((folder / name).exists() for folder in folders)  # beside it, or above


def _texts(root: Path, path: Path) -> list[tuple[str, str]]:
    """(where, text) for what a file says: the file, or each cell of a notebook."""
    where, text = str(path.relative_to(root)), path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return [(where, text)]
    cells = json.loads(text)["cells"]
    return [(f"{where}, cell {number}", "".join(cell["source"])) for number, cell in enumerate(cells, start=1)]


def text_files(root: Path) -> list[Path]:
    """The files read: the top folders' code, lessons, Markdown and TOML, and the Markdown at the root."""
    files = sorted(root.glob("*.md"))
    for folder in TOP_FOLDERS:
        files += sorted(
            p
            for p in (root / folder).rglob("*")
            if p.suffix in READ_SUFFIXES
            and p.is_file()
            and "__pycache__" not in p.parts
            and ".ipynb_checkpoints" not in p.parts
        )
    return files


def dangling(root: Path) -> list[str]:
    """'file:line names X' for every named path that is not in the repository."""
    files = text_files(root)
    documents = {path.name for path in files if path.suffix == ".md"}
    wrong = []
    for path in files:
        for where, text in _texts(root, path):
            wrong += [
                f"{where}:{line} names {name}"
                for line, name in named_paths(text)
                if not _exists(root, name, path, documents)
            ]
    return wrong


def test_every_path_the_code_and_the_lessons_name_exists():
    wrong = dangling(ROOT)
    assert not wrong, "paths named that are not in the repository:\n  " + "\n  ".join(wrong)


def test_the_files_read_are_the_code_the_lessons_and_the_docs():
    assert all((ROOT / folder).is_dir() for folder in TOP_FOLDERS), "a top folder moved: update TOP_FOLDERS"
    files = {str(path.relative_to(ROOT)) for path in text_files(ROOT)}
    assert {
        "kernels/costs.py",
        "lessons/04_queries_keys_values.ipynb",
        "docs/architecture.md",
        "README.md",
        "quizzes/INSTRUCTORS.md",
        "course/syllabus.toml",
        "tests/test_paths_named.py",
    } <= files


# -- the check finds what it is for --------------------------------------------------------------------


def test_names_are_read_from_code_prose_and_markdown():
    text = (
        '"""See kernels/costs.py and docs/architecture.md; tests/browser/ drives chromium."""\n'
        "# ~/kv-cache-course/lessons and https://example.org/kernels/x.py are elsewhere\n"
        "x = 'quizzes/bank/NN.toml'  # the rules are in LESSONS"
        ".md, the layers in kernels/model\n"
    )
    assert named_paths(text) == [
        (1, "docs/architecture.md"),
        (1, "kernels/costs.py"),
        (1, "tests/browser/"),
        (3, "LESSONS" + MD),
        (3, "quizzes/bank/NN.toml"),
    ]


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


# The planted files take names the repository has, and the dangling names are built with + ("x" + MD), so that
# this file, which the first test reads too, names nothing that is not there (the formatter joins "x" ".md").
MD = ".md"


def test_a_planted_dangling_path_is_reported(tmp_path):
    _plant(
        tmp_path,
        {
            "kernels/costs.py": '"""Formulas; the engine is kernels/' + 'engine.py (lesson 01)."""\n',
            "lessons/01_one_word_cost.ipynb": json.dumps(
                {
                    "cells": [
                        {"cell_type": "markdown", "source": ["# Lesson 01\n", "The costs: `kernels/costs.py`.\n"]},
                        {"cell_type": "code", "source": ["# the rules: shared/LESSONS" + MD + "\n", "x = 1"]},
                    ]
                }
            ),
            "docs/lessons.md": "See `lessons/NN_*.ipynb` and `benchmarks/results/"
            + "run.json`.\n"
            + "Also `lessons/"
            + "99_gone.ipynb` and ARCHITECTURE"
            + MD
            + ".\n",
            "benchmarks/results/decode.json": "{}",
        },
    )
    assert dangling(tmp_path) == [
        "docs/lessons.md:2 names ARCHITECTURE" + MD,
        "docs/lessons.md:2 names lessons/" + "99_gone.ipynb",
        "kernels/costs.py:1 names kernels/" + "engine.py",
        "lessons/01_one_word_cost.ipynb, cell 2:1 names shared/LESSONS" + MD,
    ]


def test_a_document_is_found_beside_the_text_that_names_it(tmp_path):
    _plant(
        tmp_path,
        {
            "quizzes/INSTRUCTORS.md": "The guide.\n",
            "quizzes/grading/decide.py": "# see INSTRUCTORS.md, grading/NOTES" + MD + " and NOTES" + MD + "\n",
        },
    )
    assert dangling(tmp_path) == [
        "quizzes/grading/decide.py:1 names NOTES" + MD,
        "quizzes/grading/decide.py:1 names grading/NOTES" + MD,
    ]
