"""What one submission may use while it is graded: memory, processes, CPU and the files it writes.

The defaults are far above what a quick check needs (the graded notebooks import no model: a
lesson-07 submission peaks at about 75 MiB, kernel and runner together) and far below what one student's
`np.ones(2**32)` or a loop writing to /tmp would take from the machine. confine.py says how this
machine enforces them; the sandbox gives the submission one memory-backed scratch space (its
folder and /tmp) of `disk_bytes`, on top of the 256 MB cap on any one file it writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MiB = 2**20
GiB = 2**30
VIA = ("auto", "cgroup", "rlimits")  # auto: a cgroup where this machine lets us make one, else rlimits


def size_text(num_bytes: int) -> str:
    """2147483648 -> '2 GiB', 536870912 -> '512 MiB' (binary units, as the caps are set)."""
    for unit, size in (("GiB", GiB), ("MiB", MiB)):
        if num_bytes >= size:
            value = num_bytes / size
            return f"{value:g} {unit}" if value == round(value, 2) else f"{value:.2f} {unit}"
    return f"{num_bytes:,} bytes"


@dataclass(frozen=True)
class Caps:
    """The caps of one submission (each has a flag of `kvcourse grade autograde`)."""

    memory_bytes: int | None = 2 * GiB  # None: --no-memory-cap (a trial only)
    processes: int = 128  # tasks at once, threads included (a kernel runs about 10)
    cpus: float = 1.0  # cores' worth of CPU time, shared by all its processes
    disk_bytes: int = 512 * MiB  # its folder and /tmp together; memory-backed, so it counts in memory too
    via: str = "auto"

    def __post_init__(self) -> None:
        if self.memory_bytes is not None and not 256 * MiB <= self.memory_bytes <= 1024 * GiB:
            raise ValueError(
                f"the memory cap must be between 256 MiB (a kernel needs about 100 MiB to start) "
                f"and 1 TiB, got {size_text(self.memory_bytes)}"
            )
        if not 16 <= self.processes <= 100_000:
            raise ValueError(
                f"the process cap must be between 16 (a kernel and its threads) and 100000, got {self.processes}"
            )
        if not 0.1 <= self.cpus <= 1024:
            raise ValueError(f"the CPU cap must be between 0.1 and 1024 cores, got {self.cpus:g}")
        if not 16 * MiB <= self.disk_bytes <= 1024 * GiB:
            raise ValueError(f"the disk cap must be between 16 MiB and 1 TiB, got {size_text(self.disk_bytes)}")
        if self.memory_bytes is not None and self.disk_bytes >= self.memory_bytes:
            raise ValueError(
                f"the disk cap ({size_text(self.disk_bytes)}) must be below the memory cap "
                f"({size_text(self.memory_bytes)}): the files a submission writes are held in memory"
            )
        if self.via not in VIA:
            raise ValueError(f"caps are enforced via one of {', '.join(VIA)}, got {self.via!r}")

    @property
    def num_cores(self) -> int:
        """Cores a submission may be pinned to where no cgroup shares CPU time out (ceil of cpus)."""
        return max(1, math.ceil(self.cpus))

    def memory_text(self) -> str:
        return "no memory cap" if self.memory_bytes is None else f"memory limit of {size_text(self.memory_bytes)}"
