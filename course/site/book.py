"""The course as a book: the executed lessons, the syllabus and the glossary written as a Sphinx project and built.

`write_sources` lays out what Sphinx reads: the front page (the course's parts as the sidebar), one static
notebook per lesson (render.make_static: widgets drawn as HTML, no solutions, quick checks without
answers, and a note on running it live), the glossary, conf.py and the assets the pages serve
themselves. `run_sphinx` builds it in a child process, so Sphinx's global state never outlives a build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import nbformat

from kvcourse.site.assets import copy_mathjax
from kvcourse.site.glossary import GLOSSARY_DOC, glossary_markdown, load_glossary
from kvcourse.site.render import make_static
from kvcourse.syllabus import Lesson, load_parts, part_of

INDEX_TEXT = """# The KV cache and model memory

Why does a language model get slower and hungrier for memory as it writes? Each lesson runs a real
model (SmolLM2-135M-Instruct) and a from-scratch serving engine, and shows what they measured: from one
word's cost to what today's serving engines do.

These pages are the lessons as they ran once with nobody at the keyboard, in float32. To run a lesson
yourself (make your guesses, move the simulators' controls, answer the quick checks), get the course
and run `make lab` in its folder. The {doc}`glossary <glossary>` lists the terms the lessons use; the
search box finds any word on any page.
"""

# The widgets' and quick checks' look. They sit in a cell's output, which the theme draws light in its dark mode
# too, so their greys are fixed (4.5:1 or more on that background), not the theme's muted text colour.
CSS = """
.kv-note { border-left: 4px solid var(--pst-color-info); }
.kv-box { display: flex; gap: 6px; } .kv-row { flex-flow: row wrap; align-items: center; }
.kv-column { flex-direction: column; }
.kv-control { margin-right: 1em; font-size: 0.85rem; } .kv-label { color: #444; }
.kv-control input:disabled, .kv-control select:disabled, .kv-control textarea:disabled, .kv-widget button:disabled
  { color: #222; background: #f3f3f3; border: 1px solid #888; opacity: 1; }
.kv-figure { max-width: 100%; }
.kv-closed, .kv-hint { color: #555; font-size: 0.85rem; padding: 0.3em 0; }
.kv-widget code, .kv-quiz code { color: #222; background: #e6e6e6; }
.kv-quiz { border: 1px solid #99a; border-radius: 4px; padding: 0.5em 1em; } .kv-quiz h3 { color: #222; }
.kv-question { border-top: 1px solid #ccc; }
ul.kv-options { list-style: none; padding-left: 1em; }
"""


ROOT_DOC = "index"  # the front page (sphinx_conf.root_doc)


def page_name(lesson: Lesson) -> str:
    """The file name of a lesson's page: 06_how_the_cache_grows.html."""
    return f"{_doc(lesson)}.html"


def _doc(lesson: Lesson) -> str:
    return Path(lesson.notebook).stem


def live_note(lesson: Lesson) -> str:
    """The note under every lesson's title: what this copy is, and how to run the lesson live."""
    return (
        f":::{{admonition}} A static copy of lesson {lesson.number}\n:class: note kv-note\n"
        "It ran once with nobody at the keyboard: no guesses were asked, the lesson took its quick path where it "
        "has one, in float32. The figures are as the lesson drew them; the simulators' controls, your own "
        "guesses and the quick check's feedback need the live lab. **Run this live:** in the course folder, "
        f"`make lab`, then open `{lesson.notebook}`.\n:::"
    )


def lesson_notebook(lesson: Lesson, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook the book shows: the executed one made static, with the live note under its title."""
    nb = make_static(executed, lesson.notebook)
    nb.cells.insert(1 if nb.cells else 0, nbformat.v4.new_markdown_cell(live_note(lesson), id=f"{lesson.number}-live"))
    return nb


def index_markdown(syllabus: Sequence[Lesson], written: set[str]) -> str:
    """The front page: the course in a few lines, then each part's lessons with what each shows.

    Each part is also a hidden table of contents: the sidebar lists the parts and their lessons.
    """
    blocks = [INDEX_TEXT]
    for i, part in enumerate(load_parts()):
        lessons = [lsn for lsn in syllabus if lsn.number in written and part_of(lsn.number) == part]
        if not lessons:
            continue
        caption = f"Part {i + 1}: {part.title}"
        toc = "\n".join(_doc(lsn) for lsn in lessons)
        rows = "\n".join(f"- {{doc}}`{lsn.number} · {lsn.title} <{_doc(lsn)}>`: {lsn.summary}" for lsn in lessons)
        blocks.append(f"## {caption}\n\n```{{toctree}}\n:caption: {caption}\n:hidden:\n\n{toc}\n```\n\n{rows}")
    blocks.append(f"```{{toctree}}\n:caption: Reference\n:hidden:\n\n{GLOSSARY_DOC}\n```")
    return "\n\n".join(blocks) + "\n"


def write_sources(src: Path, syllabus: Sequence[Lesson], notebooks: dict[str, nbformat.NotebookNode]) -> None:
    """The Sphinx project in ``src``: ``notebooks`` maps a lesson's number to its executed notebook."""
    src.mkdir(parents=True, exist_ok=True)
    written = [lsn for lsn in syllabus if lsn.number in notebooks]
    for lesson in written:
        nbformat.write(lesson_notebook(lesson, notebooks[lesson.number]), src / f"{_doc(lesson)}.ipynb")
    (src / f"{ROOT_DOC}.md").write_text(index_markdown(syllabus, set(notebooks)), encoding="utf-8")
    lessons = {lsn.number: lsn for lsn in syllabus}
    glossary = glossary_markdown(load_glossary(), lessons, {n: _doc(lsn) for n, lsn in lessons.items()})
    (src / f"{GLOSSARY_DOC}.md").write_text(glossary, encoding="utf-8")
    (src / "conf.py").write_text("from kvcourse.site.sphinx_conf import *  # noqa: F403\n", encoding="utf-8")
    assets = src / "_assets"
    copy_mathjax(assets / "mathjax", "the book")
    (assets / "kvcourse.css").write_text(CSS, encoding="utf-8")


def run_sphinx(src: Path, out: Path, jobs: int = 1) -> str:
    """Build the HTML book from ``src`` into ``out``; Sphinx's warnings, if any (an error raises)."""
    warnings = src.parent / f"{src.name}-warnings.txt"
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-j", str(jobs)]
    command += ["-d", str(src.parent / f"{src.name}-doctrees"), "-w", str(warnings), str(src), str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    said = warnings.read_text(encoding="utf-8") if warnings.exists() else ""
    if done.returncode != 0:
        raise RuntimeError(f"Sphinx could not build the book:\n{(done.stderr or said).strip()[-3000:]}")
    return said
