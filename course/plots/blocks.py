"""Figures of paged memory (lesson 11): blocks taken on demand, and the block-size trade.

``blocks_on_demand`` draws, from a ``BlockTableWatch`` table, one request's tokens against the slots of
its blocks, and every sequence's empty slots step by step. ``block_size_trade`` draws the block-size
sweep's waste beside the measured attention time, and
``allocators_side_by_side`` two replays of one trace (utilisation and requests running), on log-2 axes
whose ticks read as plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from kvcourse.plots.charts import lines, mark, panels

__all__ = ["allocators_side_by_side", "block_size_trade", "blocks_on_demand"]


def _plain(value: float, _pos: int | None = None) -> str:
    return f"{value:,.0f}" if abs(value) >= 1 or value == 0 else f"{value:.2g}"


def _plain_ticks(ax: Axes, *, y: bool = False) -> None:
    """Ticks written 4, 16, 256 (and 0.5, 10 on y) instead of powers."""
    axes = (ax.xaxis, ax.yaxis) if y else (ax.xaxis,)
    for axis in axes:
        axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_minor_formatter(FuncFormatter(lambda v, p: ""))


def blocks_on_demand(looks: pd.DataFrame, block_size: int, request: int) -> list[Axes]:
    """Left: ``request``'s tokens stored and slots in its blocks. Right: every sequence's empty slots."""
    axes = panels(2)
    mine = looks[looks["request"] == request]
    lines(
        list(mine["step"]),
        {"tokens stored": list(mine["stored"]), "slots in its blocks": list(mine["blocks"] * block_size)},
        ax=axes[0],
        styles={"tokens stored": "-", "slots in its blocks": "-"},
        xlabel="engine step",
        ylabel="token slots",
        title=f"request {request}: one more block each time the last is full",
    )
    groups = {f"request {rid}": rows for rid, rows in looks.groupby("request")}
    lines(
        {name: list(rows["step"]) for name, rows in groups.items()},
        {name: list(rows["empty"]) for name, rows in groups.items()},
        ax=axes[1],
        styles={name: "-" for name in groups},
        xlabel="engine step",
        ylabel="empty slots in its blocks",
        title=f"every sequence: at most {looks['empty'].max()} empty slots, never a whole block",
    )
    mark(axes[1], block_size, f"one whole block ({block_size} slots)", horizontal=True)
    axes[1].set_ylim(-0.5, 1.6 * block_size)  # room above the saw for the legend
    axes[1].legend(fontsize=8, loc="upper center", ncol=4)
    return axes


def block_size_trade(sweep: pd.DataFrame, timing: Mapping[str, pd.DataFrame], default: int) -> list[Axes]:
    """Left: % of busy memory without a token and in empty tails, by block size. Right: each decode kernel's
    median time per call (``timing``: kernel name -> ``timing_table``), with the middle half of its repeats."""
    axes = panels(2)
    sizes = list(sweep.index)
    waste = sweep["no token (%)"]
    lines(
        sizes,
        {"no token (1 - utilisation)": list(waste), "empty tails of last blocks": list(sweep["empty tails (%)"])},
        ax=axes[0],
        logx=True,
        logy=True,
        xlabel="block size (tokens, log scale)",
        ylabel="% of busy memory (log scale)",
        title=f"waste grows with the block: {waste.iloc[0]:.1f}% at {sizes[0]}, {waste.iloc[-1]:.0f}% at {sizes[-1]}",
    )
    mark(axes[0], default, f"the engine's default: {default}")
    _plain_ticks(axes[0], y=True)
    medians = {f"{name} (median)": list(table["median (ms)"]) for name, table in timing.items()}
    first = next(iter(timing.values()))
    lines(
        list(first.index),
        medians,
        ax=axes[1],
        logx=True,
        xlabel="block size (tokens, log scale)",
        ylabel="CPU ms per call",
        title="decode attention on this CPU, by block size",
    )
    for i, table in enumerate(timing.values()):
        axes[1].fill_between(
            list(table.index),
            table["25th pct (ms)"],
            table["75th pct (ms)"],
            alpha=0.25,
            color=f"C{i}",
            label="middle half of the repeats" if i == 0 else None,
        )
    axes[1].set_ylim(0, 1.3 * max(table["75th pct (ms)"].max() for table in timing.values()))
    axes[1].legend(loc="upper right", fontsize=8)
    _plain_ticks(axes[1])
    return axes


def allocators_side_by_side(
    reports: Sequence[Any], curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], window: int = 100
) -> list[Axes]:
    """Left: each replay's rolling utilisation (``curves[name]`` = steps, share). Right: requests running per step.

    ``reports`` are replay reports (``name``, ``utilisation``, ``num_steps``, ``running_per_step``,
    ``mean_running``); the first is the baseline the titles compare against.
    """
    axes = panels(2)
    base, other = reports[0], reports[-1]
    shares = ", ".join(f"{r.name} {r.utilisation:.0%}" for r in reversed(reports))
    lines(
        {name: list(steps) for name, (steps, _) in curves.items()},
        {name: [100 * u for u in share] for name, (_, share) in curves.items()},
        ax=axes[0],
        styles={name: "-" for name in curves},
        xlabel="engine step",
        ylabel="busy slots holding a token (%)",
        title=f"{shares} (rolling {window} steps)",
    )
    axes[0].set_ylim(0, 105)
    lines(
        {r.name: list(range(r.num_steps)) for r in reports},
        {r.name: r.running_per_step for r in reports},
        ax=axes[1],
        styles={r.name: "-" for r in reports},
        xlabel="engine step",
        ylabel="requests running at once",
        title=f"{other.mean_running / base.mean_running:.1f}x as many at once; "
        f"done in {other.num_steps / base.num_steps:.0%} of the steps",
    )
    return axes
