"""A learner's policy in the simulators of lessons 11-13: the labs A-C (lessons 18-20) see their code move.

Each lab's simulator is a lesson's own, run on the learner's policy, with the engine's own policy run
beside it on the same input so that the status line can compare them:

* ``LearnerSharing`` (lab A, lesson 12's fork and copy on write) on the learner's block manager;
* ``LearnerPrefixCache`` (lab B, lesson 13's prefix cache) with the learner's eviction policy;
* ``LearnerPagingSim`` (lab C, lesson 11's paging replay) on the learner's scheduling policy
  (learner_paging.py, with its ``ServingFigures``; both importable from here).

The learner's code may raise, or break a rule of the engine. Each such case is a ``LearnerError``
(an ``InvalidInput``, so the view shows it as a message, never a traceback), named as the grader would
name it (learner_errors.py, its classes importable from here); once broken, a model is not stepped again
until it is rebuilt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kvcourse.kernels import BlockPool
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.learner_errors import EvictionError, ManagerError, policy_instance
from kvcourse.simulators.learner_errors import LearnerError as LearnerError
from kvcourse.simulators.learner_errors import PolicyError as PolicyError
from kvcourse.simulators.learner_paging import LearnerPagingSim as LearnerPagingSim
from kvcourse.simulators.learner_paging import ServingFigures as ServingFigures
from kvcourse.simulators.prefix_cache_model import PoolBlock, PrefixCache, PrefixCacheConfig
from kvcourse.simulators.sharing_model import Sharing, SharingConfig

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
        self.eviction = policy_instance(eviction, EvictionError)
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
