"""How this machine enforces a submission's caps (said by the preflight), and one submission's confinement.

Where the grader can make a cgroup (cgroups.py) the memory cap holds for the whole submission,
every process together, with processes and CPU time capped there too. Elsewhere it falls back to
resource limits: RLIMIT_DATA per process, RLIMIT_NPROC for processes (which root is exempt from),
and CPU affinity. In both, each process also gets RLIMIT_DATA at the memory cap, so the usual
memory hog (one big array) fails in its cell with a MemoryError and the kernel lives on; the
cgroup is what stops several processes that each stay below it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import cgroups
from .caps import Caps, size_text

FILE_SIZE_LIMIT = 256 * 2**20  # bytes, per file written inside the sandbox
_FOUND: dict[str, tuple] = {}  # via -> (backend, why): one probe per process


def _backend(via: str) -> tuple[cgroups.CgroupV1 | cgroups.CgroupV2 | None, str]:
    if via == "rlimits":
        return None, "rlimits asked for"
    if via not in _FOUND:
        _FOUND[via] = cgroups.find() if sys.platform.startswith("linux") else (None, f"no cgroups on {sys.platform}")
    backend, why = _FOUND[via]
    if backend is None and via == "cgroup":
        raise RuntimeError(f"caps via a cgroup were asked for, and none can be made here: {why}")
    return backend, why


def _user_tasks() -> int:
    """Processes and threads of this user now: RLIMIT_NPROC counts them all, not one submission's."""
    uid, tasks = os.getuid(), 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid:
                tasks += len(os.listdir(proc / "task"))
        except OSError:
            continue
    return tasks


_NPROC_PROBE = (
    "import os, resource, sys, threading\nlimit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))\n"
    "threads = [threading.Thread(target=lambda: None) for _ in range(8)]\n"
    "[t.start() for t in threads]\n[t.join() for t in threads]\npid = os.fork()\n"
    "os._exit(0) if pid == 0 else os.waitpid(pid, 0)\n"
)
_NPROC_OK: dict[int, bool] = {}


def _nproc_holds(extra: int) -> bool:
    """Whether RLIMIT_NPROC set from the tasks this user runs *here* still lets a process start threads.

    The kernel counts a user's tasks machine-wide: in a container whose user id others share (a
    Kubernetes node running every user's pod as uid 1000), the count it sees is far above ours, and a
    limit from ours would refuse every fork. Then processes are left to the container's own pids limit.
    """
    if extra not in _NPROC_OK:
        try:
            probe = subprocess.run(
                [sys.executable, "-I", "-S", "-c", _NPROC_PROBE, str(_user_tasks() + extra)],
                capture_output=True,
                timeout=30,
            )
            _NPROC_OK[extra] = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _NPROC_OK[extra] = False
    return _NPROC_OK[extra]


@dataclass(frozen=True)
class Enforcement:
    """How each cap is enforced on this machine ('' where it is not)."""

    via: str  # "cgroup v2", "cgroup v1" or "rlimits"
    memory: str
    processes: str
    cpu: str
    disk: str
    why: str  # why there is no cgroup, when via is "rlimits"
    backend: cgroups.CgroupV1 | cgroups.CgroupV2 | None = None

    def lines(self) -> list[str]:
        lines = [
            f"caps per submission, enforced by {self.via}" + (f" (no cgroup: {self.why})" if self.why else ""),
            f"  memory:    {self.memory or 'NOT CAPPED'}",
            f"  processes: {self.processes or 'NOT CAPPED'}",
            f"  CPU:       {self.cpu}",
            f"  disk:      {self.disk}",
        ]
        return lines


