"""A throw-away sandbox for one submission: Debian's bubblewrap (`bwrap`), no network, capped resources.

What the student's code can see: the system's /usr, a few files of /etc, the Python installation
and the course's own code, all read-only, minus the quizzes package (no bank, no unsealing);
and a private, size-capped /tmp (a tmpfs of the disk cap) holding its home and its folder,
/grading, where the grading notebook is read-only and only two files, out.ipynb and
results.jsonl, are bound through to the grader's copy. So nothing it writes reaches the grader's
disk except those two files (each capped at FILE_SIZE_LIMIT, as every file it writes), and all
it writes is held in memory, counted against its memory cap where a cgroup holds it. It cannot
see the course folder (source/, gradebook.db, instructor/, other students), the exchange or
anyone's home; it has no network, its own process, IPC and UTS namespaces, no capabilities, and
dies with the grader. Its memory, processes and CPU are capped before it starts (confine.py).
For labs B and C, two open files with no name travel in as descriptors: the traces the feeder
serves and the log it writes (kvcourse.labs.feeder); the runner hands them to the feeder and
closes its own copies before the first kernel starts, so no student code holds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .caps import Caps, size_text
from .confine import FILE_SIZE_LIMIT, Confinement, Enforcement, cores_for, enforcement

INSIDE = Path("/grading")  # the submission's folder, a link to SCRATCH/grading
SCRATCH = Path("/tmp")  # its one writable file system: a tmpfs of the disk cap
RUNNER_INSIDE = Path("/kvgrade/sandbox_runner.py")
COUNTERS_INSIDE = Path("/kvgrade/counters")  # the cgroup's counters, read-only, for the runner's notes
RETURNED = ("out.ipynb", "results.jsonl")  # the only files that reach the grader's copy
FEEDER_INSIDE = "/tmp/runtime/kvfeeder.sock"  # where labs B and C's feeder listens (kvcourse.labs.feeder)
MAX_FED_BYTES = 64_000_000  # the feeder's log, read back
__all__ = ["FILE_SIZE_LIMIT", "INSIDE", "Limits", "Run", "bwrap_command", "preflight", "run_submission"]
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "ssl",
    "ca-certificates",
    "alternatives",
    "mime.types",
    "fonts",
    "os-release",
    "matplotlibrc",
)

MISSING_BWRAP = (
    "autograde runs every submission in a bubblewrap sandbox, and `bwrap` is not installed. "
    "Install it (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install "
    "bubblewrap), or, for a trial on your own machine with submissions you trust, pass "
    "--unsafe-no-sandbox."
)


@dataclass(frozen=True)
class Limits:
    """Time and output limits of one submission's run, and its caps on memory, processes, CPU and disk."""

    cell_timeout_s: float = 30.0
    output_cap_bytes: int = 1_000_000
    submission_timeout_s: float = 300.0
    caps: Caps = field(default_factory=Caps)

    def __post_init__(self) -> None:
        if not 0 < self.cell_timeout_s <= 3600:
            raise ValueError(f"the time limit per cell must be between 0 and 3600 s, got {self.cell_timeout_s}")
        if not 1000 <= self.output_cap_bytes <= 10**9:
            raise ValueError(f"the output cap must be between 1 kB and 1 GB, got {self.output_cap_bytes}")
        if self.submission_timeout_s < self.cell_timeout_s:
            raise ValueError("the time limit per submission must be at least the limit per cell")


@dataclass(frozen=True)
class Run:
    """How one sandboxed run ended."""

    seconds: float
    returncode: int | None  # None: killed at the submission's time limit
    log: str  # the runner's own stderr, cut to its end
    reached: dict[str, int] = field(default_factory=dict)  # cap -> times its cgroup counted it reached
    fed: list[dict] = field(default_factory=list)  # the feeder's log (labs B and C): its header, then one run a line


def bwrap_path() -> str | None:
    """The bwrap binary, or None when bubblewrap is not installed."""
    return shutil.which("bwrap")


