"""Shared pieces of the browser tests: the course's own lab on loopback, Chromium, a learner's clicks.

The lab is started with `kvcourse lab` exactly as `make lab` does, on a free loopback port with a
token, and with everything it writes kept in the test's tmp folder: Jupyter's config, data and
runtime folders, IPython's, and the learner's progress. Autosave is off in that private config, so
running a lesson never writes to the notebooks in the repository (`lessons_untouched`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from guards import missing, needs

from kvcourse.hub.launch import free_port
from kvcourse.kernel_env import HEADLESS_ENV, STRICT_ENV, jupyter_home, offline
from kvcourse.models import cache_dir
from kvcourse.syllabus import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
LESSONS_DIR = REPO_ROOT / "lessons"
START_TIMEOUT_S = 120
CELL_TIMEOUT_S = 300  # one cell of a lesson, on a busy 2-core machine

needs_chromium = needs(None if CHROMIUM.exists() else
                       f"browser tests need Debian's chromium at {CHROMIUM}: apt-get install -y chromium")


def sync_playwright():
    """Playwright's sync API, or a skip (under CI a failure) naming the package (it is in the dev extras)."""
    try:
        from playwright import sync_api
    except ImportError:
        missing("browser tests need playwright: pip install -e '.[dev]'")
    return sync_api.sync_playwright()


def _lab_env(home: Path) -> dict[str, str]:
    """The environment of a learner whose Jupyter and progress live in ``home`` (a tmp folder)."""
    env = {key: value for key, value in os.environ.items()
           # a learner's lab: predict() waits for a guess, a false expect() prints its verdict
           if key not in (HEADLESS_ENV, STRICT_ENV, "NBGRADER_EXECUTION")}
    env.update(jupyter_home(home), **offline(),  # one thread unless told: two workers share two cores
               KVCOURSE_CACHE=str(cache_dir()))  # the converted model already on this machine
    settings = {
        # Autosave off: a lesson run in the browser must never write outputs into the repository's notebooks.
        "docmanager-extension/plugin": {"autosave": False},
        # Every cell in the page, not only those scrolled into view, so the checks below see every output.
        "notebook-extension/tracker": {"windowingMode": "none"},
    }
    for name, values in settings.items():
        path = home / "jupyter-config" / "lab" / "user-settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    return env


