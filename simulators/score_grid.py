"""Lesson 03's simulator: the attention score grid grows with the square of the length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.labels import format_bytes, format_count

MAX_TOKENS = 10_000_000
MAX_DRAWN_CELLS_SIDE = 48  # the grid picture shows every cell up to this length


@dataclass(frozen=True)
class ScoreGridConfig:
    """Attention over ``num_tokens`` tokens in a model of the given shape (lesson 03).

    ``linear_flops_per_token`` is everything except the two attention products (QKᵀ and
    weights·V): projections, MLP, norms and the output layer; it grows in a straight line.
    """

    num_tokens: int
    num_layers: int
    num_heads: int
    head_dim: int
    bytes_per_value: int
    linear_flops_per_token: float

    def __post_init__(self) -> None:
        check_int("Length (tokens)", self.num_tokens, 1, MAX_TOKENS)
        check_int("Layers", self.num_layers, 1, 1000)
        check_int("Query heads", self.num_heads, 1, 1000)
        check_int("Head dimension", self.head_dim, 1, 100_000)
        check_int("Bytes per value", self.bytes_per_value, 1, 16)
        check_float("Linear FLOPs per token", self.linear_flops_per_token, 0.0, 1e15)


def grid_cells(num_tokens: int) -> int:
    """Cells in one head's full score grid, which plain attention fills before masking (lesson 03)."""
    return num_tokens * num_tokens


def causal_cells(num_tokens: int) -> int:
    """Cells that survive the causal mask: query p scores keys 0..p, so 1 + 2 + ... + T (lesson 03)."""
    return num_tokens * (num_tokens + 1) // 2


class ScoreGrid:
    """The score grid at one length; ``step()`` doubles the length (lesson 03)."""

    def __init__(self, config: ScoreGridConfig) -> None:
        self.config = config
        self.num_tokens = config.num_tokens

    def step(self) -> None:
        """Double the length (2x tokens -> 4x grid cells)."""
        if self.num_tokens * 2 > MAX_TOKENS:
            raise InvalidInput(f"doubling again would pass {MAX_TOKENS:,} tokens; press Reset.")
        self.num_tokens *= 2

    def reset(self) -> None:
        self.num_tokens = self.config.num_tokens

    def grid_bytes_at(self, num_tokens: int) -> int:
        """Memory for one layer's full grids, all heads at once, as plain attention holds them."""
        return grid_cells(num_tokens) * self.config.num_heads * self.config.bytes_per_value

    def attention_flops_at(self, num_tokens: float) -> float:
        """q·k and weights·v: 2 x head_dim FLOPs each per causal cell, every head and layer."""
        c = self.config
        cells = num_tokens * (num_tokens + 1) / 2
        return 4.0 * c.head_dim * cells * c.num_heads * c.num_layers

    def linear_flops_at(self, num_tokens: float) -> float:
        return self.config.linear_flops_per_token * num_tokens

    @property
    def cells(self) -> int:
        return grid_cells(self.num_tokens)

    @property
    def grid_bytes(self) -> int:
        return self.grid_bytes_at(self.num_tokens)

    @property
    def crossover_tokens(self) -> float:
        """The length past which attention's products cost more FLOPs than the rest of the model."""
        c = self.config
        # Solve 2 * head_dim * heads * layers * T (T + 1) = linear * T for T.
        return c.linear_flops_per_token / (2.0 * c.head_dim * c.num_heads * c.num_layers) - 1.0


class ScoreGridView(SimulatorView):
    """Drag the length and watch the grid, its memory and its share of the work (lesson 03)."""

    stepped = {"num_tokens": "num_tokens"}  # Step changes this box: it shows the new value

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        linear_flops_per_token: float,
        *,
        num_tokens: int = 16,
        bytes_per_value: int = 4,
    ) -> None:
        self.shape = {
            "num_layers": num_layers,
            "num_heads": num_heads,
            "head_dim": head_dim,
            "linear_flops_per_token": linear_flops_per_token,
        }
        controls = {
            "num_tokens": int_control("Length (tokens)", num_tokens),
            "bytes_per_value": int_control("Bytes per score", bytes_per_value),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.2), step_label="Double the length")

    def build(self, values: dict[str, Any]) -> ScoreGrid:
        return ScoreGrid(
            ScoreGridConfig(num_tokens=values["num_tokens"], bytes_per_value=values["bytes_per_value"], **self.shape)
        )

    def draw(self, model: ScoreGrid) -> str:
        grid_ax, curve_ax = self.axes
        t = model.num_tokens
        if t <= MAX_DRAWN_CELLS_SIDE:
            # Plain attention fills every cell, then masks the future (upper) half with -inf.
            grid_ax.imshow(np.tril(np.ones((t, t))), cmap="Purples", vmin=-0.3, vmax=1.2, interpolation="nearest")
            grid_ax.set_title(
                f"one head's score grid: {t} × {t} = {model.cells:,} cells\n(dark: used, light: future, masked)"
            )
            grid_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            grid_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            # Too many cells to draw one by one: the same two halves, drawn smoothly.
            grid_ax.imshow(np.tril(np.ones((256, 256))), cmap="Purples", vmin=-0.3, vmax=1.2, extent=(0, 1, 1, 0))
            grid_ax.set_xticks([0, 1], ["0", f"{t - 1:,}"])
            grid_ax.set_yticks([0, 1], ["0", f"{t - 1:,}"])
            grid_ax.set_title(f"{t:,} × {t:,} = {format_count(model.cells)} cells per head\n(too many to draw each)")
        grid_ax.set_xlabel("key token (compared against)")
        grid_ax.set_ylabel("query token (doing the comparing)")

        lengths = np.unique(np.geomspace(1, max(4 * t, 2 * model.crossover_tokens), 200).round())  # show the crossing
        curve_ax.loglog(lengths, model.attention_flops_at(lengths), color="C3", label="attention scores (∝ length²)")
        curve_ax.loglog(lengths, model.linear_flops_at(lengths), color="C0", label="rest of the model (∝ length)")
        curve_ax.plot([t], [model.attention_flops_at(t)], "o", color="C3")
        curve_ax.plot([t], [model.linear_flops_at(t)], "o", color="C0")
        curve_ax.axvline(
            model.crossover_tokens, color="0.5", ls=":", label=f"crossover ≈ {model.crossover_tokens:,.0f} tokens"
        )
        curve_ax.set_xlabel("length (tokens, log scale)")
        curve_ax.set_ylabel("FLOPs for one pass (log scale)")
        curve_ax.set_title("work vs length")
        curve_ax.legend(loc="upper left", fontsize=8)
        attention_share = model.attention_flops_at(t) / (model.attention_flops_at(t) + model.linear_flops_at(t))
        return (
            f"{t:,} tokens: {model.cells:,} cells per head; one layer's grid (all {model.config.num_heads} heads) "
            f"takes {format_bytes(model.grid_bytes)} at {model.config.bytes_per_value} bytes per score. "
            f"Attention is {attention_share:.1%} of the pass's FLOPs."
        )
