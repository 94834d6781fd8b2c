"""`kvcourse hub --users FILE`: a whole class on this machine, on JupyterHub (quizzes/INSTRUCTORS.md).

Checks the users file and the proxy, lays out the hub's folder (state, homes, exchange, and the
instructor's course from `kvcourse grade init` on first start), writes JupyterHub's configuration
(kvcourse.hub_config) and runs the hub in the foreground. Ctrl-C stops the hub, which stops every
server it started; anything still alive afterwards that carries the hub's marker is stopped too.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kvcourse.hub_config import COURSE_ID, MARKER_ENV, PASSWORDS_ENV, HubSettings, write_config
from kvcourse.hub_users import load_users

PROXY = "configurable-http-proxy"
PROXY_VERSION = "5.3.0"  # the Makefile installs this one into .venv
DEFAULT_DIR = Path("~/kvcourse-hub")
STOP_GRACE_S = 10


def find_proxy() -> str:
    """JupyterHub's proxy: the environment's own (`make proxy`), else one on PATH; else a clear error."""
    own = Path(sys.executable).parent / PROXY
    if own.exists():
        return str(own)
    found = shutil.which(PROXY)
    if found:
        return found
    raise RuntimeError(f"kvcourse hub needs JupyterHub's proxy, {PROXY}, which comes from npm. Install Node.js "
                       f"and npm (Debian: sudo apt-get install -y nodejs npm) and run `make proxy`, which puts "
                       f"{PROXY} {PROXY_VERSION} into .venv; or `npm install -g {PROXY}@{PROXY_VERSION}`.")


def free_port(ip: str = "127.0.0.1") -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def check_port_free(ip: str, port: int) -> None:
    """Refuse a --port something already listens on, before the hub fails on it less clearly."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as err:
            raise RuntimeError(f"cannot serve on {ip}:{port} ({err.strerror}): choose another --port") from None


def read_passwords(path: Path | str) -> tuple[str, str]:
    """The students' shared password and the instructors' from a file of `student: ...` and `instructor: ...`."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"no password file at {path}")
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        role, sep, password = line.partition(":")
        role, password = role.strip(), password.strip()
        if not sep or role not in ("student", "instructor"):
            raise ValueError(f"{path} line {number}: write `student: PASSWORD` or `instructor: PASSWORD`")
        found[role] = password
    student, instructor = found.get("student", ""), found.get("instructor", "")
    if len(student) < 8:
        raise ValueError(f"{path}: the students' password (`student: ...`) needs at least 8 characters")
    if len(instructor) < 32 or instructor == student:
        raise ValueError(f"{path}: the instructors' password (`instructor: ...`) needs at least 32 characters and "
                         "must differ from the students' (JupyterHub's rule for an admin's shared password)")
    return student, instructor


def prepare(settings: HubSettings, lessons: list[str]) -> list[str]:
    """Lay out the hub's folder; create the course on first start. Returns what it did, one line each."""
    from kvcourse.quizzes.nbgrader_export import init_course

    done = []
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    settings.homes_dir.mkdir(exist_ok=True)
    settings.exchange_dir.mkdir(exist_ok=True)
    settings.exchange_dir.chmod(0o777)  # nbgrader's rule: everyone releases into or submits through it
    if not settings.token_file.exists():
        settings.token_file.touch(mode=0o600)
        settings.token_file.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
    config = settings.course_dir / "nbgrader_config.py"
    if not config.exists():
        written = init_course(settings.course_dir, lessons, course_id=COURSE_ID, exchange=str(settings.exchange_dir))
        done.append(f"course created in {settings.course_dir}: {len(written)} assignments ({', '.join(written)})")
    elif repr(str(settings.exchange_dir)) not in config.read_text(encoding="utf-8"):
        raise ValueError(f"{config} names another exchange than this hub's ({settings.exchange_dir}): "
                         "this folder's course was not made by `kvcourse hub`; give another --dir")
    return done


def leftover_processes(state_dir: Path) -> list[int]:
    """Processes of this user still carrying this hub's marker (the hub, its proxy, servers, kernels)."""
    marker = f"{MARKER_ENV}={Path(state_dir).resolve()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return found


