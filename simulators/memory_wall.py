"""Lesson 08's simulator: one card's memory, the weights first, the KV caches in what is left, and the wall.

The pool is sized as the engine sizes it (``kvcourse.kernels.MemoryBudget`` and
``num_blocks_for_budget``): card bytes minus the weights (counted by the cost model) minus a
reserve, in whole blocks of ``block_size`` tokens. A conversation of C tokens holds
ceil(C / block_size) blocks, so ``users_that_fit`` = blocks // blocks per conversation. Step
brings one more user; the status says what the engine's scheduler does with them: admit, queue,
or refuse. tests/simulators/test_sim_memory_wall.py checks the count against the engine's own admissions.

What happened at the wall on the real engine (waits, preemptions, refusals) is read back from its
event log by ``kvcourse.kernels.request_stories`` and ``occupancy`` (kernels/measure/event_log.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from kvcourse.kernels import MemoryBudget, ModelConfig, costs, num_blocks_for_budget
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import bytes_per_value_dropdown, float_control, int_control, model_dropdown
from kvcourse.simulators.hardware import (
    MAX_CARD_GIB,
    CardConfig,
    CardPool,
    CardView,
    card_unit,
    draw_card_top,
)
from kvcourse.simulators.labels import GB, ModelFact, format_bytes, log_axes

DEFAULT_GPU = "A100 80GB"
DEFAULT_MODEL = "llama-2-13b"  # chapter 003's 13B example (kvcourse.kernels.EXAMPLE_13B)
MAX_USERS = 100_000
MAX_TOKENS = 10_000_000
MAX_BLOCK_SIZE = 1024
MAX_DRAWN_USERS = 64  # beyond this the running caches are drawn as one segment


class Admission(StrEnum):
    """What the engine's scheduler does with the next user to arrive (lesson 08)."""

    ADMIT = "admit"  # blocks are free: it starts at once
    QUEUE = "queue"  # the pool is full: it waits for a running user to finish
    REFUSE = "refuse"  # its conversation could never fit, not even alone


def users_that_fit(
    model_config: Any, budget: MemoryBudget, context_tokens: int, block_size: int = 16, bytes_per_value: int = 2
) -> int:
    """Conversations of context_tokens that the pool holds at once, in whole blocks (lesson 08)."""
    num_blocks = num_blocks_for_budget(model_config, budget, block_size, bytes_per_value)
    return num_blocks // ceil_div(context_tokens, block_size)


@dataclass(frozen=True)
class MemoryWallConfig(CardConfig):
    """A card, a model's weights, a reserve, and users of one context length (lesson 08)."""

    model: str = DEFAULT_MODEL
    reserve_gb: float = 0.0
    context_tokens: int = 4096
    num_users: int = 1
    block_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()  # the card, the model, the bytes per value
        check_float("Reserve (GB)", self.reserve_gb, 0.0, MAX_CARD_GIB)
        check_int("Context per user (tokens)", self.context_tokens, 1, MAX_TOKENS)
        check_int("Users", self.num_users, 0, MAX_USERS)
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        self.check_fits(self.block_size)

    @property
    def reserve_bytes(self) -> int:
        return round(self.reserve_gb * GB)


