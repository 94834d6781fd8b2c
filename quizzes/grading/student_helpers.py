"""The helpers a graded notebook defines in its locked set-up cell: plain Python, standard library only.

`kvcourse grade init` copies this file's code into the set-up cell of every generated notebook, so
a student's notebook needs nothing from the course package, and nothing in it decides a grade:
answers are read when the work is graded and compared with the right ones outside the notebook
(quizzes/INSTRUCTORS.md). `show_question` draws a student's values exactly as
`formulas.draw_params(question, f"{COURSE_SALT}/{STUDENT_ID}")` does (a test checks this).
"""

import hashlib
import random

COURSE_SALT = ""  # set by the generated cell
STUDENT_ID = ""  # set by the generated cell


def show_question(lesson, question, params, template, facts):
    """Print a question with the values drawn for STUDENT_ID."""
    seed = f"{COURSE_SALT}/{STUDENT_ID}|{lesson}|{question}"
    rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    values = {name: rng.choice(options) for name, options in params}
    named = dict(values)
    for name, options in params:
        named.update(facts.get(name, {}).get(options.index(values[name]), {}))
    print(template.format(**named))


def check_form(value, kind, detail=None):
    """Say whether an answer can be read; its points are decided after you submit."""
    if kind == "choice":
        ok = isinstance(value, str) and value.strip().lower() in detail
        want = f'one letter among {list(detail)} as a string, e.g. "{detail[0]}"'
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok or (isinstance(value, str) and len(value) <= 200 and any(c.isdigit() for c in value))
        want = 'a number, or a string with a number and a unit, e.g. "0.8 MB"'
    else:
        ok, want = callable(value), "a function"
        if ok:
            try:
                value(*detail)
            except Exception as err:
                raise AssertionError(f"calling it with {detail!r} raised {type(err).__name__}: {err}") from None
    if not ok:
        raise AssertionError(f"expected {want}; got {repr(value)[:80]}")
    print("Readable. It is checked after you submit.")
