"""Starting and stopping the hub of `kvcourse hub` (cli.py; quizzes/INSTRUCTORS.md).

Finds the proxy and free ports, lays out the hub's folder (state, homes, exchange, and the
instructor's course from `kvcourse grade init` on first start), writes JupyterHub's configuration
(config.py) and runs the hub in the foreground. Ctrl-C stops the hub, which stops every server it
started; anything still alive afterwards that carries the hub's marker is stopped too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kvcourse.hub.config import COURSE_ID, MARKER_ENV, PASSWORDS_ENV, HubSettings, write_config

PROXY = "configurable-http-proxy"
PROXY_VERSION = "5.3.0"  # the Makefile installs this one into .venv
STOP_GRACE_S = 10


def find_proxy() -> str:
    """JupyterHub's proxy: the environment's own (`make proxy`), else one on PATH; else a clear error."""
    own = Path(sys.executable).parent / PROXY
    if own.exists():
        return str(own)
    found = shutil.which(PROXY)
    if found:
        return found
    raise RuntimeError(
        f"kvcourse hub needs JupyterHub's proxy, {PROXY}, which comes from npm. Install Node.js "
        f"and npm (Debian: sudo apt-get install -y nodejs npm) and run `make proxy`, which puts "
        f"{PROXY} {PROXY_VERSION} into .venv; or `npm install -g {PROXY}@{PROXY_VERSION}`."
    )


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


def prepare(settings: HubSettings, lessons: list[str]) -> list[str]:
    """Lay out the hub's folder; create the course on first start. Returns what it did, one line each."""
    from kvcourse.quizzes.grading.nbgrader_export import init_course

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
        raise ValueError(
            f"{config} names another exchange than this hub's ({settings.exchange_dir}): "
            "this folder's course was not made by `kvcourse hub`; give another --dir"
        )
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
        env.update(zip(PASSWORDS_ENV, passwords, strict=True))
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
