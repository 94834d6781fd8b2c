"""N-gram speculative decoding on SmolLM2, batch 1, greedy: tokens per second with and without drafts (issue 46).

Two chat prompts through SmolLM2-135M-Instruct's chat template, served alone (batch 1), greedy, float32:
- ``grounded``: "Repeat the following text exactly" and the second paragraph of the held-out text (chapter I
  of "Alice's Adventures in Wonderland", ``kernels.measure.texts.held_out_text``): an input-grounded task,
  where the answer's runs are already in the prompt and prompt lookup finds them;
- ``free``: a free chat question, where the answer is new text and drafts are mostly wrong.
Each runs on the plain engine and on the engine with n-gram speculation (``SpeculativeConfig(k)``, n-grams of 3
down to 1 tokens), side by side in interleaved rounds (``benchmarks.common.interleaved``). Reported per task:
tokens per second of each (median of the rounds), the per-round speedup, the acceptance rate (drafts accepted
over drafts proposed), tokens per verifying step, and whether the tokens equal plain decoding (float32: they
must). The CPU and thread count are in the JSON's header. Run: python -m benchmarks.bench_speculative
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common import interleaved, paired_ratio, summary, write_result
from benchmarks.engine_setup import load_engine_model
from kvcourse.kernels.measure.speculative import FREE_QUESTION, task_prompts

K_VALUES, MAX_NEW_TOKENS, ROUNDS = (4,), 48, 2  # short: the whole run within about 2 minutes


def prompts(tokenizer: Any) -> dict[str, list[int]]:
    """The two tasks' prompt token ids, through the chat template: lesson 28's (``speculative.task_prompts``)."""
    from kvcourse.kernels.measure.texts import held_out_text

    return task_prompts(tokenizer, held_out_text())


def main() -> None:
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
    from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig

    model, _, tokenizer = load_engine_model()
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, stop_on_eos=False)
    engines = {"plain": LLMEngine(model, EngineConfig())} | {
        f"k{k}": LLMEngine(model, EngineConfig(speculation=SpeculativeConfig(k))) for k in K_VALUES
    }
    results: dict[str, Any] = {}
    for task, prompt in prompts(tokenizer).items():
        tokens: dict[str, list[int]] = {}
        steps: dict[str, int] = {}

        def measure(name: str, prompt: list[int] = prompt, tokens: dict = tokens, steps: dict = steps) -> float:
            engine = engines[name]
            before, start = engine.num_steps, time.perf_counter()
            out = engine.generate([prompt], params)[0]
            seconds = time.perf_counter() - start
            tokens[name], steps[name] = out.tokens, engine.num_steps - before
            return seconds

        print(f"{task}: {len(prompt)} prompt tokens, {MAX_NEW_TOKENS} new", flush=True)
        seconds = interleaved({name: (lambda name=name: measure(name)) for name in engines}, ROUNDS)
        rows: dict[str, Any] = {}
        for name, engine in engines.items():
            counts = list(engine.speculator.counts.values())
            drafted, accepted = sum(c.drafted for c in counts), sum(c.accepted for c in counts)
            engine.speculator.counts.clear()
            rows[name] = {
                "tokens_per_s": summary([len(tokens[name]) / s for s in seconds[name]]),
                "seconds": summary(seconds[name]),
                "forward_passes": steps[name],
                "tokens_equal_to_plain": tokens[name] == tokens["plain"],
                "acceptance_rate": accepted / drafted if drafted else None,
                "drafted": drafted,
                "accepted": accepted,
            }
            if name != "plain":
                rows[name]["speedup"] = paired_ratio(seconds["plain"], seconds[name])
        results[task] = {"prompt_tokens": len(prompt), "answer": tokenizer.decode(tokens["plain"]), "rows": rows}
        for name, row in rows.items():
            rate = row["acceptance_rate"]
            print(
                f"  {name:>5}: {row['tokens_per_s']['median']:6.1f} tokens/s, {row['forward_passes']} passes, "
                f"acceptance {'-' if rate is None else f'{rate:.0%}'}, "
                f"speedup {row.get('speedup', {}).get('ratio_of_medians', 1.0):.2f}x, "
                f"equal {row['tokens_equal_to_plain']}",
                flush=True,
            )
    path = write_result(
        "speculative",
        {
            "workload": {
                "model": "SmolLM2-135M-Instruct",
                "dtype": "float32",
                "batch": 1,
                "greedy": True,
                "max_new_tokens": MAX_NEW_TOKENS,
                "k_values": list(K_VALUES),
                "ngram": "3 down to 1",
                "rounds": ROUNDS,
                "free_question": FREE_QUESTION,
            },
            "results": results,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
