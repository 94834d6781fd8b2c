"""Decode throughput versus batch size at realistic contexts, graded against the bare linears (lesson 14).

For each batch size B, an LLMEngine holding at most B sequences takes B requests from one
seeded workload (prompts of 128-384 tokens, answers of 64-256 tokens) and prefills them; then
full-batch decode steps (every one of the B sequences adds a token, reading its whole context)
are timed in interleaved rounds across all B, beside the engine's bare linears pushed with B
rows (benchmarks/floor.py). Sequences never finish inside the timed steps, so the batch stays B.

Memory buys throughput only as far as the CPU's matrix products do: 32 rows through a linear
layer cost more than one row, by a factor that depends on the CPU. So batch scaling is graded
against the same ratio for the bare linears, measured in the same run:
    engine(B=32) tok/s / engine(B=1) tok/s  >=  0.90 x  linears(32 rows) rows/s / linears(1 row) rows/s
Attention must also read each sequence's own K/V, which the bare linears never do: at these contexts
a batch of 32 holds about as many bytes of K/V as the model has weights. So the run also measures the
floor that includes them, the bare linears plus one streaming read of the step's K/V bytes (the pool's
blocks in the batch's tables, summed layer by layer), and reports the engine's scaling against that
floor's scaling beside the target above, and whether the floor itself reaches the target: where the
linears scale almost freely (AMX makes 32 bfloat16 rows cost little more than one), it does not, and
no engine could.
At the largest batch it also times the engine's paged decode attention alone, on the engine's
own pool and block tables, every layer, through the kernel the engine runs (on the CPU the
in-place kernel where numba runs it, kernels/attention/cpu_paged.py) and through the gather
reference, so a shortfall can be put down to its cause.
Measured and graded in float32 and in bfloat16.
Run: .venv/bin/python -m benchmarks.bench_batch_throughput [--rounds 5] [--steps 8] [--dtypes fp32 bf16]
Writes benchmarks/results/batch_throughput.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import bf16_note, interleaved, paired_ratio, summary, write_result
from benchmarks.decode_attention import (
    attention_seconds,
    decode_steps,
    kv_bytes_read,
    kv_read_seconds,
    prefilled_engine,
)
from benchmarks.engine_setup import load_engine_model
from benchmarks.floor import engine_linears, linears_seconds
from benchmarks.workloads import Workload

BATCH_SIZES = [1, 4, 8, 16, 32]
TARGET_FRACTION_OF_LINEARS = 0.90
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def sweep(model, workload: Workload, batch_sizes: list[int], rounds: int, steps: int) -> dict:
    """Engine decode steps and bare linears for every batch size, interleaved; the ratios to batch 1."""
    engines = {b: prefilled_engine(model, workload, b) for b in batch_sizes}
    linears = engine_linears(model)
    measures = {}
    for b in batch_sizes:
        measures[f"engine_b{b}"] = lambda b=b: decode_steps(engines[b], b, steps) / steps  # seconds per step
        measures[f"linears_b{b}"] = lambda b=b: linears_seconds(linears, rows=b)
        measures[f"kv_read_b{b}"] = lambda b=b: kv_read_seconds(engines[b])
    largest = batch_sizes[-1]
    runner = engines[largest].model_runner
    in_place_from = runner.in_place_from if runner.decode_kernel == "in place" else None
    kernel = "gather" if in_place_from is not None and largest < in_place_from else runner.decode_kernel
    measures["attention_engine_kernel"] = lambda: attention_seconds(engines[largest], kernel)
    measures["attention_gather"] = lambda: attention_seconds(engines[largest], "gather")
    samples = interleaved(measures, rounds, log=None)
    first = batch_sizes[0]
    rows = []
    for b in batch_sizes:
        eng, lin = samples[f"engine_b{b}"], samples[f"linears_b{b}"]
        floor = [x + y for x, y in zip(lin, samples[f"kv_read_b{b}"], strict=True)]
        floors = [x + y for x, y in zip(samples[f"linears_b{first}"], samples[f"kv_read_b{first}"], strict=True)]
        # throughput ratio to the first batch size: b rows per step vs first rows per step, per round
        eng_scale = paired_ratio([x * b / first for x in samples[f"engine_b{first}"]], eng)
        lin_scale = paired_ratio([x * b / first for x in samples[f"linears_b{first}"]], lin)
        floor_scale = paired_ratio([x * b / first for x in floors], floor)
        contexts = [s.num_tokens for s in engines[b].scheduler.running]
        rows.append(
            {
                "batch": b,
                "context_tokens_at_end": [min(contexts), max(contexts)],
                "engine_ms_per_step": summary(eng, 1e3),
                "linears_ms_per_pass": summary(lin, 1e3),
                "engine_tokens_per_second": b / summary(eng)["median"],
                "linears_rows_per_second": b / summary(lin)["median"],
                "engine_over_linears_time": paired_ratio(eng, lin),
                "engine_speedup_vs_batch1": eng_scale,
                "linears_speedup_vs_batch1": lin_scale,
                "kv_bytes_read_per_step": kv_bytes_read(engines[b]),
                "kv_read_ms_per_step": summary(samples[f"kv_read_b{b}"], 1e3),
                "floor_speedup_vs_batch1": floor_scale,
            }
        )
        print(
            f"  batch {b:3d}: engine {rows[-1]['engine_ms_per_step']['median']:7.1f} ms/step "
            f"({rows[-1]['engine_tokens_per_second']:7.1f} tok/s, x{eng_scale['ratio_of_medians']:5.2f}), "
            f"linears {rows[-1]['linears_ms_per_pass']['median']:7.1f} ms "
            f"(x{lin_scale['ratio_of_medians']:5.2f}), + one read of the K/V "
            f"{rows[-1]['kv_read_ms_per_step']['median']:5.1f} ms (x{floor_scale['ratio_of_medians']:5.2f}); "
            f"contexts {contexts and min(contexts)}-"
            f"{contexts and max(contexts)}",
            flush=True,
        )
    last = rows[-1]
    step_ms = last["engine_ms_per_step"]["median"]
    attention = summary(samples["attention_engine_kernel"], 1e3)
    gather = summary(samples["attention_gather"], 1e3)
    print(
        f"  batch {largest}: paged attention through the {kernel!r} kernel {attention['median']:.1f} ms of the "
        f"{step_ms:.1f} ms step ({attention['median'] / step_ms:.0%}); through the gather "
        f"{gather['median']:.1f} ms"
        + (f"; the in-place kernel takes batches of {in_place_from} or more" if in_place_from else ""),
        flush=True,
    )
    engine_scale = last["engine_speedup_vs_batch1"]["ratio_of_medians"]
    linears_scale = last["linears_speedup_vs_batch1"]["ratio_of_medians"]
    floor_scale = last["floor_speedup_vs_batch1"]["ratio_of_medians"]
    return {
        "rows": rows,
        "largest_batch": last["batch"],
        "decode_kernel": kernel,
        "in_place_from_batch": in_place_from,  # measured at start-up: smaller decode batches gather
        "largest_batch_attention_ms_per_step": attention,
        "largest_batch_attention_share_of_step": attention["median"] / step_ms,
        "largest_batch_gather_attention_ms_per_step": gather,
        "engine_scaling": engine_scale,
        "linears_scaling": linears_scale,
        "engine_scaling_over_linears_scaling": engine_scale / linears_scale,
        "meets_target": engine_scale >= TARGET_FRACTION_OF_LINEARS * linears_scale,
        "floor_scaling": floor_scale,
        "engine_scaling_over_floor_scaling": engine_scale / floor_scale,
        "meets_target_against_floor": engine_scale >= TARGET_FRACTION_OF_LINEARS * floor_scale,
        # Whether any engine could meet the target here: one that spent nothing beyond the linears and one read
        # of its K/V would scale as the floor does. Where matrix units make 32 rows nearly as cheap as one (AMX),
        # the K/V a batch must read grows with it while the linears hardly do, and the floor falls short.
        "floor_scaling_over_linears_scaling": floor_scale / linears_scale,
        "target_reachable": floor_scale >= TARGET_FRACTION_OF_LINEARS * linears_scale,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="decode steps per timed sample")
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=BATCH_SIZES)
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES), default=list(DTYPES))
    args = parser.parse_args(argv)
    if (args.rounds + 1) * args.steps >= 64:
        parser.error("(rounds + 1) * steps must stay below 64, the shortest answer, so the batch stays full")
    workload = Workload.make(max(args.batch_sizes), seed=1)
    result: dict = {
        "workload": workload.describe(),
        "batch_sizes": args.batch_sizes,
        "rounds": args.rounds,
        "steps_per_sample": args.steps,
        "target": f"engine scaling >= {TARGET_FRACTION_OF_LINEARS} x linears scaling at batch {max(args.batch_sizes)}",
        "bf16_note": bf16_note(),
    }
    for name in args.dtypes:
        model, _, _ = load_engine_model(DTYPES[name])
        print(f"{name}:", flush=True)
        result[name] = sweep(model, workload, sorted(args.batch_sizes), args.rounds, args.steps)
        del model
    path = write_result("batch_throughput", result)
    for name in args.dtypes:
        r = result[name]
        verdict = "met" if r["meets_target"] else "NOT met"
        print(
            f"{name}: batch {r['largest_batch']} / batch 1 = {r['engine_scaling']:.2f}x for the engine, "
            f"{r['linears_scaling']:.2f}x for the bare linears ({r['engine_scaling_over_linears_scaling']:.0%}; "
            f"target >= {TARGET_FRACTION_OF_LINEARS:.0%}: {verdict}); against the linears plus one read of the "
            f"K/V, {r['floor_scaling']:.2f}x ({r['engine_scaling_over_floor_scaling']:.0%}: "
            f"{'met' if r['meets_target_against_floor'] else 'NOT met'})"
        )
        if not r["target_reachable"]:
            print(
                f"{name}: no engine can meet the linears target on this CPU: the linears plus one read of the "
                f"K/V scale {r['floor_scaling_over_linears_scaling']:.0%} of the linears' scaling, below "
                f"{TARGET_FRACTION_OF_LINEARS:.0%}"
            )
    print(f"{result['bf16_note']}\nwritten to {path}")
    return result


if __name__ == "__main__":
    main()
