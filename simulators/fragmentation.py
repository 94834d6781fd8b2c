"""Lesson 09's simulator: one contiguous reservation per request, replayed on the shared trace.

The model does not re-implement the allocator: it drives the engine's own baseline,
``kvcourse.kernels.ReservationReplay`` (first-fit regions of prompt + answer limit slots from
``ReservationAllocator``) on a trace from ``kvcourse.kernels.workload``, a few steps per click,
and draws what the replay recorded. The memory strip is ``ReservationReplay.memory_map()``:
each region split into real tokens, room reserved for tokens still to come, and room that will
never be written (internal waste), and the holes between regions, marked as external waste on
a step where the next request is turned away although enough is free in total.

``memory_map_over_time`` and ``sweep`` give the lesson its two measurements (a slot x step map of
a whole run, and the share of real tokens as one setting of the trace changes); the ``draw_*``
functions keep the lesson's plotting cells short. tests/simulators/test_sim_fragmentation.py checks the
model against ``simulate_reservation`` on the same trace.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from kvcourse.kernels import MemoryReport, ReservationReplay, simulate_reservation, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES, Segment, StepRecord, TurnedAway
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.labels import plain_ticks

LITERATURE_RANGE = (0.204, 0.382)  # share of KV memory holding token states before paging (vLLM paper, Fig. 2)
MAX_POOL_SLOTS = 4_194_304
MAX_ANSWER_LIMIT = 65_536
MAX_STEPS_PER_CLICK = 100_000
MAX_START_STEP = 1_000_000
MAX_HISTORY_POINTS = 1_500  # the history panel draws at most this many steps (evenly spaced)

# colour, hatch, legend label; in the order the stacked history draws them (real tokens at the bottom)
STYLE: dict[str, tuple[str, str, str]] = {
    "used": ("#1f5fa8", "", "real tokens"),
    "reserved_future": ("#9cc3e6", "", "reserved for tokens still to come"),
    "internal": ("#f28e2b", "", "reserved, never written (internal)"),
    "external": ("#d62728", "////", "free, no hole fits the next request (external)"),
    "stranded": ("#a0a0a0", "", "free, too little for the next request"),
    "idle": ("#f4f4f4", "", "free, nobody waiting"),
}
CODES = {category: code for code, category in enumerate(CATEGORIES)}
COLOURS = ListedColormap([STYLE[c][0] for c in CATEGORIES])
WASTE = ("reserved_future", "internal", "external", "stranded")


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class FragmentationConfig:
    """A pool, the trace's knobs, and how far each click goes (lesson 09)."""

    pool_slots: int = workload.LESSON_POOL_SLOTS
    answer_limit: int = workload.LESSON_TRACE.answer_limit
    arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step
    sigma: float = workload.LESSON_TRACE.sigma
    seed: int = workload.LESSON_TRACE.seed
    steps_per_click: int = 25
    start_step: int = 0
    num_requests: int = workload.LESSON_TRACE.num_requests

    def __post_init__(self) -> None:
        check_int("Pool (token slots)", self.pool_slots, 1, MAX_POOL_SLOTS)
        check_int("Answer limit (tokens)", self.answer_limit, 1, MAX_ANSWER_LIMIT)
        check_float("Arrivals per step", self.arrivals_per_step, 0.001, 100.0)
        check_float("Length spread σ", self.sigma, 0.05, 3.0)
        check_int("Seed", self.seed, 0, 2**31 - 1)
        check_int("Steps per click", self.steps_per_click, 1, MAX_STEPS_PER_CLICK)
        check_int("Start at step", self.start_step, 0, MAX_START_STEP)
        check_int("Requests", self.num_requests, 1, 5_000)
        longest = self.trace_config.max_prompt_len + self.answer_limit
        if longest > self.pool_slots:
            biggest = max(r.max_len for r in workload.request_trace(self.trace_config))
            if biggest > self.pool_slots:
                raise InvalidInput(
                    f"Pool (token slots): a request of this trace reserves {biggest:,} slots (its prompt + the "
                    f"answer limit), more than the pool's {self.pool_slots:,}; it could never be admitted. "
                    "Make the pool larger or the answer limit smaller."
                )

    @property
    def trace_config(self) -> workload.TraceConfig:
        """The shared trace with this config's knobs (prompt and answer means as in the lesson trace)."""
        return dataclasses.replace(
            workload.LESSON_TRACE,
            num_requests=self.num_requests,
            arrivals_per_step=float(self.arrivals_per_step),
            sigma=float(self.sigma),
            answer_limit=int(self.answer_limit),
            seed=int(self.seed),
        )


