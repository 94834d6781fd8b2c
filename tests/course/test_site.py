"""The course as a book (`make site`, issue 47): every page there, figures in, no errors, no answers, terms linked.

The book is built once per test run (the `book` fixture, tests/book_site.py) from this run's float32 lesson
runs; tests/browser/test_browser_book.py opens the same book in Chromium. The last tests here need no book.
"""

from __future__ import annotations

import ast
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from book_site import WRITTEN, executed
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import expected_number, prompt_for
from kvcourse.quizzes.model import Kind
from kvcourse.quizzes.units import DESCRIPTIONS, format_quantity
from kvcourse.site.book import lesson_notebook, page_name
from kvcourse.site.build import MARKER
from kvcourse.site.glossary import load_glossary
from kvcourse.site.render import QUIZ_SEED, WIDGET_STATE, question_html, quiz_html
from kvcourse.syllabus import Lesson, load_parts, load_syllabus

MATHJAX = "_static/mathjax/es5/tex-chtml-full.js"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.fetched: list[str] = []  # what the page loads from the network (anything but a link to follow)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.hrefs.append(found["href"] or "")
        if tag == "img":
            self.srcs.append(found.get("src") or "")
        for name in ("src", "href"):
            if tag != "a" and re.match(r"(https?:)?//", found.get(name) or ""):
                self.fetched.append(f"<{tag} {name}={found[name]}>")


def _links(text: str) -> _Links:
    parser = _Links()
    parser.feed(text)
    return parser


