"""The course's engine: model, attention, caches, allocator, scheduler (lessons 01-17)."""

from . import costs, paged_cache  # noqa: F401  (importing paged_cache registers generate(cache="paged"))
from .backend import AttentionBackend, StepMetadata
from .config import ModelConfig
from .generate import CACHE_BACKENDS, GenerationResult, Phase, StepStats, generate, register_cache
from .llm_engine import EngineConfig, LLMEngine
from .model import Transformer
from .model_configs import EXAMPLE_13B, MODEL_CONFIGS, get_model_config
from .sampling import SamplingParams, sample

__all__ = [
    "CACHE_BACKENDS",
    "EXAMPLE_13B",
    "MODEL_CONFIGS",
    "AttentionBackend",
    "EngineConfig",
    "GenerationResult",
    "LLMEngine",
    "ModelConfig",
    "Phase",
    "SamplingParams",
    "StepMetadata",
    "StepStats",
    "Transformer",
    "costs",
    "generate",
    "get_model_config",
    "register_cache",
    "sample",
]