class Fragmentation:
    """The engine's reservation replay, stepped a few steps per click (lesson 09)."""

    def __init__(self, config: FragmentationConfig) -> None:
        self.config = config
        self.trace = workload.request_trace(config.trace_config)
        self.reset()

    def reset(self) -> None:
        self.replay = ReservationReplay(self.trace, self.config.pool_slots)
        self._advance(self.config.start_step + 1)  # the strip shows step start_step

    def _advance(self, num_steps: int) -> None:
        for _ in range(num_steps):
            if self.replay.done:
                return
            self.replay.step()

    def step(self) -> None:
        """Replay ``steps_per_click`` more engine steps (fewer if the trace ends first)."""
        if self.replay.done:
            raise InvalidInput("every request of the trace has been served; press Reset to replay it.")
        self._advance(self.config.steps_per_click)

    # -- what the replay recorded ------------------------------------------------------------------
    @property
    def report(self) -> MemoryReport:
        return self.replay.report

    @property
    def num_steps(self) -> int:
        return self.report.num_steps

    @property
    def done(self) -> bool:
        return self.replay.done

    @property
    def record(self) -> StepRecord | None:
        """The last step's split of the pool (None before the first step)."""
        return self.report.history[-1] if self.report.history else None

    @property
    def segments(self) -> list[Segment]:
        """The memory strip at the last step, in address order."""
        return self.replay.memory_map()

    @property
    def holes(self) -> list[Segment]:
        return [s for s in self.segments if s.request is None]

    @property
    def blocked(self) -> TurnedAway | None:
        """The request turned away at the last step although enough slots were free in total."""
        return self.replay.blocked

    @property
    def num_served(self) -> int:
        return self.replay.num_finished

    def strip(self) -> np.ndarray:
        """One category code per slot (``CODES``) at the last step."""
        return strip_codes(self.segments, self.config.pool_slots)


def strip_codes(segments: Sequence[Segment], num_slots: int) -> np.ndarray:
    """The memory map as one category code (``CODES``) per token slot."""
    codes = np.empty(num_slots, dtype=np.int8)
    for s in segments:
        codes[s.start : s.end] = CODES[s.category]
    return codes


# ---------------------------------------------------------------- the lesson's measurements


@dataclass(frozen=True)
class MapOverTime:
    """Category codes, one row per bin of ``slot_bin`` slots and one column per sampled step."""

    codes: np.ndarray  # (num_slots // slot_bin, len(steps)), int8
    steps: list[int]
    slot_bin: int
    report: MemoryReport


def memory_map_over_time(
    trace: list[workload.TraceRequest], num_slots: int, *, every: int = 10, slot_bin: int = 16
) -> MapOverTime:
    """Replay ``trace`` to the end, keeping the memory map of every ``every``-th step, ``slot_bin`` slots
    to a row (each row shows its most common category)."""
    if num_slots % slot_bin:
        raise ValueError(f"slot_bin {slot_bin} must divide the pool's {num_slots} slots")
    replay, columns, steps = ReservationReplay(trace, num_slots), [], []
    while not replay.done:
        record = replay.step()
        if record.step % every == 0:
            binned = strip_codes(replay.memory_map(), num_slots).reshape(-1, slot_bin)
            counts = np.stack([(binned == code).sum(axis=1) for code in range(len(CATEGORIES))], axis=1)
            columns.append(counts.argmax(axis=1).astype(np.int8))
            steps.append(record.step)
    return MapOverTime(np.stack(columns, axis=1), steps, slot_bin, replay.report)


@functools.lru_cache(maxsize=64)
def _replayed(config: workload.TraceConfig, num_slots: int) -> MemoryReport:
    return simulate_reservation(workload.request_trace(config), num_slots)


def sweep(
    setting: str,
    values: Sequence[float],
    *,
    trace_config: workload.TraceConfig = workload.LESSON_TRACE,
    pool_slots: int = workload.LESSON_POOL_SLOTS,
) -> list[MemoryReport]:
    """The reservation replay once per value of one setting: ``pool_slots`` or a TraceConfig field.

    A trace and pool replayed before are not replayed again (the sweeps of one lesson share their
    starting point); the reports are finished runs, to be read, not changed."""
    reports = []
    for value in values:
        if setting == "pool_slots":
            config, slots = trace_config, int(value)
        elif setting in {f.name for f in dataclasses.fields(workload.TraceConfig)}:
            config, slots = dataclasses.replace(trace_config, **{setting: value}), pool_slots
        else:
            raise ValueError(f"unknown setting {setting!r}: pool_slots or a TraceConfig field")
        reports.append(_replayed(config, slots))
    return reports


