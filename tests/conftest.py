"""Shared fixtures: offline, two threads; the tiny model, the real model and SmolLM2 converted, each made once.

Every test module can ask for these by name (no import): `tiny_hf`, `tiny_model`, `tiny_model_each_path`
(the module's tests run on the fast paths and on the textbook model), `real_model`, `smol_model`,
`one_cpu_thread` (with `pytestmark = pytest.mark.usefixtures("one_cpu_thread")`), `fast_paths_on`,
`lesson_runs` (each lesson executed at most once per dtype per test run, whichever test needs it first),
`book` (the course built as a book once per run, tests/book_site.py) and `run_tmp` (the run's tmp folder,
shared by its xdist workers).
Tiny models of other shapes come from `factories.make_tiny_model(**overrides)`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from kvcourse.kernels.engine.threads import apply_thread_policy  # noqa: E402

# Two threads in one process; one per worker when pytest-xdist runs two workers (make test).
apply_thread_policy(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1))


def pytest_runtest_setup(item):
    """A test marked needs_tool(hint) with a hint is skipped, or failed under CI=true (tests/guards.py)."""
    from guards import missing

    for mark in item.iter_markers("needs_tool"):
        if mark.args[0] is not None:
            missing(mark.args[0])


def pytest_collection_modifyitems(config, items):
    # The site is built from the lessons tests/lessons/test_notebooks.py executes (`lesson_runs`): in any order
    # each lesson runs once, but collected after the notebook tests, the site finds them run and only waits.
    # So is the book's browser test (the same book).
    items.sort(key=lambda item: item.path.name in ("test_site.py", "test_browser_book.py"))  # stable otherwise
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real_model():
    """(hf_model, tokenizer) for SmolLM2-135M-Instruct in float32 on the CPU."""
    from kvcourse.models import load_model

    return load_model("smollm2-135m", dtype=torch.float32, device="cpu")


@pytest.fixture(scope="session")
def smol_model(real_model):
    """SmolLM2 converted to our Transformer once per session, fast paths chosen as the lessons choose them."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(real_model[0]).accelerate()


@pytest.fixture(scope="module")
def tiny_hf():
    """The tiny random Hugging Face Llama of factories.make_tiny_hf_llama() (seeded: the same weights everywhere)."""
    from factories import make_tiny_hf_llama

    return make_tiny_hf_llama()


@pytest.fixture(scope="module")
def tiny_model(tiny_hf):
    """Our Transformer converted from ``tiny_hf``: the textbook model."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(tiny_hf)


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def tiny_model_each_path(tiny_hf, request):
    """``tiny_model`` with the fast paths on, then off: the module's tests run on both."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(tiny_hf).accelerate(request.param)


@pytest.fixture(scope="module")
def one_cpu_thread():
    """Tiny models run fastest on one thread (parallel regions cost more than they save on a busy CPU).

    A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_cpu_thread")``; it uses the
    engine's thread policy and restores torch's thread count after the module.
    """
    from kvcourse.kernels.engine.threads import thread_policy

    with thread_policy(1):
        yield


@pytest.fixture
def fast_paths_on(monkeypatch):
    """For the tests of the fast paths themselves: a KVCOURSE_FAST_PATHS=0 run of the suite must not
    turn off what they test (every other test then runs the textbook model)."""
    monkeypatch.delenv("KVCOURSE_FAST_PATHS", raising=False)


# ------------------------------------------------------------------ each lesson executed once per dtype per run

LESSON_CELL_TIMEOUT_S = 300  # one cell of a lesson, on a busy 2-core machine


@pytest.fixture(scope="session")
def run_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's tmp folder, the same for every pytest-xdist worker of the run (and only for them)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root  # a worker's is <run>/popen-gwN


def execute_notebook(nb, folder: Path, dtype: str):
    """Execute ``nb`` (in place; returned) as the suite runs a lesson: offline, one thread, progress in
    ``folder``, predict() asks nothing, and a false expect() raises; CellExecutionError names the failing cell."""
    from nbclient import NotebookClient

    from kvcourse.kernel_env import headless
    from kvcourse.syllabus import REPO_ROOT

    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=LESSON_CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(REPO_ROOT / "lessons")}},
    )
    return client.execute(env=headless(folder / "progress", dtype, strict=True))


class LessonFailed(AssertionError):
    """The lesson failed when another test of this run executed it (the message says how)."""


@dataclass
class LessonRun:
    """A lesson executed in this test run: the executed notebook, how long it took, and whether this call ran it."""

    nb: object  # nbformat.NotebookNode
    seconds: float
    here: bool