class MemoryWall(CardPool):
    """The card filled by weights, then by one cache per user; step() brings one more user (lesson 08)."""

    config: MemoryWallConfig

    def step(self) -> None:
        """One more user arrives, with the same context length."""
        if self.num_users >= MAX_USERS:
            raise InvalidInput(f"{MAX_USERS:,} users is the most this simulator counts; press Reset.")
        self.num_users += 1

    # -- the split of the card ---------------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        return self.budget.weight_bytes

    @property
    def kv_budget_bytes(self) -> int:
        """What the weights and the reserve leave: the room for every KV cache."""
        return self.budget.kv_bytes

    # -- one user ------------------------------------------------------------------------------------
    @property
    def bytes_per_user(self) -> int:
        """One conversation's cache at the full context, exactly (the cost model)."""
        c = self.config
        return costs.kv_cache_bytes(c.shape, c.context_tokens, 1, c.bytes_per_value)

    @property
    def blocks_per_user(self) -> int:
        return ceil_div(self.config.context_tokens, self.config.block_size)

    def users_at(self, context_tokens: int) -> int:
        """Conversations of context_tokens that fit at once on this card."""
        c = self.config
        return users_that_fit(c.shape, self.budget, context_tokens, c.block_size, c.bytes_per_value)

    @property
    def users_fit(self) -> int:
        return self.users_at(self.config.context_tokens)

    # -- the users now -----------------------------------------------------------------------------
    @property
    def refusal(self) -> str | None:
        """Why a conversation of this context can never be served, or None (the engine's reasons)."""
        c = self.config
        if c.context_tokens > self.max_context:
            return f"{c.context_tokens:,} tokens is longer than the {self.max_context:,} this model reads"
        if self.blocks_per_user > self.num_blocks:
            return (
                f"one conversation of {c.context_tokens:,} tokens needs {self.blocks_per_user:,} blocks, but the "
                f"whole pool holds {self.num_blocks:,}: it could never fit, even alone"
            )
        return None

    @property
    def num_running(self) -> int:
        return 0 if self.refusal else min(self.num_users, self.users_fit)

    @property
    def num_waiting(self) -> int:
        return 0 if self.refusal else self.num_users - self.num_running

    @property
    def used_bytes(self) -> int:
        """Bytes the running users' blocks take from the pool."""
        return self.num_running * self.blocks_per_user * self.block_bytes

    @property
    def next_action(self) -> Admission:
        """What the scheduler does with the next user to arrive: admit, queue or refuse."""
        if self.refusal:
            return Admission.REFUSE
        return Admission.ADMIT if self.num_users < self.users_fit else Admission.QUEUE

    def context_each(self, num_users: int) -> int:
        """The longest context each of num_users can have if all of them run at once (whole blocks)."""
        if num_users < 1:
            return self.pool_tokens
        return (self.num_blocks // num_users) * self.config.block_size


class MemoryWallView(CardView):
    """A card filling up with KV caches until the wall, and what the scheduler does next (lesson 08)."""

    stepped = {"num_users": "num_users"}  # Step changes this box: it shows the new value

    def __init__(
        self,
        gpu: str | None = None,
        *,
        card_gib: float | None = None,
        model: str = DEFAULT_MODEL,
        bytes_per_value: int = 2,
        reserve_gb: float = 0.0,
        context_tokens: int = 4096,
        num_users: int = 16,
        model_config: ModelConfig | None = None,
    ) -> None:
        self.model_config = model_config  # fixed for the life of the view (e.g. SmolLM2 as loaded)
        controls = {
            **self.card_controls(gpu, card_gib, DEFAULT_GPU, "260px"),
            "model": model_dropdown(model, ModelFact.PARAMETERS, "Weights of"),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value),
            "reserve_gb": float_control("Reserve (GB)", reserve_gb),
            "context_tokens": int_control("Context per user (tokens)", context_tokens, width="260px"),
            "num_users": int_control("Users", num_users),
        }
        super().__init__(controls, step_label="One more user")

    def build(self, values: dict[str, Any]) -> MemoryWall:
        return MemoryWall(MemoryWallConfig(**self.config_fields(values), model_config=self.model_config))

    def draw(self, model: MemoryWall) -> str:
        box_ax, curve_ax = self.axes
        self._draw_box(box_ax, model)
        self._draw_curve(curve_ax, model)
        return self._summary(model)

    @staticmethod
    def _draw_box(ax: Any, m: MemoryWall) -> None:
        c = m.config
        unit, _ = card_unit(c.total_bytes)
        weights, reserve = m.weight_bytes / unit, c.reserve_bytes / unit
        ax.bar(0, weights, width=0.6, color="C0", label=f"weights: {format_bytes(m.weight_bytes)}")
        if reserve:
            ax.bar(
                0,
                reserve,
                width=0.6,
                bottom=weights,
                color="0.75",
                hatch="..",
                label=f"reserve: {format_bytes(c.reserve_bytes)}",
            )
        base, per_user = weights + reserve, m.blocks_per_user * m.block_bytes / unit
        if m.num_running:
            if m.num_running <= MAX_DRAWN_USERS:
                for i in range(m.num_running):
                    ax.bar(
                        0,
                        per_user,
                        width=0.6,
                        bottom=base + i * per_user,
                        color="C1" if i % 2 else "C3",
                        edgecolor="white",
                        linewidth=0.5,
                        label="one cache per running user" if i == 0 else None,
                    )
            else:
                ax.bar(
                    0,
                    m.num_running * per_user,
                    width=0.6,
                    bottom=base,
                    color="C1",
                    label=f"{m.num_running:,} running users' caches",
                )
        top = c.total_bytes / unit
        if m.num_waiting:
            over = min(m.num_waiting * per_user, 0.3 * top)  # drawn to a cap; the legend gives the count
            ax.bar(
                0,
                over,
                width=0.6,
                bottom=top,
                color="none",
                edgecolor="C3",
                hatch="//",
                label=f"{m.num_waiting:,} waiting: no room",
            )
        draw_card_top(ax, m.budget, "the wall", headroom=0.35)  # room above it for the waiting users
        if m.refusal:
            ax.set_title("one conversation is longer than the pool:\nrefused before it starts")
        elif m.num_waiting:
            ax.set_title(f"full: {m.num_running:,} users fit, {m.num_waiting:,} wait")
        else:
            ax.set_title(f"{m.num_running:,} users, room for {m.users_fit - m.num_running:,} more")

    @staticmethod
    def _draw_curve(ax: Any, m: MemoryWall) -> None:
        c = m.config
        top = max(4 * c.context_tokens, min(m.max_context, 4 * m.pool_tokens), 64 * c.block_size)
        contexts = np.unique(np.geomspace(c.block_size, top, 240).round().astype(int))
        users = np.array([m.users_at(int(n)) for n in contexts])
        keep = users >= 1
        ax.step(contexts[keep], users[keep], where="post", color="C1", label="users that fit")
        if m.users_fit >= 1:
            ax.plot(
                [c.context_tokens],
                [m.users_fit],
                "o",
                color="C3",
                ms=7,
                label=f"{m.users_fit:,} at {c.context_tokens:,} tokens",
            )
        if m.num_users >= 1:
            ax.axhline(m.num_users, color="0.3", ls="--", lw=1.2, label=f"users now: {m.num_users:,}")
        if m.max_context <= top:
            ax.axvline(m.max_context, color="0.5", ls=":", lw=1.5, label=f"model reads at most {m.max_context:,}")
        log_axes(ax)
        ax.set_xlabel("context per user (tokens, log scale)")
        ax.set_ylabel("users at once (log scale)")
        ax.set_title("double the context, halve the users")
        ax.legend(loc="upper right", fontsize=8)

    @staticmethod
    def _summary(m: MemoryWall) -> str:
        c = m.config
        reserve = f" and a {format_bytes(c.reserve_bytes)} reserve" if c.reserve_bytes else ""
        split = (
            f"{format_bytes(c.total_bytes)} card: {format_bytes(m.weight_bytes)} of weights{reserve} leave "
            f"{format_bytes(m.kv_budget_bytes)} = {m.num_blocks:,} blocks of {c.block_size} tokens "
            f"({m.pool_tokens:,} tokens). "
        )
        if m.refusal:
            return split + f"Next: <b>refuse</b>: {m.refusal}."
        user = (
            f"One user at {c.context_tokens:,} tokens needs {format_bytes(m.bytes_per_user)} "
            f"({m.blocks_per_user:,} blocks): {m.users_fit:,} fit at once. "
        )
        if m.next_action is Admission.ADMIT:
            nxt = f"Next: <b>admit</b>: the next user gets blocks at once ({m.users_fit - m.num_users:,} more fit)."
        else:
            nxt = (
                f"Now {m.num_running:,} run and {m.num_waiting:,} wait. Next: <b>queue</b>: the next user waits "
                "until a running one finishes; if running users grow and no block is free, the newest is "
                "preempted and recomputed later. "
            )
            each = m.context_each(m.num_users)
            nxt += (
                f"To run all {m.num_users:,} at once, each would be cut short at {each:,} tokens."
                if each
                else f"Even one block each is more than the pool holds for {m.num_users:,} users."
            )
        return split + user + nxt
