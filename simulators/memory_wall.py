"""Lesson 08's simulator: one card's memory, the weights first, the KV caches in what is left, and the wall.

The pool is sized as the engine sizes it (``kvcourse.kernels.MemoryBudget`` and
``num_blocks_for_budget``): card bytes minus the weights (counted by the cost model) minus a
reserve, in whole blocks of ``block_size`` tokens. A conversation of C tokens holds
ceil(C / block_size) blocks, so ``users_that_fit`` = blocks // blocks per conversation. Step
brings one more user; the status says what the engine's scheduler does with them: admit, queue,
or refuse. tests/test_sim_memory_wall.py checks the count against the engine's own admissions.

``request_stories`` and ``occupancy`` read a real engine's event log back, so the lesson can show
what happened at the wall (waits, preemptions, refusals) in a few lines.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.ticker import FuncFormatter

from kvcourse.kernels import (
    MODEL_CONFIGS,
    EventKind,
    LLMEngine,
    MemoryBudget,
    ModelConfig,
    costs,
    num_blocks_for_budget,
)
from kvcourse.kernels.memory.budget import block_bytes
from kvcourse.simulators.base import (
    InvalidInput,
    SimulatorView,
    check_choice,
    check_float,
    check_int,
    float_control,
    format_bytes,
    int_control,
    model_shape,
)

GB = 1e9  # decimal gigabytes, as the course counts them everywhere
# Memory as each card is sold (the vendors' data sheets), in GB.
GPU_PRESETS: dict[str, float] = {
    "T4": 16.0,
    "L4": 24.0,
    "RTX 4090": 24.0,
    "A100 40GB": 40.0,
    "A100 80GB": 80.0,
    "H100 80GB": 80.0,
    "H200": 141.0,
    "MI300X": 192.0,
}
DEFAULT_GPU = "A100 80GB"
CUSTOM = "custom"
DEFAULT_MODEL = "llama-2-13b"  # chapter 003's 13B example (kvcourse.kernels.EXAMPLE_13B)
BYTES_PER_VALUE_CHOICES = (("2 (16-bit)", 2), ("4 (float32)", 4), ("1 (int8, scales not counted)", 1))
MAX_CARD_GB = 10_000.0
MAX_USERS = 100_000
MAX_TOKENS = 10_000_000
MAX_BLOCK_SIZE = 1024
MAX_DRAWN_USERS = 64  # beyond this the running caches are drawn as one segment

ADMIT, QUEUE, REFUSE = "admit", "queue", "refuse"


def blocks_per_conversation(context_tokens: int, block_size: int) -> int:
    """Whole blocks that hold context_tokens tokens of K and V (the last one partly empty)."""
    return -(-context_tokens // block_size)


def users_that_fit(model_config: Any, budget: MemoryBudget, context_tokens: int, block_size: int = 16,
                   bytes_per_value: int = 2) -> int:
    """Conversations of context_tokens that the pool holds at once, in whole blocks (lesson 08)."""
    num_blocks = num_blocks_for_budget(model_config, budget, block_size, bytes_per_value)
    return num_blocks // blocks_per_conversation(context_tokens, block_size)


@dataclass(frozen=True)
class MemoryWallConfig:
    """A card, a model's weights, a reserve, and users of one context length (lesson 08)."""

    card_gb: float
    model: str = DEFAULT_MODEL
    bytes_per_value: int = 2
    reserve_gb: float = 0.0
    context_tokens: int = 4096
    num_users: int = 1
    block_size: int = 16
    model_config: ModelConfig | None = None  # a shape of one's own (SmolLM2 as loaded); None: the preset's

    def __post_init__(self) -> None:
        check_float("Card memory (GB)", self.card_gb, 1e-6, MAX_CARD_GB)
        model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_choice("Bytes per value", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)
        check_float("Reserve (GB)", self.reserve_gb, 0.0, MAX_CARD_GB)
        check_int("Context per user (tokens)", self.context_tokens, 1, MAX_TOKENS)
        check_int("Users", self.num_users, 0, MAX_USERS)
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        shape = self.shape
        weights = costs.weight_bytes(shape, self.bytes_per_value)
        left = self.total_bytes - weights - self.reserve_bytes
        if left <= 0:
            raise InvalidInput(
                f"the weights of {self.model} ({format_bytes(weights)} at {self.bytes_per_value} bytes per value) "
                f"and the reserve ({format_bytes(self.reserve_bytes)}) fill the {format_bytes(self.total_bytes)} "
                "card: nothing is left for a single KV cache. Pick a bigger card, a smaller model or fewer bytes.")
        if left < costs.kv_bytes_per_token(shape, self.bytes_per_value) * self.block_size:
            raise InvalidInput(f"after the weights only {format_bytes(left)} is left: not one block of "
                               f"{self.block_size} tokens fits. Pick a bigger card or a smaller model.")

    @property
    def shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)

    @property
    def total_bytes(self) -> int:
        return round(self.card_gb * GB)

    @property
    def reserve_bytes(self) -> int:
        return round(self.reserve_gb * GB)

    @property
    def budget(self) -> MemoryBudget:
        """The same split the engine takes (EngineConfig(memory_budget=...))."""
        return MemoryBudget.for_model(self.shape, self.total_bytes, self.bytes_per_value, self.reserve_bytes)


