"""Parameterised questions: values drawn from a seed, answers computed by the engine (lessons 02-16).

A parameterised question names a formula here and lists the values each parameter may take.
The values are drawn from a seed (a learner's local seed, or a student id when grading), and
the answer is always computed, by kvcourse.kernels.costs where the engine has the formula, so
no answer is ever stored.
"""

from __future__ import annotations

import ast
import hashlib
import math
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import MODEL_CONFIGS

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
    if "bytes_per_value" in values:
        out["dtype"] = _DTYPES.get(values["bytes_per_value"], f"{values['bytes_per_value']}-byte")
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
