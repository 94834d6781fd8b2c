"""Lesson 09's simulator, its view: the memory strip of one contiguous reservation per request, step by step.

The config, the model and the lesson's two measurements (``memory_map_over_time``, ``sweep``) are
fragmentation_model.py; the names the lesson and its tests use are importable from here too. The
memory strip is ``ReservationReplay.memory_map()``: each region split into real tokens, room
reserved for tokens still to come, and room that will never be written (internal waste), and the
holes between regions, marked as external waste on a step where the next request is turned away
although enough is free in total.

The ``draw_*`` functions keep the lesson's plotting cells short: the strip, the stacked history of
a run, and the slot x step map that ``memory_map_over_time`` measures; ``plot_map_over_time`` and
``plot_strip`` lay out the lesson's two wide figures of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from kvcourse.kernels import workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES, Segment, StepRecord, TurnedAway
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.fragmentation_model import CODES as CODES
from kvcourse.simulators.fragmentation_model import LITERATURE_RANGE as LITERATURE_RANGE
from kvcourse.simulators.fragmentation_model import Fragmentation, FragmentationConfig, MapOverTime
from kvcourse.simulators.fragmentation_model import memory_map_over_time as memory_map_over_time
from kvcourse.simulators.fragmentation_model import oracle_trace as oracle_trace
from kvcourse.simulators.fragmentation_model import share_inside_regions as share_inside_regions
from kvcourse.simulators.fragmentation_model import strip_codes as strip_codes
from kvcourse.simulators.fragmentation_model import sweep as sweep
from kvcourse.simulators.labels import plain_ticks

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
COLOURS = ListedColormap([STYLE[c][0] for c in CATEGORIES])


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


def plot_map_over_time(image: MapOverTime, num_slots: int, *, map_title: str, history_title: str) -> list[Any]:
    """Lesson 09's figure of a whole replay: the slot x step map beside the categories stacked, one legend."""
    _, axes = plt.subplots(1, 2, figsize=(13, 4.2), layout="tight")
    draw_map(axes[0], image, map_title)
    draw_history(axes[1], image.report.history, num_slots, history_title, legend=False)
    category_legend(axes[1], loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return list(axes)


def plot_strip(segments: Sequence[Segment], num_slots: int, *, blocked: TurnedAway | None, title: str) -> Any:
    """Lesson 09's figure of the pool at one step: one wide strip, its legend beside it."""
    _, ax = plt.subplots(figsize=(11.5, 2.8), layout="tight")
    draw_strip(ax, segments, num_slots, blocked=blocked, title=title, legend=True)
    return ax


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
