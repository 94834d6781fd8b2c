"""One student of the class benchmark: the student's lab server and a kernel running a lesson, and their memory.

A student is `kvcourse lab` (the command `make lab` runs: a Jupyter server with JupyterLab, as the
student's single-user server in a hub) on a free loopback port with a token, with Jupyter's folders,
IPython's and the progress file in a tmp folder of its own. Opening a notebook is done as JupyterLab
does it, by creating a session through the server's REST API (the server starts the kernel and
watches its messages); the cells are then sent to that kernel in order, over its connection file.

Memory is read from /proc/PID/smaps_rollup. PSS (proportional set size) charges each shared page to
the processes mapping it in equal parts, so the PSS of every process on a machine adds up to the
memory really in use: the libraries that every student's kernel maps (torch, numpy, Python) are
counted once in the total, not once per student. RSS counts every mapped page in full, so a sum of
RSS over students counts those libraries N times; it is the right figure for one container alone
(what a memory cgroup may be charged) and is reported beside PSS.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat

from kvcourse.hub.launch import free_port
from kvcourse.kernel_env import headless, jupyter_home
from kvcourse.models import cache_dir
from kvcourse.syllabus import REPO_ROOT

START_TIMEOUT_S = 180
CELL_TIMEOUT_S = 900  # one cell on a shared, oversubscribed 2-core machine


class LessonError(RuntimeError):
    """A cell of the lesson failed in the student's kernel; the message names the cell and the error."""


@dataclass(frozen=True)
class Memory:
    """PSS and RSS of a set of processes, in bytes."""

    pss: int = 0
    rss: int = 0

    def __add__(self, other: Memory) -> Memory:
        return Memory(self.pss + other.pss, self.rss + other.rss)


def process_memory(pid: int) -> Memory:
    """PSS and RSS of one process from /proc/PID/smaps_rollup; zero for a process that has gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return Memory()
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Pss", "Rss"):
            fields[key] = int(value.split()[0]) * 1024  # smaps reports kB
    return Memory(fields.get("Pss", 0), fields.get("Rss", 0))


def descendants(pid: int) -> list[int]:
    """Every process started by ``pid``, at any depth (its kernels), read from /proc."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            found += children
            todo += children
    return found


def mem_available() -> int:
    """The machine's MemAvailable from /proc/meminfo, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def student_env(home: Path) -> dict[str, str]:
    """A student whose Jupyter, IPython and progress live in ``home``; one compute thread, as the course's kernels.

    Headless and strict: predict() asks nothing (the student's guesses are not what is measured) and a false
    expect() fails the run, so a broken lesson never yields a figure. float32, the CPU default, stated.
    """
    return {
        **headless(home / "progress", "float32", strict=True, threads=1),
        **jupyter_home(home),
        "KVCOURSE_CACHE": str(cache_dir()),
    }  # the converted model, shared read-only as in the image


class Student:
    """One student's lab server and the kernel of one notebook: start(), run(), memory(), stop()."""

    def __init__(self, notebook: Path) -> None:
        self.notebook = notebook
        self.home = Path(tempfile.mkdtemp(prefix="kvcourse-class-"))
        self.port, self.token = free_port(), f"class-bench-{os.getpid()}-{id(self)}"
        self.server: subprocess.Popen | None = None
        self.client = None
        self.kernel_id: str | None = None
        self._log = None

    # -- the server and its kernel

    def start(self) -> None:
        """Start the student's lab, open the notebook's session (the server starts its kernel) and connect."""
        from jupyter_client import BlockingKernelClient

        kvcourse = Path(sys.executable).with_name("kvcourse")
        command = [
            str(kvcourse),
            "lab",
            "--no-browser",
            "--port",
            str(self.port),
            "--token",
            self.token,
            "--",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port_retries=0",
            f"--FileCheckpoints.root_dir={self.home / 'checkpoints'}",
        ]
        self._log = open(self.home / "lab.log", "w", encoding="utf-8")  # noqa: SIM115 - written while it runs
        self.server = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=student_env(self.home),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_for_server()
        # Opened from lessons/ as a student opens a lesson: the kernel's working folder is lessons/.
        path = f"lessons/{self.notebook.name}"
        session = self._api(
            "POST",
            "/api/sessions",
            {"path": path, "name": self.notebook.name, "type": "notebook", "kernel": {"name": "python3"}},
        )
        self.kernel_id = session["kernel"]["id"]
        client = BlockingKernelClient()
        client.load_connection_file(str(self.home / "jupyter-runtime" / f"kernel-{self.kernel_id}.json"))
        client.start_channels()
        self.client = client
        self._wait_for_kernel()

    def _wait_for_kernel(self) -> None:
        """Ask for kernel_info until the kernel answers on shell and iopub; dead only when its server says so.

        Not jupyter_client's wait_for_ready: a client without a KernelManager judges the kernel dead after
        one second without a heartbeat, which a kernel importing torch on a loaded 2-core machine can miss.
        """
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.client.kernel_info()
            try:
                reply = self.client.get_shell_msg(timeout=1)
            except queue.Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:  # iopub is subscribed once it carries the status messages of that request
                    self.client.get_iopub_msg(timeout=0.5)
                    return
                except queue.Empty:
                    continue
            state = self._api("GET", f"/api/kernels/{self.kernel_id}").get("execution_state")
            if state == "dead":
                raise RuntimeError(
                    f"the kernel of {self.notebook.name} died while starting; the lab's log: "
                    f"{(self.home / 'lab.log').read_text(errors='replace')[-2000:]}"
                )
        raise RuntimeError(f"the kernel of {self.notebook.name} did not answer within {START_TIMEOUT_S} s")

    def _api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"{}")

    def _wait_for_server(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self._api("GET", "/api/status")
                return
            except OSError:
                if self.server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the student's lab did not start (exit {self.server.poll()}); its log: "
                        f"{(self.home / 'lab.log').read_text(errors='replace')[-2000:]}"
                    ) from None
                time.sleep(0.5)

    # -- the lesson

    def run(self) -> float:
        """Run every code cell of the notebook in the kernel, in order; the wall time in seconds."""
        nb = nbformat.read(self.notebook, as_version=4)
        start = time.perf_counter()
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and cell.source.strip():
                self._run_cell(index, cell.source)
        return time.perf_counter() - start

    def _run_cell(self, index: int, source: str) -> None:
        errors: list[str] = []

        def collect(msg: dict) -> None:
            if msg["msg_type"] == "error":
                errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

        reply = self.client.execute_interactive(source, timeout=CELL_TIMEOUT_S, output_hook=collect, allow_stdin=False)
        if reply["content"]["status"] != "ok" or errors:
            raise LessonError(
                f"{self.notebook.name} cell {index} failed in the student's kernel: {errors or reply['content']}"
            )

    # -- memory and stopping

    def pids(self) -> tuple[int, list[int]]:
        """The server's pid and its kernel's (with anything the kernel started)."""
        return self.server.pid, descendants(self.server.pid)

    def memory(self) -> tuple[Memory, Memory]:
        """(server, kernel) memory now."""
        server, kernels = self.pids()
        total = Memory()
        for pid in kernels:
            total += process_memory(pid)
        return process_memory(server), total

    def stop(self) -> None:
        """Stop the kernel's channels, then the server with everything it started."""
        if self.client is not None:
            self.client.stop_channels()
        if self.server is not None and self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait()
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)
