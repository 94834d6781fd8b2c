"""Parameterised questions: values drawn from a seed, answers computed by the engine (lessons 02-28).

A parameterised question names a formula here and lists the values each parameter may take.
The values are drawn from a seed (a learner's local seed, or a student id when grading), and
the answer is always computed, by kvcourse.kernels.costs where the engine has the formula, so
no answer is ever stored.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kvcourse.kernels import costs
from kvcourse.kernels.engine.latency import LatencyTargets, RequestTimes, latency_summary
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.quizzes import (
    cache_2026,
    latent_checks,
    local_global_checks,
    low_bit_checks,
    radix_checks,
    speculation_checks,
    tier_checks,
)

GB = 10**9
GIB = 2**30  # a card's memory is sized in GiB (lesson 08)
# One int8 convention across the bank (lesson 16): a 1-byte question counts the values only and says
# so; a question that counts the per-token scales says so in its own words (bank 16, int8_bytes).
_DTYPES = {1: "8-bit (int8, scales not counted)", 2: "16-bit (fp16/bf16)", 4: "32-bit (fp32)"}


@dataclass(frozen=True)
class Formula:
    """How a parameterised answer is computed from the drawn values."""

    params: tuple[str, ...]
    compute: Callable[[dict[str, Any]], float]


def _config(values: dict[str, Any]):
    return MODEL_CONFIGS[values["model"]]


def _no_cache_tokens(values: dict[str, Any]) -> float:
    return costs.tokens_processed(values["prompt_tokens"], values["new_tokens"], use_cache=False)


def _max_users(values: dict[str, Any]) -> float:
    # Weights first, then whole conversations of num_tokens each in what is left of a card of gpu_gib GiB.
    cfg = _config(values)
    free = values["gpu_gib"] * GIB - costs.weight_bytes(cfg, values["bytes_per_value"])
    per_user = costs.kv_cache_bytes(cfg, values["num_tokens"], 1, values["bytes_per_value"])
    return max(free, 0) // per_user


def _last_block_waste(values: dict[str, Any]) -> float:
    block_size, tokens = values["block_size"], values["num_tokens"]
    return math.ceil(tokens / block_size) * block_size - tokens


# Lesson 21's request logs: (arrival, first token, last token) in seconds and the output tokens, per request.
REQUEST_LOGS: dict[int, tuple[tuple[float, float, float, int], ...]] = {
    1: ((0.0, 0.3, 1.7, 33), (0.6, 1.8, 9.0, 81), (1.0, 1.6, 4.2, 33), (1.6, 2.2, 5.8, 81), (2.1, 2.8, 5.4, 41)),
    2: ((0.0, 0.7, 3.8, 49), (0.3, 0.5, 6.1, 81), (0.9, 2.3, 9.5, 81), (1.3, 1.7, 2.5, 21), (1.6, 3.0, 4.6, 21)),
    3: ((0.0, 0.3, 1.1, 21), (0.3, 1.0, 3.2, 49), (0.7, 1.0, 5.8, 81), (1.2, 2.0, 5.2, 41), (1.7, 1.9, 4.5, 41)),
}
# Lesson 21's budget tables: token budget -> (the chatting users' longest gap in ms, the document's TTFT in s).
# Under the bank's targets (gap at most 300 ms, TTFT at most 2 s) exactly one budget of each table meets both.
BUDGET_TABLES: dict[int, dict[int, tuple[int, float]]] = {
    1: {2048: (1450, 1.45), 1024: (760, 1.52), 512: (410, 1.66), 256: (230, 1.85), 128: (130, 2.21), 64: (80, 2.9)},
    2: {2048: (900, 1.30), 1024: (480, 1.48), 512: (260, 1.72), 256: (150, 2.15), 128: (95, 2.6), 64: (60, 3.4)},
    3: {2048: (2400, 1.2), 1024: (1250, 1.31), 512: (650, 1.44), 256: (350, 1.7), 128: (190, 1.92), 64: (110, 2.45)},
    4: {2048: (520, 1.75), 1024: (280, 1.9), 512: (160, 2.2), 256: (90, 2.6), 128: (55, 3.3), 64: (40, 4.5)},
}
BUDGET_TARGETS = (300, 2.0)  # the longest gap in ms, the document's TTFT in s


def _log_latencies(log: int, naive_tpot: bool = False) -> list:
    """The requests of a log as the engine's RequestLatency records (its TTFT and TPOT definitions)."""
    out = []
    for arrival, first, last, tokens in REQUEST_LOGS[log]:
        times = RequestTimes(0, arrival)
        times.add_tokens(1, 1, first)
        times.add_tokens(tokens - 1, 2, last)  # the gaps' spread does not change TPOT, their mean
        times.finish(2, last)
        latency = times.latency()
        assert latency is not None  # finished, with tokens
        if naive_tpot:  # the slip: end to end over every token, the first one's wait included
            latency = dataclasses.replace(latency, tpot_s=latency.e2e_s / tokens)
        out.append(latency)
    return out


