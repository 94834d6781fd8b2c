"""How far keys and values move when they are recomputed over a longer input (lesson 04).

In exact arithmetic a token's keys and values depend only on it and the tokens before it, so
feeding a longer input recomputes the same numbers. In floating point a longer input changes
the shapes the kernels work on, and with them how a sum is split and in which order it is added
(the kernels are not *batch invariant*), so the same numbers can round differently; each layer
hands its rounding on to the next. These helpers take recordings (lesson 04's ``record_qkv``:
``k`` and ``v`` of shape (layers, KV heads, tokens, head dim)) and measure the change in the
dtype's own rounding steps, so that float32 and bfloat16 compare on one scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import pandas as pd
import torch

__all__ = ["ROUNDING_SCALE", "Recorded", "drift_by_layer", "drift_summary", "largest_change", "trend"]

# The most rounding steps a recomputation over a longer input moves SmolLM2's K/V, with room to spare: measured
# up to about 16 in float32 and 3 in bfloat16, on AVX-512 and AVX2 CPUs, fast paths on and off.
ROUNDING_SCALE = 64
GROWTH = 1.5  # the last third of the layers must drift this many times the first third to say "grows"


class Recorded(Protocol):
    """Keys and values of one pass: ``k`` and ``v`` of shape (layers, KV heads, tokens, head dim)."""

    k: np.ndarray
    v: np.ndarray


def _per_layer_change(reference: Recorded, other: Recorded, first: int) -> np.ndarray:
    """The largest |change| of any K or V number of the first ``first`` tokens, one per layer."""
    dk = np.abs(other.k[:, :, :first] - reference.k[:, :, :first]).max(axis=(1, 2, 3))
    dv = np.abs(other.v[:, :, :first] - reference.v[:, :, :first]).max(axis=(1, 2, 3))
    return np.maximum(dk, dv)


def largest_change(reference: Recorded, other: Recorded, first: int) -> float:
    """The largest |change| of any K or V number of the first ``first`` tokens, at any layer (lesson 04)."""
    return float(_per_layer_change(reference, other, first).max())


def drift_by_layer(recordings: Sequence[Recorded], first: int, dtype: torch.dtype) -> pd.DataFrame:
    """Per layer, how far the first tokens' K and V moved across ``recordings`` (against the first one).

    Columns: ``largest change``; ``largest value`` (the largest |K or V| of those tokens at that layer);
    ``rounding steps``, the change over ``dtype``'s machine epsilon times that value, i.e. how many of the
    dtype's rounding steps at the layer's largest number the change spans (lesson 04).
    """
    if not recordings:
        raise ValueError("need at least one recording")
    reference = recordings[0]
    change = np.max([_per_layer_change(reference, rec, first) for rec in recordings], axis=0)
    largest = np.maximum(
        np.abs(reference.k[:, :, :first]).max(axis=(1, 2, 3)), np.abs(reference.v[:, :, :first]).max(axis=(1, 2, 3))
    )
    steps = change / (torch.finfo(dtype).eps * np.maximum(largest, np.finfo(np.float32).tiny))
    return pd.DataFrame(
        {"largest change": change, "largest value": largest, "rounding steps": steps},
        index=pd.RangeIndex(len(change), name="layer"),
    )


def _thirds(steps: Sequence[float] | pd.Series[float]) -> tuple[float, float]:
    """The mean of the first third of the layers' values and of the last third's."""
    values = np.asarray(steps, dtype=float)
    third = max(1, len(values) // 3)
    return float(values[:third].mean()), float(values[-third:].mean())


def trend(steps: Sequence[float] | pd.Series[float]) -> str:
    """What a layer-by-layer drift did, from the first third of the layers to the last (lesson 04).

    "is zero at every layer", "grows through the layers" (the last third's mean at least ``GROWTH`` times the
    first third's), "shrinks through the layers" (the reverse) or "stays about level".
    """
    low, high = _thirds(steps)
    if high == low == 0:
        return "is zero at every layer"
    if high >= GROWTH * low:
        return "grows through the layers"
    if low >= GROWTH * high:
        return "shrinks through the layers"
    return "stays about level"


def drift_summary(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per dtype from ``drift_by_layer`` tables: the largest change, in rounding steps, and the trend."""
    rows = {}
    for name, table in tables.items():
        steps = table["rounding steps"]
        low, high = _thirds(steps)
        rows[name] = {
            "largest change": table["largest change"].max(),
            "rounding steps, most": steps.max(),
            "mean steps, first third of layers": low,
            "mean steps, last third of layers": high,
            "the drift": trend(steps),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("dtype")
