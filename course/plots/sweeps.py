"""A sweep of settings drawn from a tidy table: one line per setting, each against its value relative to
a baseline (lesson 09's knobs), with an optional shaded reference band and plain tick labels on log axes."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes

from kvcourse.plots.charts import decorate, panels

__all__ = ["plain_ticks", "sweep_lines"]


def plain_ticks(ax: Axes, fmt: str = "{:,.0f}") -> None:
    """Write a log x-axis's ticks as plain numbers (1,024 rather than 2^10); fmt takes the tick value."""
    ax.xaxis.set_major_formatter(lambda value, _: fmt.format(value))


def sweep_lines(
    table: pd.DataFrame,
    *,
    x: str,
    y: str,
    by: str,
    title: str,
    xlabel: str,
    ylabel: str,
    labels: Mapping[str, str] | None = None,
    band: tuple[float, float] | None = None,
    band_label: str = "",
    xfmt: str = "{:g}x",
    ax: Axes | None = None,
) -> Axes:
    """One line per value of column ``by`` (y against x, log-2 x axis), in the table's order of first appearance."""
    ax = ax or panels(1)[0]
    labels = labels or {}
    for i, (name, part) in enumerate(table.groupby(by, sort=False)):
        ax.plot(list(part[x]), list(part[y]), "o-", color=f"C{i}", label=labels.get(name, name))
    if band is not None:
        ax.axhspan(*band, color="0.88", zorder=0, label=band_label)
    decorate(ax, title, xlabel, ylabel, logx=True)
    plain_ticks(ax, xfmt)
    ax.legend(fontsize=8)
    return ax
