"""Reading a submitted notebook, damaged or not: which cell answers which question (issue 15).

A student's notebook is never trusted and never required to be intact. Its cells are matched to
the assignment's template (the instructor's source notebook, solutions cleared), in this order:
nbgrader's grade_id in the cell's metadata, then the cell id `grade init` gave it, then its
content (a locked cell's exact text; a code cell that assigns ``answer_<id>`` or defines the
question's function; a Markdown cell right under a free-response prompt). A file that is not valid
JSON is read cell by cell where its cell objects can still be parsed. Locked cells always come from
the template: an edited or deleted one is simply put back. What could not be found is said in one
line, never as a traceback.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 20_000_000


class NotGradable(Exception):
    """The submission cannot be read at all; the message is the one-line reason."""


@dataclass(frozen=True)
class TemplateCell:
    """One cell of the assignment as released (from the instructor's source notebook)."""

    grade_id: str
    role: str  # intro, setup, prompt, show, answer, test, free
    question: str
    cell_type: str
    source: str
    points: float = 0.0


@dataclass
class StudentCell:
    cell_type: str
    source: str
    grade_id: str = ""  # the template cell it was matched to ("" for the student's own cells)
    outputs_index: int = -1


@dataclass
class Submission:
    """A submission's cells in the student's order, matched to the template, and what was noticed."""

    cells: list[StudentCell]
    answers: dict[str, list[int]] = field(default_factory=dict)  # question -> indices of its answer cells
    free: dict[str, str] = field(default_factory=dict)  # question -> the free-response text
    notes: list[str] = field(default_factory=list)


def template_cells(source_notebook: Path) -> list[TemplateCell]:
    """The assignment as students received it: the source notebook with solutions cleared."""
    from nbgrader.preprocessors import ClearSolutions

    nb = nbformat.read(source_notebook, as_version=4)
    released, _ = ClearSolutions().preprocess(nb, {})
    cells = []
    for cell in released.cells:
        meta = cell.metadata.get("kvcourse", {})
        grader = cell.metadata.get("nbgrader", {})
        if "role" not in meta:
            continue  # a cell the instructor added to the source: shown, never matched
        cells.append(
            TemplateCell(
                grader.get("grade_id", ""),
                meta["role"],
                meta.get("question", ""),
                cell.cell_type,
                cell.source,
                float(grader.get("points", 0)),
            )
        )
    return cells


def read_bytes(path: Path) -> bytes:
    """The submitted file, refusing links, non-files and anything larger than MAX_NOTEBOOK_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise NotGradable("no notebook in the submission") from None
    except OSError as err:
        raise NotGradable(f"the notebook cannot be opened ({err.strerror}; a link?)") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotGradable("the notebook is not a regular file")
        raw = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise NotGradable(f"the notebook is larger than {MAX_NOTEBOOK_BYTES // 1_000_000} MB")
    return raw


def _text(source: object) -> str | None:
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return None


def _cells_from_json(data: object) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("worksheets"), list) and data["worksheets"]:
        data = data["worksheets"][0]  # an nbformat 3 file
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotGradable("not a notebook (no list of cells)")
    cells = []
    for cell in data["cells"]:
        if not isinstance(cell, dict):
            continue
        source = _text(cell.get("source", cell.get("input", "")))
        kind = cell.get("cell_type")
        if source is None or kind not in ("code", "markdown", "raw"):
            continue
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        grader = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
        grade_id = grader.get("grade_id") if isinstance(grader.get("grade_id"), str) else ""
        cell_id = cell.get("id") if isinstance(cell.get("id"), str) else ""
        cells.append(
            {
                "cell_type": kind,
                "source": source,
                "grade_id": grade_id,
                "id": cell_id,
                "printed": _printed(cell.get("outputs")),
            }
        )
    return cells


def _printed(outputs: object) -> str:
    """What a cell printed when the student ran it (its stream outputs), as one text; "" for none."""
    if not isinstance(outputs, list):
        return ""
    texts = [
        _text(out.get("text", "")) for out in outputs if isinstance(out, dict) and out.get("output_type") == "stream"
    ]
    return "".join(text for text in texts if text)


_SHOWN_ID = re.compile(r"^Your student id: (.+)$", re.M)


def shown_student_id(cells: list[dict]) -> str | None:
    """The student id the set-up cell printed when the student ran it: the id their values were drawn for.

    None when the notebook holds no such output (never run, outputs cleared, or unreadable JSON).
    """
    for cell in cells:
        if cell.get("grade_id") == "setup" or cell.get("id") == "setup":
            found = _SHOWN_ID.findall(cell.get("printed", ""))
            return found[-1].strip() if found else None
    return None


_CELL = re.compile(
    r'"cell_type"\s*:\s*"(code|markdown|raw)"(.*?)"source"\s*:\s*(\[(?:\s*"(?:[^"\\]|\\.)*"\s*,?)*\s*\]'
    r'|"(?:[^"\\]|\\.)*")',
    re.S,
)


def _cells_from_broken_json(text: str) -> list[dict]:
    """Whatever cell objects can still be read from a file that is not valid JSON as a whole."""
    cells = []
    for match in _CELL.finditer(text):
        try:
            source = _text(json.loads(match.group(3)))
        except ValueError:
            continue
        if source is None:
            continue
        between = match.group(2)
        grade_id = re.search(r'"grade_id"\s*:\s*"([^"\\]{1,80})"', between)
        cell_id = re.search(r'"id"\s*:\s*"([^"\\]{1,80})"', between)
        cells.append(
            {
                "cell_type": match.group(1),
                "source": source,
                "grade_id": grade_id.group(1) if grade_id else "",
                "id": cell_id.group(1) if cell_id else "",
            }
        )
    return cells


def read_cells(path: Path) -> tuple[list[dict], list[str]]:
    """(cells, notes) of a submitted notebook; NotGradable with a one-line reason if none can be read."""
    raw = read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotGradable("not a notebook (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        cells = _cells_from_broken_json(text)
        if not cells:
            raise NotGradable("not a notebook (invalid JSON)") from None
        return cells, [f"the file is not valid JSON; {len(cells)} cells could still be read from it"]
    return _cells_from_json(data), []


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _assigns(name: str) -> re.Pattern:
    return re.compile(
        rf"(?m)^[ \t]*(?:(?:def|class)[ \t]+{re.escape(name)}[ \t]*[(:]|(?:[A-Za-z_][\w \t]*,[ \t]*)?"
        rf"{re.escape(name)}[ \t]*(?::[^=\n]*)?=(?!=))"
    )


def match_cells(raw_cells: list[dict], template: list[TemplateCell], names: dict[str, str]) -> Submission:
    """Match a submission's cells to the template; ``names`` maps question -> its answer variable."""
    by_id = {cell.grade_id: cell for cell in template if cell.grade_id}
    locked_text = {
        _normal(cell.source): cell.grade_id
        for cell in template
        if cell.role in ("intro", "setup", "prompt", "show", "test")
    }
    patterns = {question: _assigns(name) for question, name in names.items()}
    sub = Submission(cells=[])
    found_by = {"metadata": 0, "id": 0, "content": 0}
    seen: set[str] = set()
    for raw in raw_cells:
        grade_id, how = "", ""
        if raw["grade_id"] in by_id:
            grade_id, how = raw["grade_id"], "metadata"
        elif raw["id"] in by_id:
            grade_id, how = raw["id"], "id"
        elif _normal(raw["source"]) in locked_text:
            grade_id, how = locked_text[_normal(raw["source"])], "content"
        if grade_id and grade_id in seen and by_id[grade_id].role != "answer":
            grade_id = ""  # a duplicated locked cell: the first one stands for it
        template_cell = by_id.get(grade_id)
        if template_cell is not None and template_cell.cell_type != raw["cell_type"]:
            grade_id, template_cell = "", None  # a cell whose type was changed is the student's own
        if grade_id:
            seen.add(grade_id)
            found_by[how] += 1
        index = len(sub.cells)
        sub.cells.append(StudentCell(raw["cell_type"], raw["source"], grade_id))
        if template_cell is not None and template_cell.role == "free":
            sub.free[template_cell.question] = raw["source"]
        if raw["cell_type"] != "code":
            continue
        for question, pattern in patterns.items():
            by_template = (
                template_cell is not None and template_cell.role == "answer" and template_cell.question == question
            )
            if by_template or pattern.search(raw["source"]):
                sub.answers.setdefault(question, []).append(index)
    _free_by_position(sub, template)
    _describe(sub, template, seen, found_by, len(raw_cells))
    return sub


def _free_by_position(sub: Submission, template: list[TemplateCell]) -> None:
    """A free response whose cell lost its metadata and id: the Markdown cell right under its prompt."""
    for cell in template:
        if cell.role != "free" or cell.question in sub.free:
            continue
        prompt = f"prompt_{cell.question}"
        for i, student in enumerate(sub.cells[:-1]):
            after = sub.cells[i + 1]
            if student.grade_id == prompt and after.cell_type == "markdown" and not after.grade_id:
                sub.free[cell.question] = after.source
                after.grade_id = cell.grade_id
                break


def _describe(sub: Submission, template: list[TemplateCell], seen: set[str], found_by: dict, total: int) -> None:
    if total == 0:
        sub.notes.append("the notebook has no cells")
        return
    if found_by["id"] or found_by["content"]:
        sub.notes.append(
            f"nbgrader metadata missing from some cells: {found_by['id']} found by cell id, "
            f"{found_by['content']} by content"
        )
    lost = [
        cell.grade_id
        for cell in template
        if cell.role in ("prompt", "show", "test", "setup") and cell.grade_id not in seen
    ]
    if lost:
        sub.notes.append(
            f"{len(lost)} locked cells were missing and were put back ({', '.join(lost[:4])}"
            f"{', ...' if len(lost) > 4 else ''})"
        )
    edited = [
        cell.grade_id
        for cell in template
        if cell.role in ("prompt", "show", "test", "setup")
        and cell.grade_id in seen
        and not any(s.grade_id == cell.grade_id and _normal(s.source) == _normal(cell.source) for s in sub.cells)
    ]
    if edited:
        sub.notes.append(
            f"{len(edited)} locked cells were edited; graded with the originals "
            f"({', '.join(edited[:4])}{', ...' if len(edited) > 4 else ''})"
        )
    for cell in template:
        if cell.role == "answer" and cell.question not in sub.answers:
            sub.notes.append(f"no answer cell found for {cell.question}")
        if cell.role == "free" and cell.question not in sub.free:
            sub.notes.append(f"no free-response cell found for {cell.question}")
