"""A lab's answer cell in a generated notebook (nbgrader_export.py): the reference solution, split for release.

nbgrader's release replaces each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of an answer cell
with ``raise NotImplementedError()``. A lab's cell (lessons 18-20) is cut from its reference solution
(kvcourse.quizzes.labs) along the lab's spec (kvcourse.labs.spec.LABS) so that what is released still
defines the class to complete, a subclass of the lab's base whose methods raise until written.
"""

from __future__ import annotations

import ast
import inspect

from kvcourse.labs.spec import LABS

from ..labs import solution_source
from ..model import Question


def lab_answer_source(question: Question) -> str:
    """A lab's answer cell: the reference solution split so that nbgrader's release leaves a class to complete.

    The reference's imports and class header stand outside the solution regions; each method the lab's
    spec leaves to the learner (``LabSpec.methods``) keeps its header and the base's docstring, with the
    reference's body in a region of its own; the reference's own state and helpers (``__init__``,
    ``_take``...) close the last region. Released, every region becomes nbgrader's ``raise
    NotImplementedError()`` inside a method, so the cell still defines a subclass of the base whose
    methods raise until written.
    """
    lab = LABS[question.lab]
    base, base_name = lab.base, lab.base.__name__
    source = solution_source(lab.key)
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == lab.class_name), None)
    if cls is None or [ast.unparse(b) for b in cls.bases] != [base_name]:
        raise ValueError(f"{lab.reference} must define class {lab.class_name}({base_name}), as the lab's spec says")
    members = [node for node in cls.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    methods = [node for node in members if isinstance(node, ast.FunctionDef) and node.name in lab.methods]
    helpers = [node for node in members if node not in methods]

    out = [
        *lines[: cls.lineno - 1 - len(cls.decorator_list)],
        f"class {cls.name}({base_name}):",
        f'    """{lab.title} (lesson {lab.lesson}): write each method below, and '
        f'add the state and helpers you need.\n    {base_name} says what the engine expects of each."""',
    ]
    for number, method in enumerate(methods):
        first = method.decorator_list[0].lineno if method.decorator_list else method.lineno
        doc = inspect.getdoc(getattr(base, method.name)) or ""
        out += ["", *lines[first - 1 : method.body[0].lineno - 1]]
        if doc:
            out.append('        """' + doc.replace("\n", "\n        ") + '"""')
        out += ["        ### BEGIN SOLUTION", *lines[method.body[0].lineno - 1 : method.end_lineno]]
        if number == len(methods) - 1:
            for helper in helpers:
                decorators = getattr(helper, "decorator_list", None)
                out += ["", *lines[(decorators[0] if decorators else helper).lineno - 1 : helper.end_lineno]]
        out.append("        ### END SOLUTION")
    return "\n".join(out)
