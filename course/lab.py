"""Open the course in JupyterLab: the student's lab (what `make lab` runs) or the instructor's.

The student's lab shows the lessons and nothing of nbgrader's authoring tools; the instructor's
(`kvcourse lab --instructor`, quizzes/INSTRUCTORS.md) is rooted at an nbgrader course folder with
formgrader and Create Assignment. Both are configured on the command line and through a settings
folder this module writes under Jupyter's runtime folder: the user's own Jupyter configuration is
never edited.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kvcourse.syllabus import REPO_ROOT, get_lesson

# nbgrader's server side: formgrader, validation, the assignment and course lists.
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
)
# Front-end plugins neither lab loads: the news pop-up and its update check.
QUIET_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)
# The student's lab also drops nbgrader's front end: Create Assignment, the Nbgrader menu, formgrader.
NBGRADER_PLUGINS = ("@jupyter/nbgrader",)


def disabled_plugins(instructor: bool = False) -> list[str]:
    """JupyterLab extensions and plugins the lab starts without (its page_config disabledExtensions)."""
    return [*QUIET_PLUGINS, *([] if instructor else NBGRADER_PLUGINS)]


def disabled_server_extensions(instructor: bool = False) -> list[str]:
    """Jupyter server extensions the lab starts without."""
    return [] if instructor else list(NBGRADER_SERVER_EXTENSIONS)


def settings_dir(instructor: bool = False, *, name: str | None = None, plugins: list[str] | None = None) -> Path:
    """Write the lab's own JupyterLab settings folder (page_config.json, overrides.json) and return it.

    ``name`` and ``plugins`` give another variant its own folder (the hub's student lab, kvcourse.hub.singleuser).
    """
    from jupyter_core.paths import jupyter_runtime_dir

    name = name or ("instructor" if instructor else "student")
    folder = Path(jupyter_runtime_dir()) / "kvcourse-lab" / name
    folder.mkdir(parents=True, exist_ok=True)
    page_config = {"disabledExtensions": disabled_plugins(instructor) if plugins is None else plugins}
    tmp = folder / f"page_config.json.{os.getpid()}"
    tmp.write_text(json.dumps(page_config, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "page_config.json")  # two labs starting at once never read half a file
    # A prediction's input box says what to type in its own prompt line; JupyterLab's grey "↑↓ for
    # history" placeholder in the same box would read as an instruction (issue 32).
    overrides = {"@jupyterlab/notebook-extension:tracker": {"showInputPlaceholder": False}}
    tmp = folder / f"overrides.json.{os.getpid()}"
    tmp.write_text(json.dumps(overrides, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "overrides.json")
    return folder


def find_course(directory: Path | str | None = None) -> Path:
    """The nbgrader course folder for the instructor's lab: ``directory``, else the current one."""
    course = Path(directory or Path.cwd()).expanduser().resolve()
    if not (course / "nbgrader_config.py").is_file():
        raise ValueError(
            f"{course} is not an nbgrader course (it has no nbgrader_config.py). Create one with "
            f"`kvcourse grade init DIR`, then run `kvcourse lab --instructor --course DIR` "
            "(or `cd DIR && kvcourse lab --instructor`)."
        )
    return course


def lab_command(
    extra_args: list[str] | None = None, *, instructor: bool = False, course: Path | None = None
) -> list[str]:
    """The command line that serves the student's lab on the start notebook, or the instructor's on ``course``."""
    if instructor:
        root = find_course(course)
        landing = ["--LabApp.default_url=/lab"]
    else:
        root = REPO_ROOT
        # default_url makes both the browser and a plain visit to the server land on the start notebook.
        landing = [f"--LabApp.default_url=/lab/tree/{get_lesson('00').notebook}"]
    # Jupyter refuses to run as root unless told; containers and CI machines often are root.
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    quiet = quiet_options(disabled_server_extensions(instructor), settings_dir(instructor))
    return [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        f"--ServerApp.root_dir={root}",
        *landing,
        *quiet,
        *as_root,
        *(extra_args or []),
    ]


def quiet_options(server_extensions_off: list[str], settings: Path) -> list[str]:
    """Server options both labs (and the hub's servers) share: extensions off, JupyterLab settings, no news."""
    quiet = [f"--ServerApp.jpserver_extensions={name}=False" for name in server_extensions_off]
    return [
        *quiet,
        f"--LabApp.app_settings_dir={settings}",
        # jupyter_lsp would look for a dozen language servers the course does not use and list
        # the missing ones in the terminal; the front end still asks it for its (empty) status.
        "--LanguageServerManager.autodetect=False",
        "--LabApp.news_url=None",  # no news fetched from the internet
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
    ]


def open_lab(extra_args: list[str] | None = None, *, instructor: bool = False, course: Path | None = None) -> None:
    """Replace this process with a JupyterLab server: the student's, or the instructor's on an nbgrader course."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The environment's own tools first on PATH, activated or not: formgrader runs nbgrader's `alembic`
    # from PATH, and a terminal opened in the lab finds `kvcourse` and `nbgrader`.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    command = lab_command(extra_args, instructor=instructor, course=course)
    # nbgrader reads nbgrader_config.py from the server's working folder: the course root.
    os.chdir(find_course(course) if instructor else REPO_ROOT)
    os.execv(command[0], command)
