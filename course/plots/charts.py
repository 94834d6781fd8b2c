"""The everyday charts: panels, lines, bars, a marker line, a chain of boxes.

Every figure follows the course's rules (docs/lessons.md): a title that states the finding,
labelled axes with units, at most two panels, log axes where a quantity doubles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

__all__ = ["bars", "chain", "decorate", "lines", "mark", "panels"]

_SIZE_ONE, _SIZE_TWO = (7.0, 3.8), (11.5, 3.8)


def panels(count: int = 1) -> list[Axes]:
    """A new figure with one or two side-by-side panels."""
    if count not in (1, 2):
        raise ValueError(f"a lesson figure has one or two panels, not {count}")
    fig, axes = plt.subplots(1, count, figsize=_SIZE_ONE if count == 1 else _SIZE_TWO, squeeze=False)
    fig.set_layout_engine("tight")
    return list(axes[0])


def lines(
    x: Sequence[float] | Mapping[str, Sequence[float]],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    ax: Axes | None = None,
    styles: Mapping[str, str] | None = None,
    steps: Sequence[str] = (),
) -> Axes:
    """One line per series against x (or against x[name] where each series has its own x).

    Series named in ``steps`` are drawn as a staircase (each value held until the next x).
    """
    ax = ax or panels(1)[0]
    styles = styles or {}
    for i, (name, ys) in enumerate(series.items()):
        xs = x[name] if isinstance(x, Mapping) else x
        ax.plot(
            list(xs),
            list(ys),
            styles.get(name, "o-"),
            color=f"C{i}",
            label=name,
            drawstyle="steps-post" if name in steps else "default",
        )
    decorate(ax, title, xlabel, ylabel, logx, logy)
    if len(series) > 1:
        ax.legend()
    return ax


def bars(
    labels: Sequence[str],
    values: Mapping[str, Sequence[float]] | Sequence[float],
    *,
    title: str,
    ylabel: str,
    logy: bool = False,
    ax: Axes | None = None,
    stacked: bool = False,
    xlabel: str = "",
    value_format: str | None = None,
    tick_every: int = 1,
) -> Axes:
    """Bars per label: one series, or several series side by side (or stacked).

    ``value_format`` (e.g. ``"{:.2f} GB"``) writes each bar's value above it, with headroom for the text;
    ``tick_every`` labels every n-th bar only, for long rows of bars.
    """
    ax = ax or panels(1)[0]
    named = values if isinstance(values, Mapping) else {"": values}
    positions = range(len(labels))
    width = 0.8 if stacked else 0.8 / len(named)
    bottom = [0.0] * len(labels)
    for i, (name, ys) in enumerate(named.items()):
        ys = list(ys)
        if stacked:
            ax.bar(positions, ys, width, bottom=bottom, label=name or None, color=f"C{i}")
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
        else:
            offset = (i - (len(named) - 1) / 2) * width
            ax.bar([p + offset for p in positions], ys, width, label=name or None, color=f"C{i}")
            bottom = [max(b, y) for b, y in zip(bottom, ys, strict=True)]
    ax.set_xticks(list(positions)[::tick_every], list(labels)[::tick_every])
    decorate(ax, title, xlabel, ylabel, False, logy)
    if value_format:
        for x, top in zip(positions, bottom, strict=True):
            ax.text(x, top, value_format.format(top), ha="center", va="bottom", fontsize=9)
    tallest = max(bottom, default=0.0)
    if value_format or len(named) > 1:  # room above the bars for their values or the legend
        ax.set_ylim(top=tallest * 3 if logy else tallest * 1.35)
    if len(named) > 1:
        ax.legend()
    return ax


def mark(ax: Axes, x: float, label: str, *, horizontal: bool = False) -> None:
    """A dashed line across the panel at x (or at y with horizontal=True), labelled in the legend."""
    line = ax.axhline if horizontal else ax.axvline
    line(x, linestyle="--", color="0.35", label=label)
    ax.legend()


def chain(links: Sequence[tuple[str, str]], *, title: str, width: float = 9.0) -> Axes:
    """Boxes top to bottom joined by arrows, each a headline over a line of detail (lesson 16's map)."""
    height = 0.95 * len(links) + 0.6
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(len(links) - 0.5, -0.6)
    for i, (headline, detail) in enumerate(links):
        ax.text(
            0.5,
            i - 0.12,
            headline,
            ha="center",
            va="center",
            fontsize=12,
            fontweight="bold",
            bbox=dict(boxstyle="round,pad=0.4", facecolor=f"C{i % 10}", alpha=0.18, edgecolor=f"C{i % 10}"),
        )
        ax.text(0.5, i + 0.2, detail, ha="center", va="center", fontsize=9, color="0.2")
        if i + 1 < len(links):
            ax.annotate(
                "", xy=(0.5, i + 0.68), xytext=(0.5, i + 0.36), arrowprops=dict(arrowstyle="-|>", color="0.4", lw=1.5)
            )
    ax.set_title(title, fontsize=12)
    fig.set_layout_engine("tight")
    return ax


def decorate(ax: Axes, title: str, xlabel: str, ylabel: str, logx: bool = False, logy: bool = False) -> None:
    """The course's look on any axes: title, axis labels, a light grid, log-2 x and log y when asked."""
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