class MemoryWall:
    """The card filled by weights, then by one cache per user; step() brings one more user (lesson 08)."""

    def __init__(self, config: MemoryWallConfig) -> None:
        self.config = config
        self.budget = config.budget
        self.num_users = config.num_users

    def step(self) -> None:
        """One more user arrives, with the same context length."""
        if self.num_users >= MAX_USERS:
            raise InvalidInput(f"{MAX_USERS:,} users is the most this simulator counts; press Reset.")
        self.num_users += 1

    def reset(self) -> None:
        self.num_users = self.config.num_users

    # -- the split of the card ---------------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        return self.budget.weight_bytes

    @property
    def kv_budget_bytes(self) -> int:
        """What the weights and the reserve leave: the room for every KV cache."""
        return self.budget.kv_bytes

    @property
    def block_bytes(self) -> int:
        """One block's K and V, as the engine sizes its pool."""
        c = self.config
        return block_bytes(c.shape, c.block_size, c.bytes_per_value)

    @property
    def num_blocks(self) -> int:
        c = self.config
        return num_blocks_for_budget(c.shape, self.budget, c.block_size, c.bytes_per_value)

    @property
    def pool_tokens(self) -> int:
        """Tokens of K and V the whole pool holds, all users together."""
        return self.num_blocks * self.config.block_size

    # -- one user ------------------------------------------------------------------------------------
    @property
    def bytes_per_user(self) -> int:
        """One conversation's cache at the full context, exactly (the cost model)."""
        c = self.config
        return costs.kv_cache_bytes(c.shape, c.context_tokens, 1, c.bytes_per_value)

    @property
    def blocks_per_user(self) -> int:
        return blocks_per_conversation(self.config.context_tokens, self.config.block_size)

    @property
    def max_context(self) -> int:
        """The longest sequence the model reads (its max_position_embeddings)."""
        return self.config.shape.max_position_embeddings

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
            return (f"one conversation of {c.context_tokens:,} tokens needs {self.blocks_per_user:,} blocks, but the "
                    f"whole pool holds {self.num_blocks:,}: it could never fit, even alone")
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
    def next_action(self) -> str:
        """What the scheduler does with the next user to arrive: admit, queue or refuse."""
        if self.refusal:
            return REFUSE
        return ADMIT if self.num_users < self.users_fit else QUEUE

    def context_each(self, num_users: int) -> int:
        """The longest context each of num_users can have if all of them run at once (whole blocks)."""
        if num_users < 1:
            return self.pool_tokens
        return (self.num_blocks // num_users) * self.config.block_size


@dataclass(frozen=True)
class RequestStory:
    """One request's path through the engine, read from its event log (lesson 08)."""

    request_id: int
    prompt_tokens: int
    admitted: tuple[int, ...]  # the steps at which it got blocks (again after each preemption)
    preempted: tuple[int, ...]  # the steps at which it lost them
    finished: int | None  # the step it ended in; None if refused
    finish_reason: str  # "stop", "length", or "refused"
    refusal: str | None
    tokens: tuple[int, ...]
    recomputed_tokens: int  # tokens whose K and V were thrown away by preemptions and computed again

    @property
    def waited_steps(self) -> int:
        """Steps spent in the queue before its first admission."""
        return self.admitted[0] if self.admitted else 0


def request_stories(engine: LLMEngine) -> list[RequestStory]:
    """Every request the engine was given, from its event log (one sample per request).

    A preempted sequence had its prompt and every token it had written so far in the pool, all but
    the last one computed: prompt + written - 1 tokens are recomputed when it returns. A sequence
    writes one token per step from each admission on (each prompt computed in one step, as in
    lesson 08, where prompts are far below the step's token budget).
    """
    by_seq: dict[int, dict[EventKind, list[int]]] = {}
    for event in engine.events.events:
        if event.seq_id is not None:
            by_seq.setdefault(event.seq_id, {}).setdefault(event.kind, []).append(event.step)
    stories = []
    for rid, request in engine.requests.items():
        out = request.output()
        steps = by_seq.get(request.seqs[0].seq_id, {}) if request.seqs else {}
        admitted, preempted = steps.get(EventKind.ADMIT, []), steps.get(EventKind.PREEMPT, [])
        prompt = len(request.prompt_token_ids)
        # Tokens written by each preemption: one per step since each admission, counted over all of them.
        written = list(itertools.accumulate(p - a for a, p in zip(admitted, preempted)))
        recomputed = sum(prompt + w - 1 for w in written)
        finished = steps.get(EventKind.FINISH, [None])[-1]
        reason = "refused" if out.refusal else (out.finish_reasons[0] if out.finish_reasons else "")
        stories.append(RequestStory(rid, prompt, tuple(admitted), tuple(preempted), finished, reason,
                                    out.refusal, tuple(out.tokens), recomputed))
    return stories


def occupancy(engine: LLMEngine) -> tuple[list[int], list[int], list[int]]:
    """Blocks held, requests running and requests waiting at the end of every step, from the event log.

    Without forks or prefix caching (lesson 08) every FREE returns one block to the pool.
    """
    num_steps = engine.num_steps
    blocks, running, done = [0] * num_steps, [0] * num_steps, [0] * num_steps
    moves = {EventKind.ALLOCATE: (blocks, 1), EventKind.FREE: (blocks, -1), EventKind.ADMIT: (running, 1),
             EventKind.PREEMPT: (running, -1), EventKind.FINISH: (running, -1)}
    for event in engine.events.events:
        if event.kind in moves:
            series, sign = moves[event.kind]
            series[event.step] += sign
        if event.kind is EventKind.FINISH:
            done[event.step] += 1
    served = sum(1 for r in engine.requests.values() if r.refusal is None)
    blocks, running, done = (list(itertools.accumulate(x)) for x in (blocks, running, done))
    waiting = [served - r - d for r, d in zip(running, done)]
    return blocks, running, waiting


def _model_label(name: str) -> str:
    return f"{name} ({costs.num_parameters(MODEL_CONFIGS[name]) / 1e9:.1f}B parameters)"


class MemoryWallView(SimulatorView):
    """A card filling up with KV caches until the wall, and what the scheduler does next (lesson 08)."""

    def __init__(self, gpu: str | None = None, *, card_gb: float | None = None, model: str = DEFAULT_MODEL,
                 bytes_per_value: int = 2, reserve_gb: float = 0.0, context_tokens: int = 4096,
                 num_users: int = 16, model_config: ModelConfig | None = None) -> None:
        if gpu is None:
            gpu = CUSTOM if card_gb is not None else DEFAULT_GPU
        if gpu != CUSTOM and gpu not in GPU_PRESETS:
            raise ValueError(f"unknown GPU {gpu!r}; choose one of {sorted(GPU_PRESETS)} or {CUSTOM!r}")
        if card_gb is None:
            card_gb = GPU_PRESETS.get(gpu, GPU_PRESETS[DEFAULT_GPU])
        if model not in MODEL_CONFIGS:
            raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODEL_CONFIGS)}")
        self.model_config = model_config  # fixed for the life of the view (e.g. SmolLM2 as loaded)
        wide = dict(style={"description_width": "initial"}, layout=widgets.Layout(width="260px"))
        controls = {
            "gpu": widgets.Dropdown(options=[(f"{n} ({gb:g} GB)", n) for n, gb in GPU_PRESETS.items()]
                                    + [("custom: type the size", CUSTOM)], value=gpu, description="GPU preset", **wide),
            "card_gb": float_control("Card memory (GB)", card_gb),
            "model": widgets.Dropdown(options=[(_model_label(n), n) for n in sorted(MODEL_CONFIGS)], value=model,
                                      description="Weights of", **wide),
            "bytes_per_value": widgets.Dropdown(options=BYTES_PER_VALUE_CHOICES, value=bytes_per_value,
                                                description="Bytes per value", **wide),
            "reserve_gb": float_control("Reserve (GB)", reserve_gb),
            "context_tokens": int_control("Context per user (tokens)", context_tokens, width="260px"),
            "num_users": int_control("Users", num_users),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.4), step_label="One more user")

    def _on_control_change(self, change: dict) -> None:
        # Picking a GPU puts its memory into the card box, then rebuilds once.
        if change.get("owner") is self.controls["gpu"] and not self._holding and change["new"] in GPU_PRESETS:
            with self._hold():
                self.controls["card_gb"].value = GPU_PRESETS[change["new"]]
        super()._on_control_change(change)

    def build(self, values: dict[str, Any]) -> MemoryWall:
        return MemoryWall(MemoryWallConfig(
            values["card_gb"], values["model"], values["bytes_per_value"], values["reserve_gb"],
            values["context_tokens"], values["num_users"], model_config=self.model_config))

    def draw(self, model: MemoryWall) -> str:
        box_ax, curve_ax = self.axes
        box_ax.clear()
        curve_ax.clear()
        self._draw_box(box_ax, model)
        self._draw_curve(curve_ax, model)
        return self._summary(model)

    @staticmethod
    def _draw_box(ax: Any, m: MemoryWall) -> None:
        c = m.config
        card, unit = c.total_bytes, (GB if c.total_bytes >= GB else 1e6)
        label = "GB" if unit == GB else "MB"
        weights, reserve = m.weight_bytes / unit, c.reserve_bytes / unit
        ax.bar(0, weights, width=0.6, color="C0", label=f"weights: {format_bytes(m.weight_bytes)}")
        if reserve:
            ax.bar(0, reserve, width=0.6, bottom=weights, color="0.75", hatch="..", label=f"reserve: {format_bytes(c.reserve_bytes)}")
        base, per_user = weights + reserve, m.blocks_per_user * m.block_bytes / unit
        if m.num_running:
            if m.num_running <= MAX_DRAWN_USERS:
                for i in range(m.num_running):
                    ax.bar(0, per_user, width=0.6, bottom=base + i * per_user, color="C1" if i % 2 else "C3",
                           edgecolor="white", linewidth=0.5, label="one cache per running user" if i == 0 else None)
            else:
                ax.bar(0, m.num_running * per_user, width=0.6, bottom=base, color="C1",
                       label=f"{m.num_running:,} running users' caches")
        top = card / unit
        if m.num_waiting:
            over = min(m.num_waiting * per_user, 0.3 * top)  # drawn to a cap; the legend gives the count
            ax.bar(0, over, width=0.6, bottom=top, color="none", edgecolor="C3", hatch="//",
                   label=f"{m.num_waiting:,} waiting: no room")
        ax.axhline(top, color="k", lw=2.5, label=f"the wall: {format_bytes(card)}")
        ax.set_xlim(-0.4, 2.0)
        ax.set_xticks([])
        bottom = 0.0
        if m.kv_budget_bytes < 0.25 * card:  # the caches would be a sliver on top of the weights: zoom in
            bottom = max(0.0, top - 2.5 * (top - weights))
        ax.set_ylim(bottom, top + 0.35 * (top - bottom))
        ax.set_ylabel(f"card memory ({label})" + (", zoomed to the top" if bottom else ""))
        ax.legend(loc="center right", fontsize=8)
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
            ax.plot([c.context_tokens], [m.users_fit], "o", color="C3", ms=7,
                    label=f"{m.users_fit:,} at {c.context_tokens:,} tokens")
        if m.num_users >= 1:
            ax.axhline(m.num_users, color="0.3", ls="--", lw=1.2, label=f"users now: {m.num_users:,}")
        if m.max_context <= top:
            ax.axvline(m.max_context, color="0.5", ls=":", lw=1.5, label=f"model reads at most {m.max_context:,}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.set_xlabel("context per user (tokens, log scale)")
        ax.set_ylabel("users at once (log scale)")
        ax.set_title("double the context, halve the users")
        ax.legend(loc="upper right", fontsize=8)

    @staticmethod
    def _summary(m: MemoryWall) -> str:
        c = m.config
        reserve = f" and a {format_bytes(c.reserve_bytes)} reserve" if c.reserve_bytes else ""
        split = (f"{format_bytes(c.total_bytes)} card: {format_bytes(m.weight_bytes)} of weights{reserve} leave "
                 f"{format_bytes(m.kv_budget_bytes)} = {m.num_blocks:,} blocks of {c.block_size} tokens "
                 f"({m.pool_tokens:,} tokens). ")
        if m.refusal:
            return split + f"Next: <b>refuse</b>: {m.refusal}."
        user = (f"One user at {c.context_tokens:,} tokens needs {format_bytes(m.bytes_per_user)} "
                f"({m.blocks_per_user:,} blocks): {m.users_fit:,} fit at once. ")
        if m.next_action == ADMIT:
            nxt = (f"Next: <b>admit</b>: the next user gets blocks at once "
                   f"({m.users_fit - m.num_users:,} more fit).")
        else:
            nxt = (f"Now {m.num_running:,} run and {m.num_waiting:,} wait. Next: <b>queue</b>: the next user waits "
                   "until a running one finishes; if running users grow and no block is free, the newest is "
                   "preempted and recomputed later. ")
            each = m.context_each(m.num_users)
            nxt += (f"To run all {m.num_users:,} at once, each would be cut short at {each:,} tokens." if each
                    else f"Even one block each is more than the pool holds for {m.num_users:,} users.")
        return split + user + nxt
