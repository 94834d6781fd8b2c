"""A learner's policy in the simulators of lessons 11-13: the labs A-C (lessons 18-20) see their code move.

Each lab's simulator is a lesson's own, run on the learner's policy, with the engine's own policy run
beside it on the same input so that the status line can compare them:

* ``LearnerSharing`` (lab A, lesson 12's fork and copy on write) on the learner's block manager;
* ``LearnerPrefixCache`` (lab B, lesson 13's prefix cache) with the learner's eviction policy;
* ``LearnerPagingSim`` (lab C, lesson 11's paging replay) on the learner's scheduling policy.

The learner's code may raise, or break a rule of the engine. Each such case is a ``LearnerError``
(an ``InvalidInput``, so the view shows it as a message, never a traceback), named as the grader would
name it; once broken, a model is not stepped again until it is rebuilt.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from kvcourse.kernels import BlockPool, PagingReplay, workload
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.measure.spread import percentile
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.paging_model import PagingConfig, PagingSim
from kvcourse.simulators.prefix_cache_model import PoolBlock, PrefixCache, PrefixCacheConfig
from kvcourse.simulators.sharing_model import Sharing, SharingConfig


class LearnerError(InvalidInput):
    """The learner's policy raised, or made a choice the engine refuses; the message says which."""


class ManagerError(LearnerError):
    """Lab A: the learner's block manager raised or broke a rule."""


class EvictionError(LearnerError):
    """Lab B: the learner's eviction policy raised, or chose a block the pool must not evict."""


class PolicyError(LearnerError):
    """Lab C: the learner's scheduling policy raised, made a choice the scheduler refuses, or starved a request."""


def _instance(policy: Any, error: type[LearnerError]) -> Any:
    """A policy given as a class is made here (a fresh one per run), one given as an object is used as it is."""
    if not isinstance(policy, type):
        return policy
    try:
        return policy()
    except Exception as err:  # noqa: BLE001 - the learner's code: its error is the message
        raise error(f"{policy.__name__}() raised {type(err).__name__}: {str(err)[:200]}") from None


# -- lab A: a block manager in lesson 12's simulator ---------------------------------------------------------


def _described(arg: Any) -> str:
    return f"sequence {arg.seq_id}" if hasattr(arg, "seq_id") else repr(arg)


