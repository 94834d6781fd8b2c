"""A token-by-token grid as a heatmap: one row per query token, one column per key token.

Lessons 03 (attention scores) and 04 (attention weights) draw the same kind of figure; this is it,
so a lesson cell says what the grid is and not how matplotlib draws it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

__all__ = ["token_grid"]

_SIZE = (6.5, 5.5)


def token_grid(
    grid: np.ndarray,
    tokens: Sequence[str],
    *,
    title: str,
    colorbar: str,
    xlabel: str = "key (token compared against)",
    ylabel: str = "query (token doing the comparing)",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    hide_future: bool = False,
) -> Axes:
    """Draw a (tokens x tokens) grid with each token's text on both axes and a labelled colour bar.

    ``hide_future=True`` leaves the cells above the diagonal blank (the causal mask: a query never
    sees a later key), whatever values they hold.
    """
    grid = np.asarray(grid, dtype=float)
    if grid.shape != (len(tokens), len(tokens)):
        raise ValueError(f"a {grid.shape} grid needs {grid.shape[0]} tokens on each axis, got {len(tokens)}")
    if hide_future:
        grid = np.where(np.tril(np.ones_like(grid)) == 1, grid, np.nan)
    fig, ax = plt.subplots(figsize=_SIZE)
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(tokens)), list(tokens), rotation=70)
    ax.set_yticks(range(len(tokens)), list(tokens))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=colorbar)
    fig.set_layout_engine("tight")
    return ax
