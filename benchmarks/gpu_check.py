"""GPU check for the paged engine (issue 29; lessons 10 and 14), under 5 minutes on one H200.

1. The Triton paged decode kernel equals the fp32 PyTorch gather reference, in fp32, bf16 and
   fp16, at block sizes 8, 16, 32 and 64, on several head layouts (benchmarks/gpu/kernel.py).
2. Its achieved bandwidth as a share of the card's measured copy bandwidth; goal 60 %.
3. The engine's greedy tokens equal Hugging Face's ``generate(do_sample=False)`` and ours.
4. Every lesson notebook headless on CUDA in bf16: pass or fail and seconds per lesson.
5. A recorded trace of LLMEngine over a seeded workload -> benchmarks/results/gpu_trace.json.
All results, the device named -> benchmarks/results/gpu_check.json (written after each check).
The lessons run last: the only open-ended check, they stop starting new notebooks past a time budget.

    python -m benchmarks.gpu_check              # the full check, on a CUDA machine
    python -m benchmarks.gpu_check --quick      # a smaller one (one layout, 3 lessons, 8 requests)
    python -m benchmarks.gpu_check --cpu-proof  # on the CPU: check 1 in the Triton interpreter,
                                                # the rest skipped with one line each; writes nothing here
    python -m benchmarks.gpu_check --only 1 3 --results-dir $OUT   # some checks, results elsewhere
Without CUDA (and without --cpu-proof) it prints a message and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.gpu.plan import CheckPlan

RESULTS = Path(__file__).resolve().parent / "results"
INTERPRET_ENV = "TRITON_INTERPRET"
CHECKS = {
    1: "Triton paged decode vs PyTorch reference",
    2: "bandwidth",
    3: "greedy tokens vs Hugging Face",
    4: "lessons on CUDA in bf16",
    5: "engine trace",
}
KEYS = {1: "kernel", 2: "bandwidth", 3: "tokens", 4: "lessons", 5: "trace"}  # their names in gpu_check.json


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a smaller check, for a short device lease")
    mode.add_argument("--cpu-proof", action="store_true", help="run end to end on the CPU (check 1 interpreted)")
    parser.add_argument("--only", type=int, nargs="+", choices=sorted(CHECKS), help="run only these checks")
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help="where the JSON files go")
    return parser.parse_args(argv)


def reexec_interpreted(argv: list[str]) -> int:
    """TRITON_INTERPRET is read when triton is first imported: run this script again with it set."""
    env = {**os.environ, INTERPRET_ENV: "1"}
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", *argv], env=env).returncode


def skip_reason() -> str:
    """Why --cpu-proof skips the checks that need CUDA."""
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    return "--cpu-proof keeps to the CPU"


class Results:
    """The JSON of the run, rewritten after every check so a run cut short still leaves what it measured."""

    def __init__(self, path: Path, device: str) -> None:
        self.path = path
        self.data: dict = {"device": device, "torch": torch.__version__, "checks": {}}

    def add(self, key: str, value: object) -> None:
        self.data["checks"][key] = value
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2))


def run_check(number: int, results: Results, fn: Callable[[], object]) -> object:
    """Print the check's header, run it, record it; an exception is recorded as the check's failure."""
    print(f"{number}. {CHECKS[number]}", flush=True)
    try:
        value = fn()
    except Exception as exc:  # e.g. the model package is missing: report it, keep the other checks
        print(f"  FAILED: {type(exc).__name__}: {exc}", flush=True)
        value = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
    results.add(KEYS[number], value)
    return value


def check_passed(value: object) -> bool:
    """False where a check (or any row of it) says ``ok: False``; a lesson not run (``ok: None``) is no failure."""
    if isinstance(value, list):
        return all(row.get("ok") is not False for row in value)
    return not isinstance(value, dict) or value.get("ok", True) is not False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.cpu_proof and os.environ.get(INTERPRET_ENV) != "1":
        return reexec_interpreted(argv)
    if not args.cpu_proof and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to PyTorch; nothing to check here (this is not an error).")
        return 0
    plan = CheckPlan.cpu_proof() if args.cpu_proof else CheckPlan.quick() if args.quick else CheckPlan.full()
    wanted = set(args.only or CHECKS)
    with tempfile.TemporaryDirectory() as tmp:
        results_dir = Path(tmp) if args.cpu_proof else args.results_dir  # --cpu-proof writes nothing here
        return run_all(plan, wanted, results_dir, cpu_proof=args.cpu_proof)


def run_all(plan: CheckPlan, wanted: set[int], results_dir: Path, cpu_proof: bool) -> int:
    """The checks of ``wanted`` in order; on the CPU only check 1 runs (interpreted), each other one says why not."""
    from benchmarks.gpu.kernel import check_kernel

    device = torch.device("cpu" if cpu_proof else "cuda")
    name = "cpu (Triton interpreter)" if cpu_proof else torch.cuda.get_device_name(0)
    print(f"gpu_check ({plan.name}) on {name}", flush=True)
    results = Results(results_dir / "gpu_check.json", name)
    results.data["plan"] = plan.name
    passed = []
    if 1 in wanted:
        passed.append(check_passed(run_check(1, results, lambda: check_kernel(plan, device))))
    if cpu_proof:
        reason = skip_reason()
        for number in sorted(wanted - {1}):
            print(f"{number}. {CHECKS[number]}: skipped ({reason})", flush=True)
            results.add(KEYS[number], {"skipped": reason})
    else:
        passed += run_cuda_checks(plan, wanted, results, results_dir, device)
    ok = all(passed)
    results.data["passed"] = ok
    results.write()
    where = "a temporary file, now removed (--cpu-proof)" if cpu_proof else str(results.path)
    print(f"gpu_check {'passed' if ok else 'FAILED'}; results written to {where}", flush=True)
    return 0 if ok else 1


def run_cuda_checks(
    plan: CheckPlan, wanted: set[int], results: Results, results_dir: Path, device: torch.device
) -> list[bool]:
    """Checks 2, 3, 5, then 4 on the GPU; whether each passed (the bandwidth goal is reported, not required)."""
    from benchmarks.gpu.bandwidth import check_bandwidth
    from benchmarks.gpu.lessons import check_lessons
    from benchmarks.gpu.tokens import check_tokens
    from benchmarks.gpu.trace import record_trace

    passed = []
    if 2 in wanted:
        bandwidth = run_check(2, results, lambda: check_bandwidth(device))
        passed.append("error" not in bandwidth)  # ran; its share against the goal is reported, not required
    if 3 in wanted:
        passed.append(check_passed(run_check(3, results, lambda: check_tokens(device, plan.num_new_tokens))))
    if 5 in wanted:
        trace = run_check(5, results, lambda: record_trace(device, plan.trace_requests))
        if isinstance(trace, dict) and "steps" in trace:
            trace_path = results_dir / "gpu_trace.json"
            trace_path.write_text(json.dumps(trace, indent=2))
            results.add(KEYS[5], {k: v for k, v in trace.items() if k != "steps"} | {"path": str(trace_path)})
            print(f"  trace written to {trace_path}", flush=True)
        passed.append(check_passed(trace))
    if 4 in wanted:  # last: the one open-ended check, bounded by its time budget
        passed.append(check_passed(run_check(4, results, lambda: check_lessons(plan.lessons, plan.lesson_budget_s))))
    return passed


if __name__ == "__main__":
    sys.exit(main())
