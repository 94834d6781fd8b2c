"""`kvcourse grade init`: an nbgrader course generated from the question bank (see INSTRUCTORS.md).

One assignment per lesson, lessonNN/lessonNN.ipynb, with nbgrader v3 cell metadata:
a locked prompt, an answer cell (solution region) where the student assigns a plain value
or writes a function, and a locked test cell whose points come from hidden tests. Free
responses are manually graded Markdown cells.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from .bank import load_quiz
from .checking import expected_results
from .model import Kind, Question, Quiz
from .units import DESCRIPTIONS

CONFIG_TEMPLATE = '''\
# nbgrader configuration written by `kvcourse grade init`.
c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = {course_id!r}
{exchange_line}
# Hidden tests import kvcourse (and torch through it): nbgrader's default of 30 s per cell is too short.
c.Execute.timeout = 600
# A student who deletes a locked test cell is graded by the original cell, put back by nbgrader.
c.OverwriteCells.add_missing_cells = True
'''


def parse_lessons(text: str) -> list[str]:
    """'01-05' or '03,07,16' (or a mix) as two-digit lesson numbers, checked against the syllabus."""
    from kvcourse.syllabus import get_lesson

    numbers: list[str] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d{1,2})(?:-(\d{1,2}))?", part)
        if not match:
            raise ValueError(f"--lessons: cannot read {part!r}; write e.g. 01-05 or 03,07,16")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise ValueError(f"--lessons: range {part!r} runs backwards")
        numbers += [get_lesson(n).number for n in range(first, last + 1)]
    return sorted(set(numbers))


def assignment_name(lesson: str) -> str:
    """The nbgrader assignment (and notebook) name of a lesson."""
    return f"lesson{lesson}"


def _meta(grade_id: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
          points: int = 0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def _var(question: Question) -> str:
    return question.function if question.kind is Kind.CODE else f"answer_{question.id}"


def _prompt_cell(question: Question) -> nbformat.NotebookNode:
    text = f"**{question.id}** ({question.points} point{'s' if question.points > 1 else ''}). "
    if question.kind is Kind.PARAMETERISED:
        text += "Run the cell below: it prints this question with the values drawn for your student id."
    else:
        text += question.prompt
    if question.kind is Kind.CHOICE:
        text += "\n\n" + "\n".join(f"- ({k}) {o}" for k, o in zip(question.option_keys, question.options))
        text += f'\n\nAssign the letter of your choice as a string: `{_var(question)} = "a"`.'
    elif question.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
        text += (f"\n\nAssign {DESCRIPTIONS[question.unit]} to `{_var(question)}`; "
                 "a unit goes in a string, a bare number is read in the question's unit.")
    elif question.kind is Kind.CODE:
        text += f"\n\nComplete `{question.function}` below."
    else:
        text += "\n\nWrite your answer in the cell below (graded by hand)."
    return new_markdown_cell(text, metadata=_meta(f"prompt_{question.id}", locked=True))


def _answer_cell(question: Question, lesson: str) -> nbformat.NotebookNode:
    var = _var(question)
    meta = _meta(f"answer_{question.id}", solution=True)
    if question.kind is Kind.CODE:
        header, _, _ = question.starter.strip().partition("\n")
        body = question.solution.strip().split("\n", 1)[1]  # the solution's lines after its def line
        source = f"{header}\n    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION"
        return new_code_cell(source, metadata=meta)
    if question.kind is Kind.CHOICE:
        solution = f"{var} = {question.correct!r}"
    elif question.kind is Kind.NUMERIC:
        solution = f"{var} = {question.answer!r}"
    else:
        solution = f"{var} = solve({lesson!r}, {question.id!r}, STUDENT_ID)"
    source = f"# Your answer: {var} = ...\n### BEGIN SOLUTION\n{solution}\n### END SOLUTION"
    return new_code_cell(source, metadata=meta)


def _test_cell(question: Question, lesson: str) -> nbformat.NotebookNode:
    var = _var(question)
    q = question
    if q.kind is Kind.CHOICE:
        visible = f'check_format({var}, "choice")'
        hidden = f"grade_choice({var}, {q.correct!r}, {''.join(q.option_keys)!r})"
    elif q.kind is Kind.NUMERIC:
        visible = f"check_format({var}, 'number', {q.unit!r})"
        hidden = f"grade_numeric({var}, {q.answer!r}, {q.unit!r}, {q.rel_tol!r}, {q.abs_tol!r})"
    elif q.kind is Kind.PARAMETERISED:
        visible = f"check_format({var}, 'number', {q.unit!r})"
        hidden = f"grade_parameterised({lesson!r}, {q.id!r}, {var})"
    else:
        visible = f"check_runs({var}, {tuple(q.cases[0])!r})"
        hidden = f"grade_function({var}, {expected_results(q)!r})"
    source = (f"# Checks {var}. This cell only checks the form of your answer; the tests that\n"
              "# give points are hidden and run when your work is graded.\n"
              f"from kvcourse.quizzes.graded import {visible.partition('(')[0]}\n"
              f"{visible}\n"
              "### BEGIN HIDDEN TESTS\n"
              f"from kvcourse.quizzes.graded import {hidden.partition('(')[0]}\n"
              f"{hidden}\n"
              "### END HIDDEN TESTS")
    return new_code_cell(source, metadata=_meta(f"test_{q.id}", grade=True, locked=True, points=q.points))


def _question_cells(question: Question, lesson: str) -> list[nbformat.NotebookNode]:
    cells = [_prompt_cell(question)]
    if question.kind is Kind.PARAMETERISED:
        cells.append(new_code_cell(f"show({lesson!r}, {question.id!r}, STUDENT_ID)",
                                   metadata=_meta(f"show_{question.id}", locked=True)))
    if question.kind is Kind.FREE:
        cells.append(new_markdown_cell(question.model_answer, metadata=_meta(
            f"free_{question.id}", grade=True, solution=True, points=question.points)))
        return cells
    return cells + [_answer_cell(question, lesson), _test_cell(question, lesson)]


def build_notebook(quiz: Quiz) -> nbformat.NotebookNode:
    """The source (instructor) notebook of one lesson's quick check."""
    intro = (f"# Lesson {quiz.lesson}: {quiz.title} (graded quick check)\n\n"
             "Answer each question by assigning a plain Python value (a letter as a string, a number, "
             'or a string with a unit such as `"0.8 MB"`) or by completing a function. Run every cell, '
             "then submit. Do not rename the answer variables.")
    id_cell = ("from kvcourse.quizzes.graded import show, solve, student_id\n\n"
               "# Your student id (the name you submit under) picks the values of some questions.\n"
               "# If it is not your nbgrader id, write it instead, e.g. STUDENT_ID = \"jdoe\".\n"
               "STUDENT_ID = student_id()\nprint(\"Your student id:\", STUDENT_ID)")
    cells = [new_markdown_cell(intro, metadata=_meta("intro", locked=True)), new_code_cell(id_cell)]
    for question in quiz.questions:
        cells += _question_cells(question, quiz.lesson)
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def init_course(directory: Path, lessons: list[str], course_id: str = "kvcourse",
                exchange: str | None = None) -> list[str]:
    """Write nbgrader_config.py and source/lessonNN/lessonNN.ipynb; returns the assignment names."""
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: choose a new folder for the course")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", course_id):
        raise ValueError(f"course id {course_id!r}: use letters, digits, '_', '-' and '.' only")
    exchange_line = f"c.Exchange.root = {str(Path(exchange).resolve())!r}" if exchange else \
        "# c.Exchange.root = '/srv/nbgrader/exchange'  # nbgrader's default exchange"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nbgrader_config.py").write_text(
        CONFIG_TEMPLATE.format(course_id=course_id, exchange_line=exchange_line), encoding="utf-8")
    names = []
    for lesson in lessons:
        name = assignment_name(lesson)
        folder = directory / "source" / name
        folder.mkdir(parents=True)
        nbformat.write(build_notebook(load_quiz(lesson)), folder / f"{name}.ipynb")
        names.append(name)
    return names
