"""The paged engine's blocks per sequence with local layers (issue 45 item 3), read from its own block tables.

SmolLM2 serves the first 2,048 tokens of the held-out text (kernels/measure/latent_rank.py) and writes 64 more,
once with every layer global and once with Gemma 3's pattern (five local layers, then one global) at windows of
512 and 256 tokens (``EngineConfig.layer_windows``: a block table per group of five layers with one window, one
pool, a local group's blocks freed once they slide out of its window). Blocks of 16 tokens; the whole prompt in
one step (max_num_batched_tokens 2,048), then decode. The peak is the most blocks the sequence's tables held in
any step's record; a block holds every layer without windows, five with them, so the bytes compare the two.
Each run's tokens are checked against the attention-mask reference's first choices after the same prefix (all
of them in float32; bfloat16 parts at near ties, with every layer global as well). Nothing is timed.
Run: python -m benchmarks.bench_engine_windows [--dtypes fp32 bf16]
Writes benchmarks/results/engine_windows.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PROMPT_TOKENS, NEW_TOKENS, WINDOWS, BLOCK = 2048, 64, [512, 256], 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES), default=list(DTYPES))
    args = parser.parse_args()
    from kvcourse.kernels.measure.engine_windows import engine_peak_blocks
    from kvcourse.kernels.measure.latent_rank import HELD_OUT_SOURCE, held_out_text

    result: dict = {
        "text": HELD_OUT_SOURCE,
        "pattern": "5 local layers, then 1 global (Gemma 3)",
        "prompt_tokens": PROMPT_TOKENS,
        "new_tokens": NEW_TOKENS,
        "block_size": BLOCK,
    }
    for name in args.dtypes:
        model, _, tokenizer = load_engine_model(DTYPES[name])
        ids = tokenizer(held_out_text())["input_ids"][:PROMPT_TOKENS]
        table = engine_peak_blocks(model, ids, NEW_TOKENS, WINDOWS, block_size=BLOCK)
        print(f"{name}: {len(ids)} prompt tokens + {NEW_TOKENS}\n{table.round(4).to_string()}")
        result[name] = table.round(4).to_dict(orient="index")
    print(f"written to {write_result('engine_windows', result)}")


if __name__ == "__main__":
    main()
