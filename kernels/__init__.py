"""The course's engine: model, attention, caches, allocator, scheduler (lessons 01-17)."""

from . import costs
from .config import ModelConfig
from .model_configs import EXAMPLE_13B, MODEL_CONFIGS, get_model_config

__all__ = [
    "EXAMPLE_13B",
    "MODEL_CONFIGS",
    "ModelConfig",
    "costs",
    "get_model_config",
]
