"""The course as a static site (`make site`, issue 16): every page there, figures in, no errors, no answers.

The site is built once per test run (a lock file shares it between pytest-xdist workers) with `build_site`,
from lessons executed at most once in this run: a lesson tests/lessons/test_notebooks.py has run (or is
running) in float32 is taken from it, any other is executed here, as that test executes it, and that test
then takes it from here (the `lesson_runs` fixture of tests/conftest.py). A lesson unchanged since an earlier
run is taken from the cache of executed notebooks (.cache/executed), as `make site` takes it.
"""

from __future__ import annotations

import ast
import fcntl
import html
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from guards import missing

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import expected_number, prompt_for
from kvcourse.quizzes.model import Kind
from kvcourse.quizzes.units import DESCRIPTIONS, format_quantity
from kvcourse.site.build import (
    MARKER,
    SITE_DTYPE,
    build_site,
    executed_key,
    load_executed,
    save_executed,
    sources_digest,
)
from kvcourse.site.pages import page_name
from kvcourse.site.render import QUIZ_SEED, WIDGET_STATE, question_html, quiz_html, typeset_math
from kvcourse.syllabus import Lesson, load_syllabus

pytestmark = pytest.mark.slow
CHROMIUM = Path("/usr/bin/chromium")
WRITTEN = [lesson for lesson in load_syllabus() if lesson.notebook_path.exists()]


def _executed_once(lesson_runs, lesson: Lesson, sources: str) -> nbformat.NotebookNode:
    """The lesson executed in this run (waiting for another worker's run of it), else an unchanged earlier run."""
    done = lesson_runs.done(lesson.notebook_path, SITE_DTYPE)
    if done is not None:
        return done.nb
    return load_executed(lesson.notebook_path, sources=sources) or lesson_runs.run(lesson.notebook_path, SITE_DTYPE).nb


@pytest.fixture(scope="session")
def site(run_tmp: Path, lesson_runs) -> Path:
    """The built site; the notebooks it was built from lie beside it, in kvcourse-site-executed/."""
    root = run_tmp
    out, failed = root / "kvcourse-site", root / "kvcourse-site.failed"
    if not (out / MARKER).exists() and not failed.exists():
        # Every worker that gets here runs the lessons nobody has run yet, side by side (one kernel per worker,
        # two in a run without workers); lessons another worker is running are waited for, never run twice.
        # Last lesson first: the notebook tests go first to last, so the two meet once, in the middle, instead
        # of one waiting at every lesson for the other.
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
            failed.write_text(f"no site was written: {err}")
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
                    nb = _executed_once(lesson_runs, lesson, sources)
                    save_executed(nb, lesson.notebook_path, executed_key(lesson.notebook_path, sources=sources), staged)
                pages = build_site(out, staged, jobs=1, log=lesson_runs.note)  # it notes a lesson it executes itself
            except Exception as err:
                failed.write_text(f"building the site failed: {err}")
                raise
            executed = root / "kvcourse-site-executed"
            executed.mkdir(exist_ok=True)
            for page in pages:
                nbformat.write(page.nb, executed / f"{page.lesson.number}.ipynb")
    return out


def _executed(site: Path, lesson: Lesson) -> nbformat.NotebookNode:
    return nbformat.read(site.parent / "kvcourse-site-executed" / f"{lesson.number}.ipynb", as_version=4)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.hrefs.append(found["href"])
        if tag == "img":
            self.srcs.append(found.get("src") or "")


def _links(text: str) -> _Links:
    parser = _Links()
    parser.feed(text)
    return parser