@dataclass
class Lab:
    """A running `kvcourse lab`: its address, token and terminal log."""

    base: str
    token: str
    log_path: Path

    def url(self, path: str = "/") -> str:
        """``path`` on this server, with the token."""
        return f"{self.base}{path}{'&' if '?' in path else '?'}token={self.token}"

    def get(self, path: str) -> int:
        """The HTTP status of a GET on ``path`` (with the token)."""
        try:
            with urllib.request.urlopen(self.url(path), timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as err:
            return err.code

    @property
    def log(self) -> str:
        """What the lab printed in its terminal so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _status(lab: Lab) -> int | None:
    try:
        return lab.get("/api/status")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@contextmanager
def running_lab(home: Path, *lab_args: str, cwd: Path = REPO_ROOT) -> Iterator[Lab]:
    """`kvcourse lab [lab_args]` on a free loopback port with a token, stopped afterwards."""
    port, token = free_port(), f"browser-test-{os.getpid()}"
    kvcourse = Path(sys.executable).with_name("kvcourse")
    command = [str(kvcourse), "lab", *lab_args, "--no-browser", "--port", str(port), "--token", token,
               "--", "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",  # this port or fail, never the next
               # JupyterLab checkpoints a notebook when it opens it: keep those copies out of the repository.
               f"--FileCheckpoints.root_dir={home / 'checkpoints'}"]
    log_path = home / "lab.log"
    with open(log_path, "w", encoding="utf-8") as log:
        server = subprocess.Popen(command, cwd=cwd, env=_lab_env(home), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    lab = Lab(f"http://127.0.0.1:{port}", token, log_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _status(lab) != 200:
            assert server.poll() is None, f"`kvcourse lab` exited with {server.returncode}; its log:\n{lab.log}"
            assert time.monotonic() < deadline, f"no lab on {lab.base} after {START_TIMEOUT_S} s; its log:\n{lab.log}"
            time.sleep(0.5)
        yield lab
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000):
    """A Chromium page (Debian's chromium, never a downloaded one) that accepts any leave-page dialog."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("dialog", lambda dialog: dialog.accept())
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


# ------------------------------------------------------------------ the repository stays clean


def _fingerprint(notebooks: tuple[str, ...]) -> dict[str, str]:
    paths = [REPO_ROOT / notebook for notebook in notebooks]
    paths += sorted((LESSONS_DIR / ".ipynb_checkpoints").rglob("*"))  # what a save would add
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest() for path in paths if path.is_file()}


@contextmanager
def lessons_untouched(*notebooks: str) -> Iterator[None]:
    """Fail if the block wrote to these notebooks (autosave, a save) or added checkpoints under lessons/."""
    before = _fingerprint(notebooks)
    yield
    after = _fingerprint(notebooks)
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"the browser test wrote into the repository: {changed}"


# ------------------------------------------------------------------ a learner's clicks


def open_notebook(page, lab: Lab, notebook: str) -> None:
    """Open a notebook (a fresh workspace: the lab's config folder is the test's own) and wait for its kernel."""
    page.goto(lab.url(f"/lab/tree/{notebook}"))
    page.locator(".jp-Notebook").first.wait_for()
    wait_kernel_idle(page)


def wait_kernel_idle(page, timeout_s: float = 120) -> None:
    """Wait until the status bar shows the notebook's kernel started and idle ("Python 3 (ipykernel) | Idle")."""
    # Not the toolbar's indicator: it reads idle while the session is still "No Kernel | Initializing",
    # and Run All at that moment opens a Select Kernel dialog.
    status = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^(?!No Kernel).+ \| Idle$"))
    status.first.wait_for(timeout=timeout_s * 1000)


def menu(page, *path: str) -> None:
    """Click through the menu bar: menu(page, "Run", "Run All Cells")."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(path[0])}$")).click()
    for item in path[1:]:
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).last.click()


def run_all_cells(page, answer: dict[str, str] | None = None, default: str = "") -> list[str]:
    """Run → Run All Cells, typing a guess into each predict box; returns the questions asked, in order.

    ``answer`` maps a fragment of a prediction's question to what to type; other predictions get
    ``default``. Returns once every cell has run (or the first one failed) and the kernel is idle.
    """
    asked: list[str] = []
    menu(page, "Run", "Run All Cells")
    # A cell whose input is collapsed (a solution toggle) shows no prompt: count the prompts shown.
    prompts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt")
    idle = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^(?!No Kernel).+ \| Idle$"))
    last_progress, last_done, finished_polls = time.monotonic(), -1, 0
    while finished_polls < 3:  # idle with every prompt numbered for three polls in a row: Run All is over
        for box in page.query_selector_all("input.jp-Stdin-input"):  # handles: this box, not "the first box"
            output = box.evaluate("box => box.closest('.jp-OutputArea').innerText")
            question = output.rsplit("Predict:", 1)[-1].split("\n", 1)[0].strip()
            typed = next((text for fragment, text in (answer or {}).items() if fragment in question), default)
            box.fill(typed)
            box.press("Enter")
            page.wait_for_function("box => !box.isConnected", arg=box)  # the box turns into the typed text
            asked.append(question)
        texts = prompts.all_inner_texts()
        done = sum(bool(re.search(r"\[\d+\]", text)) for text in texts)
        over = (done == len(texts) or error_outputs(page)) and "[*]" not in "".join(texts)
        finished_polls = finished_polls + 1 if over and idle.count() else 0
        if done != last_done:
            last_progress, last_done = time.monotonic(), done
        assert time.monotonic() - last_progress < CELL_TIMEOUT_S, (
            f"no cell finished in {CELL_TIMEOUT_S} s ({done} of {len(texts)} code cells ran)")
        time.sleep(0.5)
    return asked


def output_texts(page) -> list[str]:
    """The text of every output area of the open notebook."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output").all_inner_texts()


def error_outputs(page) -> list[str]:
    """Tracebacks and anything written to stderr, as shown under the cells."""
    errors = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) "
                          ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    return errors.all_inner_texts()


def rendered_figures(page) -> int:
    """Matplotlib figures shown under cells, counted only when the browser has decoded the image."""
    images = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img")
    return sum(image.evaluate("img => img.complete && img.naturalWidth > 0") for image in images.all())


def output_of(page, text: str):
    """The output area (a locator) whose text contains ``text``."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell-outputArea", has_text=text).first


def cell_with_source(page, fragment: str):
    """The code cell whose source contains ``fragment``."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
                        has=page.locator(".jp-InputArea-editor", has_text=fragment)).first


def wait_for_text(locator, pattern: str | re.Pattern, timeout_s: float = 60) -> str:
    """Wait until ``locator``'s text matches ``pattern``; return that text."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = locator.inner_text()
        if re.search(pattern, text):
            return text
        assert time.monotonic() < deadline, f"{pattern!r} did not appear in {text!r}"
        time.sleep(0.3)
