"""Lesson 25's parameterised quick checks: one sequence's 2-bit cache at a context, its scales and its recent tokens
counted, and the most precise of three formats whose cache fits a memory budget.

Both are computed with the engine's layout (``kvcourse.kernels.measure.low_bit.format_bytes``): a 2-bit cache in
KIVI's manner stores codes four to a byte, a float16 low and step per key channel for every ``group`` tokens and per
``group`` value channels for every token, and keeps its newest tokens in 16 bits (the draws make that exactly
``residual`` tokens: the context less the residual is a whole number of groups); FP8 stores a byte per value and
one float32 scale per layer for K and for V. The budget scenarios name a shape, a number of sequences, a context and
a budget; the answer (16, 8 or 2 bits) differs from scenario to scenario and one format always fits
(tests/quizzes/test_quiz_bank_25.py checks it). formulas.py registers the formulas and adds the scenarios' words to
the names a prompt may use.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.measure.low_bit import format_bytes
from kvcourse.kernels.model.config import ModelConfig

MIB = 2**20
BYTES_PER_VALUE = 2  # the plain cache and the 2-bit cache's recent tokens: 16 bits
FORMATS = {16: "as computed", 8: "fp8", 2: "kivi2"}  # bits -> the engine format
FORMAT_WORDS = {
    16: "16-bit (no scales)",
    8: "FP8 E4M3 (one float32 scale per layer for K and for V)",
    2: "2-bit, keys by channel and values by token (groups of 32, the newest 128 tokens in 16 bits)",
}
BUDGET_RESIDUAL = 128  # the budget scenarios' recent tokens


def _shape(num_layers: int, kv_heads: int, head_dim: int) -> ModelConfig:
    """A shape of which only the cache's fields matter."""
    return ModelConfig(num_layers=num_layers, num_heads=4 * kv_heads, num_kv_heads=kv_heads, head_dim=head_dim,
                       hidden_size=4 * kv_heads * head_dim, intermediate_size=4, vocab_size=8)  # fmt: skip


def kivi_bytes(values: dict[str, Any]) -> float:
    """The drawn 2-bit cache at the drawn context: old tokens at 2 bits with their scales, the newest in 16 bits."""
    shape = _shape(values["num_layers"], values["kv_heads"], values["head_dim"])
    return format_bytes(shape, "kivi2", values["context_tokens"], BYTES_PER_VALUE, values["group"],
                        values["residual"]).total  # fmt: skip


# Budget scenarios: (layers, KV heads, head dim, sequences, context per sequence, budget in MiB).
FORMAT_SCENARIOS: dict[int, tuple[int, int, int, int, int, int]] = {
    1: (32, 8, 128, 8, 32_768, 20_000),
    2: (64, 8, 128, 1, 131_072, 12_000),
    3: (36, 8, 128, 4, 8_192, 6_000),
    4: (80, 8, 128, 64, 2_048, 24_000),
}


def scenario_needs(scenario: int) -> dict[int, int]:
    """Each format's cache (bits -> bytes) for the scenario's sequences, each at its context."""
    layers, heads, dim, sequences, context, _ = FORMAT_SCENARIOS[scenario]
    shape = _shape(layers, heads, dim)
    return {
        bits: sequences * format_bytes(shape, name, context, BYTES_PER_VALUE, residual=BUDGET_RESIDUAL).total
        for bits, name in FORMATS.items()
    }


def format_that_fits(values: dict[str, Any]) -> float:
    """The bits per value of the most precise format whose cache fits the scenario's budget."""
    budget = FORMAT_SCENARIOS[values["format_scenario"]][5] * MIB
    return max(bits for bits, need in scenario_needs(values["format_scenario"]).items() if need <= budget)


def facts_low_bit(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 25's names: a budget scenario written out, and each format's need (for explanations)."""
    if "format_scenario" not in values:
        return {}
    layers, heads, dim, sequences, context, budget = FORMAT_SCENARIOS[values["format_scenario"]]
    needs = scenario_needs(values["format_scenario"])
    return {
        "format_scenario_text": (
            f"A model has {layers} layers, each with {heads} key/value heads of {dim} values. {sequences:,} "
            f"sequence{'s' if sequences > 1 else ''} of {context:,} tokens each must fit in {budget:,} MiB of cache"
        ),
        "formats_text": "; ".join(FORMAT_WORDS.values()),
        "format_needs_text": "; ".join(f"{FORMAT_WORDS[b]}: {need / MIB:,.0f} MiB" for b, need in needs.items()),
    }
