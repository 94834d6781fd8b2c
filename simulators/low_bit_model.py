"""Lesson 25's model: bits and group size against one sequence's cache, scales and recent tokens counted, beside
what SmolLM2 measured.

A KIVI-style cache stores each value in ``bits`` and keeps, per KV head and layer, a low and a step (``scale_bytes``
each) per key channel for every ``group`` tokens and per ``group`` value channels for every token; its newest tokens
(``residual`` to ``residual + group - 1``) stay in the model's dtype, a part per sequence
(``kvcourse.kernels.measure.low_bit.kivi_split``). At 2 bits and groups of 32 this is the engine's 2-bit cache
(``backends/kivi.py``, ``costs.kivi_kv_bytes_per_token``); at 16 bits it is the plain 16-bit cache, no scales.

Quality is measured, never computed: ``MeasuredFormats`` holds what lesson 25 measured on SmolLM2's held-out text,
one point per engine format (its own K/V, int8, FP8 with a calibrated scale and with 1.0, the 2-bit cache in groups
of 32 with 32 recent tokens). The simulator reads a point only at a setting the engine measured; elsewhere it says
it was not measured. The dense 2026 models' shapes are those of ``kvcourse.kernels.model.cache_layouts``.

The view that draws it is low_bit.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import pandas as pd

from kvcourse.kernels import ModelConfig, costs
from kvcourse.kernels.measure.low_bit import GROUP, RESIDUAL, format_bytes, kivi_split
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.simulators.checks import InvalidInput, check_choice, check_int
from kvcourse.simulators.labels import bytes_per_value_choices
from kvcourse.simulators.measured_quality import Quality

BITS_CHOICES = (("16 bits (no scales)", 16), ("8 bits", 8), ("4 bits", 4), ("2 bits", 2))
GROUP_CHOICES = tuple((f"{g} tokens / channels", g) for g in (8, 16, 32, 64))  # each divides every head here
BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(2, 4)  # the recent tokens' dtype, and the plain cache's
MEASURED_ON = "smollm2-135m"
SCALE_BYTES = 2  # each low and step in float16, as KIVI keeps them
MAX_CONTEXT = 1 << 20
# (layers, KV heads, head dim) of the dense models of 2025-26, from kernels/model/cache_layouts.py's config.json figures
SHAPES_2026 = {
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128),
    "qwen3-8b": (36, 8, 128),
    "qwen3-32b": (64, 8, 128),
    "mistral-small-3.1": (40, 8, 128),
}
MODEL_CHOICES = (MEASURED_ON, *SHAPES_2026)


def shape_of(model: str) -> ModelConfig:
    """SmolLM2's config, or a 2026 model's cache shape (only the cache's fields are meaningful)."""
    if model == MEASURED_ON:
        return MODEL_CONFIGS[model]
    if model not in SHAPES_2026:
        raise InvalidInput(f"unknown model {model!r}; choose one of {', '.join(MODEL_CHOICES)}")
    layers, kv_heads, head_dim = SHAPES_2026[model]
    return ModelConfig(num_layers=layers, num_heads=4 * kv_heads, num_kv_heads=kv_heads, head_dim=head_dim,
                       hidden_size=4 * kv_heads * head_dim, intermediate_size=4, vocab_size=8)  # fmt: skip


def low_bit_bytes_per_token(config: ModelConfig, bits: int, group: int, scale_bytes: int = SCALE_BYTES) -> int:
    """Codes plus every per-token share of the scales (16 bits: the plain 16-bit cache, no scales)."""
    if bits == 16:
        return costs.kv_bytes_per_token(config, 2)
    head_dim = config.head_dim
    codes = Fraction(2 * head_dim * bits, 8)  # K and V
    key_scales = Fraction(2 * scale_bytes * head_dim, group)  # a low and step per channel, shared by group tokens
    value_scales = Fraction(2 * scale_bytes * head_dim, group)  # a low and step per group channels, every token
    return math.ceil((codes + key_scales + value_scales) * config.num_layers * config.num_kv_heads)


@dataclass(frozen=True)
class MeasuredFormats:
    """SmolLM2's quality on the held-out text, per engine format, beside its bytes per token at the text's length."""

    points: Mapping[str, tuple[float, Quality]]  # format -> (bytes per token at the text's length, quality)
    tokens: int  # the text's length

    def __post_init__(self) -> None:
        if not {"as computed", "kivi2"} <= set(self.points):
            raise ValueError(f"the measured formats need 'as computed' and 'kivi2', got {sorted(self.points)}")
        if not all(q.valid for _, q in self.points.values()):
            raise ValueError("a perplexity is at least 1 and an agreement between 0 and 1")


# This module's default, measured by benchmarks/bench_cache_formats.py (float32, the held-out text's 2,938 tokens,
# chapter I of "Alice's Adventures in Wonderland", kernels/measure/texts.py; an Intel Xeon with AVX-512 and AMX;
# benchmarks/results/cache_formats.json). The lesson passes its own run's table.
_TOKENS = 2938
_MEASURED = {"as computed": Quality(17.993, 1.0), "int8": Quality(18.01, 0.9809), "fp8": Quality(18.506, 0.921),
             "kivi2": Quality(22.593, 0.7263)}  # fmt: skip
SMOLLM2_FORMATS = MeasuredFormats(
    {
        name: (format_bytes(MODEL_CONFIGS[MEASURED_ON], name, _TOKENS, 4).total / _TOKENS, q)
        for name, q in _MEASURED.items()
    },
    _TOKENS,
)


@dataclass(frozen=True)
class LowBitConfig:
    model: str = "qwen3-32b"
    bits: int = 2
    group: int = GROUP
    residual: int = RESIDUAL
    context: int = 32_768
    bytes_per_value: int = 2  # the recent tokens' and the plain cache's bytes per value
    measured: MeasuredFormats = SMOLLM2_FORMATS

    def __post_init__(self) -> None:
        check_choice("Model", self.model, tuple((m, m) for m in MODEL_CHOICES))
        check_choice("Bits per value", self.bits, BITS_CHOICES)
        check_choice("Group", self.group, GROUP_CHOICES)
        check_int("Recent tokens kept (tokens)", self.residual, 0, MAX_CONTEXT)
        check_int("Context (tokens)", self.context, 1, MAX_CONTEXT)
        check_choice("Recent tokens in (bytes)", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)
        for model in dict.fromkeys((self.model, MEASURED_ON)):
            if shape_of(model).head_dim % self.group:
                raise InvalidInput(
                    f"a group of {self.group} channels does not divide {model}'s head of {shape_of(model).head_dim}"
                )


class LowBit:
    """One sequence's low-bit cache against the plain one; step() halves the bits (16, 8, 4, 2)."""

    def __init__(self, config: LowBitConfig) -> None:
        self.start = config
        self.config = config

    def reset(self) -> None:
        self.config = self.start

    @property
    def bits(self) -> int:
        return self.config.bits

    def step(self) -> int:
        """Halve the bits per value; return the new number."""
        if self.bits == 2:
            raise InvalidInput("2 bits is the fewest here (four levels); press Reset to start again.")
        self.config = dataclasses.replace(self.config, bits=self.bits // 2)
        return self.bits

    def per_token(self, model: str | None = None) -> int:
        """Bytes per token stored at low bits: the codes and the scales' per-token share."""
        c = self.config
        return low_bit_bytes_per_token(shape_of(model or c.model), c.bits, c.group)

    def bytes_at(self, context: int, model: str | None = None) -> int:
        """One sequence's cache at ``context`` tokens: the old tokens at low bits, the newest in full precision."""
        c = self.config
        shape = shape_of(model or c.model)
        if c.bits == 16:
            return self.per_token(model) * context
        quantised, recent = kivi_split(context, c.group, c.residual)
        return self.per_token(model) * quantised + costs.kv_bytes_per_token(shape, c.bytes_per_value) * recent

    def plain_at(self, context: int, model: str | None = None) -> int:
        """The same sequence in the model's plain cache (``bytes_per_value`` per value, no scales)."""
        return costs.kv_bytes_per_token(shape_of(model or self.config.model), self.config.bytes_per_value) * context

    def share(self) -> float:
        return self.bytes_at(self.config.context) / self.plain_at(self.config.context)

    @property
    def measured_format(self) -> str | None:
        """The engine format this setting is, where SmolLM2 was measured in it; None elsewhere."""
        c = self.config
        if c.bits == 16 and "as computed" in c.measured.points:
            return "as computed"
        if (c.bits, c.group, c.residual) == (2, GROUP, RESIDUAL):
            return "kivi2"
        return None

    @property
    def quality(self) -> Quality | None:
        name = self.measured_format
        return None if name is None else self.config.measured.points[name][1]


def formats_from_sweep(table: pd.DataFrame) -> MeasuredFormats:
    """``kvcourse.kernels.measure.low_bit.format_sweep``'s table as the simulator's measured points."""
    points = {
        str(name): (float(row["bytes per token at this length"]),
                    Quality(float(row["perplexity"]), float(row["next-token agreement"])))
        for name, row in table.iterrows()
    }  # fmt: skip
    tokens = round(float(table["cache at the text's length (bytes)"].iloc[0]) / float(table["bytes per token"].iloc[0]))
    return MeasuredFormats(points, tokens)
