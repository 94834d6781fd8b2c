"""The notebook a sandbox runs for one submission, and the graded notebook built from what came back.

`grading_notebook` lays out what the sandbox executes: the locked set-up cell, the collector
(collector.py), the student's own code cells in their order, and after each answer a call that
hands it over as plain JSON (for a lab, its runs on the public traces and on the student's hidden
ones); `student_code` is the source of those cells, which a lab's answer is read for. `read_records`
and `read_outputs` read what the sandbox wrote, which is the student's to forge: sizes are capped,
JSON is parsed defensively, and only text, PNG/JPEG images and errors survive as outputs. `graded_notebook`
is what formgrader and nbgrader's feedback show: the released notebook with the student's answers, their
outputs and a verdict under each question (the set-up cell as one line, a written answer marked as graded
by hand), never a hidden test case or a right value the student did not give.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import nbformat

from kvcourse.labs.feeder import FED_LABS
from kvcourse.labs.spec import LABS

from ..checking import prompt_for
from ..model import Kind, Quiz
from .decide import Course, Decision, code_cases, lab_traces
from .lab_guard import CELL_BREAK
from .nbgrader_export import answer_name
from .recovery import NotGradable, Submission, TemplateCell, read_bytes

MAX_RESULTS_BYTES = 4_000_000
MAX_LINE_CHARS = 1_600_000  # one record: a lab's runs are its longest (collector.LAB_LOG_LIMIT and its wrapping)
TIMED_OUT = "Stopped: this cell ran for more than"  # sandbox_runner's TIMEOUT_NOTE (it imports nothing of ours)
OUTPUT_CUT = "[... output cut"  # its CUT_NOTE, and the cut _clean_outputs makes
CAP_REACHED = re.compile(r"Stopped: (.+?) reached \(the grader's cap")  # its CAP_NOTE
MAX_EXECUTED_BYTES = 64_000_000
_KEEP_MIME = ("text/plain", "image/png", "image/jpeg")  # no HTML or JavaScript from a student reaches a grader's page


def _module_code(name: str) -> str:
    text = (Path(__file__).parent / name).read_text(encoding="utf-8")
    return text.split('"""', 2)[2].strip()  # without the module docstring


def grading_notebook(
    sub: Submission,
    template: list[TemplateCell],
    quiz: Quiz,
    course: Course,
    student: str,
    results: Path,
    feeder: str = "",
) -> tuple[nbformat.NotebookNode, list[int | None]]:
    """(notebook, origin): the cells the sandbox runs, and for each the submission cell it came from.
    ``feeder`` is the socket of labs B and C's feeder (kvcourse.labs.feeder): their traces are not in the notebook."""
    setup = next(cell.source for cell in template if cell.role == "setup")
    collector = _module_code("collector.py").replace('RESULTS = "results.jsonl"', f"RESULTS = {str(results)!r}")
    collector = collector.replace('FEEDER = ""', f"FEEDER = {feeder!r}")
    cells = [nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(collector)]
    origin: list[int | None] = [None, None]
    last_answer = {indices[-1]: [] for indices in sub.answers.values()}
    for question, indices in sub.answers.items():
        last_answer[indices[-1]].append(question)
    roles = {cell.grade_id: cell.role for cell in template}
    details = {q.id: _detail(q, course, student) for q in quiz.questions if q.auto_graded}
    calls = {q.id: _record_call(q, details[q.id]) for q in quiz.questions if q.auto_graded}
    for index, cell in enumerate(sub.cells):
        if not _runs(cell, roles):
            continue
        cells.append(nbformat.v4.new_code_cell(cell.source))
        origin.append(index)
        for question in last_answer.get(index, []):
            if question in calls:
                cells.append(nbformat.v4.new_code_cell(calls[question]))
                origin.append(None)
    pending = [(q.id, answer_name(q), details[q.id]) for q in quiz.questions if q.auto_graded]
    cells.append(nbformat.v4.new_code_cell(f"record_missing({pending!r})"))
    origin.append(None)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb, origin


