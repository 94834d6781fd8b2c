"""Local and global layers on the real model (issue 45 item 3): the cache they save against what they cost.

SmolLM2 with five layers in six given a window (Gemma 3's pattern; layers 5, 11, 17, 23 and 29 stay global),
at windows of 64 to 1,024 tokens, each also with the first 4 tokens kept on its local layers (StreamingLLM's
attention sinks: lesson 16 shows SmolLM2 leans on its first token), on the held-out text of
kernels/measure/texts.py (chapter I of "Alice's Adventures in Wonderland", 2,938 tokens): one sequence's cache
at that length and its share of the all-global cache, perplexity, and next-token agreement with the model as
shipped; then the cache at SmolLM2's whole context (8,192 tokens). SmolLM2 was trained with every layer global,
so this is the price of a window without training for it. Nothing here is timed.
Run: python -m benchmarks.bench_local_global [--dtypes fp32 bf16]
Writes benchmarks/results/local_global.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
WINDOWS = [64, 128, 256, 512, 1024]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES), default=list(DTYPES))
    args = parser.parse_args()
    from kvcourse.kernels.measure.latent_rank import HELD_OUT_SOURCE, held_out_text
    from kvcourse.kernels.measure.local_global import SINKS, local_global_layout, window_sweep

    result: dict = {"text": HELD_OUT_SOURCE, "pattern": "5 local layers, then 1 global (Gemma 3)"}
    for name in args.dtypes:
        model, _, tokenizer = load_engine_model(DTYPES[name])
        ids = tokenizer(held_out_text())["input_ids"]
        table = window_sweep(model, ids, WINDOWS, sinks=SINKS)
        print(f"{name}: {len(ids)} tokens\n{table.round(4).to_string()}")
        context = model.config.max_position_embeddings
        at_context = {
            ("all global" if w == context else f"window {w}"): local_global_layout(
                model.config, w, model.dtype.itemsize
            )
            .bytes_at(context)
            .total
            for w in [context, *WINDOWS]
        }
        print(
            f"  one sequence at {context:,} tokens: "
            + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in at_context.items())
        )
        result[name] = {"tokens": len(ids), "sweep": table.round(4).to_dict(orient="index"), "at_context": at_context}
    print(f"written to {write_result('local_global', result)}")


if __name__ == "__main__":
    main()
