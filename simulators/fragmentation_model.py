"""Lesson 09's model: one contiguous reservation per request, replayed on the shared trace; the lesson's measurements.

The model does not re-implement the allocator: it drives the engine's own baseline,
``kvcourse.kernels.ReservationReplay`` (first-fit regions of prompt + answer limit slots from
``ReservationAllocator``) on a trace from ``kvcourse.kernels.workload``, a few steps per click,
and reads what the replay recorded: the memory strip (``ReservationReplay.memory_map()``) as one
category code per slot, and the split of the pool at every step.

``memory_map_over_time`` and ``sweep`` give the lesson its two measurements (a slot x step map of
a whole run, and the share of real tokens as one setting of the trace changes).
tests/simulators/test_sim_fragmentation.py checks the model against ``simulate_reservation`` on the
same trace. The view and the ``draw_*`` functions that draw all of this are fragmentation.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvcourse.kernels import MemoryReport, ReservationReplay, simulate_reservation, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES, Segment, StepRecord, TurnedAway
from kvcourse.simulators.checks import InvalidInput, check_float, check_int

LITERATURE_RANGE = (0.204, 0.382)  # share of KV memory holding token states before paging (vLLM paper, Fig. 2)
MAX_POOL_SLOTS = 4_194_304
MAX_ANSWER_LIMIT = 65_536
MAX_STEPS_PER_CLICK = 100_000
MAX_START_STEP = 1_000_000

CODES = {category: code for code, category in enumerate(CATEGORIES)}
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
