"""The real nbgrader command line for the grading tests: the course environment's nbgrader, in a tmp home."""

from __future__ import annotations

import os
import sys
from pathlib import Path

NBGRADER = str(Path(sys.executable).parent / "nbgrader")


def nbgrader_env(tmp: Path) -> dict[str, str]:
    """This process's environment with Jupyter's folders, the home and the progress file under ``tmp``."""
    env = dict(os.environ)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / ".local/share/jupyter"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        KVCOURSE_PROGRESS=str(tmp / "progress"),
    )
    env.pop("NBGRADER_EXECUTION", None)
    env.pop("KVCOURSE_STUDENT_ID", None)
    # jsonschema compiles an IRI grammar at import when rfc3987_syntax is installed: seconds of CPU in every
    # nbgrader command, for a check nbformat never makes. The tests' nbgrader goes without it.
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "rfc3987_syntax.py").write_text("raise ImportError('left out in the tests')\n")
    env["PYTHONPATH"] = str(stubs)
    return env
