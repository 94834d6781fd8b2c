"""`kvcourse site`: the course as a book, built with Sphinx from the executed lessons (what `make site` runs)."""

from __future__ import annotations

import time
from pathlib import Path

from kvcourse.site.build import DEFAULT_CACHE, build_site
from kvcourse.syllabus import load_syllabus


def _site_command(args) -> int:
    start = time.perf_counter()
    reuse = None if args.no_reuse else Path(args.reuse_executed)
    pages = build_site(Path(args.out), reuse, args.jobs)
    executed = [p.lesson.number for p in pages if p.source == "executed"]
    missing = [lsn.number for lsn in load_syllabus() if not lsn.notebook_path.exists()]
    print(
        f"site: wrote the book to {args.out}/ (open {args.out}/index.html; it needs no server and no network): "
        f"{len(pages)} lessons and the glossary in {time.perf_counter() - start:.0f} s "
        f"({len(pages) - len(executed)} from the cache of executed notebooks, {len(executed)} executed)"
        + (f"; no notebook yet for lesson(s) {', '.join(missing)}" if missing else "")
    )
    return 0


def add_site(sub) -> None:
    """Register `kvcourse site` (what `make site` runs)."""
    p = sub.add_parser(
        "site", help="execute every lesson and build the course as a book: sidebar, search, glossary (make site)"
    )
    p.add_argument("--out", default="site", help="folder to write (default: site)")
    p.add_argument(
        "--reuse-executed",
        default=str(DEFAULT_CACHE),
        metavar="DIR",
        help="cache of executed notebooks: a lesson unchanged since it last ran is not run again "
        "(default: .cache/executed, which the test suite fills too)",
    )
    p.add_argument("--no-reuse", action="store_true", help="execute every lesson, ignoring the cache")
    p.add_argument("--jobs", type=int, default=2, help="lessons executed at a time (default: 2)")
    p.set_defaults(func=_site_command)
