"""A control group per submission, where this machine lets the grader make one: cgroup v2 or v1.

cgroup v2 is one folder per group (memory.max, pids.max, cpu.max). The grader may make groups in
its own cgroup when that cgroup is delegated to it: as root on the host, or inside
`systemd-run --user --scope -p Delegate=yes`. A delegated cgroup that holds processes cannot hand
controllers to children (the kernel's "no internal processes" rule), so the grader first moves
itself into a child of its own, `kvgrade-grader-<pid>`, then enables memory, pids and cpu for the
children. cgroup v1 (older distributions, many containers) has a folder per controller; as root
the grader makes one in each of memory, pids and cpu. Either way every process of a submission
joins the group before the sandbox starts (enter_caps.py), so nothing it forks escapes the caps.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

_NAMES = itertools.count()
PERIOD_US = 100_000  # the CPU quota's period: cpus=1.0 is 100 ms of CPU time per 100 ms


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root, mount point, fstype, super options) of every cgroup mount this process sees."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup per controller ('' for the v2 hierarchy), from /proc/self/cgroup."""
    paths = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _folder(root: str, point: Path, path: str) -> Path:
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return point if relative in (".", "") else point / relative


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _count(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ('oom_kill 1'), or the bare number of a file like
    memory.failcnt when `key` is empty (kernels before 4.13 count no oom_kill); 0 when unreadable."""
    try:
        if not key:
            return int(path.read_text().split()[0])
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class Group:
    """One submission's cgroup: the folders its processes join, and the counters of caps it reached."""

    folders: list[Path]
    counters: dict[str, tuple[Path, str]] = field(default_factory=dict)  # cap -> (file, key)
    kill_file: Path | None = None  # v2's cgroup.kill

    @property
    def procs_files(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def count(self, cap: str) -> int:
        return _count(*self.counters[cap]) if cap in self.counters else 0

    def close(self) -> None:
        """Kill whatever is still in the group, then remove its folders (best effort, a few seconds)."""
        if self.kill_file is not None and self.kill_file.exists():
            with contextlib.suppress(OSError):
                _write(self.kill_file, "1")
        deadline = time.monotonic() + 5.0
        for folder in self.folders:
            while folder.exists():
                try:
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)


def _name() -> str:
    return f"kvgrade-{os.getpid()}-{next(_NAMES)}"


@dataclass(frozen=True)
class CgroupV2:
    """Groups as children of `parent`, whose subtree has the memory and pids controllers (and maybe cpu)."""

    parent: Path
    delegated: bool  # the grader moved itself into a child to enable the controllers

    kind = "cgroup v2"

    @property
    def has_cpu(self) -> bool:
        return "cpu" in (self.parent / "cgroup.subtree_control").read_text().split()

    def group(self, memory: int | None, processes: int, cpus: float) -> Group:
        folder = self.parent / _name()
        folder.mkdir()
        group = Group(
            [folder],
            {"memory": (folder / "memory.events", "oom_kill"), "processes": (folder / "pids.events", "max")},
            folder / "cgroup.kill",
        )
        try:
            if memory is not None:
                _write(folder / "memory.max", str(memory))
                if (folder / "memory.swap.max").exists():
                    _write(folder / "memory.swap.max", "0")
            _write(folder / "pids.max", str(processes))
            if (folder / "cpu.max").exists():
                _write(folder / "cpu.max", f"{round(cpus * PERIOD_US)} {PERIOD_US}")
        except OSError:
            group.close()
            raise
        return group


@dataclass(frozen=True)
class CgroupV1:
    """Groups as a folder in each v1 hierarchy: memory (required), pids and cpu (where writable)."""

    memory: Path
    pids: Path | None
    cpu: Path | None

    kind = "cgroup v1"

    @property
    def has_cpu(self) -> bool:
        return self.cpu is not None

    def group(self, memory: int | None, processes: int, cpus: float) -> Group:
        name = _name()
        group = Group([])
        try:
            mem = self.memory / name
            mem.mkdir()
            group.folders.append(mem)
            oom = "oom_kill" if "oom_kill" in (mem / "memory.oom_control").read_text() else ""
            group.counters["memory"] = (mem / "memory.oom_control", "oom_kill") if oom else (mem / "memory.failcnt", "")
            if memory is not None:
                _write(mem / "memory.limit_in_bytes", str(memory))
                if (mem / "memory.memsw.limit_in_bytes").exists():  # no swapping past the cap
                    _write(mem / "memory.memsw.limit_in_bytes", str(memory))
            if self.pids is not None:
                pids = self.pids / name
                pids.mkdir()
                group.folders.append(pids)
                _write(pids / "pids.max", str(processes))
                group.counters["processes"] = (pids / "pids.events", "max")
            if self.cpu is not None:
                cpu = self.cpu / name
                cpu.mkdir()
                group.folders.append(cpu)
                _write(cpu / "cpu.cfs_period_us", str(PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(round(cpus * PERIOD_US)))
        except OSError:
            group.close()
            raise
        return group


def _controllers(folder: Path, name: str) -> set[str]:
    try:
        return set((folder / name).read_text().split())
    except OSError:
        return set()


def _v2(point: Path, root: str, path: str) -> tuple[CgroupV2 | None, str]:
    here = _folder(root, point, path)
    if {"memory", "pids"} <= _controllers(here, "cgroup.subtree_control"):
        return CgroupV2(here, delegated=False), ""
    available = _controllers(here, "cgroup.controllers")
    if not {"memory", "pids"} <= available:
        return None, f"cgroup v2: the memory and pids controllers are not available in {here}"
    if not os.access(here / "cgroup.subtree_control", os.W_OK) or not os.access(here / "cgroup.procs", os.W_OK):
        return None, (
            f"cgroup v2: {here} is not delegated to you (run the grader inside "
            "`systemd-run --user --scope -p Delegate=yes`, or as root)"
        )
    grader = here / f"kvgrade-grader-{os.getpid()}"
    try:
        grader.mkdir(exist_ok=True)
        _write(grader / "cgroup.procs", str(os.getpid()))
        wanted = [c for c in ("memory", "pids", "cpu") if c in available]
        _write(here / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError as err:
        try:
            _write(here / "cgroup.procs", str(os.getpid()))
            grader.rmdir()
        except OSError:
            pass
        return None, (
            f"cgroup v2: could not enable the memory controller below {here} ({err.strerror}; other "
            "processes share it: run the grader in a scope of its own, `systemd-run --user --scope "
            "-p Delegate=yes kvcourse grade autograde ...`)"
        )
    return CgroupV2(here, delegated=True), ""


def _v1(mounts: list, paths: dict[str, str]) -> tuple[CgroupV1 | None, str]:
    folders: dict[str, Path] = {}
    for root, point, fstype, options in mounts:
        for name in ("memory", "pids", "cpu"):
            if fstype == "cgroup" and name in options and name in paths:
                folder = _folder(root, point, paths[name])
                if folder.is_dir() and os.access(folder, os.W_OK):
                    folders[name] = folder
    if "memory" not in folders:
        return None, "cgroup v1: no writable memory hierarchy (making groups there needs root)"
    return CgroupV1(folders["memory"], folders.get("pids"), folders.get("cpu")), ""


def find() -> tuple[CgroupV2 | CgroupV1 | None, str]:
    """The cgroups this grader can make for a submission, tried with a throw-away group; or (None, why not)."""
    mounts, paths = _mounts(), _own_paths()
    if not mounts:
        return None, "no cgroup file system is mounted here"
    reasons = []
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in paths:
            found, why = _v2(point, root, paths[""])
            if found is None:
                reasons.append(why)
                continue
            try:
                found.group(256 * 2**20, 16, 1.0).close()
                return found, ""
            except OSError as err:
                reasons.append(f"cgroup v2: a test group in {found.parent} failed ({err.strerror})")
    found1, why = _v1(mounts, paths)
    if found1 is None:
        reasons.append(why)
    else:
        try:
            found1.group(256 * 2**20, 16, 1.0).close()
            return found1, ""
        except OSError as err:
            reasons.append(f"cgroup v1: a test group in {found1.memory} failed ({err.strerror})")
    return None, "; ".join(reasons)