def share_inside_regions(report: MemoryReport) -> float:
    """Of the slot-steps inside reservations, the share that held real tokens. Each request holds its
    region for as many steps as its answer has tokens, so this depends on the trace alone: not on
    the pool, the arrival times or the allocator's rule (holes lie outside every region)."""
    inside = report.total("used") + report.total("reserved_future") + report.total("internal")
    return report.total("used") / inside if inside else 0.0


def oracle_trace(trace: list[workload.TraceRequest]) -> list[workload.TraceRequest]:
    """The same requests, each reserving exactly its final length: as if every answer's end were known."""
    return [dataclasses.replace(r, max_len=r.final_len) for r in trace]


# ---------------------------------------------------------------- drawing


def category_legend(ax: Any, categories: Sequence[str] = CATEGORIES, **kwargs: Any) -> None:
    handles = [Patch(facecolor=STYLE[c][0], hatch=STYLE[c][1], edgecolor="0.4", label=STYLE[c][2]) for c in categories]
    ax.legend(handles=handles, **{"fontsize": 8, **kwargs})


def draw_map(ax: Any, image: MapOverTime, title: str) -> None:
    """The slot x step map: each column is the memory strip at one step, turned upright."""
    steps, rows = image.steps, image.codes.shape[0]
    half = (steps[1] - steps[0]) / 2 if len(steps) > 1 else 0.5
    ax.imshow(
        image.codes,
        aspect="auto",
        origin="lower",
        interpolation="nearest",
        cmap=COLOURS,
        vmin=-0.5,
        vmax=len(CATEGORIES) - 0.5,
        extent=(steps[0] - half, steps[-1] + half, 0, rows * image.slot_bin),
    )
    ax.set_xlabel("engine step")
    ax.set_ylabel("slot (address in the pool)")
    plain_ticks(ax.xaxis, ax.yaxis)
    ax.set_title(title)


def draw_history(ax: Any, history: Sequence[StepRecord], num_slots: int, title: str, *, legend: bool = True) -> None:
    """Token slots per category at every step, stacked (real tokens at the bottom)."""
    ax.clear()
    if history:
        stride = max(1, ceil_div(len(history), MAX_HISTORY_POINTS))
        shown = list(history[::stride])
        if shown[-1] is not history[-1]:
            shown.append(history[-1])
        steps = [r.step for r in shown]
        ax.stackplot(
            steps,
            *[[getattr(r, c) for r in shown] for c in CATEGORIES],
            colors=[STYLE[c][0] for c in CATEGORIES],
            labels=[STYLE[c][2] for c in CATEGORIES],
        )
        ax.set_xlim(steps[0], max(steps[-1], steps[0] + 1))
    ax.set_ylim(0, num_slots)
    ax.set_xlabel("engine step")
    ax.set_ylabel("token slots")
    plain_ticks(ax.xaxis, ax.yaxis)
    ax.set_title(title)
    if legend:
        category_legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=3)


