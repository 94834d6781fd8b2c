"""The pages of the static site: the index from the syllabus, and a lesson page from its notebook (`make site`)."""

from __future__ import annotations

import html
from functools import cache

import nbformat

from kvcourse.syllabus import Lesson

# The lab template of nbconvert, less every script it would fetch: require.js and the widget manager
# (render.py draws widgets as HTML), MathJax (render.py draws formulas) and mermaid (unused).
# A page works offline, and opens from a file as well as from a web server.
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block extra_css %}<style>{{ resources.kvcourse_css }}</style>{% endblock extra_css %}
{%- block body_header -%}{{ super() }}{{ resources.kvcourse_header }}{%- endblock body_header -%}
{% block body_footer %}{{ resources.kvcourse_footer }}{{ super() }}{% endblock body_footer %}
{% block data_png scoped %}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
alt="{{ output.metadata.get('image/png', {}).get('alt', 'A figure the lesson drew') | escape_html }}">
</div>
{% endblock data_png %}
"""
_TEMPLATE_NAME = "kvcourse_site.html.j2"

# Contrast (WCAG AA, 4.5:1, checked by axe-core in tests/browser/test_browser_accessibility_site.py): the lab
# theme draws cell prompts in grey at half opacity (2.2:1) and some code colours under 4.5:1 on the code
# background (#f5f5f5); links in running text are underlined, not told apart by colour alone.
CSS = """
html:root { --jp-cell-prompt-not-active-opacity: 1; --jp-cell-prompt-not-active-font-color: #555;
        --jp-cell-inprompt-font-color: #1f5f99; --jp-cell-outprompt-font-color: #a3331a;
        --jp-mirror-editor-comment-color: #2e6666; --jp-mirror-editor-operator-color: #7a1fb8;
        --jp-mirror-editor-number-color: #006000; --jp-mirror-editor-keyword-color: #006000;
        --jp-mirror-editor-builtin-color: #006000; --jp-mirror-editor-string-color: #a31b1b;
        --jp-mirror-editor-meta-color: #7a1fb8; --jp-mirror-editor-def-color: #0000c0;
        --jp-mirror-editor-attribute-color: #0000c0; --jp-mirror-editor-variable-2-color: #0f4f8f;
        --jp-mirror-editor-tag-color: #006000; --jp-mirror-editor-qualifier-color: #4d4d00;
        --jp-mirror-editor-header-color: #0000c0; --jp-mirror-editor-quote-color: #006000;
        --jp-mirror-editor-link-color: #0d47a1; --jp-mirror-editor-error-color: #b71c1c;
        --jp-mirror-editor-property-color: #0000c0; --jp-mirror-editor-variable-3-color: #005a5a;
        --jp-mirror-editor-atom-color: #3333aa; --jp-mirror-editor-bracket-color: #5c5c3d;
        --jp-mirror-editor-hr-color: #595959; }
html .jp-RenderedHTMLCommon a, html .jp-RenderedHTMLCommon a:link, html .jp-RenderedHTMLCommon a:visited,
.kv-note a { text-decoration: underline; }
.kv-nav { display: flex; gap: 1.5em; padding: 0.6em 1em; font: 14px sans-serif; border-bottom: 1px solid #ddd; }
.kv-note { margin: 1em; padding: 0.8em 1em; background: #eef4fb; border-left: 4px solid #1a4f8b;
           font: 14px/1.5 sans-serif; }
.kv-note code, .kv-hint code { background: #fff; padding: 0 0.2em; }
.kv-box { display: flex; gap: 6px; } .kv-row { flex-flow: row wrap; align-items: center; }
.kv-column { flex-direction: column; }
.kv-control { margin-right: 1em; font: 13px sans-serif; } .kv-label { color: #444; }
.kv-control input:disabled, .kv-control select:disabled, .kv-control textarea:disabled, .kv-widget button:disabled
  { color: #444; background: #f3f3f3; border: 1px solid #888; opacity: 1; }
.kv-figure { max-width: 100%; }
.kv-closed { color: #555; font: 13px sans-serif; padding: 0.3em 0; }
.kv-hint { color: #555; font: 13px sans-serif; }
.kv-quiz { border: 1px solid #ccd; border-radius: 4px; padding: 0.5em 1em; }
.kv-question { border-top: 1px solid #eee; }
.jp-RenderedHTMLCommon ul.kv-options { list-style: none; padding-left: 1em; }
"""

_INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>The KV cache and model memory: an interactive course</title>
<style>
body {{ font: 16px/1.5 sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ text-align: left; padding: 0.4em; border-bottom: 1px solid #ddd; }}
td.num {{ font-variant-numeric: tabular-nums; color: #555; }} .pending {{ color: #595959; }}
code {{ background: #f3f3f3; padding: 0 0.2em; }}
</style></head>
<body>
<main>
<h1>The KV cache and model memory</h1>
<p>Why does a language model get slower and hungrier as it writes? Each lesson below runs a real model
(SmolLM2-135M-Instruct) and a from-scratch engine, and shows the numbers they measured.</p>
<p class="note">These pages are static copies, run once without anyone at the keyboard. To run a lesson
yourself (make your guesses, move the simulators' controls, answer the quick checks), get the course and
run <code>make lab</code> in its folder.</p>
<table>
<tr><th>#</th><th>lesson</th><th>what you see</th></tr>
{rows}
</table>
</main>
</body></html>
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def page_name(lesson: Lesson) -> str:
    """The file name of a lesson's page: 06_how_the_cache_grows.html."""
    return f"{lesson.number}_{lesson.slug}.html"


def index_html(syllabus: tuple[Lesson, ...], written: set[str]) -> str:
    """The index: every lesson of the syllabus, linked where its page exists."""
    rows = []
    for lesson in syllabus:
        if lesson.number in written:
            title = f'<a href="{_e(page_name(lesson))}">{_e(lesson.title)}</a>'
        else:
            title = f'<span class="pending">{_e(lesson.title)} (not written yet)</span>'
        rows.append(f'<tr><td class="num">{lesson.number}</td><td>{title}</td><td>{_e(lesson.summary)}</td></tr>')
    return _INDEX.format(rows="\n".join(rows))


def _nav(neighbours: tuple[Lesson | None, Lesson | None], where: str = "top") -> str:
    before, after = neighbours
    links = ['<a href="index.html">All lessons</a>']
    if before:
        links.append(f'<a href="{_e(page_name(before))}">← {before.number} {_e(before.title)}</a>')
    if after:
        links.append(f'<a href="{_e(page_name(after))}">{after.number} {_e(after.title)} →</a>')
    return f'<nav class="kv-nav" aria-label="Lessons ({where} of the page)">{"".join(links)}</nav>'


def live_note(lesson: Lesson) -> str:
    """The note on every page: what this copy is, and how to run the lesson live."""
    return (
        f'<div class="kv-note"><b>A static copy of lesson {lesson.number}.</b> It was run once with '
        "nobody at the keyboard: no guesses were asked, the lesson took its quick path where it has one, "
        "in float32. The figures are as the lesson drew them; the simulators' controls, "
        "your own guesses and the quick check's feedback need the live lab. To run it: in the course "
        f"folder, <code>make lab</code>, then open <code>{_e(lesson.notebook)}</code>.</div>"
    )


@cache
def _exporter():
    """One exporter for every page: loading its templates takes longer than exporting a page."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    return HTMLExporter(
        template_name="lab", extra_loaders=[DictLoader({_TEMPLATE_NAME: _TEMPLATE})], template_file=_TEMPLATE_NAME
    )


def lesson_html(lesson: Lesson, nb: nbformat.NotebookNode, neighbours: tuple[Lesson | None, Lesson | None]) -> str:
    """A lesson's page from its static notebook (render.make_static), with navigation and the live note."""
    nb.metadata["title"] = f"{lesson.number} · {lesson.title}"
    resources = {
        "kvcourse_css": CSS,
        "kvcourse_header": _nav(neighbours) + live_note(lesson),
        "kvcourse_footer": _nav(neighbours, "bottom"),
    }
    body, _ = _exporter().from_notebook_node(nb, resources=resources)
    return body
