"""No lesson gives a prediction's answer away before it asks for it (issue 42; /work/shared/LESSONS.md).

A prediction is a ``predict("NN.key", question, ...)`` call in a lesson's code cell, answered later by
``reveal("NN.key", value)`` (kvcourse.notebook). Predictions are declared inline in the notebooks; the
quiz bank (quizzes/bank/NN.toml) holds the quick checks, which come after the lesson, not predictions.
For every prediction of every lesson, the cells above the one that asks (markdown and code source,
headings included) are read, statically, and must not hold:

1. an option of a choice prediction: an option of four words or more nowhere in those cells (a shorter
   one, "about the same", is common prose); any option in no heading line. Which option is right is
   decided by the run, so every option is checked;
2. a literal answer: a string or number written as the reveal's value;
3. a paraphrase of the answer listed in ``ANSWER_WORDS`` (the verdicts lessons 01 and 04 once stated);
4. an answer known before the question: the reveal's value must use a name bound after the predict cell
   (the measurement), not only names the learner's page had already computed, and so could have printed.

What this cannot see: what a cell prints when it runs (a number formatted from a variable, other than
through rule 4); options built at run time (``[repr(t) for t in tokens]``) and the formatted parts of
f-string options (their literal text is checked); a paraphrase no one has listed.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

LESSONS = sorted((REPO_ROOT / "lessons").glob("[0-2][0-9]_*.ipynb"))

# Verdicts that state an answer in other words; "cells": anywhere above the question, "headings": in a heading.
ANSWER_WORDS: dict[str, tuple[str, list[str]]] = {
    "01.binds": (
        "cells",
        ["memory floor binds", "memory binds", "compute floor binds", "compute binds", "waits on memory here"],
    ),
    "01.sooner_7b_gpu": (
        "cells",
        ["outruns", "faster than smollm2", "sooner than smollm2", "beats smollm2", "bandwidth, not size"],
    ),
    "04.it_attends_to": ("headings", ["cat"]),
    "04.kv_drift": (
        "headings",
        ["not change", "never change", "don't change", "unchanged", "stay the same", "are fixed"],
    ),
    "04.mat_depends": ("headings", ["earlier word", "earlier edit", "not on later", "never on later", "only on"]),
    # lesson 07's section titles once framed its Check-yourself question by its answer ("keeping them?")
    "07.main_cost": ("headings", ["keeping them", "storing them", "the memory they hold"]),
    "07.users_13b_weights": ("headings", ["several times", "outweigh", "outweighs"]),
    "12.shared_after_write": ("headings", ["full blocks only", "only full blocks", "only its full blocks"]),
}


@dataclass
class Prediction:
    key: str
    asked: int  # the index of the cell that asks
    options: list[str] = field(default_factory=list)  # full option texts
    fragments: list[str] = field(default_factory=list)  # the literal parts of f-string options
    revealed: int | None = None
    value: ast.expr | None = None


def _code(cell: dict) -> ast.Module | None:
    try:
        return ast.parse("".join(cell["source"])) if cell["cell_type"] == "code" else None
    except SyntaxError:
        return None


def _bound(tree: ast.Module | None) -> set[str]:
    """The names a cell binds: assignments, loop targets, definitions and imports."""
    names: set[str] = set()
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _calls(tree: ast.Module | None, name: str) -> list[ast.Call]:
    return (
        [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and getattr(n.func, "id", None) == name
            and n.args
            and isinstance(n.args[0], ast.Constant)
        ]
        if tree
        else []
    )


def _assigned(trees: list[ast.Module | None], name: str) -> ast.expr | None:
    """The last value bound to ``name`` by a plain assignment in these cells."""
    value = None
    for tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                value = node.value
    return value


def _texts(node: ast.expr | None, trees: list[ast.Module | None]) -> tuple[list[str], list[str]]:
    """Option texts (whole strings) and literal fragments (f-strings) of an options expression."""
    if isinstance(node, ast.Name):
        return _texts(_assigned(trees, node.id), trees)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "list" and node.args:
        arg = node.args[0]  # list(d) or list(d.values())
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "values":
            found = _assigned(trees, getattr(arg.func.value, "id", ""))
            return _texts(ast.List(elts=found.values) if isinstance(found, ast.Dict) else None, trees)
        return _texts(arg, trees)
    if isinstance(node, ast.Dict):
        node = ast.List(elts=[k for k in node.keys if k is not None])
    whole, fragments = [], []
    for elt in node.elts if isinstance(node, (ast.List, ast.Tuple)) else ():
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            whole.append(elt.value)
        elif isinstance(elt, ast.JoinedStr):
            fragments += [v.value for v in elt.values if isinstance(v, ast.Constant) and len(v.value.split()) >= 4]
    return whole, fragments


def predictions(cells: list[dict]) -> list[Prediction]:
    """Every prediction in a notebook's cells, with its options and its reveal."""
    trees = [_code(cell) for cell in cells]
    found: dict[str, Prediction] = {}
    for index, tree in enumerate(trees):
        for call in _calls(tree, "predict"):
            options = next((k.value for k in call.keywords if k.arg == "options"), None)
            whole, fragments = _texts(options, trees[: index + 1])
            found[call.args[0].value] = Prediction(call.args[0].value, index, whole, fragments)
        for call in _calls(tree, "reveal"):
            if call.args[0].value in found and len(call.args) > 1:
                found[call.args[0].value].revealed, found[call.args[0].value].value = index, call.args[1]
    return list(found.values())


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _headings(cells: list[dict]) -> list[str]:
    return [
        _normal(line)
        for cell in cells
        if cell["cell_type"] == "markdown"
        for line in "".join(cell["source"]).splitlines()
        if line.lstrip().startswith("#")
    ]


