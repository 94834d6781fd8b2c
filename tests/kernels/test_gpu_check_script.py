"""`python -m benchmarks.gpu_check --cpu-proof` runs the GPU check end to end on the CPU (issue 29).

Check 1 runs the Triton kernel in the interpreter, at every block size and dtype; each check
that needs CUDA says so in exactly one line; nothing is written into benchmarks/results/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from benchmarks.gpu.plan import BLOCK_SIZES, DTYPES
from benchmarks.gpu_check import CHECKS, RESULTS
from kvcourse.syllabus import REPO_ROOT

pytest.importorskip("triton")

OK_LINE = re.compile(r"^  block +(\d+), .*, (\w+) *: max error \S+ \(tolerance \S+\) ok$", re.MULTILINE)


def _stamps() -> dict[str, int | None]:
    """The GPU check's own result files and when each was last written (None: absent)."""
    paths = [RESULTS / "gpu_check.json", RESULTS / "gpu_trace.json"]
    return {p.name: p.stat().st_mtime_ns if p.exists() else None for p in paths}


def test_cpu_proof_runs_every_check_or_says_why_not() -> None:
    before = _stamps()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)  # the script must set it itself
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--cpu-proof"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    tried = {(int(bs), name) for bs, name in OK_LINE.findall(out)}
    assert tried == {(bs, str(dt).removeprefix("torch.")) for bs in BLOCK_SIZES for dt in DTYPES}, out
    for number, title in CHECKS.items():
        if number == 1:
            continue
        lines = [line for line in out.splitlines() if line.startswith(f"{number}. ")]
        assert len(lines) == 1 and re.fullmatch(rf"{number}\. {re.escape(title)}: skipped \(.+\)", lines[0]), out
    assert "gpu_check passed" in out
    assert _stamps() == before, "--cpu-proof wrote into benchmarks/results/"


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA this would run the real check")
def test_without_cuda_and_without_cpu_proof_it_only_says_so() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0
    assert (
        proc.stdout.strip()
        == "gpu_check: no CUDA device visible to PyTorch; nothing to check here (this is not an error)."
    )
