"""The page and the table of `kvcourse grade report` (report.py): the same tables as plain text for the
terminal and as one self-contained HTML page, with one figure (an embedded PNG, drawn with matplotlib's
Agg backend), written under the course's instructor/ folder, which is never released.
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from pathlib import Path

from ..model import Kind
from .course import INSTRUCTOR_DIR, Course
from .report import LabFigures, Report, ReportError, short

TOP_COLOURS = 8  # findings with a colour of their own in the figure; the rest share a grey


def tables(report: Report) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, headers, rows) of each table: the ranked findings, then one per question."""
    n = report.num_graded
    ranked = [[str(i), f"{f.share:.0%}", f.question, f.answer, f.meaning] for i, f in enumerate(report.findings, 1)]
    out = [
        (
            "Misconceptions, most common first",
            "" if ranked else "no named wrong option or numeric slip",
            ["#", "share", "question", "answer", "what it means"],
            ranked,
        )
    ]
    for q in report.questions:
        kind = q.question.kind.value
        title = f"{q.question.id} ({kind}, {q.question.points} point{'s' * (q.question.points != 1)}): {q.summary}"
        rows = [[r.answer, f"{r.count / n:.0%}", str(r.count), r.meaning] for r in q.rows]
        out.append(
            (
                title,
                short(q.question.prompt, 110, sentence=False),
                ["answer", "share", "students", "what it means"],
                rows,
            )
        )
    return out


def headline(report: Report) -> str:
    """One sentence: the most common misconception, or that there is none."""
    if not report.findings:
        return "No named misconception: no wrong option, and no wrong number the bank or a simple factor explains."
    top = report.findings[0]
    return f"Most common misconception: {top.question} {top.answer}, {top.share:.0%} of the class: {top.meaning}"


def render_text(report: Report) -> str:
    """The report as plain-text tables for the terminal."""
    lines = [
        f"What the class got wrong: {report.assignment} ({report.title}), {report.num_graded} graded"
        + (f", {report.num_not_graded} could not be graded" if report.num_not_graded else "")
        + ". Shares are of the graded students.",
        headline(report),
    ]
    for title, note, headers, rows in tables(report):
        lines += ["", title] + ([f"  {note}"] if note else [])
        if not rows:
            continue
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers) - 1)]
        for row in [headers, *rows]:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return "\n".join(lines)


_LEGEND = {
    "other": ("another named slip", "#9e9e9e", ""),
    "unexplained": ("unexplained", "#cfcfcf", ""),
    "no answer": ("no answer, unreadable", "#eeeeee", "//"),
    "failed": ("tests or traces failed", "#7f7f7f", ""),
}