def _runs(cell, roles: dict[str, str]) -> bool:
    """Whether the sandbox runs this submission cell: a code cell, not a locked one (the set-up runs first;
    show and test cells are the grader's own)."""
    return cell.cell_type == "code" and roles.get(cell.grade_id) not in ("setup", "show", "test")


def student_code(sub: Submission, template: list[TemplateCell]) -> str:
    """The source of every cell the sandbox runs for this submission, joined by CELL_BREAK (lab_guard.py)."""
    roles = {cell.grade_id: cell.role for cell in template}
    return CELL_BREAK.join(cell.source for cell in sub.cells if _runs(cell, roles))


def _detail(question, course: Course, student: str) -> list | dict | None:
    """What the collector needs beside the name: a code question's cases, a lab's name and traces (as JSON)."""
    if question.kind is Kind.CODE:
        return code_cases(question, course, student)
    if question.kind is Kind.LAB and question.lab in FED_LABS:  # the feeder holds the traces: only their count here
        spec = LABS[question.lab]
        return {"lab": question.lab, "traces": spec.num_public_traces + spec.num_hidden_traces}
    if question.kind is Kind.LAB:
        return {"lab": question.lab, "traces": [trace.to_plain() for trace in lab_traces(question, course, student)]}
    return None


def feeder_plan(quiz: Quiz, course: Course, student: str) -> dict:
    """What the feeder serves for this submission: {question: {"lab", "traces"}} for each lab B or C question."""
    return {
        q.id: {"lab": q.lab, "traces": [trace.to_plain() for trace in lab_traces(q, course, student)]}
        for q in quiz.questions
        if q.kind is Kind.LAB and q.lab in FED_LABS
    }


NO_FEEDER = "no feeder served {lab}'s traces: its runs were not graded (the sandbox's log says why)"
UNPROTECTED = "the feeder that served the traces could not hide its memory ({why}): a policy could read the future"


def fed_records(records: dict[str, dict], plan: dict, fed: list[dict]) -> tuple[dict[str, dict], list[str]]:
    """The records with each fed lab's runs taken from the feeder's log (one per trace, None where it served none),
    whatever the learner's process wrote for them; and the notes a grade needs (no feeder, or an unprotected one)."""
    if not plan:
        return records, []
    header = next((line["feeder"] for line in fed if isinstance(line.get("feeder"), dict)), None)
    notes = []
    if header is None:
        notes.append(NO_FEEDER.format(lab=" and ".join(sorted({p["lab"] for p in plan.values()}))))
    elif not header.get("protected"):
        notes.append(UNPROTECTED.format(why=str(header.get("why", ""))[:200]))
    runs = {(line.get("q"), line.get("trace")): line.get("log") for line in fed if "log" in line}
    merged = dict(records)
    for question, entry in plan.items():
        logs = [runs.get((question, i)) for i in range(len(entry["traces"]))]
        record = records.get(question)
        if any(log is not None for log in logs) or (record is not None and "missing" not in record):
            merged[question] = {"q": question, "lab": logs}
    return merged, notes


def _record_call(question, detail: list | dict | None) -> str:
    if question.kind is Kind.CODE:
        return f"record_calls({question.id!r}, {question.function!r}, {detail!r})"
    if question.kind is Kind.LAB:
        return f"record_lab({question.id!r}, {answer_name(question)!r}, {detail['lab']!r}, {detail['traces']!r})"
    return f"record({question.id!r}, {answer_name(question)!r})"


# -- reading what came back (written by code we do not trust) --------------------------------------


