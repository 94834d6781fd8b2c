"""Lesson 15's simulator: how long a context a card can afford, for one user or for many.

Window = the cache memory you can spare / bytes per token, counted the way the engine counts it:
the card minus the weights (``MemoryBudget``), cut into whole blocks (``num_blocks_for_budget``);
a prefix that every conversation shares (a system prompt) is stored once, in whole blocks, as
prefix caching stores it (lesson 13); every user's own tokens take blocks of their own
(``costs.kv_blocks_needed``). The shared part is given as a share of each conversation, so a
longer window shares more tokens too: ``window_for`` finds the longest whole number of blocks
that fits. The positions the model's config declares (``max_position_embeddings``) are a second ceiling; the
status line says which of the two sets the window. tests/simulators/test_sim_context_window.py checks the
numbers against the cost model and against the engine's admissions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from kvcourse.kernel_env import running_headless
from kvcourse.kernels import costs
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import bytes_per_value_dropdown, float_control, int_control, model_dropdown
from kvcourse.simulators.hardware import CardConfig, CardPool, CardView, card_unit, draw_card_top
from kvcourse.simulators.labels import ModelFact, format_bytes, log_axes, plural

DEFAULT_GPU = "H100 80GB"
DEFAULT_MODEL = "llama-3-8b"
MAX_USERS = 100_000
MAX_BLOCK_SIZE = 1024
MEMORY, MODEL = "memory", "the model's position limit"  # the two ceilings on the window
# The card's bytes with every user at the window (ContextWindow.budget_terms).
WEIGHTS, SHARED, OWN, LEFT = "weights", "shared prefix, stored once", "users' own tokens", "left over"


def _share(shared_percent: float) -> tuple[int, int]:
    """shared_percent / 100 as an exact fraction (numerator, denominator) of the decimal typed."""
    share = Fraction(repr(float(shared_percent))) / 100
    return share.numerator, share.denominator


def shared_tokens(window: int, shared_percent: float) -> int:
    """Tokens of a ``window``-token conversation that are the shared prefix (rounded down)."""
    num, den = _share(shared_percent)
    return window * num // den


def window_for(num_blocks: int, block_size: int, num_users: int, shared_percent: float = 0.0) -> int:
    """The longest context, in whole blocks, that num_users reach at once when the first shared_percent
    of each conversation is the same for all of them (lesson 15); 0 if not every user gets a block.

    ``costs.kv_blocks_needed`` grows by at least one block with every block of context, so the
    largest fitting number of blocks is found by bisection.
    """
    num, den = _share(shared_percent)

    def fits(k: int) -> bool:
        context = k * block_size
        return costs.kv_blocks_needed(context, block_size, num_users, context * num // den) <= num_blocks

    if num_blocks < 1 or not fits(1):
        return 0
    low, high = 1, num_blocks  # a conversation of k blocks needs at least k blocks
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low * block_size


@dataclass(frozen=True)
class ContextWindowConfig(CardConfig):
    """A card, a model, the users sharing it, the shared share of each conversation, the block size (lesson 15)."""

    model: str = DEFAULT_MODEL
    num_users: int = 1
    shared_percent: float = 0.0
    block_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()  # the card, the model, the bytes per value (one width for weights and cache)
        check_int("Users", self.num_users, 1, MAX_USERS)
        check_float("Shared prefix (% of each conversation)", self.shared_percent, 0.0, 100.0)
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        self.check_fits(self.block_size)


class ContextWindow(CardPool):
    """The window each user can have, and what sets it; step() doubles the users (lesson 15)."""

    config: ContextWindowConfig

    def step(self) -> None:
        """Twice as many users share the card."""
        if self.num_users * 2 > MAX_USERS:
            raise InvalidInput(f"{MAX_USERS:,} users is the most this simulator counts; press Reset.")
        self.num_users *= 2

    # -- the pool -------------------------------------------------------------------------------------
    @property
    def bytes_per_token(self) -> int:
        return costs.kv_bytes_per_token(self.config.shape, self.config.bytes_per_value)

    # -- the window -----------------------------------------------------------------------------------
    def memory_window_at(self, num_users: int, shared_percent: float | None = None) -> int:
        """What memory alone allows each of num_users, in whole blocks."""
        percent = self.config.shared_percent if shared_percent is None else shared_percent
        return window_for(self.num_blocks, self.config.block_size, num_users, percent)

    @property
    def memory_window(self) -> int:
        return self.memory_window_at(self.num_users)

    @property
    def unshared_window(self) -> int:
        """The same users if every one of them stored the whole conversation."""
        return self.memory_window_at(self.num_users, 0.0)

    @property
    def exact_window(self) -> int:
        """Memory's window counted token by token, as if there were no blocks."""
        c = self.config
        return window_for(self.budget.kv_bytes // self.bytes_per_token, 1, self.num_users, c.shared_percent)

    @property
    def window(self) -> int:
        """The longest conversation every user can have at once: the lower of the two ceilings."""
        return min(self.memory_window, self.max_context)

    @property
    def limit(self) -> str:
        """Which ceiling sets the window: MEMORY or MODEL."""
        return MODEL if self.memory_window > self.max_context else MEMORY

    @property
    def shared_tokens(self) -> int:
        return shared_tokens(self.window, self.config.shared_percent)

    def budget_terms(self) -> dict[str, int]:
        """The card's bytes when every user is at the window: weights, the shared prefix, own tokens, the rest."""
        c, window = self.config, self.window
        if window == 0:
            shared = own = 0
        else:
            shared = min(self.shared_tokens, window - 1) // c.block_size
            own = costs.kv_blocks_needed(window, c.block_size, self.num_users, self.shared_tokens) - shared
        terms = {WEIGHTS: self.budget.weight_bytes, SHARED: shared * self.block_bytes, OWN: own * self.block_bytes}
        terms[LEFT] = c.total_bytes - sum(terms.values())
        return terms


_COLOURS = {WEIGHTS: "C0", SHARED: "C2", OWN: "C1", LEFT: "0.85"}


class ContextWindowView(CardView):
    """The window a card affords each user, and which ceiling sets it (lesson 15)."""

    stepped = {"num_users": "num_users"}  # Step changes this box: it shows the new value

    def __init__(
        self,
        gpu: str | None = None,
        *,
        card_gib: float | None = None,
        model: str = DEFAULT_MODEL,
        bytes_per_value: int = 2,
        num_users: int = 1,
        shared_percent: float = 0.0,
        block_size: int = 16,
    ) -> None:
        controls = {
            **self.card_controls(gpu, card_gib, DEFAULT_GPU, "280px"),
            "model": model_dropdown(model, ModelFact.CONTEXT, width="280px"),
            "bytes_per_value": bytes_per_value_dropdown(
                bytes_per_value, description="Weights and cache in", width="280px"
            ),
            "num_users": int_control("Users at once", num_users),
            "shared_percent": float_control("Shared prefix (% of each conversation)", shared_percent, width="330px"),
            "block_size": int_control("Block size (tokens)", block_size),
        }
        super().__init__(controls, step_label="Double the users")

    def build(self, values: dict[str, Any]) -> ContextWindow:
        return ContextWindow(ContextWindowConfig(**self.config_fields(values)))

    def draw(self, model: ContextWindow) -> str:
        card_ax, curve_ax = self.axes
        self._draw_card(card_ax, model)
        self._draw_curve(curve_ax, model)
        return self._summary(model)

    @staticmethod
    def _draw_card(ax: Any, m: ContextWindow) -> None:
        unit, _ = card_unit(m.config.total_bytes)
        base = 0.0
        names = {LEFT: "unused: the model reads no further" if m.limit == MODEL else "left over (whole blocks)"}
        for name, size in m.budget_terms().items():
            if size > 0:
                ax.bar(
                    0,
                    size / unit,
                    bottom=base,
                    width=0.6,
                    color=_COLOURS[name],
                    label=f"{names.get(name, name)}: {format_bytes(size)}",
                )
                base += size / unit
        draw_card_top(ax, m.budget, "the card", headroom=0.45)
        if m.window == 0:
            ax.set_title(f"{plural(m.num_users, 'user')}: not one block each")
        else:
            each = " each" if m.num_users > 1 else ""
            ax.set_title(f"{plural(m.num_users, 'user')} at {m.window:,} tokens{each}: {m.limit} sets it")

    @staticmethod
    def _draw_curve(ax: Any, m: ContextWindow) -> None:
        c = m.config
        top = max(2, min(max(1024, 4 * m.num_users), m.num_blocks))  # past num_blocks users nobody gets a block
        users = np.unique(np.geomspace(1, top, 60).round().astype(int))
        series = {"every user stores it all": 0.0}
        if c.shared_percent > 0:
            series[f"{c.shared_percent:g} % shared, stored once"] = c.shared_percent
        for i, (name, percent) in enumerate(series.items()):
            windows = np.array([m.memory_window_at(int(u), percent) for u in users])
            keep = windows > 0
            ax.plot(users[keep], windows[keep], color="C1" if i == 0 else "C2", lw=2, label=f"memory: {name}")
        ax.axhline(m.max_context, color="0.4", ls=":", lw=1.5, label=f"the model reads {m.max_context:,}")
        if m.window:
            ax.plot(
                [m.num_users], [m.window], "o", color="C3", ms=7, label=f"{plural(m.num_users, 'user')}: {m.window:,}"
            )
        log_axes(ax)
        ax.set_xlabel("users at once (log scale)")
        ax.set_ylabel("window per user (tokens, log scale)")
        ax.set_title("twice the users, half the window each")
        ax.legend(loc="lower left", fontsize=8)

    @staticmethod
    def _summary(m: ContextWindow) -> str:
        c = m.config
        terms = m.budget_terms()
        head = (
            f"{format_bytes(c.total_bytes)} card: {format_bytes(m.budget.weight_bytes)} of weights leave "
            f"{format_bytes(m.budget.kv_bytes)} = {m.num_blocks:,} blocks of {c.block_size} tokens "
            f"({m.bytes_per_token:,} bytes per token). "
        )
        who = f"{plural(m.num_users, 'user')}, {c.shared_percent:g} % of each conversation shared: "
        if m.window == 0:
            return (
                head
                + who
                + (
                    f"<b>no window</b>: the pool cannot give each user even one block "
                    f"({m.num_blocks:,} blocks for {m.num_users:,} users)."
                )
            )
        if m.limit == MODEL:
            return (
                head
                + who
                + (
                    f"memory holds {m.memory_window:,} tokens{' each' if m.num_users > 1 else ''}, "
                    f"but {c.model} reads at most "
                    f"{m.max_context:,}: <b>the window is {m.window:,} tokens, set by the positions the "
                    f"model's config declares</b> (max_position_embeddings)."
                )
            )
        shared = (
            f", the shared prefix ({m.shared_tokens:,} tokens) {format_bytes(terms[SHARED])}"
            f" once (without sharing: {m.unshared_window:,} tokens each)"
            if c.shared_percent > 0
            else ""
        )
        lost, whose = m.exact_window - m.window, ("users'" if m.num_users > 1 else "user's")
        rounding = (
            f"{'each' if m.num_users > 1 else 'the'} window is {lost:,} tokens shorter than counting byte by byte"
            if lost
            else "it costs no user a token here"
        )
        return (
            head
            + who
            + (
                f"<b>the window is {m.window:,} tokens{' each' if m.num_users > 1 else ''}, set by memory</b>: "
                f"the {whose} own tokens take "
                f"{format_bytes(terms[OWN])}{shared}; {format_bytes(terms[LEFT])} is left over because blocks are "
                f"whole ({rounding})."
            )
        )


def prompt_lengths_to_time() -> list[int]:
    """The prompt lengths whose prefill lesson 15 times: 128 to 1,024 tokens, or two under the test harness."""
    return [128, 512] if running_headless() else [128, 256, 512, 1024]