def _goodput(values: dict[str, Any], ttft: bool = True, tpot: bool = True, naive_tpot: bool = False) -> float:
    targets = LatencyTargets(
        ttft_s=values["ttft_target_s"] if ttft else None, tpot_s=values["tpot_target_ms"] / 1e3 if tpot else None
    )
    summary = latency_summary(_log_latencies(values["request_log"], naive_tpot), targets)
    assert summary.goodput_per_s is not None
    return summary.goodput_per_s


def _budget_meeting_targets(values: dict[str, Any]) -> float:
    gap_ms, ttft_s = BUDGET_TARGETS
    table = BUDGET_TABLES[values["budget_table"]]
    (budget,) = [b for b, (gap, ttft) in table.items() if gap <= gap_ms and ttft <= ttft_s]
    return budget


def _transfer_bytes(values: dict[str, Any]) -> float:
    return LAYOUTS_2026[values["model_2026"]].bytes_at(values["prompt_tokens"]).total


TIER_LINK = ("num_layers", "kv_heads", "head_dim", "bytes_per_value", "tokens", "bandwidth_gbs")  # lesson 27
CHAT_TURN = ("prev_prompt", "answer_tokens", "message_tokens", "block_size")  # lesson 26: a turn, its blocks

FORMULAS: dict[str, Formula] = {
    "kv_bytes_per_token": Formula(
        ("model", "bytes_per_value"), lambda v: costs.kv_bytes_per_token(_config(v), v["bytes_per_value"])
    ),
    "kv_cache_bytes": Formula(
        ("model", "num_tokens", "num_users", "bytes_per_value"),
        lambda v: costs.kv_cache_bytes(_config(v), v["num_tokens"], v["num_users"], v["bytes_per_value"]),
    ),
    "weight_bytes": Formula(
        ("model", "bytes_per_value"), lambda v: costs.weight_bytes(_config(v), v["bytes_per_value"])
    ),
    "max_cached_tokens": Formula(
        ("model", "free_gb", "bytes_per_value"),
        lambda v: costs.max_cached_tokens(_config(v), v["free_gb"] * GB, v["bytes_per_value"]),
    ),
    "max_users": Formula(("model", "gpu_gib", "num_tokens", "bytes_per_value"), _max_users),
    "causal_score_cells": Formula(
        ("num_tokens",), lambda v: costs.score_cells_per_head(v["num_tokens"], v["num_tokens"])
    ),
    "int8_kv_bytes_per_token": Formula(("model",), lambda v: costs.quantized_kv_bytes_per_token(_config(v), 1, 4)),
    "no_cache_tokens": Formula(("prompt_tokens", "new_tokens"), _no_cache_tokens),
    "last_block_waste": Formula(("block_size", "num_tokens"), _last_block_waste),
    "goodput_from_log": Formula(("request_log", "ttft_target_s", "tpot_target_ms"), _goodput),
    "budget_meeting_targets": Formula(("budget_table",), _budget_meeting_targets),
    "disaggregated_transfer_bytes": Formula(("model_2026", "prompt_tokens"), _transfer_bytes),
    # lesson 22 (cache_2026.py): a 2026 config's cache at a context; the one model of three that fits a card
    "cache_2026_bytes": Formula(("config_2026", "context_tokens"), cache_2026.config_bytes),
    "model_that_fits": Formula(("fit_scenario",), cache_2026.model_that_fits),
    # lesson 23 (latent_checks.py): a latent cache's bytes per token, its RoPE key counted
    "latent_bytes_per_token": Formula(
        ("num_layers", "latent_rank", "rope_dims", "bytes_per_value"), latent_checks.latent_bytes_per_token
    ),
    # lesson 24 (local_global_checks.py): local and global layers' cache at a context; the window that fits a budget
    "local_global_bytes": Formula(
        ("num_layers", "kv_heads", "head_dim", "local_per_global", "window", "context_tokens"),
        local_global_checks.hybrid_bytes,
    ),
    "largest_window_that_fits": Formula(("window_scenario",), local_global_checks.window_that_fits),
    # lesson 25 (low_bit_checks.py): a 2-bit cache with its scales and recent tokens; the format that fits a budget
    "kivi_cache_bytes": Formula(
        ("num_layers", "kv_heads", "head_dim", "group", "residual", "context_tokens"), low_bit_checks.kivi_bytes
    ),
    "format_that_fits": Formula(("format_scenario",), low_bit_checks.format_that_fits),
    # lesson 26 (radix_checks.py): a chat turn's prompt tokens found by the radix tree and by the hash chain
    "radix_tokens_found": Formula(CHAT_TURN, radix_checks.radix_found),
    "hash_tokens_found": Formula(CHAT_TURN, radix_checks.hash_found),
    # lesson 27 (tier_checks.py): seconds to move a cache over a link; restore or recompute on a GPU server
    "restore_seconds": Formula(TIER_LINK, tier_checks.restore_seconds),
    "which_wins": Formula(("tier_model", "prompt_tokens", "link_gbs", "fixed_ms"), tier_checks.which_wins),
    # lesson 28 (speculation_checks.py): blocks a rollback frees; tokens a verifying pass yields
    "blocks_freed": Formula(("computed", "block_size", "k", "accepted"), speculation_checks.blocks_freed),
    "tokens_per_pass": Formula(("rate_pct", "k"), speculation_checks.tokens_per_pass),
}


