"""The book (`make site`) in Debian's Chromium, opened from its folder with every request elsewhere refused (issue 47).

A reader searches for a term and lands on the lesson that teaches it; the sidebar reaches every lesson;
no page logs a console error or asks the network for anything; formulas are typeset by the book's own
MathJax; figures decode; axe-core finds no serious or critical violation on any page (and on a lesson with a
simulator and a quick check in the theme's dark mode). The book is the
suite's (the `book` fixture, tests/book_site.py), built once per run.

Time: axe's colour-contrast rule spends most of its time on highlighted code, whose colours come from
one style sheet on every page; so the first lesson page is checked whole, the others without code input.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from book_site import WRITTEN
from browser_lab import chromium_page, needs_chromium

from kvcourse.site.book import page_name

pytestmark = [pytest.mark.slow, needs_chromium]
BLOCKING = ("serious", "critical")
OTHER_PAGES = ["index.html", "glossary.html", "genindex.html", "search.html"]


class Offline:
    """A page that reaches only file: and data: URLs, and keeps what it refused and what the console said."""

    def __init__(self, page) -> None:
        self.page, self.refused, self.errors = page, [], []
        page.on("console", lambda m: self.errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda err: self.errors.append(f"{page.url}: {err}"))
        page.route("**/*", self._route)

    def _route(self, route) -> None:
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            self.refused.append(route.request.url)
            route.abort()

    def open(self, book: Path, name: str) -> None:
        self.page.goto((book / name).as_uri())
        self.page.wait_for_load_state("load")


def _sidebar(page) -> list[str]:
    hrefs = page.eval_on_selector_all("nav.bd-docs-nav a", "els => els.map(e => e.href)")
    return [Path(h.split("#")[0]).name for h in hrefs]


def test_a_reader_finds_a_lesson_by_a_term_and_the_sidebar_reaches_every_lesson(book: Path) -> None:
    lessons = [page_name(lesson) for lesson in WRITTEN]
    with chromium_page() as page:
        offline = Offline(page)
        offline.open(book, "index.html")
        assert [name for name in _sidebar(page) if name in lessons] == lessons, "the sidebar lists every lesson"
        # The search box on the first page a reader sees: type the term, press Enter, follow the first hit.
        page.locator("button.search-button-field").first.click()
        box = page.locator("form.bd-search input[name='q']").first
        box.fill("copy on write")
        box.press("Enter")
        first = page.locator("#search-results ul.search li a").first
        first.wait_for()
        assert Path(first.get_attribute("href").split("#")[0]).name == "12_sharing.html", "lesson 12 comes first"
        first.click()
        page.wait_for_load_state("load")
        assert page.url.split("#")[0].endswith("/12_sharing.html") and "Sharing" in page.title()
        landed = page.locator("#" + page.url.split("#")[1]).locator("..").inner_text().lower()
        assert "on write" in landed.replace("-", " "), "at the paragraph where the lesson first says it"
        # From a lesson, every other lesson is one click away, through the sidebar's parts.
        assert [name for name in _sidebar(page) if name in lessons] == lessons
        # The glossary leads back to a lesson.
        page.locator("a[href^='glossary.html#term-']").first.click()
        page.wait_for_load_state("load")
        assert page.url.split("#")[0].endswith("/glossary.html") and page.locator("dl.glossary dt").count() > 30
    assert not offline.refused, f"the book asked the network for {offline.refused[:5]}"
    assert not offline.errors, f"console errors: {offline.errors[:5]}"


def test_every_page_opens_offline_with_no_console_error(book: Path) -> None:
    with chromium_page() as page:
        offline = Offline(page)
        for name in OTHER_PAGES + [page_name(lesson) for lesson in WRITTEN]:
            offline.open(book, name)
            images = page.eval_on_selector_all("article img", "els => els.map(e => e.complete && e.naturalWidth > 0)")
            assert all(images), f"{name}: {images.count(False)} figures did not decode"
            if page.locator("article .math").count():
                page.locator("article mjx-container").first.wait_for()  # typeset by the book's own MathJax
            assert "Traceback" not in page.locator("body").inner_text()
    assert not offline.refused, f"the book asked the network for {sorted(set(offline.refused))[:5]}"
    assert not offline.errors, f"console errors: {offline.errors[:5]}"


def test_every_page_of_the_book_passes_axe(book: Path) -> None:
    from axe_playwright_python.sync_playwright import Axe

    names = OTHER_PAGES + [page_name(lesson) for lesson in WRITTEN]
    counts: dict[str, dict[str, int]] = {}
    blocking: list[str] = []
    with chromium_page() as page:
        offline = Offline(page)
        for i, name in enumerate(names):
            offline.open(book, name)
            alts = page.eval_on_selector_all("article img", "els => els.map(e => e.getAttribute('alt') || '')")
            assert all(alt.strip() and not alt.startswith("_images/") for alt in alts), f"{name}: a figure's alt"
            context = None if i <= len(OTHER_PAGES) else {"exclude": [[".cell_input"]]}
            for violation in Axe().run(page, context=context).response["violations"]:
                impact = violation["impact"] or "none"
                counts.setdefault(impact, {}).setdefault(violation["id"], 0)
                counts[impact][violation["id"]] += len(violation["nodes"])
                if impact in BLOCKING:
                    where = violation["nodes"][0]["target"] if violation["nodes"] else "?"
                    blocking.append(f"{name}: {violation['id']} ({impact}, first at {where}): {violation['help']}")
        # The theme follows a reader's dark mode: a lesson with a simulator, a quick check and tables, once in it.
        page.emulate_media(color_scheme="dark")
        offline.open(book, page_name(next(lesson for lesson in WRITTEN if lesson.number == "12")))
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        page.wait_for_function("document.getAnimations().every(a => a.playState !== 'running')")  # colours settled
        for violation in Axe().run(page, context={"exclude": [[".cell_input"]]}).response["violations"]:
            if violation["impact"] in BLOCKING:
                where = violation["nodes"][0]["target"] if violation["nodes"] else "?"
                blocking.append(f"12, dark mode: {violation['id']} (first at {where}): {violation['help']}")
    print(f"axe-core on {len(names)} pages and one in dark mode, violating nodes by impact and rule: {counts}")
    assert not blocking, "serious or critical accessibility violations:\n" + "\n".join(blocking)
