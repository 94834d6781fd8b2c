"""The book, built once per test run from lessons executed at most once in it (the `book` fixture, tests/conftest.py).

A lesson tests/lessons/test_notebooks.py has run (or is running) in float32 is taken from it, any other is
executed here, as that test executes it, and that test then takes it from here (`lesson_runs`). A lesson
unchanged since an earlier run is taken from the cache of executed notebooks (.cache/executed), as
`make site` takes it. A lock file shares the book between pytest-xdist workers: one builds, the other waits.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import nbformat
import pytest

from kvcourse.site.build import (
    MARKER,
    SITE_DTYPE,
    build_site,
    executed_key,
    load_executed,
    save_executed,
    sources_digest,
)
from kvcourse.syllabus import Lesson, load_syllabus

WRITTEN = [lesson for lesson in load_syllabus() if lesson.notebook_path.exists()]


def executed_once(lesson_runs, lesson: Lesson, sources: str) -> nbformat.NotebookNode:
    """The lesson executed in this run (waiting for another worker's run of it), else an unchanged earlier run."""
    done = lesson_runs.done(lesson.notebook_path, SITE_DTYPE)
    if done is not None:
        return done.nb
    return load_executed(lesson.notebook_path, sources=sources) or lesson_runs.run(lesson.notebook_path, SITE_DTYPE).nb


def built_book(root: Path, lesson_runs) -> Path:
    """The built book in ``root``/kvcourse-site; the notebooks it was built from lie in kvcourse-site-executed/."""
    out, failed = root / "kvcourse-site", root / "kvcourse-site.failed"
    if not (out / MARKER).exists() and not failed.exists():
        # Every worker that gets here runs the lessons nobody has run yet, side by side (one kernel per worker,
        # two in a run without workers); lessons another worker is running are waited for, never run twice.
        # Last lesson first: the notebook tests go first to last, so the two meet once, in the middle.
        sources = sources_digest()
        needed = [
            lesson.notebook_path
            for lesson in reversed(WRITTEN)
            if lesson_runs.done(lesson.notebook_path, SITE_DTYPE) is None
            and load_executed(lesson.notebook_path, sources=sources) is None
        ]
        try:
            lesson_runs.run_all(needed, SITE_DTYPE, jobs=1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)
        except AssertionError as err:
            failed.write_text(f"no book was built: {err}")
    with open(root / "kvcourse-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker builds; the other waits for it
        if failed.exists():  # a lesson or the build failed: say why instead of failing slowly again
            pytest.fail(failed.read_text())
        if not (out / MARKER).exists():
            # build_site takes every lesson from a cache of this run's notebooks, keyed as it keys them now.
            staged = root / "kvcourse-site-cache"
            try:
                sources = sources_digest()
                for lesson in WRITTEN:
                    nb = executed_once(lesson_runs, lesson, sources)
                    save_executed(nb, lesson.notebook_path, executed_key(lesson.notebook_path, sources=sources), staged)
                pages = build_site(out, staged, jobs=1, log=lesson_runs.note)  # it notes a lesson it executes itself
            except Exception as err:
                failed.write_text(f"building the book failed: {err}")
                raise
            executed = root / "kvcourse-site-executed"
            executed.mkdir(exist_ok=True)
            for page in pages:
                nbformat.write(page.nb, executed / f"{page.lesson.number}.ipynb")
    return out


def executed(book: Path, lesson: Lesson) -> nbformat.NotebookNode:
    """The executed notebook the book's page of ``lesson`` was built from."""
    return nbformat.read(book.parent / "kvcourse-site-executed" / f"{lesson.number}.ipynb", as_version=4)