class _GuardedManager:
    """The learner's manager as the simulator calls it: an error raised in it becomes a ManagerError."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _call(self, name: str, method: Callable, *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as err:  # noqa: BLE001
            what = f"{name}({', '.join(map(_described, args))})"
            raise ManagerError(f"your manager's {what} raised {type(err).__name__}: {str(err)[:200]}") from None

    @property
    def num_free_blocks(self) -> Any:
        return self._call("num_free_blocks", lambda: self.inner.num_free_blocks)

    def allocate(self, seq: Any) -> None:
        self._call("allocate", self.inner.allocate, seq)

    def fork(self, parent: Any, child: Any) -> None:
        self._call("fork", self.inner.fork, parent, child)

    def append_slots(self, seq: Any) -> list[BlockCopy]:
        copies = self._call("append_slots", self.inner.append_slots, seq)
        try:
            return [BlockCopy(int(c.src), int(c.dst)) for c in (copies or [])]
        except (TypeError, AttributeError, ValueError):
            raise ManagerError(
                f"your manager's append_slots({_described(seq)}) returned {copies!r:.80}, not a list "
                "of BlockCopy(src, dst)"
            ) from None


class LearnerSharing(Sharing):
    """Lesson 12's fork and writes on the learner's block manager (lab A); ``engine`` runs them on the engine's own.

    Reference counts are counted from the block tables, and every answer is checked against the rules the
    grader checks: each table right for its tokens and inside the pool, a fork shares every block, a write
    keeps the computed blocks, copies every shared block it writes into and returns those copies, and the
    manager's free count is right after every call.
    """

    def __init__(self, config: SharingConfig, block_manager: Callable[[int, int], Any]) -> None:
        self.block_manager = block_manager
        super().__init__(config)

    def new_manager(self) -> Any:
        c = self.config
        try:
            return _GuardedManager(self.block_manager(c.num_blocks, c.block_size))
        except Exception as err:  # noqa: BLE001
            name = getattr(self.block_manager, "__name__", "the manager class")
            raise ManagerError(
                f"{name}({c.num_blocks}, {c.block_size}) raised {type(err).__name__}: {str(err)[:200]}"
            ) from None

    def reset(self) -> None:
        self.engine = Sharing(self.config)
        self.broken: str | None = None  # the rule the manager broke: it is not stepped again
        super().reset()
        self._check_tables("allocate(the prompt's sequence)")

    @property
    def ref_counts(self) -> list[int]:
        counts = [0] * self.config.num_blocks
        for table in self.tables:
            for block in table:
                if isinstance(block, int) and 0 <= block < len(counts):  # _check_tables names any other
                    counts[block] += 1
        return counts

    @property
    def num_used_blocks(self) -> int:
        return sum(count > 0 for count in self.ref_counts)  # what the tables hold, whatever the manager says

    @property
    def num_free_blocks(self) -> int:
        return self.config.num_blocks - self.num_used_blocks

    def step(self) -> None:
        if self.broken is not None:
            raise ManagerError(f"{self.broken}. Fix the manager and run its cell again, or press Reset.")
        self.engine.step()  # a full pool stops both before either changes
        try:
            super().step()
        except ManagerError as err:
            self.broken = str(err)
            raise
        except InvalidInput:  # the pool is full: a message, and nothing changed
            raise
        except Exception as err:  # noqa: BLE001 - what the manager left behind broke the step
            self.broken = f"your manager left the tables in a state the step cannot use: {type(err).__name__}: {err}"
            raise ManagerError(self.broken) from None

    def _fork(self) -> None:
        super()._fork()
        parent = self.seqs[0]
        for child in self.seqs[1:]:
            if child.block_table != parent.block_table:
                raise ManagerError(
                    f"fork(sample 0, sample {child.seq_id}) gave the child blocks "
                    f"{child.block_table!r:.60}, not the parent's {parent.block_table!r:.60}: forked "
                    "sequences share every block"
                )
        self._check_tables("the fork")

    def _write(self, num_new_tokens: int) -> None:
        before = [(list(s.block_table), s.num_computed_tokens // self.config.block_size) for s in self.seqs]
        super()._write(num_new_tokens)
        self._check_tables(f"writing {num_new_tokens} token(s)")
        counts = self.ref_counts
        for sample, (seq, (old, first)) in enumerate(zip(self.seqs, before, strict=True)):
            table, where = seq.block_table, f"append_slots(sample {sample})"
            if table[:first] != old[:first]:
                raise ManagerError(f"{where} changed blocks that hold computed tokens: their K/V would be lost")
            shared = [b for b in table[first:] if counts[b] > 1]
            if shared:
                raise ManagerError(
                    f"sample {sample} writes into block {shared[0]}, which {counts[shared[0]] - 1} "
                    "other table(s) also hold: copy on write missed (the write would change their "
                    "tokens)"
                )
            replaced = {(old[i], table[i]) for i in range(first, min(len(old), len(table))) if old[i] != table[i]}
            returned = {(x.source, x.target) for x in self.last_copies if x.sample == sample}
            if replaced != returned:
                raise ManagerError(
                    f"{where} replaced blocks {sorted(replaced)} (old, new) but returned the copies "
                    f"{sorted(returned)}: the engine copies only what it is told"
                )

    def _check_tables(self, after: str) -> None:
        """Every table right for its tokens, in the pool, no block twice; the manager's free count right."""
        c = self.config
        for seq in self.seqs:
            table = seq.block_table
            if not isinstance(table, list) or len(table) != seq.num_blocks:
                raise ManagerError(
                    f"after {after}, sequence {seq.seq_id} holds {table!r:.60} for {seq.num_tokens} "
                    f"tokens: it needs a list of {seq.num_blocks} block ids"
                )
            bad = [b for b in table if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < c.num_blocks]
            if bad:
                raise ManagerError(
                    f"after {after}, sequence {seq.seq_id} holds block {bad[0]!r}, but the pool has "
                    f"blocks 0 to {c.num_blocks - 1}"
                )
            if len(set(table)) != len(table):
                raise ManagerError(f"after {after}, sequence {seq.seq_id} holds one block twice: {table}")
        reported = self.manager.num_free_blocks
        if reported != self.num_free_blocks:
            raise ManagerError(
                f"after {after} your manager counts {reported!r} free blocks, but "
                f"{self.num_free_blocks} are free ({self.num_used_blocks} held by the tables)"
            )

    def comparison(self) -> str:
        """The status line's last sentence: the learner's figures beside the engine's own manager's."""
        mine, own = (self.num_used_blocks, self.num_copies), (self.engine.num_used_blocks, self.engine.num_copies)
        verdict = "the same figures" if mine == own else "<b>different figures</b>: look at your manager's counts"
        return (
            f"<b>Your manager</b>: {mine[0]:,} blocks in use, {mine[1]:,} copied on write so far; "
            f"the engine's own: {own[0]:,} and {own[1]:,} ({verdict})."
        )


