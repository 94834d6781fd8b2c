"""`make lab` serves JupyterLab on the start notebook (checked over loopback)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from kvcourse.syllabus import REPO_ROOT

START = "lessons/00_start_here.ipynb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


@pytest.mark.slow
def test_make_lab_serves_the_start_notebook(tmp_path):
    port, token = _free_port(), "kvcourse-test-token"
    args = f"--no-browser --port {port} --token {token} -- --ServerApp.ip=127.0.0.1"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    log = open(tmp_path / "lab.log", "w+")  # noqa: SIM115 - the server writes to it until the end
    server = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=REPO_ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
