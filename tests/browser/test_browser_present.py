"""`kvcourse present`'s live slides in Chromium (issue 47): Voilà with the course's reveal template shows slides,
and a simulator on them answers a click from its kernel.

Lighter than a lesson: Voilà runs the whole notebook before the first slide shows (20 to 60 s for a lesson
here, more than this check's budget), so the page serves a two-slide notebook with one real simulator
(lesson 07's KVSizeView) and the cells' slideshow metadata, through the same command line and template as
`kvcourse present NN` (course/site/present.py). Requests off the machine are refused, and none is made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser_lab import chromium_page, needs_chromium

from kvcourse.hub.launch import free_port
from kvcourse.kernel_env import jupyter_home, offline
from kvcourse.site.present import present_env, voila_command, write_template

pytestmark = [pytest.mark.slow, needs_chromium]
START_S = 120
SIMULATOR = """from kvcourse.simulators.kv_size import KVSizeView

KVSizeView("smollm2-135m", bytes_per_value=4, num_tokens=512, num_users=1)"""


def _notebook(folder: Path) -> str:
    slide = {"slideshow": {"slide_type": "slide"}}
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Live slides\n\nThe simulator is on the next slide.", metadata=slide),
            nbformat.v4.new_code_cell(SIMULATOR, metadata=slide),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, folder / "live.ipynb")
    return "live.ipynb"


def test_live_slides_show_a_simulator_that_answers(tmp_path: Path) -> None:
    root, port = tmp_path / "present", free_port()
    write_template(root)
    command = voila_command(_notebook(tmp_path), ["--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"])
    env = {**present_env(root), **jupyter_home(tmp_path / "home"), **offline()}
    with open(tmp_path / "voila.log", "w") as log:
        server = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    base, refused = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert server.poll() is None, (tmp_path / "voila.log").read_text()
            assert time.monotonic() < deadline, f"no Voila on {base}: {(tmp_path / 'voila.log').read_text()}"
            try:
                urllib.request.urlopen(f"{base}/voila/static/voila.js", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        with chromium_page(1280, 800) as page:
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))

            def local_only(route) -> None:
                if route.request.url.startswith((base, "data:")):
                    route.continue_()
                else:
                    refused.append(route.request.url)
                    route.abort()

            page.route("**/*", local_only)
            page.goto(base + "/")
            title = page.locator(".reveal section.present h1")
            title.wait_for(timeout=START_S * 1000)  # shown once the notebook has run
            assert title.inner_text().lower().startswith("live slides")  # the theme sets headings in capitals
            page.keyboard.press("ArrowRight")
            slide = page.locator(".reveal section.present:not(.stack)")
            button = slide.get_by_role("button", name="Double the tokens")
            button.wait_for()
            before = slide.inner_text()
            assert "512" in before, before[:500]
            button.click()
            page.wait_for_function(
                "t => document.querySelector('.reveal section.present:not(.stack)').innerText !== t", arg=before
            )
            assert "1,024" in slide.inner_text() or "1024" in slide.inner_text()
            assert not errors, errors
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert not refused, f"the live slides asked the network for {refused}"