class LessonRuns:
    """Lessons executed at most once per notebook text and dtype in a test run, by whichever test asks first.

    tests/lessons/test_notebooks.py runs every lesson in each dtype; the site test (tests/course/test_site.py)
    needs every lesson run in float32. Each run is kept in the run's shared tmp folder (lesson-runs/) under
    the notebook's name, dtype and a hash of its text; a lock file per entry (flock: released if its worker
    dies) makes a second asker wait for the first and take its notebook, on any xdist worker and in any order.
    A lesson that failed fails every later asker with the first failure, without running it again.
    executions.log there lists every execution (worker, notebook, dtype, seconds).
    """

    execute = staticmethod(execute_notebook)  # for a notebook of a test's own, run every time it is asked

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    def _entry(self, path: Path, dtype: str) -> tuple[Path, bytes]:
        text = path.read_bytes()
        key = hashlib.sha256(text + f"|{dtype}".encode()).hexdigest()[:16]
        return self.folder / f"{path.stem}.{dtype}.{key}", text

    def done(self, path: Path, dtype: str) -> LessonRun | None:
        """The lesson's run in this test run if it has finished and passed (never waits, never executes)."""
        entry, _ = self._entry(path, dtype)
        return self._read(entry)

    def _read(self, entry: Path) -> LessonRun | None:
        import nbformat

        try:
            seconds = json.loads(_beside(entry, ".json").read_text())["seconds"]
            return LessonRun(nbformat.read(_beside(entry, ".ipynb"), as_version=4), seconds, here=False)
        except (OSError, ValueError, KeyError):
            return None

    def run(self, path: Path, dtype: str, *, wait: bool = True) -> LessonRun | None:
        """The lesson executed in ``dtype`` in this test run: by this call, or (waiting for it) by another test.

        With ``wait=False``, None while another test is executing it. Raises what the execution raised
        (CellExecutionError, naming the cell), or LessonFailed when another test's execution failed.
        """
        import nbformat

        from kvcourse.site.build import SITE_DTYPE, executed_key, save_executed

        entry, text = self._entry(path, dtype)
        with open(_beside(entry, ".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None  # another test is executing it now
            found = self._read(entry)
            if found is not None:
                return found
            failed = _beside(entry, ".failed")
            if failed.exists():
                raise LessonFailed(
                    f"{path.name} ({dtype}) failed when another test of this run executed it: "
                    f"{failed.read_text(encoding='utf-8')}"
                )  # its one line, then the whole error
            cache_key = executed_key(path, dtype)  # `make site`'s key, taken before it runs
            nb = nbformat.reads(text.decode("utf-8"), as_version=4)
            start = time.perf_counter()
            try:
                execute_notebook(nb, Path(tempfile.mkdtemp(prefix=f"{entry.name}.", dir=self.folder)), dtype)
            except Exception as err:  # (an interrupted run leaves no mark: the next asker runs it)
                failed.write_text(f"{_one_line(err)}\n\n{type(err).__name__}: {err}", encoding="utf-8")
                self._log(path, dtype, time.perf_counter() - start, "FAILED")
                raise
            seconds = time.perf_counter() - start
            self._log(path, dtype, seconds, "executed")
            _beside(entry, ".json").write_text(json.dumps({"seconds": seconds, "worker": self.worker}))
            nbformat.write(nb, _beside(entry, ".tmp"))
            os.replace(_beside(entry, ".tmp"), _beside(entry, ".ipynb"))  # last: the entry is whole
            if dtype == SITE_DTYPE:
                save_executed(nb, path, cache_key)  # `make site` reuses it instead of running it again
            return LessonRun(nb, seconds, here=True)

    def run_all(self, paths: Iterable[Path], dtype: str, jobs: int = 1) -> None:
        """Every lesson of ``paths`` run in this test run, ``jobs`` at a time in this process: lessons nobody
        is running first, then a wait for those another worker is running. Raises after all have been tried."""
        todo, deferred, errors = list(paths), set(), []
        guard = threading.Lock()

        def work() -> None:
            while True:
                with guard:
                    if not todo:
                        return
                    path = todo.pop(0)
                    wait = path in deferred
                try:
                    if self.run(path, dtype, wait=wait) is None:
                        with guard:
                            deferred.add(path)
                            todo.append(path)  # another worker has it: come back once the free ones are done
                except Exception as err:  # noqa: BLE001 - collected and raised below, after the other lessons
                    with guard:
                        errors.append(f"  {path.name}: {_one_line(err)}")

        threads = [threading.Thread(target=work, name=f"lesson-runs-{i}") for i in range(max(1, jobs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise LessonFailed(f"these lessons did not run to the end in {dtype}:\n" + "\n".join(sorted(errors)))

    def _log(self, path: Path, dtype: str, seconds: float, what: str) -> None:
        self.note(f"{what} {path.name} {dtype} {seconds:.1f} s")

    def note(self, text: str) -> None:
        """Add a line to executions.log (the site build says there what it executed itself, if anything)."""
        with open(self.folder / "executions.log", "a", encoding="utf-8") as log:
            log.write(f"{self.worker} {text.strip()}\n")  # one short append: whole lines from every worker


def _beside(entry: Path, suffix: str) -> Path:
    """One file of an entry: its name (notebook, dtype, key: dots inside) and ``suffix``."""
    return entry.with_name(entry.name + suffix)


def _one_line(err: BaseException) -> str:
    """An execution error in one line: the cell's exception and message, not the whole coloured traceback."""
    import re

    if isinstance(err, LessonFailed):
        return str(err).splitlines()[0]
    what = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
    return (re.sub(r"\x1b\[[0-9;]*m", "", what).strip().splitlines() or [what])[0]


@pytest.fixture(scope="session")
def lesson_runs(run_tmp: Path) -> LessonRuns:
    """Lessons executed at most once per dtype in this test run, shared by the tests that need them (LessonRuns)."""
    return LessonRuns(run_tmp / "lesson-runs")


@pytest.fixture(scope="session")
def book(run_tmp: Path, lesson_runs: LessonRuns) -> Path:
    """The course built as a book (`make site`) once per test run, from this run's float32 lesson runs."""
    from book_site import built_book

    return built_book(run_tmp, lesson_runs)
