"""Lab B: your eviction policy. The prefix cache asks it which cached block to forget; a replay judges it.

The engine's own KV-cache manager serves the trace with prefix caching on; whenever the pool has no
empty block left, the block pool shows the learner's policy every free block that still caches a
prefix (``EvictionCandidate``) and evicts the one it chooses (lesson 13). ``RecordingEviction`` writes
down each question and answer; ``ReplayEviction`` answers the same questions from that log in the
grader's process, where the pool itself refuses a block in use or one whose child is still cached.

The grade is the prefix-cache hit rate (prompt tokens found in the cache), set between three rates the grader
computes on the same trace: least recently used's (the engine's own, 60 %), the reference policy's (an online
policy of the instructor's, read as text from ``REFERENCE``: 100 %) and Belady's offline oracle's (oracle.py: the
room no online policy can quite reach). Linear between LRU's and the reference's rate; below LRU's, its share of
60 %; above the reference's, still 100 %, and the verdict says by how much. Where the reference does no better
than LRU on a trace, reaching LRU's rate there is full marks.
"""

from __future__ import annotations

from functools import cache, lru_cache

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.memory.eviction import (
    EvictionCandidate,
    EvictionPolicy,
    EvictionPolicyError,
    LRUEviction,
)

from .common import (
    Cursor,
    LabViolation,
    ReplayMismatch,
    TraceResult,
    check_log,
    reference_class,
    run_error,
    score_between,
)
from .drive import Served, serve
from .model import lab_config, lab_model
from .oracle import serve_oracle
from .traces import LabTrace

TOLERANCE = 0.005  # a hit rate this close to another counts as equal to it
REFERENCE = "kvcourse.quizzes.labs.solution_eviction"  # the instructor's policy: found and read, never imported


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
        except LabViolation:  # the feeder's stand-in for a policy in another process says what that policy raised
            raise
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


@cache
def reference_policy() -> type:
    """The reference policy's class, run from its source text (``REFERENCE``: the instructor's side)."""
    return reference_class(REFERENCE, "MyEviction", "lab B's reference policy")


@lru_cache(maxsize=64)  # a class's public traces are judged once per student: serve LRU once
def _lru(trace: LabTrace) -> Served:
    return serve(_engine(trace, LRUEviction()), trace)


@lru_cache(maxsize=64)
def rates(trace: LabTrace) -> dict[str, float]:
    """The three hit rates a policy is set between on ``trace``: LRU's, the reference's, the oracle's."""
    reference = serve(_engine(trace, reference_policy()()), trace)
    return {
        "LRU": round(hit_rate(_lru(trace)), 4),
        "reference": round(hit_rate(reference), 4),
        "oracle": round(hit_rate(serve_oracle(trace)), 4),
    }


def score(mine: float, lru: float, reference: float) -> float:
    """LRU's hit rate scores 60 %, the reference's 100 %, linear between; below LRU's, its share of 60 %."""
    return score_between(mine, lru, reference, TOLERANCE)


def four_rates(mine: float, line: dict[str, float]) -> str:
    """The verdict's figures: "LRU 41 %, yours 47 %, the reference 52 %, the oracle 58 %"."""
    return (
        f"LRU {line['LRU']:.0%}, yours {mine:.0%}, the reference {line['reference']:.0%}, "
        f"the oracle {line['oracle']:.0%}"
    )


def judge(trace: LabTrace, log: object) -> TraceResult:
    """Replay the choices on the engine; score the hit rate between LRU's and the reference's."""
    lru = _lru(trace)
    line = rates(trace)
    error = run_error(log)

    def fail(reason: str, kind: str) -> TraceResult:
        rates_here = f"LRU {line['LRU']:.0%}, the reference {line['reference']:.0%}, the oracle {line['oracle']:.0%}"
        return TraceResult(trace.name, trace.public, 0.0, f"{reason} ({rates_here})", {}, line, kind)

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
    rate = metrics["hit rate"]
    points = score(rate, line["LRU"], line["reference"])
    verdict = four_rates(rate, line)
    if rate > line["reference"] + TOLERANCE:
        verdict += f"; yours beats the reference by {100 * (rate - line['reference']):.1f} points"
    return TraceResult(trace.name, trace.public, points, verdict, metrics, line, "" if points >= 1 else "hit rate")
