"""Lab B: your eviction policy. The prefix cache asks it which cached block to forget; a replay judges it.

The engine's own KV-cache manager serves the trace with prefix caching on; whenever the pool has no
empty block left, the block pool shows the learner's policy every free block that still caches a
prefix (``EvictionCandidate``) and evicts the one it chooses (lesson 13). ``RecordingEviction`` writes
down each question and answer; ``ReplayEviction`` answers the same questions from that log in the
grader's process, where the pool itself refuses a block in use or one whose child is still cached.
The grade is the prefix-cache hit rate (prompt tokens found in the cache) against LRU's on the same
trace: at LRU's rate or above, full marks; below it, the share of LRU's rate that it reached.
"""

from __future__ import annotations

from functools import lru_cache

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.memory.eviction import (
    EvictionCandidate,
    EvictionPolicy,
    EvictionPolicyError,
    LRUEviction,
)

from .common import Cursor, LabViolation, ReplayMismatch, TraceResult, check_log, run_error
from .drive import Served, serve
from .model import lab_config, lab_model
from .traces import LabTrace

TOLERANCE = 0.005  # a hit rate this close to LRU's counts as LRU's


class EvictionBase:
    """The eviction policy the block pool asks (lab B). Subclass it and write ``choose``."""

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        """The ``block_id`` of the candidate to evict. Each candidate has ``block_id``, ``last_used``,
        ``cached_at``, ``num_hits``, ``depth`` and ``has_cached_children`` (see EvictionCandidate)."""
        raise NotImplementedError("choose: write it (lab B)")


class RecordingEviction:
    """The learner's policy as the pool sees it, writing down each choice (in the learner's process)."""

    def __init__(self, inner, entries: list) -> None:
        self.inner, self.entries = inner, entries

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        try:
            choice = self.inner.choose(list(candidates))
        except Exception as err:  # noqa: BLE001 - the learner's code: its error is the verdict
            raise LabViolation(f"choose raised {type(err).__name__}: {str(err)[:200]}") from None
        ids = [c.block_id for c in candidates]
        self.entries.append(
            ["choose", ids, choice if isinstance(choice, int) and not isinstance(choice, bool) else repr(choice)[:60]]
        )
        return choice


class ReplayEviction:
    """Answers the pool from a recorded run (in the grader's process); the pool checks each answer."""

    def __init__(self, entries: list) -> None:
        self.cursor = Cursor(entries)

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        ids, choice = self.cursor.next("choose")
        if ids != [c.block_id for c in candidates]:
            raise ReplayMismatch("the recorded candidates differ from the pool's: the run was not the engine's")
        return choice


def _engine(trace: LabTrace, eviction: EvictionPolicy) -> LLMEngine:
    """The engine a trace is served on: prefix caching on, ``eviction`` choosing what the pool forgets."""
    return LLMEngine(lab_model(), lab_config(trace, prefix_caching=True), eviction=eviction)


def record(policy, trace: LabTrace) -> dict:
    """Serve ``trace`` with the learner's eviction policy and write down every choice."""
    log = {"entries": [], "error": None}
    try:
        serve(_engine(trace, RecordingEviction(policy, log["entries"])), trace)
    except (LabViolation, EvictionPolicyError) as err:
        log["error"] = str(err)
    except Exception as err:  # noqa: BLE001
        log["error"] = f"the engine stopped: {type(err).__name__}: {str(err)[:200]}"
    return log


def hit_rate(served: Served) -> float:
    """Prompt tokens found in the prefix cache, over all prompt tokens served."""
    prompt = sum(served.num_prompt_tokens)
    return sum(served.num_cached_tokens) / prompt if prompt else 0.0


def _figures(served: Served) -> dict[str, float]:
    return {
        "hit rate": round(hit_rate(served), 4),
        "cached tokens": sum(served.num_cached_tokens),
        "prompt tokens": sum(served.num_prompt_tokens),
    }


@lru_cache(maxsize=64)  # a class's public traces are judged once per student: serve LRU once
def _lru(trace: LabTrace) -> Served:
    return serve(_engine(trace, LRUEviction()), trace)


def judge(trace: LabTrace, log: object) -> TraceResult:
    """Replay the choices on the engine; score the hit rate against LRU's."""
    lru = _lru(trace)
    reference = _figures(lru)
    error = run_error(log)

    def fail(reason: str, kind: str) -> TraceResult:
        return TraceResult(trace.name, trace.public, 0.0, reason, {}, reference, kind)

    try:
        replay = ReplayEviction(check_log(log)["entries"])
        mine = serve(_engine(trace, replay), trace)
        if replay.cursor.index != len(replay.cursor.entries):
            raise ReplayMismatch("the recorded run goes on after the engine stopped")
    except EvictionPolicyError as err:
        return fail(str(err), "in use" if "in use" in str(err) else "hash chain" if "chain" in str(err) else "choice")
    except ReplayMismatch as err:
        return fail(error, "raised") if error else fail(f"the recorded run cannot be replayed: {err}", "replay")
    if error:
        return fail(error, "raised")
    lost = [
        i
        for i, (s, ref) in enumerate(zip(mine.statuses, lru.statuses, strict=True))
        if s != "finished" and ref == "finished"
    ]
    if lost:
        return fail(f"request {lost[0]} was not served: {mine.statuses[lost[0]]}", "not served")
    metrics = _figures(mine)
    mine_rate, lru_rate = metrics["hit rate"], reference["hit rate"]
    if lru_rate <= 0 or mine_rate >= lru_rate - TOLERANCE:
        return TraceResult(trace.name, trace.public, 1.0, "", metrics, reference)
    return TraceResult(
        trace.name,
        trace.public,
        round(mine_rate / lru_rate, 4),
        f"hit rate {mine_rate:.1%} against LRU's {lru_rate:.1%}",
        metrics,
        reference,
        "hit rate",
    )