def stop_processes(pids: list[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL what is still alive after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
            time.sleep(0.2)
        if not pids:
            return


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def run_hub(settings: HubSettings, passwords: tuple[str, str] | None) -> int:
    """Run JupyterHub in the foreground until Ctrl-C (or SIGTERM); then make sure nothing of it is left."""
    config = write_config(settings)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(settings.python).parent), env.get("PATH", "")])
    env[MARKER_ENV] = str(settings.state_dir)
    env.setdefault("HF_HUB_OFFLINE", "1")
    for name in PASSWORDS_ENV:
        env.pop(name, None)
    if passwords:
        env.update(zip(PASSWORDS_ENV, passwords))
    hub = subprocess.Popen([settings.python, "-m", "jupyterhub", "-f", str(config)], cwd=settings.state_dir, env=env)
    forward = signal.signal(signal.SIGTERM, lambda *_: hub.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                code = hub.wait()
                break
            except KeyboardInterrupt:  # Ctrl-C reached the hub as well: wait while it stops its servers
                continue
    finally:
        signal.signal(signal.SIGTERM, forward)
        left = leftover_processes(settings.state_dir)
        if left:
            print(f"kvcourse hub: stopping {len(left)} processes the hub left behind", file=sys.stderr)
            stop_processes(left)
    return 0 if code in (0, -signal.SIGINT, -signal.SIGTERM) else code


def hub_command(args: argparse.Namespace) -> int:
    """`kvcourse hub`: check everything, then run the class's hub in the foreground."""
    from kvcourse.quizzes.nbgrader_export import parse_lessons

    proxy = find_proxy()
    roster = load_users(args.users)
    lessons = parse_lessons(args.lessons)
    passwords = read_passwords(args.password_file) if args.password_file else None
    from kvcourse.models import cache_dir  # imports PyTorch: after the quick checks

    state_dir = Path(args.dir).expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    settings = HubSettings(state_dir, roster, ip=args.ip, port=args.port, hub_port=free_port(),
                           proxy_api_port=free_port(), proxy=proxy, model_cache=str(cache_dir()),
                           passwords=passwords is not None,
                           extra_config=str(Path(args.config).expanduser().resolve()) if args.config else "")
    check_port_free(settings.ip, settings.port)
    with open(state_dir / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another `kvcourse hub` runs on {state_dir}: stop it first, or give another --dir") from None
        for line in prepare(settings, lessons):
            print(f"kvcourse hub: {line}")
        leftovers = leftover_processes(state_dir)  # a hub killed with SIGKILL last time
        if leftovers:
            stop_processes(leftovers)
        login = "with the shared passwords" if passwords else "with any password (DummyAuthenticator)"
        if args.config:
            login += f", unless {args.config} sets another authenticator"
        print(f"kvcourse hub: {len(roster.instructors)} instructor(s) ({', '.join(roster.instructors)}) and "
              f"{len(roster.students)} student(s) log in at {settings.url} {login}.\n"
              f"kvcourse hub: state in {state_dir}, course in {settings.course_dir}. "
              "Ctrl-C stops the hub and every server.", flush=True)
        return run_hub(settings, passwords)


def add_hub(sub: argparse._SubParsersAction) -> None:
    """Register `kvcourse hub` on the command line."""
    p = sub.add_parser("hub", help="a whole class on this machine: JupyterHub with the lessons, the assignment "
                                   "list and formgrader (quizzes/INSTRUCTORS.md)")
    p.add_argument("--users", required=True,
                   help="the class list: one user a line, `NAME instructor` or `NAME student` (a name alone: student)")
    p.add_argument("--dir", default=str(DEFAULT_DIR),
                   help=f"the hub's folder: state, homes, exchange, course (default {DEFAULT_DIR})")
    p.add_argument("--ip", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on (default 8000)")
    p.add_argument("--password-file", default=None,
                   help="lines `student: PASSWORD` (8+ characters, shared by students) and `instructor: PASSWORD` "
                        "(32+); without it any password logs in (loopback only)")
    p.add_argument("--config", default=None,
                   help="your own jupyterhub_config.py, loaded after the course's: a real authenticator or spawner "
                        "(quizzes/INSTRUCTORS.md)")
    p.add_argument("--lessons", default="00-17",
                   help='the course\'s assignments, when the hub creates it on first start (default 00-17)')
    p.set_defaults(func=hub_command)
