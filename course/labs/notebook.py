"""The labs' notebook helpers (lessons 18-20): is the learner's class written yet, and a passing run on request.

``implemented`` tells the skeleton a lab notebook hands out (methods that only raise
NotImplementedError) from a class the learner has written; ``policy_or_reference`` gives the learner's
class where it is written, else the lab's reference solution, so a simulator cell runs before the lab
is done; ``passing_run`` runs ``check`` on the reference solution and puts its verdicts and its code
behind a collapsed toggle, so a learner sees what passing looks like without being handed the answer.
"""

from __future__ import annotations

import ast
import html
import inspect
import textwrap
from typing import Any

from .common import TraceResult
from .run import check


def _only_raises_not_implemented(member: Any) -> bool:
    """Whether a method (or a property's getter) does nothing but ``raise NotImplementedError``: a skeleton's stub."""
    function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    if not inspect.isfunction(function):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):  # no source to read (built at run time): count it as written
        return False
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def implemented(answer: Any) -> bool:
    """Whether a lab answer (a class, or an instance of one) has every method written: none of the stubs its
    base classes declare is left as the base's, or as a body that only raises NotImplementedError."""
    cls = answer if isinstance(answer, type) else type(answer)
    stubs = {
        name for base in cls.__mro__[1:] for name, member in vars(base).items() if _only_raises_not_implemented(member)
    }
    return not any(_only_raises_not_implemented(inspect.getattr_static(cls, name)) for name in stubs)


def policy_or_reference(lab: str, answer: Any) -> Any:
    """The learner's class where every method is written, else the lab's reference solution (said in a line),
    so that a simulator cell runs before the lab is done."""
    from kvcourse.quizzes.labs import reference

    name = getattr(answer, "__name__", type(answer).__name__)
    if implemented(answer):
        print(f"Running your {name}.")
        return answer
    print(
        f"Your {name} still has methods to write, so this runs the reference solution; run the cell "
        "again once yours is written."
    )
    return reference(lab)


def passing_run(lab: str) -> list[TraceResult]:
    """``check`` on the lab's reference solution, its verdicts and its code shown only behind a collapsed
    toggle (a learner is not handed the answer unasked); returns the verdicts, one TraceResult per trace."""
    import ipywidgets as widgets
    from IPython.display import display
    from IPython.utils.capture import capture_output

    from kvcourse.quizzes.labs import reference, solution_source

    with capture_output() as printed:
        results = check(lab, reference(lab))
    panels = [
        f'<pre style="white-space:pre-wrap">{html.escape(printed.stdout.strip())}</pre>',
        f'<pre style="white-space:pre-wrap"><code>{html.escape(solution_source(lab).strip())}</code></pre>',
    ]
    box = widgets.Accordion(children=[widgets.HTML(panel) for panel in panels], selected_index=None)
    box.set_title(0, "Show what a passing run prints")
    box.set_title(1, "Show the reference solution (try your own first)")
    display(box)
    return results
