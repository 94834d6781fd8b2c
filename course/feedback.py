"""One look for feedback, everywhere a learner is told something: simulators, predictions, quick checks.

Three kinds, each with one colour and one pattern, so a learner reads the colour before the words:

* ``error``: something the learner typed cannot be used; says what was wrong and what to type instead.
* ``info``: the state of things (a run that ended, a value that was rounded); the page's own colour.
* ``success``: what the learner did worked, or a guess or answer was right.

Each returns HTML for an ``ipywidgets.HTML`` value. The colours pass WCAG AA contrast on white and on
JupyterLab's light theme (checked by axe-core in tests/browser/).
"""

from __future__ import annotations

import html

__all__ = ["ERROR_COLOUR", "SUCCESS_COLOUR", "error", "info", "success"]

ERROR_COLOUR = "#b71c1c"  # contrast 6.6:1 on white
SUCCESS_COLOUR = "#1b5e20"  # contrast 7.9:1 on white


def _span(text: str, colour: str | None, *, escape: bool) -> str:
    body = html.escape(text) if escape else text
    style = f" style='color:{colour}'" if colour else ""
    return f"<span{style}>{body}</span>"


def error(text: str, *, escape: bool = True) -> str:
    """A red line: what was wrong with what the learner typed, and what to do instead."""
    return _span(text, ERROR_COLOUR, escape=escape)


def info(text: str, *, escape: bool = True) -> str:
    """A line in the page's own colour: the state of things, nothing wrong and nothing won."""
    return _span(text, None, escape=escape)


def success(text: str, *, escape: bool = True) -> str:
    """A green line: it worked, or the answer was right."""
    return _span(text, SUCCESS_COLOUR, escape=escape)
