"""Picking the greedy token: PyTorch's ``argmax`` against ``max(dim).indices`` (``sampling.greedy``), side by side.

The engine picks every greedy token through ``sampling.greedy``, which returns ``logits.max(dim=-1).indices``
instead of ``logits.argmax(-1)``: the same indices (the first of ties, NaN as argmax; tested in
tests/kernels/test_kernels_sampling.py), and on the CPUs measured so far a faster kernel. This measures both on
rows of SmolLM2's vocabulary (49,152 logits), for one row (a batch-1 decode step) and 32 rows (a batch-32
step), in float32 and bfloat16, in interleaved rounds, on one thread, and grades "greedy at least as fast as
argmax" per dtype and row count. The CPU kind can be emulated (``ATEN_CPU_CAPABILITY=avx2``); the figures name
the CPU they were measured on.

Run: .venv/bin/python -m benchmarks.bench_greedy [--rounds 7] [--calls 200]
Writes benchmarks/results/greedy.json.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from benchmarks.common import interleaved, paired_ratio, summary, write_result
from kvcourse.kernels.engine.sampling import greedy
from kvcourse.kernels.model.config_table import get_model_config

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ROWS = (1, 32)


def per_call(pick: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor, calls: int) -> Callable[[], float]:
    """A measure: seconds of this thread's CPU time per call of ``pick`` on ``logits``, over ``calls`` calls."""

    def measure() -> float:
        start = time.thread_time()
        for _ in range(calls):
            pick(logits)
        return (time.thread_time() - start) / calls

    return measure


def argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200, help="calls per timed sample")
    parser.add_argument("--vocab", type=int, default=get_model_config("smollm2-135m").vocab_size)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    rows_out, meets = [], {}
    for name, dtype in DTYPES.items():
        for rows in ROWS:
            logits = torch.randn(rows, args.vocab, generator=generator).to(dtype)
            if not torch.equal(argmax(logits), greedy(logits)):
                raise SystemExit(f"{name}, {rows} rows: greedy and argmax picked different tokens")
            samples = interleaved(
                {"argmax": per_call(argmax, logits, args.calls), "greedy": per_call(greedy, logits, args.calls)},
                args.rounds,
                log=None,
            )
            ratio = paired_ratio(samples["argmax"], samples["greedy"])
            meets[f"{name}, {rows} rows"] = ratio["ratio_of_medians"] >= 1.0
            rows_out.append(
                {
                    "dtype": name,
                    "rows": rows,
                    "argmax_us": summary(samples["argmax"], 1e6),
                    "greedy_us": summary(samples["greedy"], 1e6),
                    "argmax_over_greedy": ratio,
                }
            )
            print(
                f"  {name}, {rows:2d} rows of {args.vocab:,}: argmax {rows_out[-1]['argmax_us']['median']:7.1f} us, "
                f"max(dim).indices {rows_out[-1]['greedy_us']['median']:7.1f} us "
                f"({ratio['ratio_of_medians']:.2f}x)",
                flush=True,
            )
    result = {
        "vocab": args.vocab,
        "rounds": args.rounds,
        "calls_per_sample": args.calls,
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "(not set: the CPU's own)"),
        "rows": rows_out,
        "meets_targets": meets,
    }
    print(f"greedy at least as fast as argmax: {meets}; written to {write_result('greedy', result)}")
    return result


if __name__ == "__main__":
    main()
