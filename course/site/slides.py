"""The lessons as reveal.js slides, one deck per lesson, offline (`kvcourse slides`, what `make slides` runs).

Each deck is nbconvert's SlidesExporter run on the lesson as executed for the site (build.execute_lessons: the
cache of executed notebooks first), drawn without a kernel (render.make_static), so a simulator shows the figure
it last drew. The cells' `slideshow` metadata cuts the slides; set-up code and figure-only cells show their
output alone (their `hide-input` tag). reveal.js and MathJax 3 are copied into the folder (assets.py) and the
template (TEMPLATE) loads nothing else: the decks open from file:// with no network.
"""

from __future__ import annotations

import argparse
import html
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from kvcourse.site.assets import copy_mathjax, copy_reveal
from kvcourse.site.build import DEFAULT_CACHE, Page, execute_lessons, swap_in
from kvcourse.site.render import make_static
from kvcourse.syllabus import Lesson, load_syllabus

if TYPE_CHECKING:
    from nbconvert import SlidesExporter

MARKER = ".kvcourse-slides"  # only a folder holding this file is ever replaced by a build
STATIC = "_static"
TEMPLATE_NAME = "kvcourse_slides.html.j2"
# nbconvert's reveal template (its index.html.j2) with every script served from the slides folder: no jQuery,
# require.js, mermaid or widget manager (a static deck needs none), MathJax 3 in place of the CDN's MathJax 2, and
# reveal.js loaded as plain scripts. resources["kv_static"] is the folder, resources["kv_mathjax"] MathJax's script.
TEMPLATE = r"""{%- extends 'index.html.j2' -%}

{%- block html_head_js -%}{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}

{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [["$", "$"], ["\\(", "\\)"]], displayMath: [["$$", "$$"], ["\\[", "\\]"]], processEscapes: true},
  options: {skipHtmlTags: ["script", "noscript", "style", "textarea", "pre", "code"]}
};
</script>
<script defer src="{{ resources.kv_static }}/mathjax/{{ resources.kv_mathjax }}"></script>
<style>
/* Sized for a projector: the deck is 1280 x 800 and scaled to the screen; 24px prose fits 100 characters a line. */
.reveal .slides { text-align: left; }
.reveal .slides section { height: 100%; overflow-y: auto; }
.reveal .jp-RenderedHTMLCommon { font-size: 24px; line-height: 1.45; }
.reveal .jp-RenderedHTMLCommon h1 { font-size: 48px; }
.reveal .jp-RenderedHTMLCommon h2 { font-size: 38px; }
.reveal .jp-RenderedHTMLCommon h3 { font-size: 30px; }
.reveal .jp-InputArea-editor pre, .reveal .jp-OutputArea-output pre { font-size: 18px; line-height: 1.35; }
.reveal .jp-OutputArea-output img { max-height: 480px; width: auto; max-width: 100%; }
.reveal .kv-box img { max-height: 400px; }
.reveal .jp-OutputArea-output table { font-size: 18px; }
.reveal aside.notes { display: none; }
</style>
{%- endblock html_head_js_mathjax -%}

{% block footer_js %}
<script src="{{ resources.kv_static }}/reveal.js/dist/reveal.js"></script>
<script src="{{ resources.kv_static }}/reveal.js/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({
  controls: true,
  progress: true,
  history: true,
  slideNumber: "c/t",
  transition: "{{ reveal_transition }}",
  width: {{ reveal_width }},
  height: {{ reveal_height }},
  plugins: [RevealNotes]
});
</script>
{% endblock footer_js %}
"""
# Cells shown by their output alone: figures and set-up (hide-input), solutions and the quick check's call
# (make_static replaces a solution's source and tags both remove-input).
INPUT_HIDDEN = {"hide-input", "remove-input"}


def deck_name(lesson: Lesson) -> str:
    """The file of a lesson's deck: NN_slug.slides.html."""
    return f"{Path(lesson.notebook).stem}.slides.html"


def make_exporter() -> SlidesExporter:
    """nbconvert's SlidesExporter on the course's template (TEMPLATE), its URLs all local or blank."""
    import jinja2
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_input_tags = INPUT_HIDDEN
    exporter = SlidesExporter(
        config=config,
        extra_loaders=[jinja2.DictLoader({TEMPLATE_NAME: TEMPLATE})],
        template_file=TEMPLATE_NAME,
        reveal_url_prefix=f"{STATIC}/reveal.js",
        reveal_theme="white",
        reveal_transition="none",  # a projector redraws a sliding figure badly
        reveal_width="1280",
        reveal_height="800",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        # Nothing loads from a CDN: the template loads none of these; blank them so no default URL can return.
        require_js_url="",
        jquery_url="",
        mathjax_url="",
        font_awesome_url="",
    )
    exporter.register_preprocessor("nbconvert.preprocessors.TagRemovePreprocessor", enabled=True)
    return exporter


