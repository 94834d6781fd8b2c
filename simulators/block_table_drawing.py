"""Lesson 10's pictures of block tables: logical blocks in one column, the physical pool as a grid, arrows between.

``draw_tables`` draws any set of tables on two axes: the simulator's (block_table.py's view draws its
model with it) or a real engine's, read with ``engine_tables``. ``plot_tables`` makes a new lesson
figure of the same picture. Each block is drawn pale, its written share of slots in full colour; the
followed sequence's arrows are bold, the others' faint, and past ``MAX_ARROWS`` table entries only the
followed sequence's are drawn.
"""

from __future__ import annotations

from typing import Any

from matplotlib.patches import ConnectionPatch, Rectangle

from kvcourse.kernels.checks import ceil_div

MAX_ARROWS = 64  # beyond this many table entries only the followed sequence's arrows are drawn
WIDTH_RATIOS = (1.0, 2.6)  # the logical column is narrow, the pool wide
MAX_LABELLED = 48  # logical blocks that still get a label (physical: four times as many)


def _grid_columns(num_blocks: int) -> int:
    return 8 if num_blocks <= 64 else 16 if num_blocks <= 256 else 32


def _block(ax: Any, x: float, y: float, fill: float, colour: str, edge: str = "white", ls: str = "-") -> None:
    """A block at (x, y): a pale body, its written share of slots in full colour."""
    ax.add_patch(Rectangle((x, y - 0.4), 0.9, 0.8, facecolor=colour, alpha=0.25, edgecolor="none"))
    if fill > 0:
        ax.add_patch(Rectangle((x, y - 0.4), 0.9 * fill, 0.8, facecolor=colour, edgecolor="none"))
    ax.add_patch(Rectangle((x, y - 0.4), 0.9, 0.8, facecolor="none", edgecolor=edge, lw=1.2, ls=ls))


def draw_tables(
    ax_logical: Any,
    ax_physical: Any,
    tables: list[list[int]],
    lengths: list[int],
    num_blocks: int,
    block_size: int,
    follow: int = 0,
    next_free: int | None = None,
    name: str = "seq",
) -> None:
    """Every sequence's logical blocks in one column on the left, the physical pool as a grid on the right,
    and an arrow for each table entry (the followed sequence's bold, the others' faint)."""
    for ax in (ax_logical, ax_physical):
        ax.clear()
    cols = _grid_columns(num_blocks)
    rows = ceil_div(num_blocks, cols)
    where = {b: (b % cols, -(b // cols)) for b in range(num_blocks)}  # physical block -> (x, y) on the right
    used = {b for table in tables for b in table}
    label_physical = num_blocks <= 4 * MAX_LABELLED
    for b in sorted(set(where) - used):
        _block(ax_physical, *where[b], 0.0, "0.6")
        if label_physical:
            ax_physical.text(
                where[b][0] + 0.45, where[b][1], str(b), ha="center", va="center", fontsize=7, color="0.45"
            )
    num_logical = sum(len(t) for t in tables)
    label_logical = num_logical <= MAX_LABELLED
    y, ticks, tick_labels = 0.0, [], []
    for i, (table, n) in enumerate(zip(tables, lengths, strict=True)):
        colour = f"C{i}"
        for j, b in enumerate(table):
            fill = min(max(n - j * block_size, 0), block_size) / block_size
            _block(ax_logical, 0, y, fill, colour)
            _block(ax_physical, *where[b], fill, colour)
            if label_logical:
                ax_logical.text(0.45, y, f"→ {b}", ha="center", va="center", fontsize=7)
                ticks.append(y)
                tick_labels.append(f"{name} {i}, block {j}" if j == 0 else f"block {j}")
            if label_physical:
                ax_physical.text(where[b][0] + 0.45, where[b][1], str(b), ha="center", va="center", fontsize=7)
            if i == follow or num_logical <= MAX_ARROWS:
                arrow = ConnectionPatch(
                    (0.9, y),
                    (where[b][0], where[b][1]),
                    "data",
                    "data",
                    axesA=ax_logical,
                    axesB=ax_physical,
                    arrowstyle="-|>",
                    color=colour,
                    lw=1.3 if i == follow else 0.6,
                    alpha=0.9 if i == follow else 0.35,
                )
                ax_physical.add_artist(arrow)
            y -= 1
        y -= 0.6  # a gap between sequences
    if next_free is not None:
        ax_physical.add_patch(
            Rectangle(
                (where[next_free][0] - 0.05, where[next_free][1] - 0.47),
                1.0,
                0.94,
                facecolor="none",
                edgecolor="k",
                lw=1.2,
                ls="--",
            )
        )
    ax_logical.set_xlim(-0.05, 1.0)
    ax_logical.set_ylim(y + 0.6 - 0.5, 0.5)
    ax_logical.set_yticks(ticks, tick_labels, fontsize=7)
    ax_logical.tick_params(length=0)
    ax_logical.set_xticks([])
    ax_logical.set_xlabel("logical blocks, in order\n(→ the physical block)", fontsize=8)
    ax_physical.set_xlim(-0.2, cols + 0.1)
    ax_physical.set_ylim(-rows + 0.3, 0.7)
    ax_physical.set_xticks([])
    ax_physical.set_yticks([])
    ax_physical.set_xlabel(
        f"physical blocks 0-{num_blocks - 1} of the pool, {cols} per row; coloured: in use, "
        f"filled share written" + ("; dashed: handed out next" if next_free is not None else ""),
        fontsize=8,
    )
    for spine in (*ax_logical.spines.values(), *ax_physical.spines.values()):
        spine.set_visible(False)


def plot_tables(
    tables: list[list[int]],
    lengths: list[int],
    num_blocks: int,
    block_size: int,
    follow: int = 0,
    next_free: int | None = None,
    name: str = "seq",
) -> tuple[Any, Any]:
    """A new lesson figure of ``draw_tables`` (logical column narrow, the pool wide); returns both axes."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.4), width_ratios=WIDTH_RATIOS, layout="constrained")
    draw_tables(left, right, tables, lengths, num_blocks, block_size, follow, next_free, name)
    return left, right


def engine_tables(engine: Any) -> tuple[list[list[int]], list[int]]:
    """Each request's (first sequence's) block table and tokens in the pool, in request order."""
    seqs = [request.seqs[0] for request in engine.requests.values() if request.seqs]
    return [list(s.block_table) for s in seqs], [s.num_computed_tokens for s in seqs]
