"""The checks a simulator's config runs on what the learner typed (lessons 01-17).

Each raises ``InvalidInput`` with a message that names the control and the range it allows; a view
shows that message next to its controls instead of a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvcourse.kernels import MODEL_CONFIGS, ModelConfig


class InvalidInput(ValueError):
    """A learner-fixable input problem; views show its message next to the controls (lesson 01)."""


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in [low, high], or InvalidInput naming the control and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}.")
    if isinstance(value, float) and (math.isnan(value) or not value.is_integer()):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}.")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low:,} and {high:,}, got {value:,}.")
    return int(value)


def model_shape(model: str, model_config: ModelConfig | None = None) -> ModelConfig:
    """The shape a simulator counts with: one of its own (SmolLM2 as loaded), else the named preset."""
    if model_config is not None:
        return model_config
    if model not in MODEL_CONFIGS:
        raise InvalidInput(f"Model must be one of {', '.join(sorted(MODEL_CONFIGS))}, got {model!r}.")
    return MODEL_CONFIGS[model]


def check_choice(name: str, value: Any, choices: Sequence[tuple[str, Any]]) -> Any:
    """``value`` if it is one of a dropdown's (label, value) choices, else InvalidInput listing them."""
    allowed = [v for _, v in choices]
    if value not in allowed:
        listed = ", ".join(str(v) for v in allowed[:-1]) + f" or {allowed[-1]}" if len(allowed) > 1 else str(allowed[0])
        raise InvalidInput(f"{name} must be {listed}, got {value!r}.")
    return value


def check_float(name: str, value: Any, low: float, high: float) -> float:
    """``value`` as a finite float in [low, high], or InvalidInput naming the control and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a number, got {value!r}.")
    if math.isnan(value) or math.isinf(value):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}.")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low:g} and {high:g}, got {value:g}.")
    return float(value)
