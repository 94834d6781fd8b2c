"""The course as a book: every lesson executed headless, then built with Sphinx and myst-nb (`make site`).

Each lesson runs as the test suite runs it (KVCOURSE_HEADLESS=1, so the quick path where a
lesson has one; float32; one thread per kernel), two kernels at a time. An executed notebook
is kept in a cache keyed by the notebook's text and the course's own sources, so a page whose
lesson already ran unchanged (in `make test` or a previous build) is written without running
it again. The book (book.py) serves every asset itself, has no widget scripts and no answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from kvcourse.kernel_env import headless
from kvcourse.syllabus import REPO_ROOT, Lesson, load_syllabus

# git-ignored; tests/lessons/test_notebooks.py fills it too. KVCOURSE_EXECUTED_CACHE puts it elsewhere (a CI
# cache, a cold measurement of the suite) for the site and the tests alike.
DEFAULT_CACHE = Path(os.environ.get("KVCOURSE_EXECUTED_CACHE") or REPO_ROOT / ".cache" / "executed")
SITE_DTYPE = "float32"
CELL_TIMEOUT_S = 300
MARKER = ".kvcourse-site"  # only a folder holding this file is ever replaced by a build
# What the executed output depends on besides the notebook itself: the course's own code and data.
_SOURCE_DIRS = ("course", "kernels", "simulators", "quizzes")
_SOURCE_SUFFIXES = {".py", ".toml"}
_NOT_IN_LESSONS = ("course/site/", "course/glossary.toml")  # how the book is drawn, not what a lesson prints
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---------------------------------------------------------------- the executed-notebook cache


def sources_digest() -> str:
    """A hash of every file of the course package that a lesson's outputs can depend on."""
    digest = hashlib.sha256()
    for folder in _SOURCE_DIRS:
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            name = path.relative_to(REPO_ROOT).as_posix()
            if path.suffix in _SOURCE_SUFFIXES and path.is_file() and not name.startswith(_NOT_IN_LESSONS):
                digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def executed_key(notebook: Path, dtype: str = SITE_DTYPE, sources: str | None = None) -> str:
    """The cache key of a notebook executed in ``dtype``: its text, the dtype and the course's sources."""
    digest = hashlib.sha256(notebook.read_bytes())
    digest.update(f"|{dtype}|{sources or sources_digest()}".encode())
    return digest.hexdigest()[:20]


def _cache_file(cache: Path, notebook: Path, key: str) -> Path:
    return cache / f"{notebook.stem}.{key}.ipynb"


def save_executed(nb: nbformat.NotebookNode, notebook: Path, key: str, cache: Path = DEFAULT_CACHE) -> Path:
    """Keep an executed copy of ``notebook`` under ``key``, taken (executed_key) before it ran; older copies go."""
    target = _cache_file(cache, notebook, key)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{notebook.stem}.", suffix=".tmp", dir=cache)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        nbformat.write(nb, handle)
    os.replace(tmp, target)  # atomic: a concurrent reader sees the whole file or none
    for stale in cache.glob(f"{notebook.stem}.*.ipynb"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def load_executed(
    notebook: Path, dtype: str = SITE_DTYPE, cache: Path = DEFAULT_CACHE, sources: str | None = None
) -> nbformat.NotebookNode | None:
    """The cached executed copy of ``notebook`` when it matches the notebook and sources now, else None."""
    path = _cache_file(cache, notebook, executed_key(notebook, dtype, sources))
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None
    ran = all(c.execution_count is not None for c in nb.cells if c.cell_type == "code" and c.source.strip())
    errors = any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    return nb if ran and not errors else None


# ---------------------------------------------------------------- executing


@dataclass
class Page:
    """One lesson's page: where its notebook came from and how long that took."""

    lesson: Lesson
    source: str  # "cache" or "executed"
    seconds: float
    nb: nbformat.NotebookNode


async def _execute(lesson: Lesson, env: dict[str, str], log_file) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(lesson.notebook_path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(lesson.notebook_path.parent)}},
    )
    # The kernel's own start-up chatter goes to the build log, not the terminal.
    await client.async_execute(env=env, stderr=log_file)
    return nb


