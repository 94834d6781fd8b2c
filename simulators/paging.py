"""Lesson 11's simulator: one request trace served twice, by reservation and by paging, step by step.

The model drives the engine's own allocators, so it is not a second implementation: a
``ReservationReplay`` (max-length contiguous reservations, first fit, lesson 09) and a
``PagingReplay`` (LLMEngine's own scheduler and KV-cache manager with dummy tokens, blocks on
demand, step for step as LLMEngine would serve the trace; tests/simulators/test_sim_paging.py checks both
against the engine). Both see the same requests arrive at the same steps, in a pool of the same size;
Step plays ``steps_per_click`` engine steps on both, and the figure shows their utilisation so
far and the two pools slot by slot at the latest step. Lab C (lesson 20) serves the trace on the
learner's scheduling policy beside first come, first served (``scheduling_policy``; learner_policy.py).

The helpers below serve lesson 11's measurements: ``utilisation_curve`` (a rolling share of busy
memory that holds tokens), ``block_size_sweep`` (the same trace at several block sizes) and
``decode_attention_inputs`` (a paged pool shaped like one layer of a model, for timing the
engine's ``paged_decode_attention`` at several block sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from kvcourse.feedback import info
from kvcourse.kernels import MemoryReport, PagingReplay, ReservationReplay, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import float_control, int_control

MAX_BLOCK_SIZE = 4096
MAX_POOL_SLOTS = 262_144
MAX_REQUESTS = 1000
MAX_TOKENS = 100_000
MAX_STEPS_PER_CLICK = 100_000
MAX_SEED = 2**31 - 1
WINDOW = 100  # engine steps averaged in the utilisation curves

# What each slot holds, in words a learner reads in the legend (the replays' categories).
CATEGORY_WORDS = {
    "used": "holds a token's K and V",
    "reserved_future": "reserved for answer tokens still to come",
    "internal": "held, never to be written",
    "external": "free, but no hole is large enough",
    "stranded": "free, too little for the next request",
    "idle": "free, nobody waiting",
}
CATEGORY_COLOURS = {"used": "#1f77b4", "reserved_future": "#ffbb78", "internal": "#d62728",
                    "external": "#9467bd", "stranded": "#7f7f7f", "idle": "#f2f2f2"}


@dataclass(frozen=True)
class PagingConfig:
    """A block size, a pool and a request trace (lesson 11); the defaults are the lesson's trace and pool."""

    block_size: int = 16
    pool_slots: int = workload.LESSON_POOL_SLOTS
    num_requests: int = workload.LESSON_TRACE.num_requests
    arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step
    answer_mean: float = workload.LESSON_TRACE.answer_mean
    answer_limit: int = workload.LESSON_TRACE.answer_limit
    seed: int = workload.LESSON_TRACE.seed
    steps_per_click: int = 200

    def __post_init__(self) -> None:
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        check_int("Pool (token slots)", self.pool_slots, 1, MAX_POOL_SLOTS)
        check_int("Requests", self.num_requests, 1, MAX_REQUESTS)
        check_float("Arrivals per step", self.arrivals_per_step, 0.001, 100.0)
        check_float("Mean answer (tokens)", self.answer_mean, 1.0, MAX_TOKENS)
        check_int("Answer limit (tokens)", self.answer_limit, 1, MAX_TOKENS)
        check_int("Seed", self.seed, 0, MAX_SEED)
        check_int("Steps per click", self.steps_per_click, 1, MAX_STEPS_PER_CLICK)
        if self.pool_slots < self.block_size:
            raise InvalidInput(f"Pool (token slots) must hold at least one block of {self.block_size} tokens, "
                               f"got {self.pool_slots:,} slots.")

    @property
    def num_blocks(self) -> int:
        """Whole blocks in the pool; slots beyond the last whole block go unused by paging."""
        return self.pool_slots // self.block_size

    @property
    def trace_config(self) -> workload.TraceConfig:
        """The lesson's trace with this config's settings (prompts as in lesson 09)."""
        t = workload.LESSON_TRACE
        return workload.TraceConfig(self.num_requests, float(self.arrivals_per_step), t.prompt_mean,
                                    float(self.answer_mean), t.sigma, self.answer_limit, t.max_prompt_len,
                                    self.seed)


