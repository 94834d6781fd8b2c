"""Notebook helpers every lesson uses: predict, reveal, expect, solution (lesson 00 explains them).

A lesson asks for a guess *before* it measures (``predict``), shows the guess beside the
measurement afterwards (``reveal``), states what a cell confirms in words (``expect``) and hides
exercise solutions behind a toggle (``solution``).

Two environment switches, set by the course's own tooling and never by a learner:

* ``KVCOURSE_HEADLESS=1`` (or nbgrader's ``NBGRADER_EXECUTION``): nothing waits for input;
  ``predict`` notes that no guess was asked. A kernel with no input box (nbclient, nbconvert)
  is treated the same way.
* ``KVCOURSE_STRICT=1`` (the test harness): a false ``expect`` raises ``ExpectationFailed`` with
  its sentence, so running a notebook is still a test. Otherwise it prints a verdict and goes on.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from IPython.core.error import StdinNotImplementedError

from kvcourse import feedback
from kvcourse.kernel_env import STRICT_ENV, running_headless
from kvcourse.quizzes.progress import progress_dir
from kvcourse.quizzes.units import DIMENSIONS, AnswerFormatError, parse_quantity

__all__ = ["ExpectationFailed", "expect", "headless", "predict", "reveal", "saved_predictions", "solution"]

_MAX_TRIES = 3
_UNITS: dict[str, str] = {}  # key -> unit of every prediction asked in this process, guessed or not
_MARK = {True: "✔", False: "✘"}


class ExpectationFailed(AssertionError):
    """A lesson's stated expectation did not hold (raised only under the test harness)."""


def headless() -> bool:
    """Whether this run has nobody at the keyboard (tests, nbgrader); lessons then take their short sweeps."""
    return running_headless()


def strict() -> bool:
    """Whether a false ``expect`` should raise (the notebook test harness sets KVCOURSE_STRICT=1)."""
    return bool(os.environ.get(STRICT_ENV))


# ---------------------------------------------------------------- expect


def expect(condition: Any, sentence: str) -> None:
    """Print a one-line verdict on a claim the lesson makes; raise only under the test harness."""
    held = bool(condition)
    if held:
        print(f"{_MARK[True]} {sentence}")
    else:
        print(
            f"{_MARK[False]} Expected: {sentence}. This run disagrees: look at the numbers printed above. "
            "If you changed the code, that may be why; if not, please report it."
        )
        if strict():
            raise ExpectationFailed(sentence)


# ---------------------------------------------------------------- predict and reveal

_BARE_NUMBER = re.compile(r"\s*[-+]?(\d[\d,_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*")
# "about 250", "~250", "roughly 3 GB": a guess is approximate by nature, so the marker is dropped.
_ABOUT = re.compile(r"^\s*(?:about|around|roughly|approximately|approx\.?|circa|ca\.|~|≈)\s*", re.IGNORECASE)


class NegativeGuess(ValueError):
    """A guess below zero for a quantity that cannot be negative."""


def _dimension(unit: str) -> tuple[str, float]:
    """The quick-check dimension a unit belongs to (kvcourse.quizzes.units) and its factor in it."""
    key = unit.strip().lower()
    for dimension in ("bytes", "seconds", "ratio", "percent"):
        if key and key in DIMENSIONS[dimension]:
            return dimension, DIMENSIONS[dimension][key]
    return "count", 1.0  # tokens, cells, GFLOP, users...: a plain number, "4k" and "2 million" allowed


def parse_guess(text: str, unit: str, *, allow_negative: bool = False) -> float:
    """A typed guess as a number in ``unit``; "3 GB" is accepted where the unit is MB, "about 250" as 250.

    A negative guess raises NegativeGuess unless ``allow_negative`` (sizes, counts, times, ratios and shares
    cannot be below zero).
    """
    text = _ABOUT.sub("", text, count=1)
    value = _parse_guess(text, unit)
    if value < 0 and not allow_negative:
        raise NegativeGuess(f"{text.strip()} is below zero, and this quantity cannot be: type 0 or more")
    return value


def _parse_guess(text: str, unit: str) -> float:
    dimension, factor = _dimension(unit)
    if _BARE_NUMBER.fullmatch(text):
        return parse_quantity(text.strip(), "count")  # a bare number is in the unit asked: "100" GB is 100 GB
    if dimension == "count":
        stripped = text.strip()
        suffix = unit.strip()
        if suffix and stripped.lower().endswith(suffix.lower()):
            stripped = stripped[: -len(suffix)].strip()  # "0.3 GFLOP" where the unit is GFLOP
        return parse_quantity(stripped, "count")
    return parse_quantity(text, dimension) / factor


