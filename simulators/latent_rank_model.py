"""Lesson 23's model: a latent of a chosen rank, its bytes per token, and what SmolLM2 measured at that rank.

A latent cache keeps one vector of ``rank`` values per token and layer, from which keys and values are rebuilt
(``kvcourse.kernels.model.latent``), so a token costs layers x rank x bytes per value
(``latent_bytes_per_token``). The rank at which the factorisation is exact, the *full rank*, is the smaller side
of each layer's stacked key and value projections: min(2 x KV heads x head dim, hidden size). For SmolLM2 that
is 384, exactly its grouped keys and values, so every smaller latent is a smaller cache; for a multi-head model
such as Llama-2-7B it is the hidden size, 4,096 of 8,192, so half its cache is a latent that loses nothing.

Quality cannot be computed from a shape: it is measured. ``QualityCurve`` holds what lesson 23 measured on
SmolLM2 (perplexity and next-token agreement against rank) and reads it at any *share of the full rank*,
interpolating between the measured ranks (perplexity on a log scale) and giving None outside them. For
another model the simulator reads SmolLM2's curve at the same share: an assumption the view states, since
nothing here measures a larger model. Beside the latent stand lesson 16's ways for the same shape (the cost
model's bytes: multi-head, as shipped, one KV head, int8 with its scales), with their quality where it was
measured on SmolLM2 too.

The view that draws it is latent_rank.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from kvcourse.kernels import ModelConfig, costs
from kvcourse.kernels.measure.latent_rank import INT8_ROW, MQA_ROW
from kvcourse.kernels.model.latent import full_rank, latent_bytes_per_token
from kvcourse.simulators.checks import InvalidInput, check_choice, check_int, model_shape
from kvcourse.simulators.labels import bytes_per_value_choices
from kvcourse.simulators.measured_quality import Quality, between

BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(4, 2)
MEASURED_ON = "smollm2-135m"  # the model whose quality the curve holds
SCALE_BYTES = 4  # int8: one float32 scale per token, per KV head, for K and for V (lesson 16)


@dataclass(frozen=True)
class QualityCurve:
    """Quality measured on one model at some ranks of its ``full_rank`` (the full rank is the model itself)."""

    full_rank: int
    points: Mapping[int, Quality]  # rank -> what was measured there

    def __post_init__(self) -> None:
        if len(self.points) < 2 or not all(0 < rank <= self.full_rank for rank in self.points):
            raise ValueError(f"a curve needs two or more ranks in 1..{self.full_rank}, got {sorted(self.points)}")
        if self.full_rank not in self.points:
            raise ValueError(f"a curve holds its full rank, {self.full_rank}: the model itself")
        if not all(q.valid for q in self.points.values()):
            raise ValueError("a perplexity is at least 1 and an agreement between 0 and 1")

    @property
    def full(self) -> Quality:
        """The model itself: the latent at full rank."""
        return self.points[self.full_rank]

    @property
    def shares(self) -> list[float]:
        return sorted(rank / self.full_rank for rank in self.points)

    def at(self, share: float) -> Quality | None:
        """The quality at this share of the full rank, between the measured ranks; None outside them."""
        ranks = sorted(self.points)
        shares = [rank / self.full_rank for rank in ranks]
        if not shares[0] - 1e-9 <= share <= shares[-1] + 1e-9:
            return None
        upper = next(i for i, s in enumerate(shares) if s >= share - 1e-9)
        if upper == 0 or math.isclose(shares[upper], share):
            return self.points[ranks[upper]]
        low, high = self.points[ranks[upper - 1]], self.points[ranks[upper]]
        t = (share - shares[upper - 1]) / (shares[upper] - shares[upper - 1])
        return between(low, high, t)


# This module's default, measured by lesson 23's headless sweep (float32, the factorisation fitted to the weights,
# the held-out text's first 1,000 tokens: chapter I of "Alice's Adventures in Wonderland"; an Intel Xeon with
# AVX-512 and AMX, 2 cores); the lesson passes its own run's curve in instead.
SMOLLM2_CURVE = QualityCurve(
    384,
    {
        384: Quality(22.60, 1.0),
        192: Quality(210.3, 0.208),
        128: Quality(805.3, 0.128),
        96: Quality(1139.2, 0.087),
    },
)


@dataclass(frozen=True)
class LatentRankConfig:
    """A model's shape, the latent's rank and the bytes per value; the measured curve to read quality from."""

    model: str = "smollm2-135m"
    rank: int = 192
    bytes_per_value: int = 2
    curve: QualityCurve = SMOLLM2_CURVE
    others: Mapping[str, Quality] = field(default_factory=dict)  # lesson 16's ways, as measured on SmolLM2
    model_config: ModelConfig | None = None  # a shape of one's own; None: the preset's

    def __post_init__(self) -> None:
        shape = model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_int("Latent rank (values)", self.rank, 1, full_rank(shape))
        check_choice("Values in (bytes)", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)

    @property
    def shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)


class LatentRank:
    """One latent against the model's own cache and lesson 16's ways; step() halves the rank."""

    def __init__(self, config: LatentRankConfig) -> None:
        self.start = config
        self.config = config

    def reset(self) -> None:
        self.config = self.start

    @property
    def rank(self) -> int:
        return self.config.rank

    @property
    def full_rank(self) -> int:
        return full_rank(self.config.shape)

    @property
    def share(self) -> float:
        """The rank as a share of the full rank: where SmolLM2's curve is read."""
        return self.rank / self.full_rank

    def step(self) -> int:
        """Halve the rank (rounded down, at least 1); return the new rank."""
        if self.rank == 1:
            raise InvalidInput("the rank is 1, the smallest a latent can be; press Reset to start again.")
        self.config = dataclasses.replace(self.config, rank=self.rank // 2)
        return self.rank

    def bytes_at(self, rank: int) -> int:
        return latent_bytes_per_token(self.config.shape, rank, self.config.bytes_per_value)

    @property
    def bytes_per_token(self) -> int:
        return self.bytes_at(self.rank)

    @property
    def shipped_bytes(self) -> int:
        """The model's own keys and values per token, as it ships (grouped or multi-head)."""
        return costs.kv_bytes_per_token(self.config.shape, self.config.bytes_per_value)

    @property
    def quality(self) -> Quality | None:
        """SmolLM2's measured quality at this share of the full rank (None outside the measured ranks)."""
        return self.config.curve.at(self.share)

    def ways(self) -> dict[str, tuple[str, int]]:
        """Lesson 16's ways for this shape and the latent at its full rank: key -> (label, bytes per token),
        largest first; a way the model already is (multi-head as shipped, one KV head as shipped) left out."""
        shape, bpv = self.config.shape, self.config.bytes_per_value
        out = {
            "shipped": (f"as shipped ({shape.num_kv_heads} KV heads)", self.shipped_bytes),
            "int8": ("int8 and scales", costs.quantized_kv_bytes_per_token(shape, 1, SCALE_BYTES)),
            "full": (f"latent at full rank ({self.full_rank:,})", self.bytes_at(self.full_rank)),
        }
        if shape.num_kv_heads < shape.num_heads:
            mha = dataclasses.replace(shape, num_kv_heads=shape.num_heads)
            out["mha"] = (f"MHA ({shape.num_heads} KV heads)", costs.kv_bytes_per_token(mha, bpv))
        if shape.num_kv_heads > 1:
            mqa = dataclasses.replace(shape, num_kv_heads=1)
            out["mqa"] = ("MQA (1 KV head)", costs.kv_bytes_per_token(mqa, bpv))
        return dict(sorted(out.items(), key=lambda item: -item[1][1]))

    def measured_ways(self) -> dict[str, Quality]:
        """The quality measured for lesson 16's ways, where the shape is the one they were measured on."""
        if self.config.model_config is None and self.config.model != MEASURED_ON:
            return {}
        return {key: quality for key, quality in self.config.others.items() if key in ("int8", "mqa")}


def curve_from_table(table: pd.DataFrame) -> QualityCurve:
    """A curve from ``kvcourse.kernels.measure.latent_rank.rank_sweep``'s table (its first row the full rank)."""
    ranks = table.index.to_numpy(dtype=int)
    perplexity = table["perplexity"].to_numpy(dtype=float)
    agreement = table["next-token agreement"].to_numpy(dtype=float)
    points = {int(r): Quality(float(p), float(a)) for r, p, a in zip(ranks, perplexity, agreement, strict=True)}
    return QualityCurve(int(ranks[0]), points)


def ways_from_table(table: pd.DataFrame) -> dict[str, Quality]:
    """int8's and MQA's quality from ``other_shrinks``' table, keyed as ``LatentRank.ways``."""
    perplexity, agreement = table["perplexity"].astype(float), table["next-token agreement"].astype(float)
    return {key: Quality(perplexity[row], agreement[row]) for key, row in (("int8", INT8_ROW), ("mqa", MQA_ROW))}