def draw_strip(
    ax: Any,
    segments: Sequence[Segment],
    num_slots: int,
    *,
    blocked: TurnedAway | None = None,
    title: str = "",
    legend: bool = False,
) -> None:
    """The pool as one strip of slots: regions split by category, holes hatched, a refused request above."""
    ax.clear()
    for category in CATEGORIES:
        spans = [(s.start, s.num_slots) for s in segments if s.category == category]
        if spans:
            colour, hatch, _ = STYLE[category]
            ax.broken_barh(
                spans,
                (0, 1),
                facecolors=colour,
                hatch=hatch or None,
                edgecolor="#7f0000" if category == "external" else "none",
                linewidth=0.6,
            )
    starts = [s.start for s in segments if s.request is not None and s.category == "used"]
    ax.vlines(starts, 0, 1, colors="black", lw=0.7)  # where one request's region ends and the next begins
    if blocked is not None:
        hole = max((s for s in segments if s.request is None), key=lambda s: s.num_slots)
        ax.add_patch(
            Rectangle((hole.start, 1.25), blocked.needed, 0.5, facecolor="none", edgecolor="#b00000", lw=2, ls="--")
        )
        ax.add_patch(Rectangle((hole.start, 1.25), hole.num_slots, 0.5, facecolor="#d62728", alpha=0.25))
        on_the_left = hole.start + blocked.needed / 2 > num_slots / 2  # the label goes where there is room
        x = hole.start - 0.01 * num_slots if on_the_left else hole.start + blocked.needed + 0.01 * num_slots
        ax.text(
            x,
            1.5,
            f"request {blocked.request} needs {blocked.needed:,} in a row (dashed): refused\n"
            f"the largest hole holds {blocked.largest_gap:,} (shaded); {blocked.free:,} are free in total",
            ha="right" if on_the_left else "left",
            va="center",
            fontsize=8,
            color="#b00000",
        )
    ax.set_xlim(0, num_slots)
    ax.set_ylim(-0.05, 1.9)
    ax.set_yticks([])
    ax.set_xlabel("slot (address in the pool, token slots)")
    plain_ticks(ax.xaxis)
    if title:
        ax.set_title(title)
    if legend:
        shown = [c for c in CATEGORIES if any(s.category == c for s in segments)]
        category_legend(ax, shown, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def strip_title(record: StepRecord | None, blocked: TurnedAway | None, holes: Sequence[Segment]) -> str:
    if record is None:
        return "step 0: the pool is empty"
    head = f"step {record.step:,}: {record.running} running, {record.waiting} waiting"
    if blocked is not None:
        return f"{head}; {blocked.free:,} slots free in {len(holes)} holes, but no {blocked.needed:,} in a row"
    return f"{head}; {record.used / max(1, record.busy):.0%} of the busy slots hold real tokens"


# ---------------------------------------------------------------- the view


class FragmentationView(SimulatorView):
    """The memory strip of the reservation allocator, a few engine steps per click (lesson 09)."""

    def __init__(
        self,
        pool_slots: int = workload.LESSON_POOL_SLOTS,
        answer_limit: int = workload.LESSON_TRACE.answer_limit,
        arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step,
        sigma: float = workload.LESSON_TRACE.sigma,
        seed: int = workload.LESSON_TRACE.seed,
        steps_per_click: int = 25,
        start_step: int = 0,
    ) -> None:
        self._arranged = False
        controls = {
            "pool_slots": int_control("Pool (token slots)", pool_slots),
            "answer_limit": int_control("Answer limit (tokens)", answer_limit),
            "arrivals_per_step": float_control("Arrivals per step", arrivals_per_step),
            "sigma": float_control("Length spread σ", sigma, width="190px"),
            "seed": int_control("Seed", seed, width="130px"),
            "steps_per_click": int_control("Steps per click", steps_per_click, width="180px"),
            "start_step": int_control("Start at step", start_step, width="180px"),
        }
        super().__init__(controls, figsize=(11.5, 5.6), step_label="Step")

    def build(self, values: dict[str, Any]) -> Fragmentation:
        return Fragmentation(FragmentationConfig(**values))

    def _arrange(self) -> None:
        """A short strip above a taller history panel (the base class lays panels side by side)."""
        if self._arranged:
            return
        for ax in self.axes:
            ax.remove()
        grid = self.figure.add_gridspec(2, 1, height_ratios=(1, 1.7))
        self.axes = [self.figure.add_subplot(grid[0]), self.figure.add_subplot(grid[1])]
        self._arranged = True

    def draw(self, model: Fragmentation) -> str:
        self._arrange()
        strip_ax, history_ax = self.axes
        record, blocked, holes = model.record, model.blocked, model.holes
        draw_strip(
            strip_ax,
            model.segments,
            model.config.pool_slots,
            blocked=blocked,
            title=strip_title(record, blocked, holes),
        )
        so_far = model.report.utilisation
        title = (
            f"so far {so_far:.0%} of the slot-steps under demand held real tokens"
            if record is not None
            else "press Step to replay the trace"
        )
        draw_history(history_ax, model.report.history, model.config.pool_slots, title)
        return self._summary(model)

    @staticmethod
    def _summary(m: Fragmentation) -> str:
        c, r = m.config, m.record
        if r is None:
            return (
                f"{len(m.trace)} requests, a pool of {c.pool_slots:,} token slots; each request reserves its "
                f"prompt + {c.answer_limit:,} slots. Press <b>Step</b> to replay {c.steps_per_click:,} steps."
            )
        holes = m.holes
        free = sum(h.num_slots for h in holes)
        text = (
            f"Step {r.step:,}: {r.running} running, {r.waiting} waiting, {m.num_served} of {len(m.trace)} served. "
            f"Slots: {r.used:,} real tokens · {r.reserved_future:,} reserved for tokens to come · "
            f"{r.internal:,} never to be written · {free:,} free in {len(holes)} holes"
            f" (largest {max((h.num_slots for h in holes), default=0):,}). "
        )
        if m.blocked is not None:
            b = m.blocked
            text += (
                f"<b>Request {b.request} turned away</b>: it needs {b.needed:,} slots in a row; "
                f"{b.free:,} are free, but the largest hole is {b.largest_gap:,}. "
            )
        text += f"Whole run so far: {m.report.utilisation:.1%} real tokens. "
        if m.done:
            return text + "Every request served: press Reset to replay."
        return text + f"<b>Step</b> replays {c.steps_per_click:,} more."