def deck_html(nb: nbformat.NotebookNode, lesson: Lesson, mathjax: str, exporter: SlidesExporter | None = None) -> str:
    """One lesson's deck from its executed notebook: widgets drawn, answers out, scripts from ./_static.

    ``mathjax`` is MathJax's script under _static/mathjax (assets.copy_mathjax); ``exporter`` one from
    make_exporter, shared by the decks of a build (a new one otherwise)."""
    static = make_static(nb, lesson.notebook)
    static.metadata["title"] = f"{lesson.number} · {lesson.title}"
    resources = {"kv_static": STATIC, "kv_mathjax": mathjax}
    body, _ = (exporter or make_exporter()).from_notebook_node(static, resources=resources)
    return body


def index_html(lessons: list[Lesson], written: set[str]) -> str:
    """The list of decks, in the syllabus's order; a lesson with no notebook yet is named without a link."""
    items = []
    for lesson in lessons:
        name = html.escape(f"{lesson.number} · {lesson.title}")
        link = f"<a href='{html.escape(deck_name(lesson))}'>{name}</a>" if lesson.number in written else name
        items.append(f"<li>{link}</li>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>KV-cache course: slides</title>"
        "<style>body{font:1.2rem/1.5 system-ui,sans-serif;max-width:48rem;margin:2rem auto;padding:0 1rem}</style>"
        "</head><body><main><h1>KV-cache course: slides</h1>"
        "<p>One deck per lesson. Arrow keys step through a deck; <kbd>s</kbd> opens the speaker notes, "
        "<kbd>f</kbd> full screen. The simulators show the figure they drew when the lesson ran; "
        "<code>kvcourse lab</code> runs them live.</p>"
        f"<ol>{''.join(items)}</ol></main></body></html>\n"
    )


def build_slides(
    out: Path,
    reuse: Path | None = DEFAULT_CACHE,
    jobs: int = 2,
    log: Callable[[str], None] = print,
    numbers: list[str] | None = None,
) -> list[Page]:
    """Write the decks to ``out``: index.html, one NN_slug.slides.html per lesson with a notebook, and _static/.

    ``numbers`` limits the decks to those lessons (the tests build two); the index lists the decks written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"{out} exists and is not a folder written by `kvcourse slides`; choose another --out")
    syllabus = load_syllabus()
    chosen = [lsn for lsn in syllabus if lsn.notebook_path.exists() and (numbers is None or lsn.number in numbers)]
    pages = execute_lessons(chosen, reuse, jobs, log)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))  # same disk: one rename
    try:
        (staging / MARKER).write_text("written by `kvcourse slides`; replaced on every build\n")
        copy_reveal(staging / STATIC / "reveal.js")
        mathjax = copy_mathjax(staging / STATIC / "mathjax", needed_by="the slides")
        exporter = make_exporter()
        for page in pages:
            text = deck_html(page.nb, page.lesson, mathjax, exporter)
            (staging / deck_name(page.lesson)).write_text(text, encoding="utf-8")
        written = {p.lesson.number for p in pages}
        (staging / "index.html").write_text(index_html(syllabus, written), encoding="utf-8")
        swap_in(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return pages


def _slides_command(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    reuse = None if args.no_reuse else Path(args.reuse_executed)
    pages = build_slides(Path(args.out), reuse, args.jobs)
    executed = sum(1 for p in pages if p.source == "executed")
    print(
        f"slides: wrote {args.out}/index.html and {len(pages)} decks in {time.perf_counter() - start:.0f} s "
        f"({len(pages) - executed} from the cache of executed notebooks, {executed} executed)"
    )
    return 0


def add_slides(sub: argparse._SubParsersAction) -> None:
    """Register `kvcourse slides` (what `make slides` runs)."""
    p = sub.add_parser("slides", help="write each lesson as reveal.js slides that open offline (make slides)")
    p.add_argument("--out", default="slides", help="folder to write (default: slides)")
    p.add_argument(
        "--reuse-executed",
        default=str(DEFAULT_CACHE),
        metavar="DIR",
        help="cache of executed notebooks (default: .cache/executed, which the test suite and `make site` fill)",
    )
    p.add_argument("--no-reuse", action="store_true", help="execute every lesson, ignoring the cache")
    p.add_argument("--jobs", type=int, default=2, help="lessons executed at a time (default: 2)")
    p.set_defaults(func=_slides_command)
