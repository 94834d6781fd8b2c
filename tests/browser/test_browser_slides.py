"""One lesson's slides in Debian's Chromium, from file:// with every request but file: and data: refused (issue 47):
the arrow key steps through every slide to the last, a figure decodes, MathJax 3 loads, nothing logs an error.

The deck is built as `kvcourse slides` builds it (tests/slides_build.py: lesson 13, executed once per test run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_lab import chromium_page, needs_chromium

pytestmark = [pytest.mark.slow, needs_chromium]
DECK = "13_prefix_caching.slides.html"


@pytest.fixture(scope="module")
def decks(run_tmp: Path, lesson_runs) -> Path:
    from slides_build import built_slides

    return built_slides(run_tmp, lesson_runs)


def test_a_deck_steps_to_its_last_slide_offline(decks: Path) -> None:
    problems: list[str] = []
    with chromium_page(1280, 800) as page:
        page.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
        page.on("pageerror", lambda err: problems.append(f"page error: {err}"))

        def only_local(route) -> None:
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                problems.append(f"request refused: {route.request.url}")
                route.abort()

        page.route("**/*", only_local)
        page.goto((decks / DECK).as_uri())
        page.wait_for_function("window.Reveal && Reveal.isReady()")
        total = page.evaluate("Reveal.getTotalSlides()")
        assert total > 10, f"{DECK}: {total} slides"
        seen = [page.evaluate("Reveal.getSlidePastCount()")]
        for _ in range(total - 1):
            page.keyboard.press("Space")  # the next slide, down a column of subslides first, then right
            seen.append(page.evaluate("Reveal.getSlidePastCount()"))
        assert seen == list(range(total)), f"the slide index went {seen}"
        assert page.evaluate("Reveal.isLastSlide()")
        page.keyboard.press("ArrowRight")  # past the end: stays
        assert page.evaluate("Reveal.isLastSlide()")
        decoded = page.evaluate(
            "[...document.querySelectorAll('.reveal img')].filter(i => i.complete && i.naturalWidth > 0).length"
        )
        assert decoded >= 1, "no figure decoded"
        # MathJax 3, served from the folder, loaded and ready (few lessons have math; 13 has none to typeset).
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
        assert page.evaluate("MathJax.startup.promise.then(() => MathJax.version)").startswith("3.")
    assert not problems, problems
