"""How every simulator writes its numbers and names its choices (lessons 01-17).

Decimal units (1 GB = 1e9 bytes, as the course counts them everywhere), one label style for the
bytes a stored number takes, one label for a preset model, and log axes whose ticks read as plain
numbers. A learner meets the same words in every lesson's widget.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from matplotlib.ticker import FuncFormatter

from kvcourse.kernels import MODEL_CONFIGS, costs

GB = 1e9  # decimal gigabytes, as the course counts them everywhere
GIB = 2**30  # what a card sold as "80 GB" holds: 80 GiB (lesson 00's glossary)

# int8 is counted without its scales except where a simulator adds them (lesson 16's switch).
BYTES_PER_VALUE_LABELS: dict[int, str] = {
    4: "32-bit (4 bytes)",
    2: "16-bit (2 bytes)",
    1: "8-bit (int8, scales not counted)",
}


def bytes_per_value_choices(*values: int) -> tuple[tuple[str, int], ...]:
    """A dropdown's (label, bytes) choices for these widths, in this order, in the one label style."""
    return tuple((BYTES_PER_VALUE_LABELS[value], value) for value in values)


def format_bytes(num_bytes: float) -> str:
    """Bytes in the largest unit that keeps the number >= 1 (decimal units: 1 GB = 1e9 bytes)."""
    for unit, size in (("TB", 1e12), ("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if abs(num_bytes) >= size:
            return f"{num_bytes / size:,.2f} {unit}"
    return f"{num_bytes:,.0f} B"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """A count and its noun, plural unless it is one: "1 block", "2 blocks", "3 passes" (``many``)."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"


def named(noun: str, items: list) -> str:
    """A noun and the items it names, plural unless one: "request 3", "requests 1, 2 and 4"."""
    listed = ", ".join(map(str, items[:-1])) + f" and {items[-1]}" if len(items) > 1 else str(items[0])
    return f"{noun}{'' if len(items) == 1 else 's'} {listed}"


def format_count(value: float) -> str:
    """A large count with a word-free SI suffix (k, M, G, T)."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f}"


class ModelFact(Enum):
    """What a preset model's label adds to its name: the fact its lesson turns on."""

    PARAMETERS = "parameters"  # lessons 08, 14: the weights' share of the card
    ATTENTION = "attention"  # lesson 07: multi-head or grouped-query
    KV_HEADS = "kv_heads"  # lesson 16: query heads against key/value heads
    CONTEXT = "context"  # lesson 15: the longest sequence it reads


def model_label(name: str, fact: ModelFact) -> str:
    """A preset's name and one fact of its shape, e.g. "llama-2-13b (13B parameters)" (lessons 07-16)."""
    shape = MODEL_CONFIGS[name]
    if fact is ModelFact.PARAMETERS:
        detail = f"{costs.num_parameters(shape) / 1e9:.3g}B parameters"
    elif fact is ModelFact.ATTENTION:
        detail = "MHA" if shape.num_kv_heads == shape.num_heads else f"GQA {shape.num_heads}:{shape.num_kv_heads}"
    elif fact is ModelFact.KV_HEADS:
        detail = f"{shape.num_heads} query, {shape.num_kv_heads} KV heads"
    else:
        detail = f"reads {shape.max_position_embeddings:,} tokens"
    return f"{name} ({detail})"


def plain_number(value: float, _pos: int | None = None) -> str:
    """A tick as a plain number: 200, 0.5, 1,000 (never 2x10^2)."""
    return f"{value:,.0f}" if abs(value) >= 1 or value == 0 else f"{value:.2g}"


def log_axes(ax: Any, xbase: int = 2, ybase: int = 2) -> None:
    """Both axes of ``ax`` on log scales (base 2 unless told), every major tick a plain number."""
    ax.set_xscale("log", base=xbase)
    ax.set_yscale("log", base=ybase)
    plain_ticks(ax.xaxis, ax.yaxis)


def plain_ticks(*axes: Any, minor: bool = False) -> None:
    """Write each axis's ticks (the minor ones too where ``minor``) as plain numbers, not powers."""
    for axis in axes:
        axis.set_major_formatter(FuncFormatter(plain_number))
        if minor:
            axis.set_minor_formatter(FuncFormatter(plain_number))


# -- text inside a drawing: readable, or left out ------------------------------------------------
LABEL_PT = 8  # the smallest text the figure draws (readable at 100 %); a label that cannot fit is left out


def points_per_unit(ax: Any) -> tuple[float, float]:
    """How many points one data unit spans across and up ``ax`` (its position on the figure, its limits)."""
    box = ax.get_position()
    width_in, height_in = ax.figure.get_size_inches()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return box.width * width_in * 72 / abs(x1 - x0), box.height * height_in * 72 / abs(y1 - y0)


def label_fits(text: str, width_pt: float, height_pt: float, fontsize: float = LABEL_PT) -> bool:
    """Whether ``text`` in a monospace font of ``fontsize`` fits a box of width x height points."""
    return len(text) * 0.62 * fontsize <= width_pt and 1.2 * fontsize <= height_pt


def format_seconds(seconds: float) -> str:
    """Seconds in the unit that reads best: 850 µs, 12.3 ms, 4.56 s, 3.2 min."""
    if seconds >= 120:
        return f"{seconds / 60:,.1f} min"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.1f} ms"
    return f"{seconds * 1e6:,.0f} µs"