def _plain(text: str) -> str:
    """Page or bank text compared as a reader sees it: no tags, no entities, no backticks, one space."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", text)).replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def _local_targets(site: Path, hrefs: list[str]) -> list[str]:
    """Relative links whose file is missing."""
    local = [h.split("#")[0] for h in hrefs if not re.match(r"[a-z]+:", h) and not h.startswith("#")]
    return [h for h in local if h and not (site / h).is_file()]


def test_index_lists_the_syllabus_and_every_link_resolves(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    hrefs = _links(index).hrefs
    assert not _local_targets(site, hrefs), f"index.html links to missing pages: {_local_targets(site, hrefs)}"
    assert hrefs == [page_name(lesson) for lesson in WRITTEN], "the index links every written lesson, in order"
    for lesson in load_syllabus():
        assert html.escape(lesson.title) in index and html.escape(lesson.summary, quote=True) in index
    pages = sorted(p.name for p in site.glob("*.html"))
    assert pages == sorted(["index.html", *(page_name(lesson) for lesson in WRITTEN)])


@pytest.mark.parametrize("lesson", WRITTEN, ids=lambda lesson: lesson.number)
def test_lesson_page_has_its_outputs_and_figures_and_no_errors(site: Path, lesson: Lesson) -> None:
    text = (site / page_name(lesson)).read_text(encoding="utf-8")
    links = _links(text)
    assert not _local_targets(site, links.hrefs), f"{page_name(lesson)}: missing {_local_targets(site, links.hrefs)}"
    assert all(src.startswith("data:image/") for src in links.srcs), "every figure is embedded in the page"
    nb = _executed(site, lesson)
    png_outputs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    simulator_figures = sum(m["model_name"] == "ImageModel" and bool(m.get("buffers")) for m in state.values())
    assert len(links.srcs) >= png_outputs, f"{page_name(lesson)}: {len(links.srcs)} images for {png_outputs} figures"
    if png_outputs + simulator_figures:
        assert len(links.srcs) >= png_outputs + min(simulator_figures, 1)
    for bad in (r"Traceback", r"\bename\b", r"CellExecutionError", r"✘ Expected"):
        assert not re.search(bad, text), f"{page_name(lesson)} shows an error ({bad!r})"
    fetched = [
        m.group(0)[:80] for m in re.finditer(r'<(\w+)[^>]*\s(?:src|href)="https?://[^"]*"', text) if m.group(1) != "a"
    ] + re.findall(r"url\(['\"]?https?://[^)]*\)", text)
    assert not fetched and "<script src=" not in text, f"the page fetches {fetched}: it must read offline"
    raw_tex = re.findall(r"\\(?:frac|text|dots|approx|cdot|times|sum)\b", _plain(text))
    assert not raw_tex, f"{page_name(lesson)}: formulas left as TeX ({raw_tex}); site.render.typeset_math draws them"
    assert "make lab" in text and lesson.notebook in text, "the page says how to run the lesson live"
    assert "widget-state" not in text and "widget-view" not in text, "no widget state or view in a static page"


def _solution_texts(nb: nbformat.NotebookNode, source: Path) -> list[str]:
    """What every solution toggle holds: as drawn in the run (widget state) and as written in the lesson."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    texts = []
    for model in state.values():
        if model["model_name"] == "AccordionModel":
            for child in model["state"].get("children", []):
                texts.append(state[child.removeprefix("IPY_MODEL_")]["state"].get("value", ""))
    for cell in nbformat.read(source, as_version=4).cells:
        if cell.cell_type != "code" or "solution(" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "solution":
                arguments = [*node.args, *(k.value for k in node.keywords)]
                texts += [
                    c.value
                    for a in arguments
                    for c in ast.walk(a)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
    return _sentences(texts)


def _sentences(texts: list[str]) -> list[str]:
    """Each text cut into sentences long enough that finding one in a page means it leaked."""
    pieces = [s.strip() for t in texts for s in re.split(r"(?<=[.!?])\s+", _plain(t))]
    return sorted({s for s in pieces if len(s) >= 40})


def _bank_secrets(lesson: Lesson) -> list[str]:
    """The unsealed bank's answer key for the lesson: explanations, solutions, model answers."""
    secrets = []
    for q in load_quiz(lesson.number).questions:
        public = _plain(" ".join([q.prompt, q.starter, *q.options]))  # a solution starts like its starter
        secrets += [
            s
            for s in _sentences([q.explanation, q.solution, q.model_answer, *(why for _, why in q.why)])
            if s not in public
        ]
    return secrets


@pytest.mark.parametrize("lesson", WRITTEN, ids=lambda lesson: lesson.number)
def test_lesson_page_holds_no_answer_key(site: Path, lesson: Lesson) -> None:
    text = (site / page_name(lesson)).read_text(encoding="utf-8")
    plain = _plain(text)
    leaked = [t[:60] for t in _solution_texts(_executed(site, lesson), lesson.notebook_path) if t in plain]
    assert not leaked, f"{page_name(lesson)} shows solution text: {leaked}"
    leaked = [t[:60] for t in _bank_secrets(lesson) if t in plain]
    assert not leaked, f"{page_name(lesson)} shows the bank's answer key: {leaked}"
    quiz = _plain(quiz_html(lesson.number, lesson.notebook))
    assert quiz in plain, "the quick check is drawn from the bank's public fields"
    assert "The answer is" not in quiz
    questions = load_quiz(lesson.number).questions
    for number, q in enumerate(questions, start=1):
        shown = _plain(question_html(q, number, len(questions)))
        assert f"Question {number} of {len(questions)}" in shown and q.id not in shown.split(":")[0]
        assert shown in quiz and _plain(prompt_for(q, QUIZ_SEED)) in shown, f"question {q.id} is shown"
        if q.kind is Kind.CHOICE:
            assert all(_plain(option) in shown for option in q.options), f"{q.id}: every option is shown"
        if q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
            expected = expected_number(q, QUIZ_SEED)
            shown = shown.replace(_plain(DESCRIPTIONS[q.unit]), "")  # the unit's hint has example numbers
            shown = shown.split(": ", 1)[-1]  # so has the header, "Question n of m (p points): "
            for answer in {format_quantity(expected, q.unit), f"{expected:g}", f"{expected:,.0f}"}:
                in_prompt = re.search(rf"(?<![\d.,]){re.escape(answer)}(?![\d.,])", prompt_for(q, QUIZ_SEED))
                in_shown = re.search(rf"(?<![\d.,]){re.escape(answer)}(?![\d.,])", shown)
                assert in_prompt or not in_shown, f"{q.id}: the answer {answer} is shown"


def test_site_in_a_browser(site: Path, tmp_path: Path) -> None:
    """Every page opens in Chromium with nothing fetched from the network: figures decode, links resolve."""
    try:
        from playwright import sync_api
    except ImportError:
        missing("needs the Python package playwright: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        missing("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.route(
            "**/*",
            lambda route: route.continue_() if route.request.url.startswith(("file:", "data:")) else route.abort(),
        )
        page.goto((site / "index.html").as_uri())
        links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        assert len(links) == len(WRITTEN)
        for lesson, url in zip(WRITTEN, links, strict=True):
            page.goto(url)
            assert lesson.title in page.title()
            images = page.eval_on_selector_all("img", "els => els.map(e => e.complete && e.naturalWidth > 0)")
            assert all(images), f"{url}: {images.count(False)} figures did not decode"
            assert page.locator(".kv-note").is_visible() and "make lab" in page.locator(".kv-note").inner_text()
            assert "Traceback" not in page.locator("body").inner_text()
            for href in page.eval_on_selector_all(".kv-nav a", "els => els.map(e => e.href)"):
                assert Path(href.removeprefix("file://")).is_file(), f"{url}: broken link {href}"
        browser.close()
    assert not errors, f"script errors: {errors}"


def test_formulas_are_drawn_and_money_and_code_left_alone() -> None:
    drawn = typeset_math(
        r"Time: $$a \times n + \underbrace{b}_{\text{per FLOP}}$$, step $t$; "
        r"it costs $5 and $10; `x = $y$` is code."
    )
    assert drawn.count("class='kv-math'") == 2 and "$5 and $10" in drawn and "`x = $y$`" in drawn
    assert "\\underbrace" in drawn, "the formula's own TeX is kept as the image's alt text"


def test_figures_scrolling_boxes_and_navigation_are_accessible() -> None:
    from kvcourse.site.pages import _nav
    from kvcourse.site.render import figure_alt, focusable_scrolling

    alt = figure_alt("## Growth\n\nSome words.\n\nThe figure shows the cache growing. Then more.", 2, "Growth")
    assert alt == "Figure 2 (section: Growth), drawn by the code cell above it. The figure shows the cache growing."
    assert figure_alt("", 1) == "Figure 1, drawn by the code cell above it."
    wide = focusable_scrolling(
        '<pre style="overflow-x:auto">x</pre><div style="overflow: scroll" tabindex="-1">y</div>'
    )
    assert (
        wide == '<pre tabindex="0" style="overflow-x:auto">x</pre><div style="overflow: scroll" tabindex="-1">y</div>'
    )
    assert 'aria-label="Lessons (top of the page)"' in _nav((None, None))
    assert 'aria-label="Lessons (bottom of the page)"' in _nav((None, None), "bottom")
