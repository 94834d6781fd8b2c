"""Two lessons' slides, built once per test run as `kvcourse slides` builds them (tests/course/test_slides.py and
tests/browser/test_browser_slides.py read them).

Each lesson is the one this run executed (or is executing: waited for), else an unchanged earlier run from the cache
of executed notebooks, else executed here, as tests/course/test_site.py takes them (the `lesson_runs` fixture of
tests/conftest.py): a lesson runs at most once per test run, whichever test needs it first.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from book_site import executed_once

from kvcourse.site.build import executed_key, save_executed, sources_digest
from kvcourse.site.slides import MARKER, build_slides
from kvcourse.syllabus import load_syllabus

# Lesson 00 (prose, a table, no model) and lesson 13 (code, figures, a simulator, math).
DECKS = ("00", "13")


def built_slides(run_tmp: Path, lesson_runs) -> Path:
    """The slides folder of DECKS, built by the first test that asks; the others wait for it."""
    out = run_tmp / "kvcourse-slides"
    with open(run_tmp / "kvcourse-slides.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / MARKER).exists():
            staged, sources = run_tmp / "kvcourse-slides-cache", sources_digest()
            for lesson in (lsn for lsn in load_syllabus() if lsn.number in DECKS):
                nb = executed_once(lesson_runs, lesson, sources)
                save_executed(nb, lesson.notebook_path, executed_key(lesson.notebook_path, sources=sources), staged)
            build_slides(out, staged, jobs=1, log=lesson_runs.note, numbers=list(DECKS))
    return out
