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
# Every wait below is on the page's state (a status, a text, a prompt number), never on time; these are only
# the bounds after which a wait fails, generous enough for a 2-core machine that runs the rest of the suite.
START_TIMEOUT_S = 300  # the lab answering on its port
CELL_TIMEOUT_S = 300  # one cell of a lesson making no progress
WAIT_S = 180  # anything else the page is waiting for: a kernel, a reply to a click, a figure decoding

needs_chromium = needs(
    None if CHROMIUM.exists() else f"browser tests need Debian's chromium at {CHROMIUM}: apt-get install -y chromium"
)


def sync_playwright():
    """Playwright's sync API, or a skip (under CI a failure) naming the package (it is in the dev extras)."""
    try:
        from playwright import sync_api
    except ImportError:
        missing("browser tests need playwright: pip install -e '.[dev]'")
    return sync_api.sync_playwright()


def _lab_env(home: Path) -> dict[str, str]:
    """The environment of a learner whose Jupyter and progress live in ``home`` (a tmp folder)."""
    env = {
        key: value
        for key, value in os.environ.items()
        # a learner's lab: predict() waits for a guess, a false expect() prints its verdict
        if key not in (HEADLESS_ENV, STRICT_ENV, "NBGRADER_EXECUTION")
    }
    env.update(
        jupyter_home(home),
        **offline(),  # one thread unless told: two workers share two cores
        KVCOURSE_CACHE=str(cache_dir()),
    )  # the converted model already on this machine
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
            with urllib.request.urlopen(self.url(path), timeout=WAIT_S) as response:
                return response.status
        except urllib.error.HTTPError as err:
            return err.code

    @property
    def log(self) -> str:
        """What the lab printed in its terminal so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _status(lab: Lab) -> int | None:
    try:
        with urllib.request.urlopen(lab.url("/api/status"), timeout=10) as response:  # polled: a slow answer is retried
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@contextmanager
def running_lab(home: Path, *lab_args: str, cwd: Path = REPO_ROOT) -> Iterator[Lab]:
    """`kvcourse lab [lab_args]` on a free loopback port with a token, stopped afterwards."""
    port, token = free_port(), f"browser-test-{os.getpid()}"
    kvcourse = Path(sys.executable).with_name("kvcourse")
    command = [
        str(kvcourse),
        "lab",
        *lab_args,
        "--no-browser",
        "--port",
        str(port),
        "--token",
        token,
        "--",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port_retries=0",  # this port or fail, never the next
        # JupyterLab checkpoints a notebook when it opens it: keep those copies out of the repository.
        f"--FileCheckpoints.root_dir={home / 'checkpoints'}",
    ]
    log_path = home / "lab.log"
    with open(log_path, "w", encoding="utf-8") as log:
        server = subprocess.Popen(
            command, cwd=cwd, env=_lab_env(home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
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
            page.set_default_timeout(WAIT_S * 1000)  # an action waits for its element; a bound, not a pause
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


def wait_kernel_idle(page, timeout_s: float = START_TIMEOUT_S) -> None:
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


# The question a predict box answers: the n-th "Predict: ..." line above it in its cell's output (n counted by
# the data-kv-asked mark this file leaves on the output area), or null while that line has not reached the page.
# The kernel prints the question before it asks for input, but the two travel on different channels (iopub and
# stdin): on a busy machine the box can be drawn before the text above it. JupyterLab inserts a late output
# above the pending box, so waiting for the line is enough.
_QUESTION_JS = r"""box => {
  const panel = box.closest('.jp-OutputArea-child'), area = box.closest('.jp-OutputArea');
  const asked = Number(area.dataset.kvAsked || 0), questions = [];
  for (const child of area.children) {
    if (child === panel) break;
    for (const m of child.textContent.matchAll(/Predict: ([^\n]*)\n/g)) questions.push(m[1].trim());
  }
  return questions.length > asked ? {question: questions[asked]} : null;
}"""
_ASKED_JS = (
    "box => { const area = box.closest('.jp-OutputArea');"
    " area.dataset.kvAsked = Number(area.dataset.kvAsked || 0) + 1; }"
)


def _question(page, box) -> str:
    """The question ``box`` asks, once its "Predict:" line is in the page."""
    try:
        found = page.wait_for_function(_QUESTION_JS, arg=box, timeout=WAIT_S * 1000, polling=200)
    except Exception as err:  # playwright's TimeoutError: say what was missing
        output = box.evaluate("box => box.closest('.jp-OutputArea').innerText")
        raise AssertionError(f"an input box with no new 'Predict:' line above it after {WAIT_S} s:\n{output}") from err
    return found.json_value()["question"]


def run_all_cells(page, answer: dict[str, str] | None = None, default: str = "") -> list[str]:
    """Run → Run All Cells, typing a guess into each predict box; returns the questions asked, in order.

    ``answer`` maps a fragment of a prediction's question to what to type; other predictions get
    ``default``. Returns once every cell has run (or the first one failed) and the kernel is idle.
    A cell's prompt turns from [*] to its number only once JupyterLab has both the kernel's reply and the
    idle status that follows the cell's last output, so numbered prompts mean every output has arrived.
    """
    asked: list[str] = []
    menu(page, "Run", "Run All Cells")
    # A cell whose input is collapsed (a solution toggle) shows no prompt: count the prompts shown.
    prompts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt")
    idle = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^(?!No Kernel).+ \| Idle$"))
    last_progress, last_done, finished_polls = time.monotonic(), -1, 0
    while finished_polls < 3:  # idle with every prompt numbered for three polls in a row: Run All is over
        for box in page.query_selector_all("input.jp-Stdin-input"):  # handles: this box, not "the first box"
            question = _question(page, box)
            typed = next((text for fragment, text in (answer or {}).items() if fragment in question), default)
            box.evaluate(_ASKED_JS)
            box.fill(typed)
            box.press("Enter")
            page.wait_for_function("box => !box.isConnected", arg=box)  # the box turns into the typed text
            asked.append(question)
            last_progress = time.monotonic()  # the learner's typing is not the cell's time
        texts = prompts.all_inner_texts()
        done = sum(bool(re.search(r"\[\d+\]", text)) for text in texts)
        over = (done == len(texts) or error_outputs(page)) and "[*]" not in "".join(texts)
        finished_polls = finished_polls + 1 if over and idle.count() else 0
        if done != last_done:
            last_progress, last_done = time.monotonic(), done
        assert time.monotonic() - last_progress < CELL_TIMEOUT_S, (
            f"no cell finished in {CELL_TIMEOUT_S} s ({done} of {len(texts)} code cells ran)"
        )
        time.sleep(0.5)  # the polling interval: each poll reads the page's state afresh
    return asked


def output_texts(page) -> list[str]:
    """The text of every output area of the open notebook."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output").all_inner_texts()


