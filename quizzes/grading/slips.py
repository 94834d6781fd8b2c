"""What a wrong number means, for `kvcourse grade report` (report.py) to group a class's wrong answers by.

A wrong answer to a numeric or parameterised question is explained, in this order, as one of the bank's
planted mistakes (checking.named_mistake, on the student's own drawn values, in the bank's words), else a
simple factor off the right answer (2 for keys and values, the layers, the bytes per value, 1024 vs
1000...), else a count one too many or one too few, else unexplained: a ``Slip``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from ..checking import named_mistake
from ..formulas import draw_params, facts
from ..model import Kind, Question

_SEVERAL = "That number fits more than one slip. "  # how checking.named_mistake starts two slips' words


class How(Enum):
    """How a wrong number is explained."""

    PLANTED = "planted"  # one of the bank's planted mistakes, in its words
    FACTOR = "factor"  # a simple factor off the right answer
    OFF_BY_ONE = "off by one"  # a count one too many or one too few
    UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Slip:
    """What a wrong number means: a planted mistake (the bank's words), a simple factor off, or nothing known."""

    how: How
    label: str  # how far off: "x1/2", "x1.07", "+1"
    words: tuple[str, ...]  # the bank's sentence, or the factors it may be

    @property
    def named(self) -> bool:
        return self.how is not How.UNEXPLAINED

    @property
    def meaning(self) -> str:
        if self.how is How.FACTOR:
            return ("a factor left out: " if self.label.startswith("x1/") else "a factor too many: ") + " or ".join(
                self.words
            )
        return " Or: ".join(self.words) if self.words else self.how.value


def ratio_label(number: float, expected: float) -> str:
    """How many times the right answer a number is: "x2", "x1/2", "x3.7"; "" where no ratio says it."""
    if expected == 0 or number == 0 or (number < 0) != (expected < 0):
        return ""
    ratio = number / expected
    return f"x{ratio:.3g}" if ratio >= 1 else f"x1/{1 / ratio:.3g}"


def simple_factors(question: Question, seed: str = "") -> list[tuple[float, str]]:
    """The factors a common slip multiplies a right answer by, or divides it by, with what each would mean:
    the K-and-V 2 of lessons 06-07's formula, the bytes per value, the drawn model's shape, 1024 vs 1000."""
    names = facts(draw_params(question, seed)) if question.kind is Kind.PARAMETERISED else {}
    found = [(2.0, "2 (keys and values: each token keeps both)")]
    if isinstance(names.get("bytes_per_value"), (int, float)):
        found.append((names["bytes_per_value"], f"the bytes per value ({names['bytes_per_value']})"))
    else:
        found += [(2.0, "2 bytes per value (16-bit)"), (4.0, "4 bytes per value (32-bit)")]
    for name, words in (("num_layers", "the layers"), ("num_users", "the users"), ("num_tokens", "the tokens")):
        if isinstance(names.get(name), (int, float)):
            found.append((names[name], f"{words} ({names[name]:,})"))
    heads, kv_heads = names.get("num_heads"), names.get("num_kv_heads")
    if heads and kv_heads and heads != kv_heads:
        found.append((heads / kv_heads, f"query heads per key/value head ({heads}/{kv_heads})"))
    found += [
        (1.024, "1024 vs 1000 (KiB vs kB)"),
        (1.024**2, "1024 vs 1000 (MiB vs MB)"),
        (1.024**3, "1024 vs 1000 (GiB vs GB)"),
        (1e3, "1,000 (a unit prefix: kB vs bytes)"),
        (1024.0, "1,024 (a binary prefix: KiB vs bytes)"),
        (1e6, "1,000,000 (two unit prefixes)"),
    ]
    if question.unit == "percent":
        found.append((100.0, "100 (a fraction, not a percentage)"))
    return [(float(f), words) for f, words in found if f > 0 and f != 1]


def explain_number(question: Question, number: float, expected: float, seed: str = "") -> Slip:
    """What a wrong number means for this question (and this student's drawn values)."""
    label = ratio_label(number, expected)
    planted = named_mistake(question, number, seed)
    if planted:  # two slips may give the same number on some drawn values: each is a candidate
        return Slip(How.PLANTED, label, tuple(planted.removeprefix(_SEVERAL).split(" Or: ")))

    def close(target: float) -> bool:
        return math.isclose(number, target, rel_tol=max(question.rel_tol, 1e-6), abs_tol=question.abs_tol)

    factors = simple_factors(question, seed)
    words = [w for f, w in factors if close(expected * f)] or [w for f, w in factors if close(expected / f)]
    if words and label:
        return Slip(How.FACTOR, label, tuple(dict.fromkeys(words)))
    if question.unit == "count" and abs(number - expected) == 1 and abs(expected) > 2:
        return Slip(
            How.OFF_BY_ONE, f"{number - expected:+g}", ("one too many" if number > expected else "one too few",)
        )
    return Slip(How.UNEXPLAINED, label, ())