def _store() -> Path:
    return progress_dir() / "predictions.json"


def _load() -> dict[str, dict]:
    try:
        data = json.loads(_store().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(key: str, **fields: Any) -> None:
    data = _load()
    entry = data.setdefault(key, {})
    entry.update(fields, when=datetime.now(UTC).isoformat(timespec="seconds"))
    path = _store()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError as err:  # a read-only home must not stop the lesson
        print(f"(Could not save your guess: {err})")


def saved_predictions() -> dict[str, dict]:
    """Every guess and measurement saved so far, by key (for ``kvcourse progress`` and tests)."""
    return _load()


def _say(look: Callable[[str], str], text: str) -> None:
    """One line of feedback in the course's look (kvcourse.feedback) in a notebook; plain text elsewhere."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        print(text)
        return
    from IPython.display import display

    display({"text/plain": text, "text/html": look(text)}, raw=True)


def _ask(prompt: str, read: Callable[[str], str], parse: Callable[[str], Any]) -> Any | None:
    """Ask until the answer parses (a few tries); an empty answer means no guess."""
    for _ in range(_MAX_TRIES):
        text = read(prompt).strip()
        if not text:
            return None
        try:
            return parse(text)
        except (AnswerFormatError, ValueError) as err:  # the quick checks' words: "Could not read that answer"
            verb = "use" if isinstance(err, NegativeGuess) else "read"
            _say(feedback.error, f"Could not {verb} that answer: {err}. Try again, or press Enter to skip.")
    return None


def _number_prompt(unit: str) -> str:
    """What to type, said in words (the input box beside it is JupyterLab's and has no hint of ours)."""
    dimension, _ = _dimension(unit)
    if unit.strip() in ("x", "×"):
        what = 'a number of times (for example 4 for "4x")'
    elif unit.strip() == "%":
        what = "a percentage (a number; the % sign may follow it)"
    elif dimension in ("bytes", "seconds"):
        what = f"a number in {unit} (another unit may follow it, such as {_OTHER_UNIT[dimension]})"
    elif unit:
        what = f"a number of {unit}"
    else:
        what = "a number"
    return f"Type {what} and press Enter (Enter alone skips): "


_OTHER_UNIT = {"bytes": "GB", "seconds": "ms"}


def predict(
    key: str,
    question: str,
    *,
    unit: str = "",
    kind: str = "number",
    options: Sequence[str] | None = None,
    read: Callable[[str], str] = input,
    allow_negative: bool = False,
) -> None:
    """Ask for a guess before a measurement; ``reveal(key, measured)`` later shows how close it was.

    ``kind="number"`` takes a number in ``unit`` (a unit may be typed: "3 GB" where MB is asked);
    ``kind="choice"`` takes the letter of one of ``options``. A negative number is refused (and asked
    again) unless ``allow_negative``; "about 250" and "~250" are read as 250. The guess is saved with the learner's
    progress (``saved_predictions()``). In a headless run nothing waits. Returns nothing, so a
    predict cell shows only the question and the learner's answer.
    """
    if kind not in ("number", "choice"):
        raise ValueError(f"kind must be 'number' or 'choice', got {kind!r}")
    if kind == "choice" and not options:
        raise ValueError("a choice prediction needs its options")
    _UNITS[key] = unit
    print(f"Predict: {question}")
    letters = "abcdefghij"[: len(options or [])]
    if kind == "choice":
        for letter, text in zip(letters, options, strict=True):
            print(f"  ({letter}) {text}")
    if headless():
        print("(Headless run: no guess asked.)")
        return
    if kind == "choice":
        prompt = f"Type one letter ({', '.join(letters)}) and press Enter (Enter alone skips): "
        parse = lambda text: _choice(text, letters, options)
    else:
        prompt = _number_prompt(unit)
        parse = lambda text: parse_guess(text, unit, allow_negative=allow_negative)
    try:
        guess = _ask(prompt, read, parse)
    except (StdinNotImplementedError, EOFError):  # a front end with no input box, or stdin closed
        print("(This front end has no input box: no guess asked.)")
        return
    if guess is None:
        _say(feedback.info, "No guess this time; the measurement comes next.")
    else:
        shown = guess if kind == "choice" else _fmt(guess, unit)
        _say(feedback.info, f"Locked in: {shown}. Now run the measurement.")
        _save(key, guess=guess, unit=unit, kind=kind)


def _choice(text: str, letters: str, options: Sequence[str]) -> str:
    letter = text.strip().strip("()").lower()
    if len(letter) != 1 or letter not in letters:
        raise ValueError(f"answer with one of the letters {', '.join(letters)}")
    return options[letters.index(letter)]


def _fmt(value: float, unit: str) -> str:
    if value != 0 and (abs(value) >= 1e9 or abs(value) < 1e-3):
        number = f"{value:.3g}"
    elif float(value).is_integer() or abs(value) >= 100:
        number = f"{value:,.0f}"
    else:
        number = f"{value:,.3g}"
    return f"{number} {unit}".strip() if unit not in ("x", "%") else f"{number}{unit}"


def reveal(key: str, measured: float | str, *, unit: str | None = None) -> None:
    """Show the guess saved under ``key`` beside the measurement, and how far off it was."""
    entry = _load().get(key, {})
    unit = entry.get("unit", _UNITS.get(key, "")) if unit is None else unit
    guess = entry.get("guess")
    if isinstance(measured, str):
        look, line = _reveal_choice(guess, measured)
    else:
        look, line = _reveal_number(guess, float(measured), unit)
    _save(key, measured=measured, unit=unit)
    _say(look, line)


def _reveal_choice(guess: Any, measured: str) -> tuple[Callable[[str], str], str]:
    if guess is None:
        return feedback.info, f"Measured: {measured}. (You made no guess for this one.)"
    if guess == measured:
        return feedback.success, f"You chose: {guess}. Measured: {measured}. Right: that is what you predicted."
    return feedback.info, (
        f"You chose: {guess}. Measured: {measured}. Not quite: the measurement differs "
        "from your guess; the next cells show why."
    )


def _reveal_number(guess: Any, measured: float, unit: str) -> tuple[Callable[[str], str], str]:
    shown = _fmt(measured, unit)
    if not isinstance(guess, (int, float)):
        return feedback.info, f"Measured: {shown}. (You made no guess for this one.)"
    look = feedback.info
    if guess > 0 and measured > 0:
        ratio = measured / guess
        if ratio == 1.0:
            look, how = feedback.success, "exactly your guess"
        elif math.isclose(ratio, 1.0, rel_tol=0.05):
            look, how = feedback.success, "within 5 %: well predicted"
        elif ratio > 1:
            how = f"{ratio:.3g}x your guess"
        else:
            how = f"{1 / ratio:.3g}x smaller than your guess"
    elif measured == guess:
        look, how = feedback.success, "exactly your guess"
    elif measured > guess:
        how = f"{_fmt(measured - guess, unit)} more than your guess"
    else:
        how = f"{_fmt(guess - measured, unit)} less than your guess"
    return look, f"Your guess: {_fmt(guess, unit)}. Measured: {shown}. The measurement is {how}."


# ---------------------------------------------------------------- solution


_INLINE_CODE = re.compile(r"`([^`]+)`")


def _paragraphs(text: str) -> str:
    parts = [html.escape(part.strip()).replace("\n", " ") for part in text.strip().split("\n\n")]
    parts = [_INLINE_CODE.sub(r"<code>\1</code>", part) for part in parts if part]
    return "".join(f"<p>{part}</p>" for part in parts)


class SolutionFailed(AssertionError):
    """A lesson's solution snippet raised when the test harness ran it."""


def _run_solution(code: str) -> None:
    """Run a solution snippet on a copy of the lesson's namespace, out of sight.

    A copy, so the snippet's names never leak into the lesson; its printing and displays are swallowed and its figures
    closed, so an executed notebook (the static site is built from one) shows no answer under the toggle.
    """
    import matplotlib.pyplot as plt
    from IPython import get_ipython
    from IPython.utils.capture import capture_output

    shell = get_ipython()
    namespace = dict(shell.user_ns) if shell is not None else {}
    before = set(plt.get_fignums())
    try:
        with capture_output():
            exec(compile(code, "<solution>", "exec"), namespace)  # noqa: S102 - the lesson's own published code
    except Exception as error:
        raise SolutionFailed(f"a solution snippet raised {type(error).__name__}: {error}\n{code}") from error
    finally:
        for number in set(plt.get_fignums()) - before:
            plt.close(number)


def solution(text: str, code: str | None = None, *, title: str = "Show a solution") -> Any:
    """A collapsed "show a solution" toggle for an exercise: explanation, then optional Python code.

    Under the test harness (``KVCOURSE_STRICT=1``) the code also runs, so every published solution is
    tested against the lesson it belongs to (see ``_run_solution``).
    """
    import ipywidgets as widgets

    if code and strict():
        _run_solution(code)
    content = _paragraphs(text)
    if code:
        content += f'<pre style="white-space:pre-wrap"><code>{html.escape(code.strip(chr(10)))}</code></pre>'
    box = widgets.Accordion(children=[widgets.HTML(content)], selected_index=None)
    box.set_title(0, title)
    return box
