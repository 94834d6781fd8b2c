"""The environments a lesson's kernel runs in when the course runs it itself: the tests, the site, the class benchmark.

Two parts, combined as each caller needs:
* ``jupyter_home(home)``: Jupyter's, IPython's and the course's own files (progress) in one folder of
  their own, so a run never reads or writes the learner's;
* ``headless(...)``: nobody at the keyboard: offline, one compute thread, ``predict()`` asks nothing
  (KVCOURSE_HEADLESS), and where ``strict``, a false ``expect()`` raises (KVCOURSE_STRICT), so a
  lesson whose claim fails fails its run instead of printing a verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

HEADLESS_ENV = "KVCOURSE_HEADLESS"
STRICT_ENV = "KVCOURSE_STRICT"


def running_headless() -> bool:
    """Whether this run has nobody at the keyboard (the course's tests, nbgrader): sweeps take their short path.

    Here, with nothing to import, so that a simulator can ask without importing the notebook helpers (and
    through them the quizzes, which the learner's side of a lab never imports)."""
    return bool(os.environ.get(HEADLESS_ENV) or os.environ.get("NBGRADER_EXECUTION"))


def jupyter_home(home: Path) -> dict[str, str]:
    """Variables that put Jupyter's config, data and runtime files, IPython's and the progress file under ``home``."""
    return {
        "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(home / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(home / "jupyter-runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "KVCOURSE_PROGRESS": str(home / "progress"),
    }


def offline(threads: int | None = None) -> dict[str, str]:
    """No model hub, quiet tokenizers, and ``threads`` compute threads (None: OMP_NUM_THREADS as set, else one).

    One thread by default: on a busy shared CPU, two OpenMP threads spin-waiting on each other ran the
    lessons 10-30x slower, and the course's kernels are single-threaded in a class.
    """
    count = os.environ.get("OMP_NUM_THREADS", "1") if threads is None else str(threads)
    return {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": count}


def headless(progress: Path, dtype: str, *, strict: bool, threads: int | None = None) -> dict[str, str]:
    """This process's environment for a kernel nobody watches: offline, ``dtype``, progress in ``progress``.

    With ``strict`` a false ``expect()`` raises (tests, benchmarks); without, it prints its verdict (the site).
    """
    env = {
        **os.environ,
        **offline(threads),
        "KVCOURSE_DTYPE": dtype,
        "KVCOURSE_PROGRESS": str(progress),
        HEADLESS_ENV: "1",
    }
    if strict:
        env[STRICT_ENV] = "1"
    else:
        env.pop(STRICT_ENV, None)
    return env
