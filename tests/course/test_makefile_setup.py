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

STEPS = (
    "creating the environment",
    "installing PyTorch",
    "installing the course",
    "installing the model",
    "converting the model",
)
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _steps_to_run(folder: Path, *args: str) -> list[str]:
    out = subprocess.run(
        ["make", "-n", "setup", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MAKEFLAGS": ""},
    ).stdout
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
    versions = {
        "torch": _pin(makefile, "TORCH_VERSION"),
        "model": _pin(makefile, "MODEL_VERSION"),
        "converted": _pin(makefile, "MODEL_VERSION"),
    }
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
    (tmp_path / "Makefile").write_text(
        (REPO_ROOT / "Makefile").read_text() + "\nbroken:\n"
        "\t$(call step,doing something that fails,echo first line; echo the reason >&2; false)\n"
    )
    run = subprocess.run(
        ["make", "broken"], cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MAKEFLAGS": ""}
    )
    assert run.returncode != 0
    assert "setup: doing something that fails ..." in run.stdout and "FAILED" in run.stdout
    assert "first line" in run.stdout and "the reason" in run.stdout, "the step's own output is shown"
    log = (tmp_path / ".venv" / "setup.log").read_text()
    assert "doing something that fails" in log and "the reason" in log


def _dry_run(folder: Path, target: str, *args: str, path: str | None = None) -> str:
    """What `make -n TARGET` would run in ``folder``, with PATH set to ``path`` (to hide or fake nvidia-smi)."""
    env = {**os.environ, "MAKEFLAGS": "", **({"PATH": path} if path is not None else {})}
    env.pop("TORCH_INDEX", None)
    return subprocess.run(
        [shutil.which("make"), "-n", target, *args], cwd=folder, capture_output=True, text=True, check=True, env=env
    ).stdout


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A fresh clone's view: the Makefile and a pyproject.toml, no .venv."""
    shutil.copy(REPO_ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    return tmp_path


def _path_without_nvidia_smi(tmp_path: Path) -> str:
    """PATH with only the tools make and its recipes need, and no nvidia-smi among them."""
    bin_dir = tmp_path / "bin-without-gpu"
    bin_dir.mkdir()
    for tool in ("sh", "uname", "python3", "date", "mkdir", "printf", "cat", "rm", "touch", "tail", "test", "npm"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_a_learners_lab_never_touches_npm(fresh: Path) -> None:
    assert "npm" not in _dry_run(fresh, "lab")
    assert "npm" in _dry_run(fresh, "test") or shutil.which("npm") is None, "make test installs the hub's proxy"


def test_linux_without_an_nvidia_gpu_gets_the_cpu_build(fresh: Path, tmp_path: Path) -> None:
    if os.uname().sysname != "Linux":
        pytest.skip("the choice for Linux")
    out = _dry_run(fresh, "setup", path=_path_without_nvidia_smi(tmp_path))
    assert "installing PyTorch 2.13.0 (the CPU build: no NVIDIA GPU answers nvidia-smi)" in out
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in out
    assert "cannot be reached: PyTorch comes from pip's default index instead" in out, "the fallback is one line"


def test_a_machine_with_an_nvidia_gpu_gets_the_cuda_build(fresh: Path, tmp_path: Path) -> None:
    if os.uname().sysname != "Linux":
        pytest.skip("the choice for Linux")
    fake = tmp_path / "fake-gpu"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    (fake / "nvidia-smi").chmod(0o755)
    out = _dry_run(fresh, "setup", path=f"{fake}:{_path_without_nvidia_smi(tmp_path)}")
    assert "installing PyTorch 2.13.0 (the CUDA build: nvidia-smi sees an NVIDIA GPU)" in out
    assert "--extra-index-url" not in out and "pip install --quiet torch==2.13.0" in out


def test_torch_index_overrides_the_choice(fresh: Path) -> None:
    out = _dry_run(fresh, "setup", "TORCH_INDEX=https://example.org/whl/cu128")
    assert "(from TORCH_INDEX=https://example.org/whl/cu128)" in out
    assert "--extra-index-url https://example.org/whl/cu128" in out


def test_python_older_than_3_11_is_refused_before_the_environment_is_made(fresh: Path) -> None:
    old = fresh / "python3.10"
    old.write_text("#!/bin/sh\necho 3.10\nexit 1\n")  # prints its version and fails the check, as 3.10 would
    old.chmod(0o755)
    run = subprocess.run(
        ["make", "setup", f"PYTHON={old}"],
        cwd=fresh,
        capture_output=True,
        text=True,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert run.returncode != 0
    assert f"the course needs Python 3.11 or newer and {old} is 3.10" in run.stdout
    assert not (fresh / ".venv").exists(), "nothing is made before the check"


def test_make_test_passes_pytest_args_through(fresh: Path) -> None:
    out = _dry_run(fresh, "test", "PYTEST_ARGS=-m 'not slow' -k paged")
    assert "pytest -n 2 -m 'not slow' -k paged" in out
