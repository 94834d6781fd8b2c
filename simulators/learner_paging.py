"""Lab C (lesson 20): lesson 11's trace paged first come, first served and on the learner's scheduling policy.

``LearnerPagingSim`` replays lesson 11's trace twice, step by step, on the engine's own paging replay:
once on first come, first served (the engine's own policy) and once on the learner's scheduling policy,
so that the view (paging.py, with ``scheduling_policy``) draws and compares both. ``ServingFigures`` is
what a policy did with the trace so far: throughput, and what users waited. A choice the scheduler
refuses, an error the policy raises, or a request it leaves waiting for ever is a ``PolicyError``
(learner_errors.py), and the policy is not asked again until the model is rebuilt.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kvcourse.kernels import PagingReplay, workload
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.measure.spread import percentile
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.learner_errors import PolicyError, policy_instance
from kvcourse.simulators.paging_model import PagingConfig, PagingSim


@dataclasses.dataclass(frozen=True)
class ServingFigures:
    """What a scheduling policy did with a trace so far (lab C): throughput, and what users waited."""

    num_finished: int
    num_refused: int
    tokens_per_step: float  # answer tokens of finished requests per engine step
    median_wait: float  # engine steps from arrival to finish, over the finished requests
    p95_wait: float
    num_preemptions: int

    @classmethod
    def of(cls, replay: PagingReplay) -> ServingFigures:
        waits = [step - replay.trace[rid].arrival_step for rid, step in replay.finish_steps.items()]
        tokens = sum(replay.trace[rid].num_output_tokens for rid in replay.finish_steps)
        return cls(
            len(replay.finish_steps),
            replay.num_refused,
            tokens / max(1, replay.step_index),
            percentile(waits, 50, math.nan),
            percentile(waits, 95, math.nan),
            replay.report.num_preemptions,
        )


class LearnerPagingSim(PagingSim):
    """Lesson 11's trace paged twice, step by step: first come, first served (``fcfs``, the engine's own
    policy) and the learner's scheduling policy (``mine``, lab C)."""

    def __init__(self, config: PagingConfig | None, scheduling_policy: Any) -> None:
        self.config = config if config is not None else PagingConfig()
        self.scheduling_policy = scheduling_policy
        c = self.config
        self.trace = workload.request_trace(c.trace_config)
        longest = max(r.final_len for r in self.trace)
        if ceil_div(longest, c.block_size) > c.num_blocks:
            raise InvalidInput(
                f"a request of {longest:,} tokens needs {ceil_div(longest, c.block_size):,} blocks of "
                f"{c.block_size}, more than the pool's {c.num_blocks:,}: raise Pool (token slots) or "
                "lower Answer limit (tokens)."
            )
        # a bound no policy that keeps the pool busy reaches: every request alone, one token per step, and more
        self.max_steps = 4 * sum(r.final_len for r in self.trace) + max(r.arrival_step for r in self.trace) + 50
        self.reset()

    def reset(self) -> None:
        c = self.config
        self.broken: str | None = None  # what the policy did wrong: it is not asked again
        self.fcfs = PagingReplay(self.trace, c.num_blocks, c.block_size)
        self.mine = PagingReplay(
            self.trace, c.num_blocks, c.block_size, policy_instance(self.scheduling_policy, PolicyError)
        )
        for replay, name in ((self.fcfs, "first come, first served"), (self.mine, "your scheduler")):
            replay.name = replay.report.name = name

    @property
    def replays(self) -> tuple[PagingReplay, PagingReplay]:
        return self.fcfs, self.mine

    def step(self, num_steps: int | None = None) -> None:
        if self.broken is not None:
            raise PolicyError(f"{self.broken}. Fix the policy and run its cell again, or press Reset.")
        if self.done:
            raise InvalidInput("both replays have served every request; press Reset to start again.")
        for _ in range(self.config.steps_per_click if num_steps is None else num_steps):
            if not self.fcfs.done:
                self.fcfs.step()
            if not self.mine.done:
                self._step_mine()
            if self.done:
                break

    def _step_mine(self) -> None:
        replay = self.mine
        try:
            replay.step()
        except Exception as err:  # noqa: BLE001 - the learner's policy: its error is the message
            name = type(err).__name__
            self.broken = f"at engine step {replay.step_index:,} your scheduler " + (
                f"made a choice the scheduler refuses: {err}"
                if name == "SchedulingPolicyError"
                else f"raised {name}: {str(err)[:200]}"
            )
            raise PolicyError(self.broken) from None
        if not replay.done and replay.waiting and not replay.running:  # the engine would refuse the head now
            self.broken = (
                f"at engine step {replay.step_index - 1:,} your scheduler admitted nobody while the pool "
                f"stood empty and {len(replay.waiting)} request(s) waited: they would wait for ever"
            )
            raise PolicyError(self.broken)
        if not replay.done and replay.step_index >= self.max_steps:
            self.broken = (
                f"after {replay.step_index:,} engine steps your scheduler still leaves "
                f"{len(replay.waiting)} request(s) waiting: it never admits them"
            )
            raise PolicyError(self.broken)

    def draw_finished(self, ax: Any) -> None:
        """The left panel of lab C's view: requests finished against the engine step, on both policies."""
        for i, replay in enumerate(self.replays):
            steps = sorted(replay.finish_steps.values())
            ax.step(
                [0, *steps],
                range(len(steps) + 1),
                where="post",
                color=f"C{i}",
                lw=1.5,
                label=f"{replay.name}: {len(steps)} finished",
            )
        ax.axvline(self.step_index - 1, color="0.4", ls=":", lw=1)
        ax.set_ylim(0, len(self.trace) * 1.05)
        ax.set_xlabel("engine step")
        ax.set_ylabel("requests finished (of the trace's)")
        fcfs, mine = (ServingFigures.of(r) for r in self.replays)
        ax.set_title(
            f"median wait so far: {mine.median_wait:g} steps on your scheduler, {fcfs.median_wait:g} "
            f"first come, first served\n95th percentile: {mine.p95_wait:g} against {fcfs.p95_wait:g}",
            fontsize=10,
        )
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)

    def summary(self) -> str:
        """Lab C's status line: each policy's throughput, waits and preemptions so far."""
        parts = []
        for replay in self.replays:
            f = ServingFigures.of(replay)
            state = "done" if replay.done else f"{len(replay.running)} running, {len(replay.waiting)} waiting"
            refused = f", {f.num_refused} refused" if f.num_refused else ""
            parts.append(
                f"<b>{replay.name}</b>: {f.num_finished} of {len(self.trace)} finished{refused} ({state}); "
                f"{f.tokens_per_step:.2f} answer tokens per step; steps from arrival to finish: median "
                f"{f.median_wait:g}, 95th percentile {f.p95_wait:g}; {f.num_preemptions:,} preemptions"
            )
        return (
            f"After engine step {self.step_index - 1:,} ({len(self.trace)} requests, a pool of "
            f"{self.config.num_blocks:,} blocks of {self.config.block_size}). " + "; ".join(parts) + "."
        )
