"""Hostile and broken submissions through the real autograde (issue 15): every cheater scores exactly
what its honest work earns, innocent students' files and grades do not change by a byte, a broken
notebook with right answers is graded or reported, and a looping one finishes in under a minute.

One course (lesson 07: every kind of question), one `nbgrader generate_assignment`, and two
autograde runs shared by all the tests of this module: the innocent students first, then everyone
else. `pytest tests/quizzes/test_grading_hostile.py -s` prints the table (student, score got, score due, seconds).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import pytest
from guards import needs
from hostile_course import (
    ASSIGNMENT,
    _release,
    _role,
    _snapshot,
    _submit,
    make_course,
    notebook,
    right_answers,
    shared_run,
)

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.autograde import autograde
from kvcourse.quizzes.grading.decide import Course, code_cases, expected_answer
from kvcourse.quizzes.grading.gradebook import export_grades
from kvcourse.quizzes.grading.sandbox import Limits, bwrap_path, quizzes_dir

pytestmark = needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)

LIMITS = Limits(cell_timeout_s=5.0, output_cap_bytes=1_000_000, submission_timeout_s=90.0)
NOT_GRADED = None  # the due "score" of a submission that must be reported, not scored


@dataclass(frozen=True)
class Case:
    name: str
    due: float | None  # the automatic points its honest work earns (None: reported as not graded)
    what: str


CASES = [
    Case("alice", 8, "innocent: everything right"),
    Case("carol", 1, "innocent: one right, the rest wrong or malformed"),
    Case("patcher", 1, "monkeypatches the graders and the collector to write 'passed'"),
    Case("always_equal", 0, "answers are objects (and a str subclass) whose __eq__ is always True"),
    Case("exiter", 4, "os._exit and SystemExit in answer cells and inside its function"),
    Case("tamperer", 1, "edits and deletes test cells, prints fake scores, adds a 100-point cell"),
    Case("reader", 0, "reads source/, gradebook.db, the secret, others' work, the bank; network; solve/unseal"),
    Case("vandal", 1, "deletes others' files, rewrites the gradebook and source, kills its grader"),
    Case("looper", 2, "a loop that swallows KeyboardInterrupt"),
    Case("flooder", 8, "prints 30 MB, everything right"),
    Case("forker", 1, "leaves background processes behind"),
    Case("hardcoder", 1, "its function is a table of the bank's public test cases"),
    Case("copier", 1, "claims a classmate's id and hands in the classmate's parameterised answers"),
    Case("transformer", 1, "an IPython input transformer blanks every later cell"),
    Case("forger", 1, "writes forged lines into the results file"),
    Case("unsealer", 1, "opens the public bank's seal for the fixed question (a documented leak)"),
    Case("symlinker", NOT_GRADED, "its notebook is a link to the instructor's source notebook"),
    Case("no_metadata", 8, "broken: every nbgrader metadata stripped, answers right"),
    Case("no_ids", 8, "broken: metadata and cell ids stripped (nbformat 4.4), answers right"),
    Case("reordered", 8, "broken: cells shuffled, answers right"),
    Case("deleted_cells", 8, "broken: set-up, prompts, tests and the free response deleted, answers right"),
    Case("invalid_json", 8, "broken: a comma missing in the middle of the file, answers right"),
    Case("garbage", NOT_GRADED, "broken: not JSON at all"),
    Case("empty", NOT_GRADED, "broken: an empty file"),
    Case("untouched", 0, "the released notebook as is"),
]
INNOCENTS = ["alice", "carol"]
SLEEPER = Case("sleeper", 2, "an endless sleep that swallows interrupts, under the default limits (30 s per cell)")


def neighbour(course: Course, student: str) -> str:
    """A classmate whose parameterised values differ from this student's on every such question."""
    params = [q for q in load_quiz("07").questions if q.kind.value == "param"]
    for friend in ("alice", "bob", "dave", "erin", "frank", "grace", "heidi", "ivan"):
        if all(expected_answer(q, course, friend) != expected_answer(q, course, student) for q in params):
            return friend
    raise AssertionError("no classmate with other values")


