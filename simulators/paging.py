"""Lesson 11's simulator, its view: one request trace served by reservation and by paging, both pools drawn.

The config, the model and lesson 11's measuring helpers are paging_model.py. With ``scheduling_policy``
(lab C, lesson 20) the view serves the trace on the learner's scheduling policy beside first come, first
served (``LearnerPagingSim``, simulators/learner_paging.py). The model sits below the learner's twin and the
view above both, so the three never import one another in a loop.
"""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from kvcourse.feedback import info
from kvcourse.kernels import workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.learner_paging import LearnerPagingSim
from kvcourse.simulators.paging_model import WINDOW, PagingConfig, PagingSim, utilisation_curve
from kvcourse.simulators.paging_model import block_size_sweep as block_size_sweep
from kvcourse.simulators.paging_model import block_sizes_to_sweep as block_sizes_to_sweep
from kvcourse.simulators.paging_model import decode_attention_inputs as decode_attention_inputs
from kvcourse.simulators.paging_model import timing_rounds as timing_rounds

# What each slot holds, in words a learner reads in the legend (the replays' categories).
CATEGORY_WORDS = {
    "used": "holds a token's K and V",
    "reserved_future": "reserved for answer tokens still to come",
    "internal": "held, never to be written",
    "external": "free, but no hole is large enough",
    "stranded": "free, too little for the next request",
    "idle": "free, nobody waiting",
}
CATEGORY_COLOURS = {
    "used": "#1f77b4",
    "reserved_future": "#ffbb78",
    "internal": "#d62728",
    "external": "#9467bd",
    "stranded": "#7f7f7f",
    "idle": "#f2f2f2",
}


class PagingView(SimulatorView):
    """Reservation and paging on one trace: utilisation so far, and both pools now (lesson 11)."""

    def __init__(
        self,
        block_size: int = 16,
        pool_slots: int = workload.LESSON_POOL_SLOTS,
        num_requests: int = workload.LESSON_TRACE.num_requests,
        arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step,
        answer_mean: float = workload.LESSON_TRACE.answer_mean,
        answer_limit: int = workload.LESSON_TRACE.answer_limit,
        seed: int = workload.LESSON_TRACE.seed,
        steps_per_click: int = 200,
        *,
        scheduling_policy: Any = None,
    ) -> None:
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
            ax.plot(
                steps,
                100 * share,
                color=f"C{i}",
                lw=1.5,
                label=f"{replay.name}: {replay.report.utilisation:.1%} so far",
            )
        ax.axvline(sim.step_index - 1, color="0.4", ls=":", lw=1)
        ax.set_ylim(0, 105)
        ax.set_xlabel("engine step")
        ax.set_ylabel(f"slots holding a token (% of busy, last {WINDOW} steps)")
        reservation, paging = sim.reports
        ax.set_title(
            f"so far {paging.utilisation:.1%} of paging's busy memory holds tokens, "
            f"{reservation.utilisation:.1%} of reservation's",
            fontsize=10,
        )
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
            image[i * (rows + gap) : i * (rows + gap) + rows] = slots.reshape(rows, width)
        cmap = ListedColormap(["white"] + [CATEGORY_COLOURS[k] for k in CATEGORIES])
        ax.imshow(image + 1, cmap=cmap, vmin=0, vmax=len(CATEGORIES), aspect="auto", interpolation="nearest")
        for i, replay in enumerate(sim.replays):
            if replay.done:  # an empty strip would say nothing: say why it is empty
                ax.text(
                    width / 2,
                    i * (rows + gap) + rows / 2,
                    f"every request served by step {replay.step_index - 1:,}: the pool is empty",
                    ha="center",
                    va="center",
                    fontsize=9,
                )
        ax.set_yticks([rows / 2, rows + gap + rows / 2], [replay.name.replace(", ", ",\n") for replay in sim.replays])
        ax.set_xticks([])
        ax.set_xlabel(f"the pool: {c.pool_slots:,} token slots, {width:,} per row, at step {sim.step_index - 1:,}")
        present = set(np.unique(image).tolist())
        shown = [k for i, k in enumerate(CATEGORIES) if i in present]
        ax.legend(
            handles=[Patch(color=CATEGORY_COLOURS[k], label=CATEGORY_WORDS[k]) for k in shown],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.12),
            ncol=2,
            fontsize=8,
            frameon=False,
        )
        ax.set_title("each slot now, in address order", fontsize=10)

    @staticmethod
    def _summary(sim: PagingSim) -> str:
        c = sim.config
        parts = []
        for replay in sim.replays:
            last = replay.report.history[-1]
            state = (
                f"finished every request at step {replay.step_index - 1:,}"
                if replay.done
                else f"{last.running} running, {last.waiting} waiting"
            )
            parts.append(
                f"<b>{replay.name}</b>: {replay.report.utilisation:.1%} of busy memory held tokens so far, "
                f"{replay.report.mean_running:.1f} running on average; {state}"
            )
        unused = c.pool_slots - c.num_blocks * c.block_size
        note = f" ({unused} slots beyond the last whole block go unused by paging.)" if unused else ""
        head = (
            f"After engine step {sim.step_index - 1:,} ({len(sim.trace)} requests in the trace, blocks of "
            f"{c.block_size} tokens). "
        )
        tail = (
            f" Paging ran {sim.more_running:.1f}x as many requests at once." if not math.isnan(sim.more_running) else ""
        )
        return head + "; ".join(parts) + "." + tail + note