def figure_png(report: Report) -> str:
    """Horizontal bars of the share of the class wrong per question, coloured by misconception (base64 PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [q for q in report.questions if q.question.kind is not Kind.FREE]
    colours = {
        f.key: (f"{f.key}: {short(f.meaning, 50)}", f"C{i}", "") for i, f in enumerate(report.findings[:TOP_COLOURS])
    }
    fig = Figure(
        figsize=(9, 2.4 + 0.4 * len(shown) + 0.22 * min(len(report.findings), TOP_COLOURS)), layout="constrained"
    )
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labelled = set()
    for y, q in enumerate(shown):
        left = 0.0
        for row in q.rows:
            if row.right or not row.count or not row.group:
                continue
            name, colour, hatch = colours.get(row.group) or _LEGEND.get(row.group) or _LEGEND["other"]
            share = 100 * row.count / report.num_graded
            ax.barh(
                y,
                share,
                left=left,
                color=colour,
                hatch=hatch,
                edgecolor="white",
                label=None if name in labelled else name,
            )
            labelled.add(name)
            left += share
    ax.set_yticks(range(len(shown)), [q.question.id for q in shown])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the class (%)")
    top = report.findings[0] if report.findings else None
    ax.set_title(
        f"{report.assignment}: {top.key} is the most common misconception ({top.share:.0%})"
        if top
        else f"{report.assignment}: share of the class wrong per question"
    )
    if labelled:  # the legend in the findings' order, then the greys
        order = [name for name, _, _ in [*colours.values(), *_LEGEND.values()]]
        handles = sorted(zip(*ax.get_legend_handles_labels(), strict=True), key=lambda h: order.index(h[1]))
        ax.legend(
            *zip(*handles, strict=True), loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=8, frameon=False
        )
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def lab_figure_png(figures: LabFigures, lab: str) -> str:
    """The class against a lab's lines (base64 PNG): each student's mean figure on the public traces, as a
    histogram, and the baseline's, the reference's (and the oracle's) as vertical lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    values = [*figures.students, *figures.lines.values()]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    ax.hist(figures.students, bins=12, range=(low, high if high > low else low + 1e-6), color="C0", label="students")
    for i, (name, value) in enumerate(figures.lines.items()):
        ax.axvline(value, color=f"C{i + 1}", linestyle="--", label=f"{name} {value:.3g}")
    ax.set_xlabel(f"mean {figures.figure} on the public traces")
    ax.set_ylabel("students")
    ax.set_title(f"{lab}: the class between its lines")
    ax.legend(fontsize=8, frameon=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;"
    "margin:.5em 0 1.5em}td,th{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;"
    "vertical-align:top}tr.right td{background:#eaf6ea}p.note{color:#555;margin:.2em 0}"
)


def render_html(report: Report) -> str:
    """The report as one self-contained page: the same tables, and the figure as an embedded PNG."""
    e = html.escape
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>What the class got wrong: "
        f"{e(report.assignment)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>What the class got wrong: {e(report.assignment)} ({e(report.title)})</h1>",
        f"<p>{report.num_graded} graded"
        + (f", {report.num_not_graded} could not be graded" if report.num_not_graded else "")
        + ". Shares are of the graded students. Instructors only: never release this page.</p>",
        f"<p><strong>{e(headline(report))}</strong></p>",
        f"<figure><img alt='{e('Share of the class wrong per question, coloured by misconception')}' "
        f"src='data:image/png;base64,{figure_png(report)}'></figure>",
    ]
    for i, (title, note, headers, rows) in enumerate(tables(report)):
        parts.append(f"<h2>{e(title)}</h2>" if i == 0 else f"<h3>{e(title)}</h3>")
        if note:
            parts.append(f"<p class='note'>{e(note)}</p>")
        if rows:
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>")
            right = [r.right for r in report.questions[i - 1].rows] if i else [False] * len(rows)
            for row, is_right in zip(rows, right, strict=True):
                parts.append(
                    f"<tr{' class=right' if is_right else ''}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                )
            parts.append("</table>")
        shown = report.questions[i - 1].lab_figures if i else None
        if shown is not None and shown.students:
            alt = f"Students' mean {shown.figure} on the public traces against the lines they are graded between"
            png = lab_figure_png(shown, report.questions[i - 1].question.id)
            parts.append(f"<figure><img alt='{e(alt)}' src='data:image/png;base64,{png}'></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def default_html_path(course: Course, assignment: str) -> Path:
    """Where the page goes: instructor/reports/<assignment>.html, beside the course's secret, never released."""
    return course.directory / INSTRUCTOR_DIR / "reports" / f"{assignment}.html"


def check_html_path(course: Course, path: Path) -> Path:
    """`path`, resolved, unless students could come to see it: inside the course folder but outside
    instructor/ (release/, feedback/, ...), or in the exchange."""
    target = path.expanduser().resolve()
    private = (course.directory / INSTRUCTOR_DIR).resolve()
    places = [(course.directory.resolve(), "the course folder"), (Path(course.exchange).resolve(), "the exchange")]
    for place, name in places:
        if target.is_relative_to(place) and not target.is_relative_to(private):
            raise ReportError(
                f"--html {path}: the report tells what the class answered; write it under {private} "
                f"or outside {name} ({place}), never where students may see it"
            )
    return target


def write_html(report: Report, path: Path) -> Path:
    """Write the page (mode 600, its folder 700 where it is made) and return its path."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    page = render_html(report)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 600, a name of its own
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return path
