"""Open the course in JupyterLab (what `make lab` runs)."""

from __future__ import annotations

import os
import sys

from kvcourse.syllabus import REPO_ROOT, get_lesson


def lab_command(extra_args: list[str] | None = None) -> list[str]:
    """The command line that serves JupyterLab on the start notebook."""
    start = get_lesson("00").notebook
    # Jupyter refuses to run as root unless told; containers and CI machines often are root.
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    # default_url makes both the browser and a plain visit to the server land on the start notebook.
    return [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={REPO_ROOT}",
            f"--LabApp.default_url=/lab/tree/{start}", *as_root, *(extra_args or [])]


def open_lab(extra_args: list[str] | None = None) -> None:
    """Replace this process with a JupyterLab server rooted at the course folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    command = lab_command(extra_args)
    os.chdir(REPO_ROOT)
    os.execv(command[0], command)