def enforcement(caps: Caps, *, sandbox: bool = True) -> Enforcement:
    """What this machine enforces of `caps` (a throw-away cgroup is made and removed the first time)."""
    backend, why = _backend(caps.via)
    cores = f"{caps.num_cores} core{'s' * (caps.num_cores > 1)}"
    per_file = f"each file at most {size_text(FILE_SIZE_LIMIT)}"
    disk = (
        f"{size_text(caps.disk_bytes)} for its folder and /tmp together (in memory), {per_file}"
        if sandbox
        else f"{per_file}; no total without the sandbox"
    )
    memory = "" if caps.memory_bytes is None else size_text(caps.memory_bytes)
    if backend is not None:
        kind = backend.kind
        has_pids = isinstance(backend, cgroups.CgroupV2) or backend.pids is not None
        processes = f"{caps.processes} tasks at once, threads included ({kind} pids)" if has_pids else ""
        cpu = (
            f"{caps.cpus:g} core's worth of CPU time, all its processes together ({kind} cpu quota)"
            if backend.has_cpu
            else f"pinned to {cores} (CPU affinity; no cpu controller here, so it could widen it)"
        )
        if memory:
            memory = f"{memory} for the whole submission, all its processes together ({kind})"
        return Enforcement(kind, memory, processes, cpu, disk, "", backend)
    if not sys.platform.startswith("linux") or os.geteuid() == 0 or not _nproc_holds(caps.processes):
        processes = ""  # the kernel never applies RLIMIT_NPROC to root; elsewhere it may count other containers
    else:
        processes = f"{caps.processes} tasks more than your user runs now (RLIMIT_NPROC counts all of your processes)"
    if memory and sys.platform.startswith("linux"):
        memory = f"{memory} per process (RLIMIT_DATA): several processes together can use more"
    elif memory:
        memory = ""  # macOS and others do not apply RLIMIT_DATA to mmap
    cpu = f"pinned to {cores} (CPU affinity; without a cgroup a submission could widen it)"
    return Enforcement("rlimits", memory, processes, cpu, disk, why)


class Confinement:
    """One submission's caps: its cgroup (if any), and the command that enters them before the sandbox starts."""

    def __init__(self, caps: Caps, how: Enforcement, cores: list[int] | None):
        self.caps, self.how = caps, how
        self.group = how.backend.group(caps.memory_bytes, caps.processes, caps.cpus) if how.backend else None
        rlimits = {"RLIMIT_FSIZE": FILE_SIZE_LIMIT, "RLIMIT_CORE": 0}
        if caps.memory_bytes is not None:
            rlimits["RLIMIT_DATA"] = caps.memory_bytes
        if self.group is None and how.processes:
            rlimits["RLIMIT_NPROC"] = _user_tasks() + caps.processes
        pin = self.group is None or not how.backend.has_cpu
        self.spec = {
            "join": self.group.procs_files if self.group else [],
            "rlimits": rlimits,
            "cores": cores if pin and cores else [],
        }

    def command(self, command: list[str]) -> list[str]:
        """`command`, started under the caps (enter_caps.py joins the cgroup and sets the limits, then execs it)."""
        enter = Path(__file__).resolve().with_name("enter_caps.py")
        return [sys.executable, "-I", "-S", str(enter), json.dumps(self.spec), "--", *command]

    def counters(self) -> dict[str, tuple[str, str]]:
        """cap -> (cgroup file, key) counting how often it was reached (the runner reads them after each cell)."""
        if self.group is None:
            return {}
        return {cap: (str(path), key) for cap, (path, key) in self.group.counters.items()}

    def reached(self) -> dict[str, int]:
        """How often each cap was reached in this run (cgroup counters; empty without a cgroup)."""
        return {cap: self.group.count(cap) for cap in self.group.counters} if self.group else {}

    def close(self) -> None:
        if self.group is not None:
            self.group.close()

    def __enter__(self) -> Confinement:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cores_for(slot: int, caps: Caps) -> list[int]:
    """The cores of the slot-th submission graded at once, when they are pinned (affinity)."""
    cores = available_cores()
    first = (slot * caps.num_cores) % len(cores)
    return [cores[(first + i) % len(cores)] for i in range(min(caps.num_cores, len(cores)))]


def memory_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None
