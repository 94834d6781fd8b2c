"""Lesson 27's parameterised quick checks: the seconds to move a cache over a link, and whether restoring or
recomputing a prompt is faster on a GPU server.

``restore_seconds``: a drawn shape's bytes per token (K and V, every layer and KV head, ``bytes_per_value`` each,
``costs.kv_bytes_per_token``) times the tokens, over a link of ``bandwidth_gbs`` GB/s (GB = 10^9 bytes).
``which_wins``: a drawn model (its parameters and its bf16 cache per token), a prompt length, a link and a restore's
fixed part; recomputing runs at half of an H100's dense BF16 peak, 2 x parameters FLOPs a token
(simulators/tier_model.py's ``prefill_rate``); the answer is 1 when restoring is faster, 2 when recomputing is. The
draws never come within 10 % of a tie, and both answers occur (tests/quizzes/test_quiz_bank_27.py checks both).
formulas.py registers the formulas and adds ``facts_tier``'s words to the names a prompt may use.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels import costs
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.simulators.tier_model import H100_TFLOPS, UTILISATION, Tier, TierConfig, prefill_rate

# name -> (parameters, layers, KV heads, head dim): Meta's model cards and config.json files
TIER_MODELS: dict[str, tuple[float, int, int, int]] = {
    "Llama 3.2 1B": (1.24e9, 16, 8, 64),
    "Llama 3.1 8B": (8.03e9, 32, 8, 128),
    "Llama 3.1 70B": (70.6e9, 80, 8, 128),
}
MODEL_ORDER = tuple(TIER_MODELS)  # the drawn ``tier_model`` is an index into this, from 1


def _shape(num_layers: int, kv_heads: int, head_dim: int) -> ModelConfig:
    """A shape of which only the cache's fields matter."""
    return ModelConfig(num_layers=num_layers, num_heads=4 * kv_heads, num_kv_heads=kv_heads, head_dim=head_dim,
                       hidden_size=4 * kv_heads * head_dim, intermediate_size=4, vocab_size=8)  # fmt: skip


def restore_seconds(values: dict[str, Any]) -> float:
    """Seconds to move the drawn tokens' K/V over the drawn link."""
    shape = _shape(values["num_layers"], values["kv_heads"], values["head_dim"])
    per_token = costs.kv_bytes_per_token(shape, values["bytes_per_value"])
    return values["tokens"] * per_token / (values["bandwidth_gbs"] * 1e9)


def tier_case(values: dict[str, Any]) -> Tier:
    """The drawn case as lesson 27's simulator: the model's bf16 cache, the link, the fixed part, the prefill rate."""
    params, layers, heads, dim = TIER_MODELS[MODEL_ORDER[values["tier_model"] - 1]]
    config = TierConfig(
        tokens=values["prompt_tokens"],
        bytes_per_token=costs.kv_bytes_per_token(_shape(layers, heads, dim), 2),
        bandwidth_gbs=float(values["link_gbs"]),
        prefill_tokens_per_s=prefill_rate(params, H100_TFLOPS, UTILISATION),
        fixed_us=1000.0 * values["fixed_ms"],
    )
    return Tier(config)


def which_wins(values: dict[str, Any]) -> float:
    """1 when restoring the drawn prompt is faster than recomputing it, 2 when recomputing is."""
    return 1.0 if tier_case(values).restore_wins() else 2.0


def facts_tier(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 27's names: the drawn model written out, and both times (for the explanation)."""
    if "tier_model" not in values:
        return {}
    name = MODEL_ORDER[values["tier_model"] - 1]
    params, layers, heads, dim = TIER_MODELS[name]
    per_token = costs.kv_bytes_per_token(_shape(layers, heads, dim), 2)
    out: dict[str, Any] = {
        "tier_model_text": (
            f"{name}: {params / 1e9:g} billion parameters, {layers} layers of {heads} KV heads of {dim} values, "
            f"its cache in bf16 ({per_token:,} bytes per token)"
        ),
        "peak_text": f"{H100_TFLOPS:,.0f} TFLOP/s dense BF16 at {UTILISATION:.0%} utilisation",
    }
    if {"prompt_tokens", "link_gbs", "fixed_ms"} <= values.keys():  # the whole case drawn (a prompt shows one value)
        case = tier_case(values)
        out |= {
            "restore_ms": 1e3 * case.restore_s(),
            "recompute_ms": 1e3 * case.recompute_s(),
            "prefill_rate": case.config.prefill_tokens_per_s,
        }
    return out