class PagingSim:
    """The same trace on max-length reservations and on paging, stepped together (lesson 11)."""

    def __init__(self, config: PagingConfig | None = None) -> None:
        self.config = config if config is not None else PagingConfig()
        c = self.config
        self.trace = workload.request_trace(c.trace_config)
        longest_reservation = max(r.max_len for r in self.trace)
        if longest_reservation > c.pool_slots:
            raise InvalidInput(
                f"a request reserves {longest_reservation:,} slots (its prompt + the answer limit), more than "
                f"the pool's {c.pool_slots:,}: raise Pool (token slots) or lower Answer limit (tokens).")
        self.reservation = ReservationReplay(self.trace, c.pool_slots)
        self.paging = PagingReplay(self.trace, c.num_blocks, c.block_size)

    @property
    def replays(self) -> tuple[ReservationReplay, PagingReplay]:
        return self.reservation, self.paging

    @property
    def done(self) -> bool:
        return all(replay.done for replay in self.replays)

    @property
    def step_index(self) -> int:
        """Engine steps played so far (the longer of the two replays)."""
        return max(r.step_index for r in self.replays)

    def step(self, num_steps: int | None = None) -> None:
        """Play ``num_steps`` engine steps (default: steps_per_click) on both replays."""
        if self.done:
            raise InvalidInput("both replays have served every request; press Reset to start again.")
        for _ in range(self.config.steps_per_click if num_steps is None else num_steps):
            for replay in self.replays:
                if not replay.done:
                    replay.step()
            if self.done:
                break

    def run(self) -> tuple[MemoryReport, MemoryReport]:
        """Play both replays to the end: (reservation report, paging report)."""
        while not self.done:
            self.step(10_000)
        return self.reports

    def reset(self) -> None:
        """Back to step 0 on the same trace."""
        c = self.config
        self.reservation = ReservationReplay(self.trace, c.pool_slots)
        self.paging = PagingReplay(self.trace, c.num_blocks, c.block_size)

    # -- what the lesson and the view read ------------------------------------------------------
    @property
    def reports(self) -> tuple[MemoryReport, MemoryReport]:
        first, second = self.replays
        return first.report, second.report

    @property
    def more_running(self) -> float:
        """How many times as many requests paging ran at once as reservation, on average so far."""
        reservation, paging = self.reports
        return paging.mean_running / reservation.mean_running if reservation.mean_running else math.nan

    def pool_map(self, replay: ReservationReplay | PagingReplay) -> np.ndarray:
        """The replay's pool at its latest step: one category index (into CATEGORIES) per slot."""
        slots = np.full(self.config.pool_slots, CATEGORIES.index("idle"), dtype=np.int8)
        if replay.step_index == 0 or replay.done:  # before the first request, after the last: empty
            return slots
        for segment in replay.memory_map():
            slots[segment.start:segment.end] = CATEGORIES.index(segment.category)
        return slots


