"""`kvcourse grade init`: an nbgrader course generated from the question bank (see INSTRUCTORS.md).

One assignment per lesson, lessonNN/lessonNN.ipynb, with nbgrader v3 cell metadata: a locked
set-up cell, and per question a locked prompt, an answer cell (solution region) where the student
assigns a plain value or writes a function, and a locked test cell worth the question's points.
Free responses are manually graded Markdown cells. Every cell also carries
``metadata.kvcourse = {"role", "question"}`` and a fixed cell id, which is how autograde.py finds a
student's answers even in a damaged notebook.

The notebooks need nothing from the course package but a lab's cells (lessons 18-20), which import
kvcourse.labs: the class to subclass, and the public traces' check. The set-up cell holds plain-Python
helpers (student_helpers.py); a lab's answer cell is its reference solution with the methods to write
left as solution regions (lab_answer.py); a test cell checks that an answer is readable, or, for a lab,
runs the public traces. Points are decided by `kvcourse grade autograde`, outside the student's kernel.
`init_course` also writes instructor/course.json (never released): the course's secret, from which
per-student hidden test cases and lab traces are drawn, and its public salt, from which per-student
values are drawn.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kvcourse.labs.spec import LABS

from ..bank import load_quiz
from ..formulas import facts
from ..model import Kind, Question, Quiz
from ..units import DESCRIPTIONS
from .course import COURSE_FILE, INSTRUCTOR_DIR
from .lab_answer import lab_answer_source

CONFIG_TEMPLATE = """\
# nbgrader configuration written by `kvcourse grade init`.
c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = {course_id!r}
{exchange_line}
# Grade with `kvcourse grade autograde` (sandboxed, points decided outside the student's kernel):
# these notebooks hold no tests for nbgrader's own autograde, which is therefore switched off.
# It stops before it touches a folder (`nbgrader autograde --force` would first delete autograded/).
c.Autograde.exporter_class = "kvcourse.quizzes.grading.autograde.RefuseAutogradeExporter"
"""


NBGRADER_EXCHANGE = "/usr/local/share/nbgrader/exchange"  # nbgrader 0.9's own default (a test checks it)
STUDENTS_DIR = "for_students"
STUDENT_CONFIG = """\
# For your students: their ~/.jupyter/nbgrader_config.py (written by `kvcourse grade init`).
# It names this course and the exchange its assignments are released to and submitted through.
c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = {course_id!r}
{exchange_line}
"""


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


def lesson_of(assignment: str) -> str:
    """The lesson number of an assignment name ("lesson07" -> "07")."""
    match = re.fullmatch(r"lesson(\d\d)", assignment)
    if not match:
        raise ValueError(f"{assignment!r} is not an assignment of this course (expected lessonNN)")
    return match.group(1)


def answer_name(question: Question) -> str:
    """The variable (or function, or a lab's class) a student's answer cell defines."""
    if question.kind is Kind.LAB:
        return question.class_name
    return question.function if question.kind is Kind.CODE else f"answer_{question.id}"


def _cell(
    make,
    source: str,
    grade_id: str,
    role: str,
    question: str = "",
    *,
    grade: bool = False,
    solution: bool = False,
    locked: bool = False,
    points: int = 0,
) -> nbformat.NotebookNode:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = points
    cell = make(source, metadata={"nbgrader": meta, "kvcourse": {"role": role, "question": question}})
    cell.id = grade_id  # fixed ids: a damaged submission's cells can still be told apart
    return cell


def _prompt_cell(question: Question) -> nbformat.NotebookNode:
    text = f"**{question.id}** ({question.points} point{'s' if question.points > 1 else ''}). "
    if question.kind is Kind.PARAMETERISED:
        text += "Run the cell below: it prints this question with the values drawn for your student id."
    else:
        text += question.prompt
    if question.kind is Kind.CHOICE:
        text += "\n\n" + "\n".join(f"- ({k}) {o}" for k, o in zip(question.option_keys, question.options, strict=True))
        text += f'\n\nAssign the letter of your choice as a string: `{answer_name(question)} = "a"`.'
    elif question.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
        text += (
            f"\n\nAssign {DESCRIPTIONS[question.unit]} to `{answer_name(question)}`; "
            "a unit goes in a string, a bare number is read in the question's unit."
        )
    elif question.kind is Kind.CODE:
        text += f"\n\nComplete `{question.function}` below."
    elif question.kind is Kind.LAB:
        lab = LABS[question.lab]
        text += (
            f"\n\nComplete `{question.class_name}` in the cell below: each of its methods raises until you "
            "write it. The cell after it serves the public traces on your class and prints what the grader "
            f"says of each. After you submit, your class is graded on those {lab.num_public_traces} traces and "
            f"on {lab.num_hidden_traces} hidden ones drawn for your student id: {question.points} points times "
            + (
                "the mean score on the hidden traces (you already hold the public ones)."
                if lab.lines
                else "the mean trace score."
            )
        )
    else:
        text += "\n\nWrite your answer in the cell below (graded by hand)."
    return _cell(new_markdown_cell, text, f"prompt_{question.id}", "prompt", question.id, locked=True)


def _show_cell(question: Question, lesson: str) -> nbformat.NotebookNode:
    params = [(name, list(values)) for name, values in sorted(question.params)]
    table = {}
    for name, values in params:
        extra = [{k: v for k, v in facts({name: value}).items() if k != name} for value in values]
        if any(extra):
            table[name] = dict(enumerate(extra))
    source = (
        f"show_question({lesson!r}, {question.id!r}, {params!r},\n              {question.prompt!r},\n"
        f"              {table!r})"
    )
    return _cell(new_code_cell, source, f"show_{question.id}", "show", question.id, locked=True)


def _answer_cell(question: Question) -> nbformat.NotebookNode:
    var = answer_name(question)
    if question.kind is Kind.LAB:
        source = lab_answer_source(question)
    elif question.kind is Kind.CODE:
        header, _, _ = question.starter.strip().partition("\n")
        body = question.solution.strip().split("\n", 1)[1]  # the solution's lines after its def line
        source = f"{header}\n    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION"
    else:
        if question.kind is Kind.CHOICE:
            solution = f"{var} = {question.correct!r}"
        elif question.kind is Kind.NUMERIC:
            solution = f"{var} = {question.answer!r}"
        else:  # each student's own values; the instructor's copy computes them (never released)
            solution = (
                "from kvcourse.quizzes.bank import load_quiz\n"
                "from kvcourse.quizzes.checking import expected_number\n"
                f"{var} = expected_number(load_quiz({question.lesson!r}).question({question.id!r}), "
                'f"{COURSE_SALT}/{STUDENT_ID}")'
            )
        source = f"# Your answer: {var} = ...\n### BEGIN SOLUTION\n{solution}\n### END SOLUTION"
    return _cell(new_code_cell, source, f"answer_{question.id}", "answer", question.id, solution=True)


def _test_cell(question: Question) -> nbformat.NotebookNode:
    var = answer_name(question)
    if question.kind is Kind.CHOICE:
        check = f'check_form({var}, "choice", {"".join(question.option_keys)!r})'
    elif question.kind is Kind.CODE:
        check = f'check_form({var}, "function", {tuple(question.cases[0])!r})'
    else:
        check = f'check_form({var}, "number")'
    source = (
        f"# Checks that {var} can be read. Its {question.points} point(s) are decided after you submit,\n"
        f"# outside this notebook, by comparing your answer with the right one.\n{check}"
    )
    if question.kind is Kind.LAB:
        source = (
            f"# Serves the public traces on {var}: the grader's verdict on each, beside the engine's own figures.\n"
            f"# Its {question.points} points are decided after you submit, outside this notebook, on these "
            "traces and on\n# hidden ones drawn for your student id.\n"
            "from kvcourse.labs import check\n\n"
            f"if not all(trace.passed for trace in check({question.lab!r}, {var})):\n"
            '    raise AssertionError("not every public trace passes yet: the lines above say why")'
        )
    return _cell(
        new_code_cell,
        source,
        f"test_{question.id}",
        "test",
        question.id,
        grade=True,
        locked=True,
        points=question.points,
    )


def _question_cells(question: Question, lesson: str) -> list[nbformat.NotebookNode]:
    cells = [_prompt_cell(question)]
    if question.kind is Kind.PARAMETERISED:
        cells.append(_show_cell(question, lesson))
    if question.kind is Kind.FREE:
        cells.append(
            _cell(
                new_markdown_cell,
                question.model_answer,
                f"free_{question.id}",
                "free",
                question.id,
                grade=True,
                solution=True,
                points=question.points,
            )
        )
        return cells
    return cells + [_answer_cell(question), _test_cell(question)]


def setup_source(salt: str) -> str:
    """The locked set-up cell: the student id, the course's public salt and student_helpers' code."""
    helpers = (Path(__file__).parent / "student_helpers.py").read_text(encoding="utf-8")
    body = helpers.split('"""', 2)[2].strip()  # the module's code without its docstring
    body = body.replace('COURSE_SALT = ""   # set by the generated cell\n', "")
    body = body.replace('STUDENT_ID = ""    # set by the generated cell\n', "")
    return (
        "# Set-up (locked). Nothing in this notebook grades you: your answers are read when you submit\n"
        "# and compared with the right ones outside it. Run this cell first.\n"
        f"{body}\n\n"
        f"COURSE_SALT = {salt!r}\n"
        "# Your student id picks the values of some questions: it must be the id you submit under.\n"
        "# nbgrader submits under your login name (on a hub, your hub name), as below; if you submit\n"
        "# with --student=ID or share a login, set KVCOURSE_STUDENT_ID=ID before starting Jupyter.\n"
        "import getpass\nimport os\n"
        "_login = getpass.getuser()\n"
        'STUDENT_ID = (os.environ.get("KVCOURSE_STUDENT_ID")\n'
        '              or (os.environ.get("JUPYTERHUB_USER") if _login == "jovyan" else None) or _login)\n'
        'print("Your student id:", STUDENT_ID)\n'
        'if STUDENT_ID in ("root", "jovyan"):\n'
        '    print("  This looks like a shared account. If you submit under another id, set "\n'
        '          "KVCOURSE_STUDENT_ID to it and restart: your values are drawn for the id above.")'
    )


def build_notebook(quiz: Quiz, salt: str = "") -> nbformat.NotebookNode:
    """The source (instructor) notebook of one lesson's quick check."""
    written = "a function or a class" if any(q.kind is Kind.LAB for q in quiz.questions) else "a function"
    intro = (
        f"# Lesson {quiz.lesson}: {quiz.title} (graded quick check)\n\n"
        "Answer each question by assigning a plain Python value (a letter as a string, a number, "
        f'or a string with a unit such as `"0.8 MB"`) or by completing {written}. Run every cell, '
        "then submit. Do not rename the answer variables."
    )
    cells = [
        _cell(new_markdown_cell, intro, "intro", "intro", locked=True),
        _cell(new_code_cell, setup_source(salt), "setup", "setup", locked=True),
    ]
    for question in quiz.questions:
        cells += _question_cells(question, quiz.lesson)
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["kvcourse"] = {"lesson": quiz.lesson}
    nbformat.validate(nb)
    return nb


def init_course(
    directory: Path, lessons: list[str], course_id: str = "kvcourse", exchange: str | None = None
) -> list[str]:
    """Write nbgrader_config.py, source/lessonNN/lessonNN.ipynb and instructor/course.json; returns the names."""
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: choose a new folder for the course")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", course_id):
        raise ValueError(f"course id {course_id!r}: use letters, digits, '_', '-' and '.' only")
    exchange_path = str(Path(exchange).resolve()) if exchange else NBGRADER_EXCHANGE
    exchange_line = f"c.Exchange.root = {exchange_path!r}"  # always stated: students' configs name the same
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)  # the source notebooks hold the answers, instructor/ the secret: yours only
    (directory / "nbgrader_config.py").write_text(
        CONFIG_TEMPLATE.format(course_id=course_id, exchange_line=exchange_line), encoding="utf-8"
    )
    students = directory / STUDENTS_DIR
    students.mkdir()
    (students / "nbgrader_config.py").write_text(
        STUDENT_CONFIG.format(course_id=course_id, exchange_line=exchange_line), encoding="utf-8"
    )
    course = {
        "version": 1,
        "course_id": course_id,
        "salt": secrets.token_hex(6),
        "secret": secrets.token_hex(32),
        "exchange": exchange_path,
    }
    private = directory / INSTRUCTOR_DIR
    private.mkdir(mode=0o700)
    secret_file = private / COURSE_FILE
    secret_file.touch(mode=0o600)
    secret_file.write_text(json.dumps(course, indent=1), encoding="utf-8")
    names = []
    for lesson in lessons:
        name = assignment_name(lesson)
        folder = directory / "source" / name
        folder.mkdir(parents=True)
        nbformat.write(build_notebook(load_quiz(lesson), course["salt"]), folder / f"{name}.ipynb")
        (folder / f"{name}.ipynb").chmod(0o600)
        names.append(name)
    return names


def ensure_exchange(path: str) -> str | None:
    """Create the exchange folder, writable by every student as nbgrader needs it; None when done, else
    the command to run (a folder outside your home usually needs root)."""
    folder = Path(path)
    if folder.is_dir():
        return None
    try:
        folder.mkdir(parents=True)
        folder.chmod(0o1777)  # everyone may write, only an owner may remove: what /tmp is
    except OSError:
        return f"sudo mkdir -p {_quote(folder)} && sudo chmod 1777 {_quote(folder)}"
    return None


def next_steps(directory: Path, names: list[str]) -> str:
    """The commands that come next, as a shell line that works as printed (a test runs it)."""
    nbgrader = shutil.which("nbgrader")
    ours = Path(sys.executable).parent / "nbgrader"
    prefix = ""
    if ours.exists() and (nbgrader is None or Path(nbgrader).resolve() != ours.resolve()):
        prefix = f'PATH="{ours.parent}:$PATH" '  # nbgrader (and its alembic) from the course's environment
    generate = " && ".join(f"{prefix}nbgrader generate_assignment {name}" for name in names)
    return f"cd {_quote(directory)} && {generate}"


def _quote(path: Path) -> str:
    import shlex

    return shlex.quote(str(path))
