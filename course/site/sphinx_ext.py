"""The course's Sphinx extension for the book: glossary links in the lessons (kvcourse.site.glossary)."""

from __future__ import annotations

from typing import Any

from kvcourse.site.glossary import link_terms


def setup(app: Any) -> dict[str, Any]:
    app.connect("doctree-read", link_terms, priority=400)  # before the index and search collect entries
    return {"parallel_read_safe": True, "parallel_write_safe": True}
