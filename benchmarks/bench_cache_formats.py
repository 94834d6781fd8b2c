"""The cache formats side by side on the real model (issue 45): bytes per token against what each costs in quality.

For SmolLM2 in each dtype, on one held-out text (chapter I of "Alice's Adventures in Wonderland", public domain,
about 3,000 tokens: kernels/measure/texts.py, lesson 23's text, so the two lessons' figures compare):
perplexity and next-token agreement with the model reading its keys and values as
computed, against the same through the int8 cache (lesson 16), FP8 E4M3 with a scale per layer, and the
KIVI-style 2-bit cache (fed 32 tokens a step, so its newest tokens stay in full precision as in a decode);
beside each, the bytes a token takes in that format. Then why KIVI groups keys by channel: the share of K's and
V's energy in their 4 largest channels, and each quantised to 2 bits both ways (kernels/measure/kv_grouping.py),
averaged over the layers. Nothing here is timed.
Run: python -m benchmarks.bench_cache_formats [--dtypes fp32 bf16]
Writes benchmarks/results/cache_formats.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FORMATS = {"as computed": ("none", None), "int8": ("int8", None), "fp8": ("fp8", None), "kivi2": ("kivi2", 32)}


def text_ids(tokenizer) -> list[int]:
    from kvcourse.kernels.measure.latent_rank import held_out_text

    return tokenizer(held_out_text())["input_ids"]


def formats(model, ids: list[int]) -> dict:
    from kvcourse.kernels import costs
    from kvcourse.kernels.measure.agreement import all_logits
    from kvcourse.kernels.measure.perplexity import perplexity_of

    config, model_bytes = model.config, model.dtype.itemsize
    per_token = {
        "as computed": costs.kv_bytes_per_token(config, model_bytes),
        "int8": costs.quantized_kv_bytes_per_token(config, 1, 4),
        "fp8": costs.fp8_kv_bytes_per_token(config),
        "kivi2": costs.kivi_kv_bytes_per_token(config),
    }
    reference = all_logits(model, ids).argmax(-1)
    rows = {}
    for name, (cache, chunk) in FORMATS.items():
        logits = all_logits(model, ids, cache, chunk)
        rows[name] = {
            "bytes per token": per_token[name],
            "perplexity": round(perplexity_of(logits, ids), 3),
            "next-token agreement": round(float((logits.argmax(-1) == reference).float().mean()), 4),
        }
        print(
            f"  {name:12s} {per_token[name]:6,} bytes per token, perplexity {rows[name]['perplexity']:7.3f}, "
            f"next token as computed at {rows[name]['next-token agreement']:.1%} of positions"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES), default=list(DTYPES))
    args = parser.parse_args()
    from kvcourse.kernels.measure.kv_grouping import kv_grouping
    from kvcourse.kernels.measure.latent_rank import HELD_OUT_SOURCE

    result: dict = {}
    for name in args.dtypes:
        model, _, tokenizer = load_engine_model(DTYPES[name])
        ids = text_ids(tokenizer)
        print(f"{name}: {len(ids)} tokens")
        grouping = kv_grouping(model, ids).mean().round(3).to_dict()
        print("  2-bit error by grouping (mean over layers): " + ", ".join(f"{k} {v}" for k, v in grouping.items()))
        result[name] = {
            "text": HELD_OUT_SOURCE,
            "tokens": len(ids),
            "formats": formats(model, ids),
            "grouping": grouping,
        }
    print(f"written to {write_result('cache_formats', result)}")


if __name__ == "__main__":
    main()
