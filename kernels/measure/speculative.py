"""Lesson 28's measurements: n-gram speculative decoding on the engine, with and without drafts (issue 46).

Two chat prompts, served alone (batch 1) and greedily: ``grounded`` asks the model to repeat a paragraph of the
held-out text, so the answer's runs are already in the prompt and prompt lookup finds them; ``free`` is a free
chat question, whose answer is new text. ``with_and_without`` serves each on a plain engine and on one with
``SpeculativeConfig(k)``, interleaved, and tabulates the decoding after the first token (the prefill both share):
tokens per second (the fastest round), forward passes, what a pass cost against a plain one, the acceptance rate,
and whether the tokens equal plain greedy decoding (and for how many tokens they agree). The tasks are those of
benchmarks/bench_speculative.py. ``min_ngram_counts``: drafts proposed and accepted per shortest n-gram.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.kernels.engine.sampling import SamplingParams

FREE_QUESTION = "Write a short story about a lighthouse keeper who finds a message in a bottle."
INSTRUCTION = "Repeat the following text exactly:"


def task_prompts(tokenizer: Any, text: str) -> dict[str, list[int]]:
    """The two tasks' prompt token ids through the chat template: repeat ``text``'s second long paragraph, and a
    free question."""
    paragraph = [p for p in text.split("\n\n") if len(p) > 300][1].replace("\n", " ")
    users = {"grounded": f"{INSTRUCTION}\n\n{paragraph}", "free": FREE_QUESTION}
    return {
        task: tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], add_generation_prompt=True, return_tensors="pt"
        )["input_ids"][0].tolist()
        for task, user in users.items()
    }


def speculative_engine(model: Any, k: int, min_ngram: int = 1) -> LLMEngine:
    """An engine drafting up to ``k`` tokens a step from n-grams of 3 down to ``min_ngram`` tokens."""
    return LLMEngine(model, EngineConfig(speculation=SpeculativeConfig(k, max_ngram=3, min_ngram=min_ngram)))


def serve(engine: LLMEngine, prompt: list[int], new_tokens: int) -> tuple[list[int], float, int]:
    """One greedy answer of ``new_tokens`` tokens: its tokens, and the seconds and forward passes after the first
    token (the decoding, without the prefill both engines share)."""
    params = SamplingParams(max_new_tokens=new_tokens, stop_on_eos=False)
    out = engine.generate([prompt], params)[0]
    latency = out.latency
    assert latency is not None
    return out.tokens, latency.e2e_s - latency.ttft_s, latency.finish_step - latency.first_token_step


def agree_for(a: list[int], b: list[int]) -> int:
    """How many tokens two answers share before they first differ."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def speed_words(speedup: float, options: list[str]) -> str:
    """The lesson's four answers for a speedup: slower (under 0.9x), about the same, under 1.5x, 1.5x or more."""
    return options[0 if speedup < 0.9 else 1 if speedup <= 1.1 else 2 if speedup < 1.5 else 3]


def drafts(engine: LLMEngine) -> tuple[int, int]:
    """Drafts proposed and accepted over the engine's requests so far; clears its counts."""
    counts = list(engine.speculator.counts.values())
    engine.speculator.counts.clear()
    return sum(c.drafted for c in counts), sum(c.accepted for c in counts)


def with_and_without(model: Any, prompts: dict[str, list[int]], new_tokens: int, k: int, rounds: int) -> pd.DataFrame:
    """Per task: the plain engine against n-gram speculation with ``k`` drafts, ``rounds`` interleaved rounds."""
    plain, spec = LLMEngine(model, EngineConfig()), speculative_engine(model, k)
    rows = {}
    for task, prompt in prompts.items():
        seconds: dict[str, list[float]] = {"plain": [], "spec": []}
        for _ in range(rounds):
            want, s, plain_passes = serve(plain, prompt, new_tokens)
            seconds["plain"].append(s)
            drafts(spec)
            have, s, spec_passes = serve(spec, prompt, new_tokens)
            seconds["spec"].append(s)
        drafted, accepted = drafts(spec)
        plain_s, spec_s = min(seconds["plain"]), min(seconds["spec"])
        rows[task] = {
            "prompt tokens": len(prompt),
            "plain tokens/s": (new_tokens - 1) / plain_s,
            "speculative tokens/s": (new_tokens - 1) / spec_s,
            "speedup": plain_s / spec_s,
            "acceptance": accepted / drafted if drafted else 0.0,
            "plain passes": plain_passes,
            "speculative passes": spec_passes,
            "tokens per pass": (new_tokens - 1) / spec_passes,
            "pass cost vs plain": (spec_s / spec_passes) / (plain_s / plain_passes),
            "same tokens": want == have,
            "agree for": agree_for(want, have),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def min_ngram_counts(model: Any, prompt: list[int], new_tokens: int, k: int, values: tuple[int, ...]) -> pd.DataFrame:
    """Per ``min_ngram``: drafts proposed and accepted, the acceptance rate and the passes, one answer each."""
    rows = {}
    for n in values:
        engine = speculative_engine(model, k, min_ngram=n)
        _, _, passes = serve(engine, prompt, new_tokens)
        drafted, accepted = drafts(engine)
        acceptance = accepted / drafted if drafted else 0.0
        rows[n] = {"drafted": drafted, "accepted": accepted, "acceptance": acceptance, "passes": passes}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("min_ngram")