def _in_heading(text: str, headings: list[str]) -> bool:
    pattern = rf"(?<!\w){re.escape(_normal(text))}(?!\w)"
    return any(re.search(pattern, heading) for heading in headings)


def given_away(cells: list[dict], prediction: Prediction) -> list[str]:
    """What the cells above ``prediction``'s question say of its answer; empty when nothing."""
    above = cells[: prediction.asked]
    text, headings = _normal("\n".join("".join(c["source"]) for c in above)), _headings(above)
    found = []
    for option in prediction.options:
        if (len(option.split()) >= 4 and _normal(option) in text) or _in_heading(option, headings):
            found.append(f"option {option!r}")
    found += [f"option text {f!r}" for f in prediction.fragments if _normal(f) in text]
    value = prediction.value
    if isinstance(value, ast.Constant) and _normal(str(value.value)) in text:
        found.append(f"the revealed value {value.value!r}")
    scope, words = ANSWER_WORDS.get(prediction.key, ("cells", []))
    found += [
        f"the words {w!r}" for w in words if (_in_heading(w, headings) if scope == "headings" else _normal(w) in text)
    ]
    if prediction.revealed is not None and value is not None and not isinstance(value, ast.Constant):
        used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        measured = set().union(*(_bound(_code(c)) for c in cells[prediction.asked + 1 : prediction.revealed + 1]))
        if not used & measured:
            found.append(f"the reveal's value uses only names bound before the question: {sorted(used)}")
    return found


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _cases() -> list:
    cases = []
    for path in LESSONS:
        for prediction in predictions(_cells(path)):
            cases.append(pytest.param(path, prediction.key, id=prediction.key))
    return cases


@pytest.mark.parametrize(("path", "key"), _cases())
def test_no_cell_before_a_prediction_gives_its_answer(path: Path, key: str):
    cells = _cells(path)
    prediction = next(p for p in predictions(cells) if p.key == key)
    assert prediction.revealed is not None and prediction.revealed > prediction.asked, f"{key}: revealed where?"
    found = given_away(cells, prediction)
    assert not found, f"{key} (asked in cell {cells[prediction.asked].get('id')}): given away above it: {found}"


def test_every_answer_word_key_is_a_prediction():
    """ANSWER_WORDS lists only keys a lesson asks today: a retired key's paraphrases guard nothing."""
    asked = {prediction.key for path in LESSONS for prediction in predictions(_cells(path))}
    assert not set(ANSWER_WORDS) - asked, f"ANSWER_WORDS keys no lesson asks: {sorted(set(ANSWER_WORDS) - asked)}"


def test_every_lesson_with_predictions_is_read():
    """The parser finds predictions in the lessons that ask them (a parser that found none would pass all)."""
    counted = {path.stem[:2]: len(predictions(_cells(path))) for path in LESSONS}
    assert sum(counted.values()) >= 40 and counted["04"] == 3 and counted["01"] >= 1, counted


# ---------------------------------------------------------------- the test can fail


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _py(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


_ASK = _py(
    'after = ["They all go back to the free pool at once", "They stay in use"]\n'
    'predict("99.after_end", "What happens to the blocks?", kind="choice", options=after)'
)
_MEASURE = _py("in_use = count_blocks()")
_REVEAL = _py('reveal("99.after_end", after[0] if in_use == 0 else after[1])')
_NUMBER = [
    _py('predict("99.bytes", "How many bytes?", unit="bytes")'),
    _py("held = measure()"),
    _py('reveal("99.bytes", held)'),
]

PLANTED = {
    "a heading states the right option": [_md("## They all go back to the free pool at once"), _ASK, _MEASURE, _REVEAL],
    "a short option in a heading": [_md("# Blocks: they stay in use"), _ASK, _MEASURE, _REVEAL],
    "a code comment states an option": [_py("# they all go back to the free pool at once"), _ASK, _MEASURE, _REVEAL],
    "the answer is computed before it is asked": [
        _py("held = 2 * 3 * 64\nprint(held)"),
        _NUMBER[0],
        _py("print('now measure')"),
        _NUMBER[2],
    ],
    "a literal answer printed above": [
        _md("It adds 1,536 bytes."),
        _NUMBER[0],
        _py('reveal("99.bytes", "1,536 bytes")'),
    ],
}


@pytest.mark.parametrize("cells", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_giveaway_is_found(cells):
    [prediction] = predictions(cells)
    assert given_away(cells, prediction)


def test_a_notebook_that_keeps_its_answers_passes():
    for cells in (
        [_md("## What happens to the blocks when a request ends"), _ASK, _MEASURE, _REVEAL],
        [_md("One token's K and V, in one layer."), *_NUMBER],
    ):
        [prediction] = predictions(cells)
        assert given_away(cells, prediction) == []