# -- lab B: an eviction policy in lesson 13's simulator ------------------------------------------------------


def hit_rate(cache: PrefixCache) -> float:
    """Prompt tokens reused from the cache, over the prompt tokens served (lab B's grade)."""
    return cache.num_cached_tokens / cache.num_prompt_tokens if cache.num_prompt_tokens else 0.0


class LearnerPrefixCache(PrefixCache):
    """Lesson 13's requests with the learner's eviction policy choosing what the pool forgets (lab B);
    ``engine`` serves them in the engine's own order (least recently used first)."""

    def __init__(self, config: PrefixCacheConfig, num_served: int, eviction: Any) -> None:
        self.eviction = _instance(eviction, EvictionError)
        super().__init__(config, num_served)

    def reset(self) -> None:
        super().reset()
        self.pool = BlockPool(self.config.num_blocks, eviction=self.eviction)  # the engine's pool, the learner's choice
        self.engine = PrefixCache(self.config)
        self.broken: str | None = None  # what the policy did wrong: it is not asked again

    @property
    def hit_rate(self) -> float:
        return hit_rate(self)

    def step(self) -> Any:
        if self.broken is not None:
            raise EvictionError(f"{self.broken}. Fix the policy and run its cell again, or press Reset.")
        if not self.done:
            self.engine.step()
        try:
            return super().step()
        except InvalidInput:
            raise
        except Exception as err:  # noqa: BLE001 - the learner's policy, or the pool refusing its choice
            refused = type(err).__name__ == "EvictionPolicyError"
            self.broken = f"serving request {self.num_served + 1}, your eviction policy " + (
                f"chose a block the pool refuses: {err}"
                if refused
                else f"raised {type(err).__name__}: {str(err)[:200]}"
            )
            raise EvictionError(self.broken) from None

    def pool_blocks(self) -> list[PoolBlock]:
        """The blocks as lesson 13 draws them, but no eviction ranks: the learner's policy decides when asked."""
        return [dataclasses.replace(block, eviction_rank=None) for block in super().pool_blocks()]

    def comparison(self) -> str:
        """The status line's last sentence: the prompt tokens reused beside the engine's own order's."""
        if not self.results:
            return ""
        mine, own = self.num_cached_tokens, self.engine.num_cached_tokens
        verdict = "more than" if mine > own else "fewer than" if mine < own else "as many as"
        return (
            f"<b>Your policy</b> reused {mine:,} of {self.num_prompt_tokens:,} prompt tokens ({self.hit_rate:.0%}), "
            f"{verdict} the engine's own order (least recently used first): {own:,} ({hit_rate(self.engine):.0%})."
        )


# -- lab C: a scheduling policy in lesson 11's simulator -----------------------------------------------------


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
        self.mine = PagingReplay(self.trace, c.num_blocks, c.block_size, _instance(self.scheduling_policy, PolicyError))
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
