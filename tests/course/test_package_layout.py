"""The package's layout holds (issue 28): every folder ships, files stay small, imports run one way.

The kvcourse package is four folders of the repository (pyproject.toml's package-dir): course/ is
kvcourse, kernels/, quizzes/ and simulators/ its sub-packages. A folder a wheel does not list is
silently missing from an install, so the list is checked against the folders.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

SETUPTOOLS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
ROOTS = {
    package: REPO_ROOT / folder for package, folder in SETUPTOOLS["package-dir"].items() if package.count(".") <= 1
}  # kvcourse and its four top folders
MAX_LINES = 400


def _package_of(folder: Path) -> str:
    """The dotted name a folder of the repository has in the installed package."""
    for package, root in sorted(ROOTS.items(), key=lambda item: -len(str(item[1]))):
        if folder == root or root in folder.parents:
            return ".".join([package, *folder.relative_to(root).parts])
    raise AssertionError(f"{folder} is in no package root")


SOURCES = sorted({path for root in ROOTS.values() for path in root.rglob("*.py") if "__pycache__" not in path.parts})
FOLDERS = sorted({path.parent for path in SOURCES})


def _imports(path: Path) -> set[str]:
    """Modules a file imports at run time, relative imports resolved (not those under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    hints = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    package = _package_of(path.parent).split(".")
    names = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names.add(".".join([*base, node.module] if node.module else base))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_every_folder_with_python_in_it_is_a_listed_package():
    listed = set(SETUPTOOLS["packages"])
    for folder in FOLDERS:
        name = _package_of(folder)
        assert (folder / "__init__.py").exists(), f"{folder.relative_to(REPO_ROOT)} has modules but no __init__.py"
        assert name in listed, f"{name} ({folder.relative_to(REPO_ROOT)}) is missing from pyproject.toml's packages"
    assert listed == {_package_of(folder) for folder in FOLDERS}, "pyproject.toml lists a package that is gone"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_file_in_the_package_is_over_400_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES, "split it by concept"


def _offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in (REPO_ROOT / folder).rglob("*.py"):
        wrong = sorted(m for m in _imports(path) if m.startswith(forbidden))
        if wrong:
            found[str(path.relative_to(REPO_ROOT))] = wrong
    return found


COURSE_FOLDERS = tuple(f"kvcourse.{p.name}" for p in (REPO_ROOT / "course").iterdir() if (p / "__init__.py").exists())


def test_the_engine_imports_nothing_above_it():
    """kernels/ is the bottom layer: nothing of kvcourse outside it (lessons, simulators, tests and tools import it)."""
    above = {
        path: [m for m in modules if not m.startswith("kvcourse.kernels")]
        for path, modules in _offenders("kernels", ("kvcourse",)).items()
    }
    assert {path: modules for path, modules in above.items() if modules} == {}


def test_simulators_import_the_engine_never_the_course_or_its_grading():
    """A simulator is config, model and view over kernels/ (and the course's plots): never quizzes or features."""
    assert _offenders("simulators", ("kvcourse.quizzes", *COURSE_FOLDERS)) == {}


def test_what_a_learner_uses_never_imports_the_instructors_grading():
    """quizzes/grading/ reads the bank; the bank, widget and progress never import grading."""
    learner = set((REPO_ROOT / "quizzes").glob("*.py"))
    allowed = {REPO_ROOT / "quizzes" / "autograde.py"}  # the old path instructors' nbgrader_config.py names
    wrong = {
        str(p.relative_to(REPO_ROOT)): sorted(m for m in _imports(p) if m.startswith("kvcourse.quizzes.grading"))
        for p in learner - allowed
    }
    assert {k: v for k, v in wrong.items() if v} == {}