def read_records(path: Path) -> dict[str, dict]:
    """The collector's records per question: the last one with a value, else the last one."""
    try:
        raw = read_bytes(path)[:MAX_RESULTS_BYTES]
    except NotGradable:
        return {}
    records: dict[str, dict] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if len(line) > MAX_LINE_CHARS:
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("q"), str):
            continue
        if "missing" in entry and entry["q"] in records and "missing" not in records[entry["q"]]:
            continue  # a later "missing" (a restarted kernel) does not undo an answer handed over before
        records[entry["q"]] = entry
    return records


def read_outputs(path: Path, count: int, cap: int) -> list[list]:
    """Each executed cell's outputs, cleaned: only text, PNG/JPEG images and errors, at most `cap` bytes."""
    empty: list[list] = [[] for _ in range(count)]
    try:
        raw = read_bytes(path)
        if len(raw) > MAX_EXECUTED_BYTES:
            return empty
        nb = json.loads(raw.decode("utf-8"))
        cells = nb["cells"]
    except (NotGradable, ValueError, RecursionError, KeyError, TypeError):
        return empty
    if not isinstance(cells, list) or len(cells) != count:
        return empty
    return [_clean_outputs(cell.get("outputs", []) if isinstance(cell, dict) else [], cap) for cell in cells]


def limit_notes(executed: list[list], cell_timeout_s: float, output_cap_bytes: int) -> list[str]:
    """Notes for the log and the export when the grader's limits cut a run: cells stopped at the time
    limit (sandbox_runner's TIMEOUT_NOTE), killed kernels, output dropped (its CUT_NOTE, or ours), and
    each cap reached (its CAP_NOTE: "memory limit of 2 GiB reached in 1 cell(s)")."""
    stopped = died = cut = 0
    caps: dict[str, int] = {}
    for outputs in executed:
        errors = [(out.get("ename"), _text(out.get("evalue"))) for out in outputs if out.get("output_type") == "error"]
        streams = [_text(out.get("text")) for out in outputs if out.get("output_type") == "stream"]
        stopped += any(name == "TimeoutError" and value.startswith(TIMED_OUT) for name, value in errors)
        died += any(name == "DeadKernel" for name, _ in errors)
        cut += any(OUTPUT_CUT in text for text in streams)
        for what in {m.group(1) for name, value in errors if name == "CapReached" and (m := CAP_REACHED.match(value))}:
            caps[what] = caps.get(what, 0) + 1
    notes = [f"{what} reached in {n} cell(s)" for what, n in caps.items()]
    if stopped:
        notes.append(f"{stopped} cell(s) stopped at the time limit of {cell_timeout_s:g} s per cell")
    if died:
        notes.append(f"the kernel died in {died} cell(s) and was started again")
    if cut:
        notes.append(f"output cut at {output_cap_bytes:,} bytes in {cut} cell(s)")
    return notes


def _text(value: Any) -> str:
    if isinstance(value, list):
        value = "".join(item for item in value if isinstance(item, str))
    return value if isinstance(value, str) else ""


def _clean_outputs(outputs: Any, cap: int) -> list:
    kept, used = [], 0
    for out in outputs if isinstance(outputs, list) else []:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            name = out.get("name") if out.get("name") in ("stdout", "stderr") else "stdout"
            item = nbformat.v4.new_output("stream", name=name, text=_text(out.get("text"))[:cap])
        elif kind in ("display_data", "execute_result") and isinstance(out.get("data"), dict):
            data = {mime: _text(out["data"][mime])[:cap] for mime in _KEEP_MIME if mime in out["data"]}
            if not data:
                continue
            item = nbformat.v4.new_output("display_data", data=data)
        elif kind == "error":
            trace = out.get("traceback") if isinstance(out.get("traceback"), list) else []
            item = nbformat.v4.new_output(
                "error",
                ename=_text(out.get("ename"))[:200],
                evalue=_text(out.get("evalue"))[:2000],
                traceback=[_text(line)[:2000] for line in trace[:100]],
            )
        else:
            continue
        used += len(json.dumps(item))
        if used > cap:
            kept.append(
                nbformat.v4.new_output(
                    "stream", name="stdout", text=f"[... output cut at {cap:,} bytes by the grader ...]\n"
                )
            )
            break
        kept.append(item)
    return kept


