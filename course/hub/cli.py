"""`kvcourse hub --users FILE`: a whole class on this machine, on JupyterHub (quizzes/INSTRUCTORS.md).

Checks the users file and the proxy, lays out the hub's folder (state, homes, exchange, and the
instructor's course from `kvcourse grade init` on first start), writes JupyterHub's configuration
(config.py) and runs the hub in the foreground (launch.py). Ctrl-C stops the hub, which stops every
server it started; anything still alive afterwards that carries the hub's marker is stopped too.
"""

from __future__ import annotations

import argparse
import fcntl
from pathlib import Path

from kvcourse.hub.config import HubSettings
from kvcourse.hub.launch import (
    check_port_free,
    find_proxy,
    free_port,
    leftover_processes,
    prepare,
    run_hub,
    stop_processes,
)
from kvcourse.hub.users import load_users, read_passwords

DEFAULT_DIR = Path("~/kvcourse-hub")


def hub_command(args: argparse.Namespace) -> int:
    """`kvcourse hub`: check everything, then run the class's hub in the foreground."""
    from kvcourse.quizzes.grading.nbgrader_export import parse_lessons

    proxy = find_proxy()
    roster = load_users(args.users)
    lessons = parse_lessons(args.lessons)
    passwords = read_passwords(args.password_file) if args.password_file else None
    from kvcourse.models import cache_dir  # imports PyTorch: after the quick checks

    state_dir = Path(args.dir).expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    settings = HubSettings(
        state_dir,
        roster,
        ip=args.ip,
        port=args.port,
        hub_port=free_port(),
        proxy_api_port=free_port(),
        proxy=proxy,
        model_cache=str(cache_dir()),
        passwords=passwords is not None,
        extra_config=str(Path(args.config).expanduser().resolve()) if args.config else "",
    )
    check_port_free(settings.ip, settings.port)
    with open(state_dir / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(
                f"another `kvcourse hub` runs on {state_dir}: stop it first, or give another --dir"
            ) from None
        for line in prepare(settings, lessons):
            print(f"kvcourse hub: {line}")
        leftovers = leftover_processes(state_dir)  # a hub killed with SIGKILL last time
        if leftovers:
            stop_processes(leftovers)
        login = "with the shared passwords" if passwords else "with any password (DummyAuthenticator)"
        if args.config:
            login += f", unless {args.config} sets another authenticator"
        print(
            f"kvcourse hub: {len(roster.instructors)} instructor(s) ({', '.join(roster.instructors)}) and "
            f"{len(roster.students)} student(s) log in at {settings.url} {login}.\n"
            f"kvcourse hub: state in {state_dir}, course in {settings.course_dir}. "
            "Ctrl-C stops the hub and every server.",
            flush=True,
        )
        return run_hub(settings, passwords)


def add_hub(sub: argparse._SubParsersAction) -> None:
    """Register `kvcourse hub` on the command line."""
    p = sub.add_parser(
        "hub",
        help="a whole class on this machine: JupyterHub with the lessons, the assignment "
        "list and formgrader (quizzes/INSTRUCTORS.md)",
    )
    p.add_argument(
        "--users",
        required=True,
        help="the class list: one user a line, `NAME instructor` or `NAME student` (a name alone: student)",
    )
    p.add_argument(
        "--dir",
        default=str(DEFAULT_DIR),
        help=f"the hub's folder: state, homes, exchange, course (default {DEFAULT_DIR})",
    )
    p.add_argument("--ip", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on (default 8000)")
    p.add_argument(
        "--password-file",
        default=None,
        help="lines `student: PASSWORD` (8+ characters, shared by students) and `instructor: PASSWORD` "
        "(32+); without it any password logs in (loopback only)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="your own jupyterhub_config.py, loaded after the course's: a real authenticator or spawner "
        "(quizzes/INSTRUCTORS.md)",
    )
    p.add_argument(
        "--lessons",
        default="00-20",
        help="the course's assignments, when the hub creates it on first start "
        "(default 00-20: the lessons and the three labs)",
    )
    p.set_defaults(func=hub_command)