async def _run(
    lessons: list[Lesson], reuse: Path | None, jobs: int, work: Path, log: Callable[[str], None]
) -> list[Page]:
    sources = sources_digest()
    slots = asyncio.Semaphore(jobs)
    log_file = (work / "kernels.log").open("w")
    env = headless(
        work / "progress", SITE_DTYPE, strict=False, threads=1
    )  # a false expect() prints, as a learner sees it

    async def one(lesson: Lesson) -> Page:
        if lesson.number in cached:
            return Page(lesson, "cache", 0.0, cached[lesson.number])
        async with slots:
            start = time.perf_counter()
            # Looked up again at the last moment: the test suite may have just executed it.
            nb = load_executed(lesson.notebook_path, cache=reuse, sources=sources) if reuse else None
            if nb is not None:
                return Page(lesson, "cache", time.perf_counter() - start, nb)
            log(f"  executing lesson {lesson.number} ({lesson.notebook}) ...")
            key = executed_key(lesson.notebook_path, sources=sources)  # what it is now, before it runs
            nb = await _execute(lesson, env, log_file)
            if reuse:
                save_executed(nb, lesson.notebook_path, key, reuse)
            return Page(lesson, "executed", time.perf_counter() - start, nb)

    found = {
        lsn.number: load_executed(lsn.notebook_path, cache=reuse, sources=sources) if reuse else None for lsn in lessons
    }
    cached = {number: nb for number, nb in found.items() if nb is not None}
    try:
        results = await asyncio.gather(*(one(lesson) for lesson in lessons), return_exceptions=True)
    finally:
        log_file.close()
    failed = [
        _failure(lesson, err) for lesson, err in zip(lessons, results, strict=True) if isinstance(err, BaseException)
    ]
    if failed:
        raise RuntimeError("these lessons did not run to the end, so no site was written:\n" + "\n".join(failed))
    return results


def _failure(lesson: Lesson, err: BaseException) -> str:
    """One line naming the lesson and the error (not the whole coloured traceback)."""
    what = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
    return f"  lesson {lesson.number} ({lesson.notebook}): {_ANSI.sub('', what).strip().splitlines()[0]}"


def execute_lessons(
    lessons: Iterable[Lesson], reuse: Path | None = DEFAULT_CACHE, jobs: int = 2, log: Callable[[str], None] = print
) -> list[Page]:
    """Every lesson executed (or taken from the cache ``reuse``), ``jobs`` kernels at a time."""
    with tempfile.TemporaryDirectory(prefix="kvcourse-site-") as work:
        return asyncio.run(_run(list(lessons), reuse, max(1, jobs), Path(work), log))


# ---------------------------------------------------------------- writing the site


def build_site(
    out: Path, reuse: Path | None = DEFAULT_CACHE, jobs: int = 2, log: Callable[[str], None] = print
) -> list[Page]:
    """Write the book to ``out`` (index.html, a page per lesson whose notebook exists, the glossary, search)."""
    from kvcourse.site.book import run_sphinx, write_sources

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"{out} exists and is not a site written by `kvcourse site`; choose another --out")
    syllabus = load_syllabus()
    written = [lesson for lesson in syllabus if lesson.notebook_path.exists()]
    pages = execute_lessons(written, reuse, jobs, log)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))  # same disk: one rename
    try:
        write_sources(work / "src", syllabus, {page.lesson.number: page.nb for page in pages})
        staging = work / "html"
        said = run_sphinx(work / "src", staging, jobs)
        if said.strip():
            log(f"  Sphinx warned ({len(said.strip().splitlines())} lines, kept in {out / MARKER}):")
            log("    " + said.strip().splitlines()[0][:300])
        (staging / MARKER).write_text(
            "written by `kvcourse site`; replaced on every build\n" + (f"Sphinx warned:\n{said}" if said else "")
        )
        swap_in(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pages


def swap_in(staging: Path, out: Path) -> None:
    """``staging`` put where ``out`` was (the book, the slides): readable by all, in one rename on the same disk."""
    staging.chmod(0o755)
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