# -- the graded notebook, for formgrader and feedback ----------------------------------------------


def _escape_markdown(text: str) -> str:
    """A student's Markdown with raw HTML and script links made inert (formgrader shows it in your browser)."""
    text = html.escape(text, quote=False)
    return re.sub(r"(?i)\]\(\s*(javascript|vbscript|data)\s*:", r"](unsafe-\1:", text)


def _verdict_output(decision: Decision) -> nbformat.NotebookNode:
    text = decision.verdict + (f"\n{decision.feedback}" if decision.feedback else "")
    if decision.right:
        return nbformat.v4.new_output("stream", name="stdout", text=text + "\n")
    return nbformat.v4.new_output("error", ename="Not right", evalue=decision.verdict, traceback=text.splitlines())


# The graded notebook is what feedback shows: the set-up's ~40 lines of helpers would open every
# page, so they stand as one line (the cell and its nbgrader metadata stay, for formgrader).
SETUP_IN_FEEDBACK = "# Set-up (locked): the course's helpers and your student id, as in your notebook (not shown here)."
# nbgrader shows a written answer's score as 0 until it is graded by hand; this line says why.
BY_HAND = (
    "*Graded by hand.* Your instructor grades written answers after the automatic grading: until this "
    "one is graded, its score on this page reads 0."
)


def graded_notebook(
    source: Path,
    sub: Submission,
    outputs: dict[int, list],
    decisions: dict[str, Decision],
    quiz: Quiz,
    course: Course,
    student: str,
) -> nbformat.NotebookNode:
    """The released notebook with this student's answers, outputs and verdicts, for formgrader and feedback."""
    from nbgrader.preprocessors import ClearSolutions

    nb, _ = ClearSolutions().preprocess(nbformat.read(source, as_version=4), {})
    chosen = {indices[-1]: q for q, indices in sub.answers.items()}
    by_question = {q: i for i, q in chosen.items()}
    extras: dict[str, list[int]] = {}
    anchor = "setup"
    for index, cell in enumerate(sub.cells):
        if index in chosen:
            anchor = f"answer_{chosen[index]}"
        elif cell.grade_id:
            anchor = cell.grade_id
        else:
            extras.setdefault(anchor, []).append(index)
    cells = []
    for cell in nb.cells:
        meta = cell.metadata.get("kvcourse", {})
        role, qid = meta.get("role"), meta.get("question", "")
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if role == "answer" and qid in by_question:
            cell.source = sub.cells[by_question[qid]].source
            cell.outputs = outputs.get(by_question[qid], [])
        elif role == "free" and qid in sub.free:
            cell.source = _escape_markdown(sub.free[qid])
        elif role == "setup":
            cell.source = SETUP_IN_FEEDBACK
        elif role == "show":
            text = prompt_for(quiz.question(qid), course.seed(student))
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
        elif role == "test" and qid in decisions:
            cell.outputs = [_verdict_output(decisions[qid])]
        cells.append(cell)
        if role == "free" and qid in decisions and decisions[qid].points is None:
            cells.append(
                nbformat.v4.new_markdown_cell(BY_HAND, metadata={"kvcourse": {"role": "note", "question": qid}})
            )
        for index in extras.get(grade_id, []):
            cells.append(_student_cell(sub, index, outputs))
    nb.cells = cells
    return nb


def _student_cell(sub: Submission, index: int, outputs: dict[int, list]) -> nbformat.NotebookNode:
    cell = sub.cells[index]
    meta = {"kvcourse": {"role": "student"}}
    if cell.cell_type == "code":
        made = nbformat.v4.new_code_cell(cell.source, metadata=meta)
        made.outputs = outputs.get(index, [])
        return made
    return nbformat.v4.new_markdown_cell(_escape_markdown(cell.source), metadata=meta)
