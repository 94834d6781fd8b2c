"""The CPU's two paged decode kernels side by side, per block size, at batch 32 (lessons 10, 11, 14).

For block sizes 8, 16, 32 and 64, an LLMEngine holds 32 requests of one seeded realistic workload
(prompts of 128-384 tokens, answers of 64-256), every prompt computed. In interleaved rounds it
times, per block size: a full-batch decode step of the engine (on the kernel the engine chose),
and the step's paged attention alone, every layer, through the in-place kernel
(kernels/attention/cpu_paged.py: walks each block table, no copy) and through the gather
reference (paged_decode_attention: blocks copied into a padded batch, then SDPA). Reported:
attention's share of the step, and gather / in-place per block size (information, not graded).
Run: .venv/bin/python -m benchmarks.bench_paged_kernels [--rounds 5] [--steps 4] [--dtype fp32]
Writes benchmarks/results/paged_kernels.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import interleaved, paired_ratio, summary, write_result
from benchmarks.decode_attention import attention_seconds, decode_steps, prefilled_engine
from benchmarks.engine_setup import load_engine_model
from benchmarks.workloads import Workload

BLOCK_SIZES = [8, 16, 32, 64]
BATCH = 32
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="decode steps per timed sample")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    args = parser.parse_args(argv)
    if (args.rounds + 1) * (args.steps + 2) >= 64:
        parser.error("(rounds + 1) * (steps + 2) must stay below 64, the shortest answer, so the batch stays full")
    model, _, _ = load_engine_model(DTYPES[args.dtype])
    workload = Workload.make(BATCH, seed=1)
    engines = {bs: prefilled_engine(model, workload, BATCH, bs) for bs in BLOCK_SIZES}
    kernel = engines[BLOCK_SIZES[0]].model_runner.decode_kernel
    if kernel != "in place":
        raise SystemExit(
            f"the engine's decode kernel here is {kernel!r}, not the in-place one: nothing to compare "
            "(see `kvcourse doctor`)"
        )
    measures = {}
    for bs, engine in engines.items():
        measures[f"step_{bs}"] = lambda e=engine: decode_steps(e, BATCH, args.steps) / args.steps
        measures[f"in_place_{bs}"] = lambda e=engine: attention_seconds(e, "in place")
        measures[f"gather_{bs}"] = lambda e=engine: attention_seconds(e, "gather")
    samples = interleaved(measures, args.rounds, log=None)
    rows = []
    for bs in BLOCK_SIZES:
        step, in_place, gather = (summary(samples[f"{name}_{bs}"], 1e3) for name in ("step", "in_place", "gather"))
        rows.append(
            {
                "block_size": bs,
                "step_ms": step,
                "in_place_attention_ms": in_place,
                "gather_attention_ms": gather,
                "attention_share_of_step": in_place["median"] / step["median"],
                "gather_over_in_place": paired_ratio(samples[f"gather_{bs}"], samples[f"in_place_{bs}"]),
            }
        )
        print(
            f"  blocks of {bs:2d}: step {step['median']:6.1f} ms; attention in place {in_place['median']:5.1f} ms "
            f"({rows[-1]['attention_share_of_step']:.0%} of the step), gather {gather['median']:5.1f} ms "
            f"({rows[-1]['gather_over_in_place']['ratio_of_medians']:.2f}x)",
            flush=True,
        )
    result = {
        "workload": workload.describe(),
        "batch": BATCH,
        "dtype": args.dtype,
        "rounds": args.rounds,
        "steps_per_sample": args.steps,
        "decode_kernel": kernel,
        "rows": rows,
    }
    print(f"written to {write_result('paged_kernels', result)}")
    return result


if __name__ == "__main__":
    main()
