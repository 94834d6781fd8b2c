"""Check 4: every lesson notebook headless on CUDA in bf16, as tests/lessons/test_notebooks.py runs them.

The switch exists: the lessons load the model with ``load_model()``, whose device "auto" is
$KVCOURSE_DEVICE (else CUDA when present) and whose dtype is $KVCOURSE_DTYPE, which
``kernel_env.headless`` sets. So the lesson kernels get KVCOURSE_DEVICE=cuda and
KVCOURSE_DTYPE=bfloat16; strict mode makes a false ``expect()`` fail the lesson.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

CELL_TIMEOUT_S = 120
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the kernel's traceback is coloured for a terminal


def lesson_paths(names: tuple[str, ...] | None) -> list[Path]:
    """The notebooks under lessons/ (None: all of them), in course order."""
    from kvcourse.syllabus import REPO_ROOT

    paths = sorted((REPO_ROOT / "lessons").glob("*.ipynb"))
    return paths if names is None else [p for p in paths if p.stem in names]


def run_lesson(path: Path, workdir: Path) -> None:
    """Execute one notebook top to bottom on CUDA in bf16; raises (naming the cell) on any error."""
    import nbformat
    from nbclient import NotebookClient

    from kvcourse.kernel_env import headless

    nb = nbformat.read(path, as_version=4)
    env = {**headless(workdir / "progress", "bfloat16", strict=True), "KVCOURSE_DEVICE": "cuda"}
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=env)


def check_lessons(names: tuple[str, ...] | None, budget_s: float) -> list[dict]:
    """Per lesson: passed or failed (with the error's last line) and seconds; none started past the budget."""
    rows, spent = [], 0.0
    for path in lesson_paths(names):
        if spent > budget_s:
            rows.append({"lesson": path.stem, "ok": None, "skipped": f"time budget of {budget_s:.0f} s spent"})
            print(f"  {path.stem}: not run (time budget of {budget_s:.0f} s spent)", flush=True)
            continue
        start = time.perf_counter()
        error = None
        with tempfile.TemporaryDirectory() as tmp:
            try:
                run_lesson(path, Path(tmp))
            except Exception as exc:  # a failing lesson is a result, and the next lesson still runs
                lines = ANSI_COLOUR.sub("", str(exc)).strip().splitlines() or [""]
                error = f"{type(exc).__name__}: {lines[-1]}"
        seconds = time.perf_counter() - start
        spent += seconds
        rows.append({"lesson": path.stem, "ok": error is None, "seconds": round(seconds, 1), "error": error})
        print(
            f"  {path.stem}: {'passed' if error is None else 'FAILED'} in {seconds:.1f} s"
            + (f" ({error})" if error else ""),
            flush=True,
        )
    ran = [r for r in rows if r["ok"] is not None]
    print(f"  {sum(r['ok'] for r in ran)}/{len(ran)} lessons passed, {len(rows) - len(ran)} not run", flush=True)
    return rows
