"""Overlaid histograms of lengths on a log axis (lesson 09: prompt and answer lengths of a trace)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes

from kvcourse.plots.charts import panels

__all__ = ["log_histogram"]


def log_histogram(
    samples: Mapping[str, Sequence[float]],
    *,
    top: float,
    title: str,
    xlabel: str,
    ylabel: str,
    bins: int = 40,
    ax: Axes | None = None,
) -> Axes:
    """One half-transparent histogram per sample, in log-spaced bins from 1 to ``top``, on a log x axis."""
    ax = ax or panels(1)[0]
    edges = np.geomspace(1, top, bins + 1)
    for i, (name, values) in enumerate(samples.items()):
        ax.hist(list(values), edges, alpha=0.6, color=f"C{i}", label=name)
    ax.set(xscale="log", title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