def build_submissions(course_dir: Path, course: Course, names: list[str]) -> None:
    """Write each named student's submission under submitted/, as `nbgrader collect` would."""
    wrong = {
        "main_cost": 'answer_main_cost = "a"',
        "per_token_gqa": "answer_per_token_gqa = 1",
        "users_to_outweigh_13b": "answer_users_to_outweigh_13b = 80",
        "cache_bytes_param": "answer_cache_bytes_param = 3",
        "formula_code": "def kv_cache_bytes(*args):\n    return 0",
    }
    only_main = {**wrong, "main_cost": 'answer_main_cost = "b"'}
    paths = {"COURSE": str(course_dir), "QUIZZES": str(quizzes_dir()), "EXCHANGE": course.exchange}
    header = "".join(f"{k} = {v!r}\n" for k, v in paths.items())
    for name in names:
        right = right_answers(course, name)
        content: nbformat.NotebookNode | bytes | None
        if name == "alice":
            content = notebook(course_dir, right)
        elif name == "carol":
            content = notebook(
                course_dir,
                {
                    **wrong,
                    "main_cost": 'answer_main_cost = "B"',
                    "cache_bytes_param": "answer_cache_bytes_param = None",
                },
            )
        elif name == "patcher":
            patch = (
                "import json\ntry:\n    import kvcourse.quizzes.graded as g\n    g.grade_numeric = lambda *a: None\n"
                "except ImportError:\n    pass\n"
                "def record(q, name, *rest):\n"
                "    open(RESULTS, 'a').write(json.dumps({'q': q, 'passed': True, 'points': 99}) + '\\n')\n"
                "record_calls = record\nrecord_missing = lambda *a: None\n"
                "check_form = lambda *a, **k: print('passed')\n"
            )
            content = notebook(course_dir, {**only_main, "per_token_gqa": patch + wrong["per_token_gqa"]})
        elif name == "always_equal":
            objects = (
                "class Always:\n    def __eq__(self, other):\n        return True\n"
                "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
                "class AlwaysStr(str):\n    def __eq__(self, other):\n        return True\n"
                "    __hash__ = str.__hash__\n"
            )
            content = notebook(
                course_dir,
                {
                    "main_cost": objects + "answer_main_cost = AlwaysStr('z')",
                    "per_token_gqa": "answer_per_token_gqa = Always()",
                    "users_to_outweigh_13b": "answer_users_to_outweigh_13b = [Always()]",
                    "cache_bytes_param": "class F(float):\n    def __eq__(self, o):\n        return True\n"
                    "answer_cache_bytes_param = F(1.0)",
                    "formula_code": "def kv_cache_bytes(*args):\n    return Always()",
                },
            )
        elif name == "exiter":
            content = notebook(
                course_dir,
                {
                    **wrong,
                    "main_cost": 'answer_main_cost = "b"',
                    "per_token_gqa": right["per_token_gqa"] + "\nimport os\nos._exit(1)",
                    "users_to_outweigh_13b": right["users_to_outweigh_13b"],
                    "cache_bytes_param": right["cache_bytes_param"] + "\nraise SystemExit(0)",
                    "formula_code": "def kv_cache_bytes(*args):\n    import os\n    os._exit(0)",
                },
            )
        elif name == "tamperer":
            nb = notebook(course_dir, only_main)
            for cell in nb.cells:
                if _role(cell)[0] == "test":
                    cell.source = "print('All tests passed. Score: 10/10')\n10.0"
            nb.cells = [c for c in nb.cells if _role(c) != ("test", "formula_code")]
            bonus = nbformat.v4.new_code_cell(
                "print('Score: 100/100')\n100.0",
                metadata={
                    "nbgrader": {
                        "grade": True,
                        "grade_id": "bonus",
                        "locked": False,
                        "points": 100,
                        "schema_version": 3,
                        "solution": False,
                        "task": False,
                    }
                },
            )
            nb.cells.append(bonus)
            content = nb
        elif name == "reader":
            attack = header + (
                "import os, pathlib, re, socket\nfound = ''\n"
                "for t in [COURSE + '/source/lesson07/lesson07.ipynb', COURSE + '/gradebook.db',\n"
                "          COURSE + '/instructor/course.json', COURSE + '/submitted/alice/lesson07/lesson07.ipynb',\n"
                "          COURSE, QUIZZES + '/bank/07.toml', QUIZZES, EXCHANGE, '/root/.ssh', '/home',\n"
                "          '/etc/shadow']:\n"
                "    try:\n"
                "        data = pathlib.Path(t).read_bytes() if os.path.isfile(t) else str(os.listdir(t)).encode()\n"
                "        if t in (QUIZZES, '/home') and data in (b'[]',):\n"
                "            raise FileNotFoundError('empty')\n"
                "        found += data.decode('latin-1'); print('LEAKED', t)\n"
                "    except Exception as err:\n"
                "        print('BLOCKED', t, type(err).__name__)\n"
                "for host in [('1.1.1.1', 53), ('example.com', 80)]:\n"
                "    try:\n"
                "        socket.create_connection(host, timeout=2); print('LEAKED network', host)\n"
                "    except Exception as err:\n"
                "        print('BLOCKED network', host, type(err).__name__)\n"
                "for module, attr in [('kvcourse.quizzes.sealing', 'unseal'), ('kvcourse.quizzes.graded', 'solve'),\n"
                "                     ('kvcourse.quizzes.grading.decide', 'expected_answer')]:\n"
                "    try:\n"
                "        getattr(__import__(module, fromlist=[attr]), attr); print('LEAKED', module)\n"
                "    except Exception as err:\n"
                "        print('BLOCKED', module, type(err).__name__)\n"
                "m = re.search(r\"answer_main_cost = '(\\w)'\", found)\n"
                "answer_main_cost = m.group(1) if m else 'z'\n"
            )
            content = notebook(course_dir, {**wrong, "main_cost": attack})
        elif name == "vandal":
            attack = header + (
                "import os, shutil, sqlite3\n"
                "for t in [COURSE + '/submitted/alice', COURSE + '/autograded/alice', COURSE + '/source']:\n"
                "    try:\n"
                "        shutil.rmtree(t); print('DAMAGED', t)\n"
                "    except Exception as err:\n"
                "        print('BLOCKED', t, type(err).__name__)\n"
                "try:\n"
                "    db = sqlite3.connect(COURSE + '/gradebook.db')\n"
                "    db.execute('update grade set auto_score = 0');"
                " db.execute(\"update source_cell set source = 'x'\")\n"
                "    db.commit(); print('DAMAGED gradebook')\n"
                "except Exception as err:\n"
                "    print('BLOCKED gradebook', type(err).__name__)\n"
                "for t in [COURSE + '/nbgrader_config.py', QUIZZES + '/grading/decide.py',"
                " os.path.dirname(QUIZZES) + '/README.md']:\n"
                "    try:\n"
                "        open(t, 'a').write('# was here'); print('DAMAGED', t)\n"
                "    except Exception as err:\n"
                "        print('BLOCKED', t, type(err).__name__)\n"
            )
            content = notebook(
                course_dir,
                {
                    **only_main,
                    "per_token_gqa": attack,
                    "users_to_outweigh_13b": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                },
            )
        elif name == "looper":
            loop = "while True:\n    try:\n        pass\n    except BaseException:\n        pass"
            content = notebook(
                course_dir,
                {**only_main, "per_token_gqa": loop, "users_to_outweigh_13b": right["users_to_outweigh_13b"]},
            )
        elif name == "sleeper":
            loop = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n        pass"
            content = notebook(
                course_dir,
                {**only_main, "per_token_gqa": loop, "users_to_outweigh_13b": right["users_to_outweigh_13b"]},
            )
        elif name == "flooder":
            flood = right["main_cost"] + "\nfor _ in range(30):\n    print('x' * 1_000_000)"
            content = notebook(course_dir, {**right, "main_cost": flood})
        elif name == "forker":
            spawn = (
                "import subprocess, sys\nfor _ in range(2):\n"
                "    subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.2)',"
                " 'kvgrade-forker-marker'], start_new_session=True)"
            )
            content = notebook(course_dir, {**only_main, "per_token_gqa": spawn})
        elif name == "hardcoder":
            q = load_quiz("07").question("formula_code")
            table = {tuple(case): 2 * math.prod(case) for case in q.cases}
            content = notebook(
                course_dir, {**only_main, "formula_code": f"def kv_cache_bytes(*args):\n    return {table!r}[args]"}
            )
        elif name == "copier":
            friend = neighbour(course, name)
            theirs = right_answers(course, friend)
            spoof = f"import os\nos.environ['KVCOURSE_STUDENT_ID'] = {friend!r}\nSTUDENT_ID = {friend!r}\n"
            content = notebook(
                course_dir,
                {
                    **only_main,
                    "per_token_gqa": spoof + theirs["per_token_gqa"],
                    "cache_bytes_param": theirs["cache_bytes_param"],
                },
            )
        elif name == "transformer":
            blank = "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])"
            content = notebook(course_dir, {**right, "per_token_gqa": right["per_token_gqa"] + "\n" + blank})
        elif name == "forger":
            forge = (
                "import json\nwith open(RESULTS, 'a') as f:\n"
                "    f.write(json.dumps({'q': 'formula_code', 'calls': [{'ok': 819200}] * 8}) + '\\n')\n"
                "    f.write(json.dumps({'q': 'per_token_gqa', 'value': {'ok': True}, 'passed': True}) + '\\n')\n"
                "    f.write(json.dumps({'q': 'cache_bytes_param', 'passed': True}) + '\\n')\n"
                "    f.write('[' * 100000 + '\\n' + 'x' * 300000 + '\\nnot json\\n')\n"
            )
            content = notebook(course_dir, {**only_main, "formula_code": forge + wrong["formula_code"]})
        elif name == "unsealer":
            sealing = (quizzes_dir() / "sealing.py").read_text()
            sealed = next(
                line.split('"')[1]
                for line in (quizzes_dir() / "bank" / "07.toml").read_text().splitlines()
                if line.startswith("sealed")
            )
            lookup = f"{sealing}\nanswer_main_cost = unseal({sealed!r}, '07', 'main_cost')['correct']"
            content = notebook(
                course_dir,
                {
                    **wrong,
                    "main_cost": lookup,
                    "per_token_gqa": "from kvcourse.quizzes.graded import solve\n"
                    "answer_per_token_gqa = solve('07', 'per_token_gqa', 'x')",
                },
            )
        elif name == "symlinker":
            path = _submit(course_dir, name, None)
            path.symlink_to(course_dir / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
            continue
        elif name == "no_metadata":
            nb = notebook(course_dir, right)
            for cell in nb.cells:
                cell.metadata = {}
            content = nb
        elif name == "no_ids":
            nb = notebook(course_dir, right)
            nb.nbformat_minor = 4
            for cell in nb.cells:
                cell.metadata = {}
                del cell["id"]
            content = nb
        elif name == "reordered":
            nb = notebook(course_dir, right)
            nb.cells = nb.cells[::-1][:-2] + nb.cells[:2]  # every question backwards, the set-up still first
            nb.cells = nb.cells[-2:] + nb.cells[:-2]
            content = nb
        elif name == "deleted_cells":
            nb = notebook(course_dir, right)
            nb.cells = [c for c in nb.cells if _role(c)[0] not in ("setup", "prompt", "test", "free", "show")]
            content = nb
        elif name == "invalid_json":
            text = nbformat.writes(notebook(course_dir, right))
            cut = text.index('"cell_type": "markdown"', len(text) // 2)
            comma = text.rindex("},", 0, cut)
            content = (text[: comma + 1] + text[comma + 2 :]).encode()
        elif name == "garbage":
            content = b"this is not a notebook {"
        elif name == "empty":
            content = b""
        elif name == "untouched":
            content = _release(course_dir)
        else:
            raise KeyError(name)
        _submit(course_dir, name, content)


def _grade_everyone(tmp: Path) -> dict:
    """The innocent students graded, a snapshot, everyone else graded, a snapshot (JSON-able)."""
    course_dir, course = make_course(tmp, "kvhostile")
    build_submissions(course_dir, course, INNOCENTS)
    log: list[str] = []
    results = autograde(course_dir, ASSIGNMENT, INNOCENTS, LIMITS, log=log.append)
    before = _snapshot(course_dir, INNOCENTS, course.course_id)
    others = [case.name for case in CASES if case.name not in INNOCENTS]
    build_submissions(course_dir, course, others + [SLEEPER.name])
    results += autograde(course_dir, ASSIGNMENT, others, LIMITS, log=log.append)
    results += autograde(course_dir, ASSIGNMENT, [SLEEPER.name], log=log.append)
    after = _snapshot(course_dir, INNOCENTS, course.course_id)
    return {
        "course": str(course_dir),
        "results": {r.student: asdict(r) for r in results},
        "before": before,
        "after": after,
        "log": log,
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    """One grading run for the whole module, shared by both xdist workers (make test runs two)."""
    return shared_run(tmp_path_factory, worker_id, "hostile-grading", _grade_everyone)


def test_every_student_scores_exactly_what_its_honest_work_earns(graded, capsys):
    results = graded["results"]
    rows = []
    for case in [*CASES, SLEEPER]:
        result = results[case.name]
        got = result["score"] if result["status"] == "graded" else None
        rows.append(
            (
                case.name,
                "not graded" if got is None else f"{got:g}",
                "not graded" if case.due is None else f"{case.due:g}",
                f"{result['seconds']:.1f}",
                case.what,
            )
        )
    with capsys.disabled():
        print("\n\nstudent         got         due         seconds  what it did")
        for row in rows:
            print(f"{row[0]:<15} {row[1]:<11} {row[2]:<11} {row[3]:>7}  {row[4]}")
    wrong = [row for row in rows if row[1] != row[2]]
    assert not wrong, wrong


def test_innocent_students_files_and_grades_are_byte_identical(graded):
    before, after = graded["before"], graded["after"]
    assert before["files"].keys() == after["files"].keys()
    changed = [path for path in before["files"] if before["files"][path] != after["files"][path]]
    assert not changed, changed
    for key in ("grades", "stamps", "sources", "status"):
        assert before[key] == after[key], key
    assert len(before["grades"]) == 12  # 6 grade cells for each of the two innocent students


def test_nothing_outside_the_sandbox_was_reachable(graded):
    for student in ("reader", "vandal"):
        nb = nbformat.read(graded["course"] / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)
        text = "".join(o.get("text", "") for cell in nb.cells for o in cell.get("outputs", []))
        assert "BLOCKED" in text and "LEAKED" not in text and "DAMAGED" not in text, text


def test_no_background_process_outlives_its_sandbox(graded):
    survivors = []
    for proc in Path("/proc").iterdir():
        try:
            if b"kvgrade-forker-marker" in (proc / "cmdline").read_bytes():
                survivors.append(proc.name)
        except OSError:
            continue
    assert not survivors


def test_a_looping_submission_finishes_in_under_a_minute(graded):
    assert graded["results"]["sleeper"]["seconds"] < 60  # the default limits: 30 s per cell
    assert graded["results"]["looper"]["seconds"] < 40  # 5 s per cell here


def test_output_is_capped_per_cell(graded):
    path = graded["course"] / "autograded" / "flooder" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert path.stat().st_size < 2_500_000
    assert "output cut" in path.read_text()


def test_broken_notebooks_are_graded_or_reported_never_silently_zero(graded, tmp_path):
    results = graded["results"]
    assert results["garbage"]["reason"] == "not a notebook (invalid JSON)"
    assert results["empty"]["reason"] == "not a notebook (invalid JSON)"
    assert "link" in results["symlinker"]["reason"]
    assert "could not grade garbage: not a notebook (invalid JSON)" in graded["log"]
    assert any("not valid JSON" in note for note in results["invalid_json"]["notes"])
    rows = {r["student_id"]: r for r in export_grades(graded["course"], tmp_path / "grades.csv")}
    assert rows["garbage"]["status"] == "not graded" and rows["garbage"]["score"] == ""
    assert rows["garbage"]["reason"] == "not a notebook (invalid JSON)"
    assert rows["untouched"]["status"] == "graded" and rows["untouched"]["score"] == 0.0
    assert rows["alice"]["status"] == "to grade by hand" and rows["alice"]["score"] == 8.0


def test_untouched_submissions_log_nothing_that_looks_like_tampering(graded):
    assert graded["results"]["untouched"]["notes"] == []
    assert graded["results"]["alice"]["notes"] == []
    assert any("edited" in note for note in graded["results"]["tamperer"]["notes"])


def test_graded_notebooks_show_verdicts_never_hidden_cases_or_right_values(graded):
    course = Course.load(graded["course"])
    q = load_quiz("07").question("formula_code")
    text = (graded["course"] / "autograded" / "carol" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    for args in code_cases(q, course, "carol")[len(q.cases) :]:
        assert repr(args)[1:-1] not in text  # a hidden case's arguments
    for qid in ("per_token_gqa", "cache_bytes_param"):
        value = expected_answer(load_quiz("07").question(qid), course, "carol")
        assert f"{value:,.0f}" not in text and f"{value:.0f}" not in text
    assert "record_calls" not in text and "Right: (b)" in text and "Not within the tolerance" in text
    assert nbformat.reads(text, as_version=4).cells[1].source.startswith("# Set-up (locked)")