def utilisation_curve(report: MemoryReport, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(steps, utilisation): the share of busy slot-steps that held a token over the last ``window`` steps.

    Steps where nothing was busy (an empty pool, nobody waiting) count as fully used, as in
    ``StepRecord.utilisation``.
    """
    check_int("window", window, 1, 10**9)
    used = np.array([r.used for r in report.history], dtype=float)
    busy = np.array([r.busy for r in report.history], dtype=float)
    kernel = np.ones(window)
    used_sum = np.convolve(used, kernel)[: len(used)]
    busy_sum = np.convolve(busy, kernel)[: len(busy)]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(busy_sum > 0, used_sum / busy_sum, 1.0)
    return np.arange(len(used)), share


@dataclass(frozen=True)
class BlockSizePoint:
    """One block size's replay of a trace on a fixed pool (lesson 11's sweep)."""

    block_size: int
    report: MemoryReport
    num_allocations: int  # blocks the KV-cache manager handed out over the whole trace

    @property
    def waste(self) -> float:
        """Share of the busy memory that held no token (1 - utilisation)."""
        return 1.0 - self.report.utilisation

    @property
    def tail_waste(self) -> float:
        """Share of the busy memory in the empty tails of the sequences' last blocks."""
        return self.report.share("internal")

    @property
    def mean_table_len(self) -> float:
        """Block-table entries per running sequence, averaged over every step."""
        blocks = sum((r.used + r.internal) // self.block_size for r in self.report.history)
        return blocks / max(1, sum(r.running for r in self.report.history))


def block_size_sweep(trace: list[workload.TraceRequest], pool_slots: int,
                     block_sizes: list[int]) -> list[BlockSizePoint]:
    """Replay ``trace`` with paging (as the engine steps) at each block size, the pool fixed in slots."""
    points = []
    for block_size in block_sizes:
        replay = PagingReplay(trace, pool_slots // block_size, block_size)
        report = replay.run()
        points.append(BlockSizePoint(block_size, report, replay.manager.events.counts().get("allocate", 0)))
    return points


def decode_attention_inputs(context_lens: list[int], block_size: int, num_heads: int, num_kv_heads: int,
                            head_dim: int, dtype: torch.dtype = torch.float32, seed: int = 0,
                            ) -> tuple[torch.Tensor, ...]:
    """Arguments for ``paged_decode_attention``: one decode query per sequence over a pool whose
    blocks are handed out in a random order, as a busy pool hands them out (lesson 11).

    Returns (q, k_cache, v_cache, block_tables, context_lens, scale); the pool holds exactly the
    blocks the sequences need, and each row of block_tables is padded with block 0.
    """
    generator = torch.Generator().manual_seed(seed)
    per_seq = [ceil_div(n, block_size) for n in context_lens]
    num_blocks = sum(per_seq)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=generator).to(dtype)
    v_cache = torch.randn(shape, generator=generator).to(dtype)
    order = torch.randperm(num_blocks, generator=generator).tolist()
    width, rows, start = max(per_seq), [], 0
    for n in per_seq:
        rows.append(order[start:start + n] + [0] * (width - n))
        start += n
    q = torch.randn((len(context_lens), num_heads, head_dim), generator=generator).to(dtype)
    return q, k_cache, v_cache, torch.tensor(rows), torch.tensor(context_lens), head_dim ** -0.5


class PagingView(SimulatorView):
    """Reservation and paging on one trace: utilisation so far, and both pools now (lesson 11)."""

    def __init__(self, block_size: int = 16, pool_slots: int = workload.LESSON_POOL_SLOTS,
                 num_requests: int = workload.LESSON_TRACE.num_requests,
                 arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step,
                 answer_mean: float = workload.LESSON_TRACE.answer_mean,
                 answer_limit: int = workload.LESSON_TRACE.answer_limit, seed: int = workload.LESSON_TRACE.seed,
                 steps_per_click: int = 200, *, scheduling_policy: Any = None) -> None:
        self.scheduling_policy = scheduling_policy  # lab C: the learner's policy, beside first come, first served
        controls = {
            "block_size": int_control("Block size (tokens)", block_size),
            "pool_slots": int_control("Pool (token slots)", pool_slots, width="240px"),
            "num_requests": int_control("Requests", num_requests, width="170px"),
            "arrivals_per_step": float_control("Arrivals per step", arrivals_per_step, width="210px"),
            "answer_mean": float_control("Mean answer (tokens)", answer_mean),
            "answer_limit": int_control("Answer limit (tokens)", answer_limit, width="240px"),
            "seed": int_control("Seed", seed, width="150px"),
            "steps_per_click": int_control("Steps per click", steps_per_click, width="200px"),
        }
        self.run_button = widgets.Button(description="Run to the end", icon="fast-forward")
        super().__init__(controls, num_axes=2, figsize=(12, 4.6), step_label="Step")
        self.run_button.on_click(lambda _button: self.run_to_end())
        buttons = self.widget.children[1]
        buttons.children = (*buttons.children, self.run_button)

    def build(self, values: dict[str, Any]) -> PagingSim:
        if self.scheduling_policy is None:
            sim = PagingSim(PagingConfig(**values))
        else:
            from kvcourse.simulators.learner_policy import LearnerPagingSim  # (it builds on this module)
            sim = LearnerPagingSim(PagingConfig(**values), self.scheduling_policy)
        sim.step()  # the first picture already shows some traffic
        return sim

    def run_to_end(self) -> None:
        """Play both replays to the end and redraw (nothing while the inputs are invalid)."""
        if self.model is None or self._error is not None:
            return
        if not self.model.done:
            try:
                self.model.run()
            except InvalidInput as err:  # a learner's policy stopped the run (lab C): say why, keep the figure
                self.message.value = info(str(err), escape=True)
                return
        self._redraw()

    def draw(self, model: PagingSim) -> str:
        curve_ax, map_ax = self.axes
        if self.scheduling_policy is not None:  # lab C: when each request finished, on both policies
            model.draw_finished(curve_ax)
        else:
            self._draw_curves(curve_ax, model)
        self._draw_pools(map_ax, model)
        return self._summary(model) if self.scheduling_policy is None else model.summary()

    @staticmethod
    def _draw_curves(ax: Any, sim: PagingSim) -> None:
        for i, replay in enumerate(sim.replays):
            steps, share = utilisation_curve(replay.report)
            ax.plot(steps, 100 * share, color=f"C{i}", lw=1.5,
                    label=f"{replay.name}: {replay.report.utilisation:.1%} so far")
        ax.axvline(sim.step_index - 1, color="0.4", ls=":", lw=1)
        ax.set_ylim(0, 105)
        ax.set_xlabel("engine step")
        ax.set_ylabel(f"slots holding a token (% of busy, last {WINDOW} steps)")
        reservation, paging = sim.reports
        ax.set_title(f"so far {paging.utilisation:.1%} of paging's busy memory holds tokens, "
                     f"{reservation.utilisation:.1%} of reservation's", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)

    @staticmethod
    def _draw_pools(ax: Any, sim: PagingSim) -> None:
        c = sim.config
        # whole blocks per row, about twice as wide as tall
        width = c.block_size * 2 ** math.ceil(math.log2(max(1.0, math.sqrt(2 * c.num_blocks))))
        rows = ceil_div(c.pool_slots, width)
        gap = max(1, rows // 6)
        image = np.full((2 * rows + gap, width), -1, dtype=np.int8)  # -1: no slot (padding, the gap)
        for i, replay in enumerate(sim.replays):
            slots = np.full(rows * width, -1, dtype=np.int8)
            slots[: c.pool_slots] = sim.pool_map(replay)
            image[i * (rows + gap): i * (rows + gap) + rows] = slots.reshape(rows, width)
        cmap = ListedColormap(["white"] + [CATEGORY_COLOURS[k] for k in CATEGORIES])
        ax.imshow(image + 1, cmap=cmap, vmin=0, vmax=len(CATEGORIES), aspect="auto", interpolation="nearest")
        for i, replay in enumerate(sim.replays):
            if replay.done:  # an empty strip would say nothing: say why it is empty
                ax.text(width / 2, i * (rows + gap) + rows / 2, f"every request served by step "
                        f"{replay.step_index - 1:,}: the pool is empty", ha="center", va="center", fontsize=9)
        ax.set_yticks([rows / 2, rows + gap + rows / 2], [replay.name.replace(", ", ",\n") for replay in sim.replays])
        ax.set_xticks([])
        ax.set_xlabel(f"the pool: {c.pool_slots:,} token slots, {width:,} per row, at step {sim.step_index - 1:,}")
        present = set(np.unique(image).tolist())
        shown = [k for i, k in enumerate(CATEGORIES) if i in present]
        ax.legend(handles=[Patch(color=CATEGORY_COLOURS[k], label=CATEGORY_WORDS[k]) for k in shown],
                  loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
        ax.set_title("each slot now, in address order", fontsize=10)

    @staticmethod
    def _summary(sim: PagingSim) -> str:
        c = sim.config
        parts = []
        for replay in sim.replays:
            last = replay.report.history[-1]
            state = ("finished every request at step " f"{replay.step_index - 1:,}" if replay.done
                     else f"{last.running} running, {last.waiting} waiting")
            parts.append(f"<b>{replay.name}</b>: {replay.report.utilisation:.1%} of busy memory held tokens so far, "
                         f"{replay.report.mean_running:.1f} running on average; {state}")
        unused = c.pool_slots - c.num_blocks * c.block_size
        note = (f" ({unused} slots beyond the last whole block go unused by paging.)" if unused else "")
        head = (f"After engine step {sim.step_index - 1:,} ({len(sim.trace)} requests in the trace, blocks of "
                f"{c.block_size} tokens). ")
        tail = (f" Paging ran {sim.more_running:.1f}x as many requests at once." if not math.isnan(sim.more_running)
                else "")
        return head + "; ".join(parts) + "." + tail + note
