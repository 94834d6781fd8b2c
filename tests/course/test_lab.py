"""`make lab` serves JupyterLab on the start notebook (checked over loopback): the student's and instructor's lab."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from kvcourse.hub.launch import free_port
from kvcourse.syllabus import REPO_ROOT

START = "lessons/00_start_here.ipynb"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


@pytest.mark.slow
def test_make_lab_serves_the_start_notebook(tmp_path):
    port, token = free_port(), "kvcourse-test-token"
    args = f"--no-browser --port {port} --token {token} -- --ServerApp.ip=127.0.0.1"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    log = open(tmp_path / "lab.log", "w+")  # noqa: SIM115 - the server writes to it until the end
    server = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_ARGS={args}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, page = _get(f"{base}/lab/tree/{START}?token={token}")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1)
        log.seek(0)
        output = log.read()
        assert status == 200, f"JupyterLab did not answer on {base}; its log:\n{output}"
        assert "JupyterLab" in page
        assert f"/lab/tree/{START}" in output, "the server should announce the start notebook"
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=5) as response:
            assert response.url.startswith(f"{base}/lab/tree/{START}"), "the root must land on lesson 00"
        status, body = _get(f"{base}/api/contents/{START}?token={token}")
        notebook = json.loads(body)
        assert status == 200 and notebook["type"] == "notebook" and notebook["content"]["cells"]
        assert _get(f"{base}/api/contents/{START}")[0] == 403, "the server must require its token"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        log.close()


def _flags(command: list[str]) -> set[str]:
    return {arg for arg in command if arg.startswith("--")}


def test_student_lab_hides_nbgrader_news_and_language_servers(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    from kvcourse.lab import NBGRADER_SERVER_EXTENSIONS, lab_command

    flags = _flags(lab_command())
    assert f"--ServerApp.root_dir={REPO_ROOT}" in flags and f"--LabApp.default_url=/lab/tree/{START}" in flags
    for name in NBGRADER_SERVER_EXTENSIONS:
        assert f"--ServerApp.jpserver_extensions={name}=False" in flags
    assert {"--LabApp.news_url=None", "--LanguageServerManager.autodetect=False"} <= flags
    settings = next(arg.split("=", 1)[1] for arg in flags if arg.startswith("--LabApp.app_settings_dir="))
    page_config = json.loads((tmp_path / "runtime" / "kvcourse-lab" / "student" / "page_config.json").read_text())
    assert settings == str(tmp_path / "runtime" / "kvcourse-lab" / "student")
    assert {"@jupyter/nbgrader", "@jupyterlab/apputils-extension:announcements"} <= set(
        page_config["disabledExtensions"]
    )
    overrides = json.loads((tmp_path / "runtime" / "kvcourse-lab" / "student" / "overrides.json").read_text())
    # no "↑↓ for history" in a prediction's box: its prompt line says what to type (issue 32)
    assert overrides["@jupyterlab/notebook-extension:tracker"] == {"showInputPlaceholder": False}


def test_instructor_lab_is_rooted_at_an_nbgrader_course(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    from kvcourse.lab import lab_command

    course = tmp_path / "kv-course"
    course.mkdir()
    with pytest.raises(ValueError, match="kvcourse grade init"):
        lab_command(instructor=True, course=course)
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    flags = _flags(lab_command(instructor=True, course=course))
    assert f"--ServerApp.root_dir={course}" in flags
    assert not [arg for arg in flags if "jpserver_extensions=nbgrader" in arg], "formgrader must stay on"
    page_config = json.loads((tmp_path / "runtime" / "kvcourse-lab" / "instructor" / "page_config.json").read_text())
    assert page_config["disabledExtensions"] == ["@jupyterlab/apputils-extension:announcements"]


def test_course_without_instructor_is_refused(capsys):
    from kvcourse.cli import main

    assert main(["lab", "--course", "somewhere"]) == 2
    assert "--instructor" in capsys.readouterr().err
