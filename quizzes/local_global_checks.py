"""Lesson 24's parameterised quick checks: one sequence's cache with local and global layers at a context, and
the largest of three windows that fits a memory budget.

Both are computed with the engine's layout (``kvcourse.kernels.measure.local_global.local_global_layout``): the
layers laid out as ``local_global_windows`` does, ``local_per_global`` local layers and then one global, repeated
from the first layer, each local layer holding at most its window. The budget scenarios name a shape, a context,
a budget and three windows; the largest that fits is a different one from scenario to scenario, and at least one
fits (tests/quizzes/test_quiz_bank_24.py checks it). formulas.py registers the formulas and adds the scenarios'
words to the names a prompt may use.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.cache_layout import CacheBytes
from kvcourse.kernels.measure.local_global import local_global_layout
from kvcourse.kernels.model.config import ModelConfig

MIB = 2**20
BYTES_PER_VALUE = 2  # 16-bit caches throughout


def _shape(num_layers: int, kv_heads: int, head_dim: int) -> ModelConfig:
    """A shape of which only the cache's fields matter."""
    return ModelConfig(num_layers=num_layers, num_heads=4 * kv_heads, num_kv_heads=kv_heads, head_dim=head_dim,
                       hidden_size=4 * kv_heads * head_dim, intermediate_size=4, vocab_size=8)  # fmt: skip


def held(num_layers: int, kv_heads: int, head_dim: int, window: int, local_per_global: int, context: int) -> CacheBytes:
    """One sequence's 16-bit cache at ``context`` tokens, its local layers windowed to ``window`` tokens."""
    layout = local_global_layout(_shape(num_layers, kv_heads, head_dim), window, BYTES_PER_VALUE, local_per_global)
    return layout.bytes_at(context)


def hybrid_bytes(values: dict[str, Any]) -> float:
    """The drawn config's cache at the drawn context: global layers x context + local layers x window."""
    names = ("num_layers", "kv_heads", "head_dim", "window", "local_per_global", "context_tokens")
    return held(*(values[name] for name in names)).total


# Budget scenarios: (layers, KV heads, head dim, local per global, context, budget in MiB, three windows).
WINDOW_SCENARIOS: dict[int, tuple[int, int, int, int, int, int, tuple[int, int, int]]] = {
    1: (48, 8, 256, 5, 131_072, 9_000, (1024, 2048, 4096)),
    2: (62, 16, 128, 5, 131_072, 10_500, (512, 1024, 4096)),
    3: (36, 8, 64, 1, 32_768, 1_300, (512, 2048, 4096)),
    4: (24, 8, 128, 3, 65_536, 1_650, (1024, 2048, 8192)),
}


def scenario_needs(scenario: int) -> list[int]:
    """Each window's cache, in bytes, for one sequence at the scenario's context."""
    layers, heads, dim, per_global, context, _, windows = WINDOW_SCENARIOS[scenario]
    return [held(layers, heads, dim, w, per_global, context).total for w in windows]


def window_that_fits(values: dict[str, Any]) -> float:
    """The largest of the scenario's windows whose cache fits its budget, in tokens."""
    scenario = WINDOW_SCENARIOS[values["window_scenario"]]
    budget, windows = scenario[5] * MIB, scenario[6]
    needs = scenario_needs(values["window_scenario"])
    return max(w for w, need in zip(windows, needs, strict=True) if need <= budget)


def facts_local_global(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 24's names: a budget scenario written out, and each window's need (for explanations)."""
    if "window_scenario" not in values:
        return {}
    layers, heads, dim, per_global, context, budget, windows = WINDOW_SCENARIOS[values["window_scenario"]]
    needs = scenario_needs(values["window_scenario"])
    return {
        "scenario_text": (
            f"A model has {layers} layers, each with {heads} key/value heads of {dim} values, cached in 16 bits; "
            f"{per_global} local layer{'s' if per_global > 1 else ''} then one global layer, repeated from the first "
            f"layer. One sequence of {context:,} tokens must fit in {budget:,} MiB of cache"
        ),
        "windows_text": ", ".join(f"{w:,}" for w in windows),
        "needs_text": "; ".join(f"window {w:,}: {need / MIB:,.0f} MiB" for w, need in zip(windows, needs, strict=True)),
    }
