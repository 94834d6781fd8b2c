"""A quick check's long options in a narrow column, in Debian's Chromium: each radio sits by its option's first line.

(The book's pages are checked with axe-core in tests/browser/test_browser_book.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_lab import chromium_page, needs_chromium

pytestmark = [pytest.mark.slow, needs_chromium]


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