class Parameterised(Protocol):
    """What drawing and computing read of a parameterised question: model.py's Question has it all.

    Named by shape, not imported: model.py checks a question's formula against FORMULAS, so this module
    sits below model.py and never imports it.
    """

    @property
    def lesson(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def params(self) -> tuple[tuple[str, tuple], ...]: ...

    @property
    def formula(self) -> str | None: ...


def draw_params(question: Parameterised, seed: str) -> dict[str, Any]:
    """The values this seed draws for this question: the same seed always draws the same values."""
    digest = hashlib.sha256(f"{seed}|{question.lesson}|{question.id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return {name: rng.choice(values) for name, values in sorted(question.params)}


def compute_answer(question: Parameterised, values: dict[str, Any]) -> float:
    """The right answer for these drawn values."""
    return float(FORMULAS[question.formula].compute(values))


def facts(values: dict[str, Any]) -> dict[str, Any]:
    """The names a prompt may use: the drawn values, the model's shape and a dtype in words."""
    out = dict(values)
    if "model" in values:
        cfg = MODEL_CONFIGS[values["model"]]
        for name in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size"):
            out.setdefault(name, getattr(cfg, name))
        out.setdefault("num_parameters", costs.num_parameters(cfg))
    out.update(_serving_facts(values))
    out.update(cache_2026.facts_2026(values))
    out.update(local_global_checks.facts_local_global(values))
    out.update(low_bit_checks.facts_low_bit(values))
    out.update(tier_checks.facts_tier(values))
    out.update(speculation_checks.facts_speculation(values))
    if "bytes_per_value" in values:
        out["dtype"] = _DTYPES.get(values["bytes_per_value"], f"{values['bytes_per_value']}-byte")
    return out


def _serving_facts(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 21's names: a request log or a budget table written out, a 2026 model's cache per layer."""
    out: dict[str, Any] = {}
    if "request_log" in values:
        rows = REQUEST_LOGS[values["request_log"]]
        out["log_text"] = "; ".join(
            f"request {i}: arrives at {a:g} s, first token at {f:g} s, last token at {t:g} s, {n} tokens"
            for i, (a, f, t, n) in enumerate(rows, start=1)
        )
        out["log_seconds"] = max(t for _, _, t, _ in rows) - min(a for a, _, _, _ in rows)
        if {"ttft_target_s", "tpot_target_ms"} <= values.keys():  # the slips, as rates (planted mistakes)
            out["rate_ttft_only"] = _goodput(values, tpot=False)
            out["rate_tpot_only"] = _goodput(values, ttft=False)
            out["rate_naive_tpot"] = _goodput(values, naive_tpot=True)
    if "budget_table" in values:
        table = BUDGET_TABLES[values["budget_table"]]
        out["budget_text"] = "; ".join(f"{b:,} tokens: {gap:,} ms, {ttft:.2f} s" for b, (gap, ttft) in table.items())
    if "model_2026" in values:
        (group,) = LAYOUTS_2026[values["model_2026"]].groups  # the bank draws models with one kind of layer
        out["num_layers"] = group.num_layers
        out["layer_values"] = group.values_per_token
        out["token_bytes"] = group.num_layers * group.values_per_token * 2  # 16 bits
        if "prompt_tokens" in values:  # the transfer's time over the links lesson 21 names
            out["ndr_ms"] = _transfer_bytes(values) / 50e6
            out["nvlink_ms"] = _transfer_bytes(values) / 900e6
        out["cache_kind"] = {
            "full": "the keys and values of its grouped key/value heads",
            "latent": "one compressed latent vector and one shared RoPE key: multi-head latent attention",
        }[group.kind]
    return out


def render(template: str, values: dict[str, Any]) -> str:
    """A prompt or explanation with the drawn values filled in."""
    return template.format(**facts(values))


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def evaluate(expression: str, names: dict[str, Any]) -> float:
    """The value of a planted mistake's arithmetic ("answer / 2") on a student's drawn values.

    Only numbers, the given names, + - * / // % ** and brackets: the bank's text is read, never run.
    ValueError names what is not allowed.
    """

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and isinstance(names.get(node.id), (int, float)):
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(
            f"{ast.unparse(node)!r} in {expression!r}: use numbers, "
            f"{sorted(k for k, v in names.items() if isinstance(v, (int, float)))} and + - * / // % **"
        )

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError(f"{expression!r} is not an arithmetic expression") from None
    return float(value(tree.body))