def _plain(text: str) -> str:
    """Page or bank text compared as a reader sees it: no tags, no entities, no backticks, one space."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", text)).replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def _missing_targets(book: Path, page: str, hrefs: list[str]) -> list[str]:
    """Relative links and sources whose file is missing."""
    local = [h.split("#")[0].split("?")[0] for h in hrefs if not re.match(r"[a-z]+:|//", h) and not h.startswith("#")]
    return [h for h in local if h and not (book / page).parent.joinpath(h).is_file()]


def _article(text: str) -> str:
    """The page's own content, without the sidebar and the theme's header and footer."""
    match = re.search(r'<article class="bd-article">(.*?)</article>', text, re.DOTALL)
    assert match, "a book page has an article"
    return match.group(1)


@pytest.mark.slow
def test_index_has_the_parts_in_the_sidebar_and_every_lesson_in_order(book: Path) -> None:
    index = (book / "index.html").read_text(encoding="utf-8")
    links = _links(index)
    assert not _missing_targets(book, "index.html", links.hrefs + links.srcs)
    lessons = [h for h in dict.fromkeys(links.hrefs) if re.match(r"\d\d_\w+\.html$", h)]
    assert lessons == [page_name(lesson) for lesson in WRITTEN], "the index links every written lesson, in order"
    for i, part in enumerate(load_parts()):
        assert f"Part {i + 1}: {html.escape(part.title)}" in index, f"the sidebar names part {i + 1}"
    assert "glossary.html" in links.hrefs and "search.html" in index
    assert (book / MARKER).read_text().count("Sphinx warned") == 0, (book / MARKER).read_text()[:2000]


@pytest.mark.slow
@pytest.mark.parametrize("lesson", WRITTEN, ids=lambda lesson: lesson.number)
def test_lesson_page_has_its_outputs_and_figures_and_no_errors(book: Path, lesson: Lesson) -> None:
    name = page_name(lesson)
    text = (book / name).read_text(encoding="utf-8")
    links = _links(text)
    assert not _missing_targets(book, name, links.hrefs + links.srcs), f"{name} links to missing files"
    assert not links.fetched and "require.js" not in text and "embed-amd" not in text, f"{name}: {links.fetched}"
    nb = executed(book, lesson)
    png_outputs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    simulator_figures = sum(m["model_name"] == "ImageModel" and bool(m.get("buffers")) for m in state.values())
    figures = [src for src in _links(_article(text)).srcs if src.startswith(("data:image/", "_images/"))]
    assert len(figures) >= png_outputs + min(simulator_figures, 1), f"{name}: {len(figures)} figures"
    for bad in (r"Traceback", r"\bename\b", r"CellExecutionError", r"✘ Expected"):
        assert not re.search(bad, text), f"{name} shows an error ({bad!r})"
    if 'class="math' in text:
        assert MATHJAX in text, f"{name} has formulas: MathJax comes from the book itself"
    assert "Run this live" in text and "make lab" in text and lesson.notebook in text, "the live note is there"
    assert "widget-state" not in text and "widget-view" not in text, "no widget state or view in a page"
    source = nbformat.read(lesson.notebook_path, as_version=4)
    folded = sum("hide-input" in c.metadata.get("tags", []) for c in source.cells)
    assert text.count("cell tag_hide-input") == folded, f"{name}: every cell the lesson marks hide-input is folded"


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


@pytest.mark.slow
@pytest.mark.parametrize("lesson", WRITTEN, ids=lambda lesson: lesson.number)
def test_lesson_page_holds_no_answer_key(book: Path, lesson: Lesson) -> None:
    text = (book / page_name(lesson)).read_text(encoding="utf-8")
    plain = _plain(text)
    leaked = [t[:60] for t in _solution_texts(executed(book, lesson), lesson.notebook_path) if t in plain]
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


@pytest.mark.slow
def test_glossary_lists_every_term_and_the_lesson_that_teaches_it_links_there(book: Path) -> None:
    glossary = (book / "glossary.html").read_text(encoding="utf-8")
    pages = {lesson.number: (book / page_name(lesson)).read_text(encoding="utf-8") for lesson in WRITTEN}
    for term in load_glossary():
        entry = re.search(rf'<dt id="(term-[^"]+)">{re.escape(html.escape(term.term))}<', glossary)
        assert entry, f"the glossary lists {term.term!r}"
        page = pages[term.lesson]
        assert f'href="glossary.html#{entry.group(1)}"' in page, f"lesson {term.lesson} links {term.term!r} there"
        assert re.search(rf'id="taught-{re.escape(nodes.make_id(term.term))}-\d+"', page), (
            f"lesson {term.lesson} is where the index and search send {term.term!r}"
        )
    assert f'href="{page_name(WRITTEN[12])}' in glossary, "each entry names the lesson that teaches it"


@pytest.mark.slow
def test_search_sends_a_term_to_the_lesson_that_teaches_it(book: Path) -> None:
    script = (book / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(script[script.index("(") + 1 : script.rindex(")")])
    docnames, entries = index["docnames"], index["indexentries"]
    for term in load_glossary():
        found = entries.get(term.term) or entries.get(term.term.lower())
        assert found, f"{term.term!r} is an index entry"
        lesson = next(lesson for lesson in WRITTEN if lesson.number == term.lesson)
        assert {docnames[hit[0]] for hit in found} == {Path(lesson.notebook).stem}, term.term
    assert "copy on write" in entries and docnames[entries["copy on write"][0][0]] == "12_sharing"


# ---------------------------------------------------------------- no book needed


def test_glossary_links_the_first_use_in_prose_only() -> None:
    from kvcourse.site.glossary import Term, link_terms_in

    settings = get_default_settings(Parser)
    doc = new_document("<lesson>", settings)
    Parser().parse("Heading KV cache\n================\n\nThe ``KV cache`` code. A KV cache and a kv cache.\n", doc)
    terms = (Term("KV cache", ("key-value cache",), "05", "What it is."),)
    assert link_terms_in(doc, terms, lesson="05") == 1
    xrefs = [n for n in doc.findall() if n.tagname == "pending_xref"]
    assert [x.astext() for x in xrefs] == ["KV cache"] and xrefs[0]["reftarget"] == "kv cache"
    assert doc.next_node(nodes.title).astext() == "Heading KV cache", "a heading is never linked"
    assert doc.next_node(nodes.literal).astext() == "KV cache", "nor is code"
    assert [n["entries"][0][1] for n in doc.findall() if n.tagname == "index"] == ["KV cache"]
    other = new_document("<other>", settings)
    Parser().parse("A key-value cache here.\n", other)
    assert link_terms_in(other, terms, lesson="12") == 1
    assert not [n for n in other.findall() if n.tagname == "index"], "only the teaching lesson is indexed"


def test_a_lesson_page_has_the_live_note_and_no_solution_source() -> None:
    lesson = next(lesson for lesson in load_syllabus() if lesson.number == "12")
    nb = lesson_notebook(lesson, nbformat.read(lesson.notebook_path, as_version=4))
    assert nb.cells[1].cell_type == "markdown" and "Run this live" in nb.cells[1].source
    assert lesson.notebook in nb.cells[1].source
    solutions = [c for c in nb.cells if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert solutions and all("solution(" not in c.source for c in solutions)
    assert all("remove-input" in c.metadata["tags"] for c in solutions)


def test_figures_and_scrolling_boxes_are_accessible() -> None:
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
