"""Reading a numeric answer, with or without a unit (lesson 00: how checks work).

The rule, as learners see it:

* A bare number (``819200``, ``819,200``, ``8.192e5``, or the Python value ``819200``) is read
  in the question's own unit, the one the question names ("in bytes", "in tokens").
* A string may add a unit after the number: ``"0.8 MB"``, ``"800 KiB"``, ``"819200 bytes"``.
  Units are case-insensitive. Decimal prefixes are powers of 1000 (kB, MB, GB, TB), binary
  ones powers of 1024 (KiB, MiB, GiB, TiB); ``b`` means bytes, never bits.
* Counts accept the words thousand, million, billion and trillion, the suffixes k, M, bn, T
  (``"100 million"``, ``"4k"``) and the question's own noun (``"512 tokens"``).
* Percentages accept ``"25%"`` or ``"25"``; ratios accept ``"4x"`` or ``"4"``; times accept
  s, ms, us and min.
* A unit of another kind (``"3 GB"`` for a count of tokens) is an error that names the
  expected kind; it is never silently reinterpreted.

Then the value must lie strictly within the question's tolerance (relative, absolute, or both)
of the right answer; a count of whole things (both tolerances 0) must be exact. ``True``/``False``, NaN and
infinities are never numbers here.
"""

from __future__ import annotations

import math
import re
from numbers import Real

_BYTES = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SCALE_WORDS = {
    "thousand": 1e3,
    "k": 1e3,
    "million": 1e6,
    "m": 1e6,
    "billion": 1e9,
    "bn": 1e9,
    "trillion": 1e12,
    "t": 1e12,
}
_COUNT_NOUNS = (
    "",
    "tokens",
    "token",
    "cells",
    "cell",
    "blocks",
    "block",
    "passes",
    "pass",
    "parameters",
    "params",
    "flops",
    "layers",
    "heads",
    "users",
    "requests",
    "steps",
    "sequences",
    "times",
)
_COUNT = {noun: 1.0 for noun in _COUNT_NOUNS}
_PERCENT = {"": 1.0, "%": 1.0, "percent": 1.0}
_RATIO = {"": 1.0, "x": 1.0, "×": 1.0, "times": 1.0}
_SECONDS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "min": 60.0,
    "minutes": 60.0,
}

# A question's `unit` names one of these; the table maps the units an answer may carry to a factor.
DIMENSIONS: dict[str, dict[str, float]] = {
    "": {"": 1.0},
    "bytes": {"": 1.0, **_BYTES},
    "count": _COUNT,
    "percent": _PERCENT,
    "ratio": _RATIO,
    "seconds": {"": 1.0, **_SECONDS},
}
DESCRIPTIONS = {
    "": "a plain number",
    "bytes": 'a number of bytes, or a number with a unit ("0.8 MB", "800 KiB", "3.2 GB")',
    "count": 'a number ("100000", "100,000", "100 thousand", "4k")',
    "percent": 'a percentage ("25" or "25%")',
    "ratio": 'a ratio ("4" or "4x")',
    "seconds": 'a time in seconds, or with a unit ("0.5 s", "500 ms")',
}
_NUMBER = re.compile(r"\s*([-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*")


# Longer than any number anyone writes: a 1 MB paste is refused before it reaches the parser.
MAX_ANSWER_CHARS = 200


class AnswerFormatError(ValueError):
    """The answer could not be read as a number of the expected kind; the message says why."""


def shown(value: object, limit: int = 60) -> str:
    """A short repr of an answer for a message: a long string or a huge number is cut, never echoed whole."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    try:
        text = repr(value)
    except Exception:  # a huge number inside a list, an object whose repr fails
        return f"a {type(value).__name__} (cannot be shown)"
    return text if len(text) <= limit else f"{text[:limit]}... ({type(value).__name__}, {len(text):,} characters)"


def parse_quantity(value: object, unit: str = "") -> float:
    """The answer as a float in the question's unit; AnswerFormatError explains a malformed one."""
    table = DIMENSIONS[unit]
    if isinstance(value, bool) or value is None:
        raise AnswerFormatError(f"expected {DESCRIPTIONS[unit]}, got {shown(value)}")
    if isinstance(value, Real):
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):
            raise AnswerFormatError(f"{shown(value)} is too large to read as a number") from None
    elif isinstance(value, str):
        if len(value) > MAX_ANSWER_CHARS:
            raise AnswerFormatError(
                f"an answer of {len(value):,} characters is too long to be a number; expected {DESCRIPTIONS[unit]}"
            )
        number = _parse_text(value, unit, table)
    else:
        raise AnswerFormatError(f"expected {DESCRIPTIONS[unit]}, got a {type(value).__name__}: {shown(value)}")
    if not math.isfinite(number):
        raise AnswerFormatError(f"expected a finite number, got {shown(value)}")
    return number


def _parse_text(text: str, unit: str, table: dict[str, float]) -> float:
    match = _NUMBER.fullmatch(text)
    if not match:
        raise AnswerFormatError(f"could not read a number in {text!r}; expected {DESCRIPTIONS[unit]}")
    digits, suffix = match.group(1), match.group(2)
    # A comma must separate groups of three digits: "1,5" is a decimal comma we refuse to guess at.
    if "," in digits and not re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?", digits):
        raise AnswerFormatError(f"{text!r}: commas may only separate thousands (819,200)")
    number = float(digits.replace(",", "").replace("_", ""))
    return number * _factor(suffix, unit, table, text)


def _factor(suffix: str, unit: str, table: dict[str, float], text: str) -> float:
    key = suffix.strip().lower()
    if key in table:
        return table[key]
    if unit == "count":
        # "100 million tokens", "4k"
        words = key.split()
        if words and words[0] in _SCALE_WORDS and (len(words) == 1 or " ".join(words[1:]) in _COUNT):
            return _SCALE_WORDS[words[0]]
    expected = DESCRIPTIONS[unit]
    for other, other_table in DIMENSIONS.items():
        if other != unit and key and key in other_table:
            raise AnswerFormatError(f"{text!r} is in {other}, but this question wants {expected}")
    raise AnswerFormatError(f"unknown unit {suffix!r} in {text!r}; expected {expected}")


def within_tolerance(value: float, expected: float, rel_tol: float, abs_tol: float) -> bool:
    """Whether value is strictly closer to expected than the tolerance (relative or absolute, the larger).

    The boundary is outside: with ``abs_tol = 0.5`` around 62, 62.5 is refused (it is 1000 / 16 not
    rounded down, the slip bank 13 tests). Both tolerances 0 mean the exact value: a count of whole things.
    """
    tolerance = max(rel_tol * abs(expected), abs_tol)
    if tolerance == 0:
        return value == expected
    return abs(value - expected) < tolerance


def is_exact(rel_tol: float, abs_tol: float) -> bool:
    """Whether a question wants its exact value (both tolerances 0): counts of whole things."""
    return rel_tol == 0 and abs_tol == 0


def format_quantity(value: float, unit: str) -> str:
    """A readable rendering of a right answer, e.g. 819,200 bytes (0.82 MB)."""
    if unit == "bytes":
        text = f"{value:,.0f} bytes" if float(value).is_integer() else f"{value:,.2f} bytes"
        for name, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if abs(value) >= size:
                return f"{text} (about {value / size:.3g} {name})"
        return text
    if unit == "percent":
        return f"{value:.3g}%"
    if unit == "ratio":
        return f"{value:.3g}x"
    if unit == "seconds":
        return f"{value:.3g} s"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"
