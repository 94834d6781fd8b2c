"""The Makefile's set-up (issue 16): one step per stamp, so a change re-runs only the steps it touches.

Checked with `make -n` (print, run nothing) on a copy of the Makefile beside fake stamps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

STEPS = ("creating the environment", "installing PyTorch", "installing the course", "installing the model",
         "converting the model")
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _steps_to_run(folder: Path, *args: str) -> list[str]:
    out = subprocess.run(["make", "-n", "setup", *args], cwd=folder, capture_output=True, text=True, check=True,
                         env={**os.environ, "MAKEFLAGS": ""}).stdout
    return [step for step in STEPS if step in out]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the Makefile, a pyproject.toml and every stamp of a finished set-up, newest last."""
    shutil.copy(REPO_ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    assert _steps_to_run(tmp_path) == list(STEPS), "a fresh folder runs every step, in this order"
    venv = tmp_path / ".venv"
    venv.mkdir()
    stamps = [".stamp-venv", ".stamp-torch-*", ".stamp-course", ".stamp-model-*", ".stamp-converted-*"]
    makefile = (tmp_path / "Makefile").read_text()
    versions = {"torch": _pin(makefile, "TORCH_VERSION"), "model": _pin(makefile, "MODEL_VERSION"),
                "converted": _pin(makefile, "MODEL_VERSION")}
    past = time.time() - 100
    os.utime(tmp_path / "pyproject.toml", (past, past))
    for i, stamp in enumerate(stamps):
        name = stamp.replace("*", versions[stamp.split("-")[1]]) if "*" in stamp else stamp
        (venv / name).touch()
        os.utime(venv / name, (past + 10 + i, past + 10 + i))
    return tmp_path


def _pin(makefile: str, name: str) -> str:
    return next(line.split(":=")[1].strip() for line in makefile.splitlines() if line.startswith(f"{name} :="))


def test_a_finished_setup_runs_nothing(project: Path) -> None:
    assert _steps_to_run(project) == []


def test_a_new_pyproject_reinstalls_only_the_course(project: Path) -> None:
    (project / "pyproject.toml").touch()
    assert _steps_to_run(project) == ["installing the course"]


def test_a_new_torch_pin_reinstalls_torch_and_the_course(project: Path) -> None:
    assert _steps_to_run(project, "TORCH_VERSION=9.9.9") == ["installing PyTorch", "installing the course"]


def test_a_new_model_pin_reinstalls_and_reconverts_only_the_model(project: Path) -> None:
    assert _steps_to_run(project, "MODEL_VERSION=9.9.9") == ["installing the model", "converting the model"]


def test_a_failing_step_shows_its_output(tmp_path: Path) -> None:
    """A failed step prints FAILED and the end of what it printed; the whole log stays in .venv/setup.log."""
    (tmp_path / "Makefile").write_text((REPO_ROOT / "Makefile").read_text() + "\nbroken:\n"
                                       "\t$(call step,doing something that fails,echo first line; echo the reason >&2; false)\n")
    run = subprocess.run(["make", "broken"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "MAKEFLAGS": ""})
    assert run.returncode != 0
    assert "setup: doing something that fails ..." in run.stdout and "FAILED" in run.stdout
    assert "first line" in run.stdout and "the reason" in run.stdout, "the step's own output is shown"
    log = (tmp_path / ".venv" / "setup.log").read_text()
    assert "doing something that fails" in log and "the reason" in log
