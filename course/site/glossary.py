"""The book's glossary: its page from course/glossary.toml, and the links from the lessons to it (`make site`).

A lesson page links the first place its prose uses a term (or one of the term's other spellings) to
the term's entry; code, outputs, headings and existing links are left alone. The notebooks stay as
written: the links are made while the book is built (`link_terms`, a Sphinx `doctree-read` handler).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from docutils import nodes
from sphinx import addnodes

from kvcourse.syllabus import Lesson

GLOSSARY_FILE = Path(__file__).resolve().parent.parent / "glossary.toml"
GLOSSARY_DOC = "glossary"
# Where a term is never linked: code, outputs, headings, links, formulas, raw HTML.
_SKIP = (
    nodes.literal,
    nodes.literal_block,
    nodes.title,
    nodes.reference,
    nodes.math,
    nodes.math_block,
    nodes.raw,
    nodes.image,
    addnodes.pending_xref,
    nodes.container,  # a code cell (its source and its outputs)
)


@dataclass(frozen=True)
class Term:
    """One glossary entry."""

    term: str
    also: tuple[str, ...]
    lesson: str
    text: str

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.term, *self.also)


@cache
def load_glossary(path: Path = GLOSSARY_FILE) -> tuple[Term, ...]:
    """Every entry of the glossary, in the order of the file."""
    with path.open("rb") as handle:
        raw = tomllib.load(handle)
    return tuple(
        Term(t["term"], tuple(t.get("also", ())), t["lesson"], " ".join(t["text"].split())) for t in raw["term"]
    )


def glossary_markdown(terms: tuple[Term, ...], lessons: dict[str, Lesson], doc_of: dict[str, str]) -> str:
    """The glossary page (MyST): each term, what it means, and the lesson that teaches it."""
    lines = [
        "# Glossary",
        "",
        "The terms the lessons use, each with the lesson that teaches it. On a lesson's page, the first use of a "
        "term links here.",
        "",
        "```{glossary}",
        ":sorted:",
        "",
    ]
    for term in terms:
        lesson = lessons[term.lesson]
        where = f"{{doc}}`Lesson {lesson.number}, {lesson.title} <{doc_of[lesson.number]}>`"
        lines += [term.term, f"  {term.text} Taught in {where}.", ""]
    return "\n".join([*lines, "```", ""])


def _pattern(terms: tuple[Term, ...]) -> re.Pattern[str]:
    spellings = sorted({s for t in terms for s in t.spellings}, key=len, reverse=True)  # longest first
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(s) for s in spellings) + r")(?![\w-])", re.IGNORECASE)


def _skipped(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, _SKIP):
            return True
        parent = parent.parent
    return False


def _index_entry(term: str, taught_here: int) -> list[nodes.Node]:
    """An index entry for ``term`` at this place (search and the index lead to the lesson that teaches it)."""
    anchor = f"taught-{nodes.make_id(term)}-{taught_here}"
    index = addnodes.index(entries=[("single", term, anchor, "main", None)], inline=True)
    return [nodes.target("", "", ids=[anchor]), index]


def link_terms_in(doctree: nodes.document, terms: tuple[Term, ...], lesson: str = "") -> int:
    """Link the first use of each term in ``doctree``'s prose to its glossary entry; how many were linked.

    Where ``lesson`` is the one that teaches a term, that first use is also the term's index entry.
    """
    pattern = _pattern(terms)
    entry = {s.lower(): t.term for t in terms for s in t.spellings}
    linked: set[str] = set()
    for text in list(doctree.findall(nodes.Text)):
        if _skipped(text):
            continue
        pieces: list[nodes.Node] = []
        rest, value = 0, str(text)
        for match in pattern.finditer(value):
            term = entry[match.group(1).lower()]
            if term in linked:
                continue
            linked.add(term)
            pieces.append(nodes.Text(value[rest : match.start()]))
            if lesson and lesson == next(t.lesson for t in terms if t.term == term):
                pieces += _index_entry(term, len(linked))
            xref = addnodes.pending_xref(
                "", refdomain="std", reftype="term", reftarget=term.lower(), refexplicit=True, refwarn=True
            )
            xref += nodes.inline(match.group(1), match.group(1), classes=["kv-term"])
            pieces.append(xref)
            rest = match.end()
        if pieces:
            pieces.append(nodes.Text(value[rest:]))
            text.parent.replace(text, pieces)
    return len(linked)


def link_terms(app, doctree: nodes.document) -> None:
    """Sphinx's doctree-read handler: a lesson links its terms; the glossary's own index entries go.

    A term's index entry (which search ranks above a word on a page) points at the lesson that teaches
    it, not at the glossary, so searching for a term lands on that lesson.
    """
    docname = app.env.docname
    if docname == GLOSSARY_DOC:
        for index in list(doctree.findall(addnodes.index)):
            index.parent.remove(index)
    elif docname != "index":
        link_terms_in(doctree, load_glossary(), docname.split("_")[0])
