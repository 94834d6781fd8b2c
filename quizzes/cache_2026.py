"""Lesson 22's parameterised quick checks: a 2026 config's cache at a context, and which model fits a card.

The configs are published ones (config.json fields named beside each), described to the learner in words and
computed with ``kernels/cache_layout.py``, as the lesson does. The card scenarios put three models of
``LAYOUTS_2026`` on one card with their weights as published (``context_windows.PUBLISHED_2026``), 16-bit
caches, nothing held back; in each exactly one fits (tests/quizzes/test_quiz_bank_22.py checks it). formulas.py
registers the formulas and adds these facts to the names a prompt may use.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.cache_layout import CacheLayout, full, latent, window
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.context_windows import PUBLISHED_2026

GIB = 2**30

# A published config in words, and its layout (16-bit cache).
CONFIGS_2026: dict[int, tuple[str, CacheLayout]] = {
    # deepseek-ai/DeepSeek-V3: num_hidden_layers 61, kv_lora_rank 512, qk_rope_head_dim 64
    1: (
        "DeepSeek-V3 has 61 layers of multi-head latent attention; each layer caches, per token, one latent vector "
        "of 512 values and one RoPE key of 64 values shared by its 128 heads",
        CacheLayout((latent(61, 512, 64),)),
    ),
    # deepseek-ai/DeepSeek-V2-Lite: num_hidden_layers 27, kv_lora_rank 512, qk_rope_head_dim 64
    2: (
        "DeepSeek-V2-Lite has 27 layers of multi-head latent attention; each layer caches, per token, one latent "
        "vector of 512 values and one RoPE key of 64 values shared by its 16 heads",
        CacheLayout((latent(27, 512, 64),)),
    ),
    # google/gemma-3-27b-it: 62 layers, 16 KV heads of 128, sliding_window 1024, five local layers per global one
    3: (
        "Gemma-3-27B has 62 layers, each with 16 key/value heads of 128 values; 52 of them are local layers that "
        "attend to the last 1,024 tokens only, and 10 are global layers that attend to every token",
        LAYOUTS_2026["gemma-3-27b"],
    ),
    # google/gemma-3-12b-it: 48 layers, 8 KV heads of 256, sliding_window 1024, five local layers per global one
    4: (
        "Gemma-3-12B has 48 layers, each with 8 key/value heads of 256 values; 40 of them are local layers that "
        "attend to the last 1,024 tokens only, and 8 are global layers that attend to every token",
        CacheLayout((window(40, 8, 256, 1024), full(8, 8, 256))),
    ),
    # meta-llama/Llama-4-Scout-17B-16E: 48 layers, 8 KV heads of 128, attention_chunk_size 8192 on 3 layers in 4
    5: (
        "Llama-4-Scout has 48 layers, each with 8 key/value heads of 128 values; 36 of them attend only within chunks "
        "of 8,192 tokens, so each keeps at most 8,192 tokens (count that many), and 12 attend to every token",
        LAYOUTS_2026["llama-4-scout"],
    ),
}

# Card scenarios: the card's memory as sold (GB on the box, GiB on the card), users, tokens each, three models.
FIT_SCENARIOS: dict[int, tuple[int, int, int, tuple[str, str, str]]] = {
    1: (80, 16, 32_768, ("gemma-3-27b", "gpt-oss-120b", "qwen3-32b")),
    2: (141, 16, 131_072, ("llama-3.1-8b", "gemma-3-27b", "gpt-oss-120b")),
    3: (80, 4, 131_072, ("llama-3.1-8b", "gemma-3-27b", "mistral-small-3.1")),
    4: (24, 4, 32_768, ("gpt-oss-20b", "llama-3.1-8b", "qwen3-8b")),
}


def config_bytes(values: dict[str, Any]) -> float:
    """One user's 16-bit cache at the drawn context: growing + bounded parts."""
    return CONFIGS_2026[values["config_2026"]][1].bytes_at(values["context_tokens"]).total


def scenario_needs(scenario: int) -> list[int]:
    """Each model's bytes on the scenario's card: its weights plus every user's cache at the context."""
    _, users, context, names = FIT_SCENARIOS[scenario]
    return [PUBLISHED_2026[name].weight_bytes + users * LAYOUTS_2026[name].bytes_at(context).total for name in names]


def model_that_fits(values: dict[str, Any]) -> float:
    """The number (1, 2 or 3) of the scenario's one model that fits its card."""
    card = FIT_SCENARIOS[values["fit_scenario"]][0] * GIB
    (number,) = [i for i, need in enumerate(scenario_needs(values["fit_scenario"]), start=1) if need <= card]
    return number


def _model_words(name: str, context: int) -> str:
    layout, weights = LAYOUTS_2026[name], PUBLISHED_2026[name].weight_bytes
    bounded = layout.bytes_at(context).bounded
    windows = f" plus {bounded / 1e6:,.1f} MB per user for its windows at that length" if bounded else ""
    return f"{name}, {weights / 1e9:,.1f} GB of weights, {layout.per_token_bytes:,} bytes per token{windows}"


def facts_2026(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 22's names: a config in words and its parts; a card scenario written out."""
    out: dict[str, Any] = {}
    if "config_2026" in values:
        text, layout = CONFIGS_2026[values["config_2026"]]
        at = layout.bytes_at(values.get("context_tokens", 0))
        out["config_text"] = text
        out["token_bytes"] = layout.per_token_bytes
        out["bounded_bytes"] = at.bounded
        out["growing_bytes"] = at.growing
        # the slips: a window layer counted as if it kept every token; a latent without its RoPE key
        every = sum(g.num_layers * g.values_per_token for g in layout.groups) * layout.bytes_per_value
        out["all_growing_bytes"] = every * values.get("context_tokens", 0)
        rope = sum(g.num_layers * 64 for g in layout.groups if g.kind == "latent") * layout.bytes_per_value
        out["no_rope_bytes"] = at.total - rope * values.get("context_tokens", 0) if rope else -1
    if "fit_scenario" in values:
        card_gb, users, context, names = FIT_SCENARIOS[values["fit_scenario"]]
        needs = scenario_needs(values["fit_scenario"])
        out.update(card_gb=card_gb, users=users, context=context, card_bytes=card_gb * GIB)
        out["models_text"] = "; ".join(f"({i}) {_model_words(n, context)}" for i, n in enumerate(names, start=1))
        out["needs_text"] = "; ".join(f"({i}) {need / 1e9:,.1f} GB" for i, need in enumerate(needs, start=1))
    return out
