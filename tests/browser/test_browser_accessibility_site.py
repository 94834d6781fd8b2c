"""axe-core on every page of the static site, in Debian's Chromium: no serious or critical violation (issue 32).

The pages are written as `kvcourse site` writes them (course/site: index_html, make_static, lesson_html),
once per session, from the executed notebooks the suite keeps (tests/lessons/test_notebooks.py saves them in
.cache/executed; the newest copy of each lesson, whatever sources it ran under). A lesson never executed
here is drawn from its committed notebook (text and code, no outputs), so every page is still checked;
KVCOURSE_A11Y_EXECUTED=DIR takes executed notebooks from DIR/NN.ipynb first (a full run, for the report).

Time: axe's colour-contrast rule spends most of its time on the highlighted code (about 80 % of a page's
elements), whose colours come from one style sheet (pages.CSS) on every page. So the first lesson page is
checked whole, code included, and every other page whole except its code input areas.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from browser_lab import chromium_page, needs_chromium

from kvcourse.site.build import DEFAULT_CACHE
from kvcourse.site.pages import index_html, lesson_html, page_name
from kvcourse.site.render import make_static
from kvcourse.syllabus import Lesson, load_syllabus

pytestmark = [pytest.mark.slow, needs_chromium]
SYLLABUS = load_syllabus()
WRITTEN = [lesson for lesson in SYLLABUS if lesson.notebook_path.exists()]
BLOCKING = ("serious", "critical")


def _ran(nb: nbformat.NotebookNode) -> bool:
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    return bool(code) and all(c.execution_count is not None for c in code)


def _notebook(lesson: Lesson) -> tuple[nbformat.NotebookNode, str]:
    """The lesson's newest executed copy, else its committed notebook; and which it is."""
    candidates = []
    folder = os.environ.get("KVCOURSE_A11Y_EXECUTED")
    if folder:
        candidates.append(Path(folder) / f"{lesson.number}.ipynb")
    candidates += sorted(
        DEFAULT_CACHE.glob(f"{lesson.notebook_path.stem}.*.ipynb"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for path in candidates:
        try:
            nb = nbformat.read(path, as_version=4)
        except (OSError, ValueError):
            continue
        if _ran(nb):
            return nb, "executed"
    return nbformat.read(lesson.notebook_path, as_version=4), "committed"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("a11y-site")
    (out / "index.html").write_text(index_html(SYLLABUS, {lesson.number for lesson in WRITTEN}), encoding="utf-8")
    sources = {}
    for i, lesson in enumerate(WRITTEN):
        nb, sources[lesson.number] = _notebook(lesson)
        neighbours = (WRITTEN[i - 1] if i else None, WRITTEN[i + 1] if i + 1 < len(WRITTEN) else None)
        text = lesson_html(lesson, make_static(nb, lesson.notebook), neighbours)
        (out / page_name(lesson)).write_text(text, encoding="utf-8")
    print("pages from executed notebooks:", sorted(n for n, s in sources.items() if s == "executed"))
    return out


CODE = {"exclude": [[".jp-InputArea"]]}  # the code cells' input, checked on the first lesson page


def _axe(page, context: dict | None = None) -> list[dict]:
    from axe_playwright_python.sync_playwright import Axe

    return Axe().run(page, context=context).response["violations"]


def test_every_page_of_the_site_passes_axe(site: Path) -> None:
    names = ["index.html", *(page_name(lesson) for lesson in WRITTEN)]
    counts: dict[str, dict[str, int]] = {}
    blocking: list[str] = []
    with chromium_page() as page:
        page.route(
            "**/*",
            lambda route: route.continue_() if route.request.url.startswith(("file:", "data:")) else route.abort(),
        )
        for i, name in enumerate(names):
            page.goto((site / name).as_uri())
            alts = page.eval_on_selector_all("img", "els => els.map(e => e.getAttribute('alt') || '')")
            vague = [a for a in alts if not a.strip() or a.startswith("No description")]
            assert not vague, f"{name}: {len(vague)} figures without a text alternative of ours"
            for violation in _axe(page, None if i <= 1 else CODE):
                impact = violation["impact"] or "none"
                counts.setdefault(impact, {}).setdefault(violation["id"], 0)
                counts[impact][violation["id"]] += len(violation["nodes"])
                if impact in BLOCKING:
                    where = violation["nodes"][0]["target"] if violation["nodes"] else "?"
                    blocking.append(
                        f"{name}: {violation['id']} ({impact}, {len(violation['nodes'])} nodes, "
                        f"first at {where}): {violation['help']}"
                    )
    print(f"axe-core on {len(names)} pages, violating nodes by impact and rule: {counts}")
    assert not blocking, "serious or critical accessibility violations:\n" + "\n".join(blocking)


# ipywidgets 8's own rules for a radio group and an HTML widget (jupyter-widgets/controls, widgets-base.css):
# fixed-height labels with a floated radio, and prose at the height of an input box.
_WIDGETS_CSS = """<style>
:root { --jp-widgets-radio-item-height: 20px; --jp-widgets-inline-height: 28px; }
.widget-radio-box { display: flex; flex-direction: column; align-items: stretch; }
.widget-radio-box label {
  height: var(--jp-widgets-radio-item-height); line-height: var(--jp-widgets-radio-item-height);
}
.widget-radio-box input { height: var(--jp-widgets-radio-item-height); margin: 0 4px 0 1px; float: left; }
.widget-html-content { line-height: var(--jp-widgets-inline-height); }
</style>"""


def test_quick_check_long_options_wrap_beside_their_radio(tmp_path: Path) -> None:
    """Bank 14 `why_batch` in a narrow column: every radio button sits at the top of its own option."""
    import html

    from kvcourse.quizzes.bank import load_quiz
    from kvcourse.quizzes.widget import STYLE

    q = load_quiz("14").question("why_batch")
    labels = "".join(
        f'<label>{html.escape(f"({k}) {text}")}<input type="radio"></label>'
        for k, text in zip(q.option_keys, q.options, strict=True)
    )
    page_html = (
        f"<html lang='en'><body style='width:480px;font:13px sans-serif'>{_WIDGETS_CSS}{STYLE}"
        f"<div class='kv-quiz'><div class='widget-radio-box'>{labels}</div></div></body></html>"
    )
    (tmp_path / "quiz.html").write_text(page_html, encoding="utf-8")
    with chromium_page(800, 600) as page:
        page.goto((tmp_path / "quiz.html").as_uri())
        boxes = page.eval_on_selector_all(
            "label",
            """els => els.map(l => {
            const r = l.getBoundingClientRect(), i = l.querySelector('input').getBoundingClientRect();
            return [r.top, r.bottom, i.top, i.bottom]; })""",
        )
    assert any(bottom - top > 30 for top, bottom, _, _ in boxes), "the test needs an option long enough to wrap"
    for (top, bottom, radio_top, radio_bottom), following in zip(boxes, boxes[1:] + [None], strict=True):
        assert top - 1 <= radio_top and radio_bottom <= top + 24, "the radio sits beside its option's first line"
        assert following is None or bottom <= following[0] + 0.5, "an option's text runs into the next one"