def error_outputs(page) -> list[str]:
    """Tracebacks and anything written to stderr, as shown under the cells."""
    errors = page.locator(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    )
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
    return page.locator(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
        has=page.locator(".jp-InputArea-editor", has_text=fragment),
    ).first


def wait_until(read, done, what: str, timeout_s: float = WAIT_S):
    """Poll ``read()`` (a text, a count, an attribute of the page) until ``done(value)``; return that value.

    A wait on the page's state: it returns as soon as the state is reached, and fails (saying ``what``
    and the last value read) only after ``timeout_s``, a bound for a loaded machine, never a pause.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what}: still {value!r} after {timeout_s} s"
        time.sleep(0.2)


def wait_for_text(locator, pattern: str | re.Pattern, timeout_s: float = WAIT_S) -> str:
    """Wait until ``locator``'s text matches ``pattern``; return that text."""
    return wait_until(
        locator.inner_text, lambda text: re.search(pattern, text), f"{pattern!r} did not appear", timeout_s
    )


def wait_for_figures(page, count: int = 1, timeout_s: float = WAIT_S) -> int:
    """Wait until at least ``count`` figures under the cells are decoded (images decode after the output lands)."""
    return wait_until(
        lambda: rendered_figures(page), lambda n: n >= count, f"fewer than {count} figures decoded", timeout_s
    )


def wait_image_decoded(image, timeout_s: float = WAIT_S) -> None:
    """Wait until the image ``image`` (a locator) is in the page and decoded."""
    wait_until(
        lambda: image.count() and image.first.evaluate("img => img.complete && img.naturalWidth > 0"),
        bool,
        "the image did not decode",
        timeout_s,
    )