def _exposed_roots() -> list[Path]:
    """The Python installation and the course's code: what the kernel needs to start and import."""
    import importlib.util

    roots = {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots |= {Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != Path.cwd().resolve()}
    roots.add(Path(os.path.realpath(sys.executable)).parent.parent)
    spec = importlib.util.find_spec("kvcourse")
    if spec and spec.submodule_search_locations:
        roots.add(Path(next(iter(spec.submodule_search_locations))).parent)  # the repository, for an editable install
    # Never a whole shared folder: /tmp or / would expose other students and the gradebook.
    roots = {root.resolve() for root in roots if root.exists()} - {Path("/"), Path("/tmp"), Path.home()}
    return sorted(root for root in roots if not any(other != root and other in root.parents for other in roots))


def quizzes_dir() -> Path:
    """The folder of the quizzes package (hidden in the sandbox: the bank and the unsealing code live here)."""
    return Path(__file__).resolve().parent.parent  # quizzes/, not this grading/ folder inside it


def runner_path() -> Path:
    """sandbox_runner.py, beside this file (bound into the sandbox on its own, at RUNNER_INSIDE)."""
    return Path(__file__).resolve().with_name("sandbox_runner.py")


def bwrap_command(
    copy: Path,
    hidden: list[Path],
    command: list[str],
    env: dict[str, str],
    *,
    disk_bytes: int | None = None,
    counters: dict[str, str] | None = None,
) -> list[str]:
    """The bwrap command line that runs `command` (in the sandbox's terms) on the copy (see the module docstring)."""
    cmd = [
        bwrap_path() or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            cmd += ["--ro-bind", str(path), str(path)]
    for name in _ETC:
        cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # The private /tmp first: a course or virtual environment that itself lives under /tmp is bound on top.
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    if disk_bytes is not None:
        cmd += ["--size", str(disk_bytes)]
    folder = SCRATCH / "grading"
    cmd += [
        "--tmpfs",
        str(SCRATCH),
        "--dir",
        "/tmp/home",
        "--dir",
        "/tmp/runtime",
        "--dir",
        str(folder),
        "--symlink",
        str(folder),
        str(INSIDE),
    ]
    roots = _exposed_roots()
    for root in roots:
        cmd += ["--ro-bind", str(root), str(root)]
    for path in [quizzes_dir(), *hidden]:
        path = path.resolve()
        if any(path == root or root in path.parents for root in roots) and path.exists():
            cmd += ["--tmpfs", str(path), "--remount-ro", str(path)]  # an empty, read-only folder instead
    cmd += [
        "--ro-bind",
        str(runner_path()),
        str(RUNNER_INSIDE),
        "--ro-bind-try",
        str(copy / "grading.ipynb"),
        str(folder / "grading.ipynb"),
    ]
    for name in RETURNED:  # bound file by file: the student cannot add files to the grader's disk
        (copy / name).touch()
        cmd += ["--bind", str(copy / name), str(folder / name)]
    for cap, path in (counters or {}).items():
        cmd += ["--ro-bind", path, str(COUNTERS_INSIDE / cap)]
    cmd += ["--chdir", str(INSIDE)]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd + ["--", *command]


def environment(student: str, home: str, runtime: str) -> dict[str, str]:
    """The only variables the student's code sees (bwrap starts from an empty environment)."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "IPYTHONDIR": f"{home}/.ipython",
        "JUPYTER_RUNTIME_DIR": runtime,
        "JUPYTER_CONFIG_DIR": f"{home}/.jupyter",
        "JUPYTER_PLATFORM_DIRS": "1",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "KVCOURSE_STUDENT_ID": student,
        "NBGRADER_EXECUTION": "autograde",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _runner_caps(confinement: Confinement, *, sandbox: bool) -> str:
    """What the runner needs to say which cap a cell reached: the caps in words, and where their counters are."""
    caps = confinement.caps
    spec: dict = {
        "processes": f"process limit of {caps.processes} tasks",
        "disk": f"disk cap of {size_text(caps.disk_bytes)}",
        "file": f"file size limit of {size_text(FILE_SIZE_LIMIT)}",
        "counters": {
            cap: [str(COUNTERS_INSIDE / cap) if sandbox else path, key]
            for cap, (path, key) in confinement.counters().items()
        },
    }
    if caps.memory_bytes is not None:
        spec["memory"] = caps.memory_text()
    return json.dumps(spec)


def feeder_address(copy: Path, sandbox: bool) -> str:
    """The Unix socket labs B and C's feeder listens on, as the sandboxed kernel names it."""
    return FEEDER_INSIDE if sandbox else str(copy / "kvfeeder.sock")


def _fed_lines(log) -> list[dict]:
    """The feeder's log as it came back: JSON lines, each a dict (written by our code, read defensively)."""
    log.seek(0)
    lines = []
    for line in log.read(MAX_FED_BYTES).decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            lines.append(entry)
    return lines


def run_submission(
    copy: Path,
    student: str,
    limits: Limits,
    hidden: list[Path],
    *,
    sandbox: bool = True,
    slot: int = 0,
    feeder_plan: dict | None = None,
) -> Run:
    """Run copy/grading.ipynb to copy/out.ipynb under the caps, in the sandbox (or, with sandbox=False, as a
    plain subprocess); `slot` tells submissions graded at once apart (which cores they are pinned to).
    `feeder_plan` ({question: {"lab", "traces"}}) is what the feeder serves (labs B and C): it reaches the
    sandbox as an open file with no name, as does the log it writes, which comes back as ``Run.fed``."""
    how = enforcement(limits.caps, sandbox=sandbox)
    with contextlib.ExitStack() as files, Confinement(limits.caps, how, cores_for(slot, limits.caps)) as confinement:
        fds: tuple[int, ...] = ()
        if feeder_plan:
            plan, fed_log = files.enter_context(tempfile.TemporaryFile()), files.enter_context(tempfile.TemporaryFile())
            plan.write(json.dumps(feeder_plan).encode())
            plan.seek(0)
            fds = (plan.fileno(), fed_log.fileno())
        runner_args = [
            "grading.ipynb",
            "out.ipynb",
            "--timeout",
            f"{limits.cell_timeout_s:g}",
            "--output-cap",
            str(limits.output_cap_bytes),
            "--caps",
            _runner_caps(confinement, sandbox=sandbox),
        ]
        if fds:
            runner_args += ["--feeder", f"{feeder_address(copy, sandbox)},{fds[0]},{fds[1]}"]
        if sandbox:
            if bwrap_path() is None:
                raise RuntimeError(MISSING_BWRAP)
            cmd = bwrap_command(
                copy,
                hidden,
                [sys.executable, str(RUNNER_INSIDE), *runner_args],
                environment(student, "/tmp/home", "/tmp/runtime"),
                disk_bytes=limits.caps.disk_bytes,
                counters={cap: path for cap, (path, _) in confinement.counters().items()},
            )
            env, cwd = None, None
        else:  # --unsafe-no-sandbox: the student's code runs with the grader's own rights
            (copy / ".home").mkdir(exist_ok=True)
            env = environment(student, str(copy / ".home"), str(copy / ".home" / "runtime"))
            cmd = [sys.executable, str(runner_path()), *runner_args]
            cwd = copy
        start = time.monotonic()
        # stderr goes to a file, not a pipe: a student writing gigabytes to fd 2 fills a capped file, not our memory
        with tempfile.TemporaryFile() as log:
            process = subprocess.Popen(
                confinement.command(cmd),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                pass_fds=fds,
            )
            try:
                code: int | None = process.wait(timeout=limits.submission_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the whole sandbox: bwrap, the runner, the kernel
                process.wait()
                code = None
            seconds = time.monotonic() - start
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - 4000))
            tail = log.read().decode("utf-8", "replace")
        reached = confinement.reached()
        fed = _fed_lines(fed_log) if fds else []
    return Run(seconds, code, tail, reached, fed)


_PREFLIGHT_PASSED: set[tuple[bool, Caps]] = set()
NO_MEMORY_CAP = (
    "this machine cannot cap a submission's memory ({why}); nothing was graded. Grade where a "
    "cgroup or RLIMIT_DATA holds (Linux; see quizzes/INSTRUCTORS.md), or pass --no-memory-cap for a "
    "trial with submissions you trust."
)


def preflight(limits: Limits, *, sandbox: bool = True) -> Enforcement:
    """How the caps are enforced here; RuntimeError unless a one-cell notebook runs under them (once per
    process) or when the memory cap cannot be enforced: failures are then the submission's."""
    how = enforcement(limits.caps, sandbox=sandbox)
    if limits.caps.memory_bytes is not None and not how.memory:
        raise RuntimeError(NO_MEMORY_CAP.format(why=how.why or sys.platform))
    if (sandbox, limits.caps) in _PREFLIGHT_PASSED:
        return how
    import nbformat

    with tempfile.TemporaryDirectory(prefix="kvgrade-preflight-") as scratch:
        copy = Path(scratch)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('kvgrade ' + 'ready')")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, copy / "grading.ipynb")
        run = run_submission(
            copy, "preflight", Limits(max(limits.cell_timeout_s, 60.0), 10_000, 300.0, limits.caps), [], sandbox=sandbox
        )
        out = copy / "out.ipynb"
        if not out.is_file() or "kvgrade ready" not in out.read_text(encoding="utf-8", errors="replace"):
            tail = " | ".join(run.log.strip().splitlines()[-3:]) or "no message"
            raise RuntimeError(
                f"the grading sandbox cannot run a notebook on this machine under the caps "
                f"({tail[:500]}); nothing was graded"
            )
    _PREFLIGHT_PASSED.add((sandbox, limits.caps))
    return how
