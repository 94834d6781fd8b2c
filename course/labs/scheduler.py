"""Lab C: your scheduler's two choices, admission and preemption, under a tight KV pool; a replay judges it.

The engine's scheduler keeps the mechanics (the token budget, the sequence limit, the blocks) and asks
the learner's policy who is admitted next and who gives way when blocks run out (lessons 08 and 14;
``kvcourse.kernels.engine.policy``). ``RecordingPolicy`` writes down every question and answer;
``ReplayPolicy`` answers the same questions from that log in the grader's process, where the scheduler
itself refuses an impossible choice.

The grade is goodput, as serving engines are judged in 2026 (lesson 21): a request is good when its time to
first token and its time per output token, in engine steps (the engine's own latency stamps, latency.py),
meet the targets below; goodput is good requests per engine step. A run shorter than first come, first served's
counts as long as it, and a request turned away adds the steps it would have taken alone: turning work away must
not pay by shortening the run. First come, first served's goodput scores
60 %, the reference scheduler's (the instructor's, read as text from ``REFERENCE``) 100 %, linear between; below
first come, first served, its share of 60 %. A request lost (never finished, or left waiting while the pool stood
idle) or refused without a reason scores 0 on that trace; one refused with a reason missed its targets.
"""

from __future__ import annotations

from functools import cache, lru_cache

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.engine.latency import RequestLatency
from kvcourse.kernels.engine.policy import FCFSPolicy, Refuse, SchedulingPolicyError, SeqView
from kvcourse.kernels.engine.stuck import STUCK

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
from .drive import Served, max_steps_for, serve
from .model import lab_config, lab_model
from .traces import LabTrace

TTFT_TARGET_STEPS = 6  # a good request's first token comes out within this many steps of its arrival
TPOT_TARGET_STEPS = 1.5  # and its later tokens at most this many steps apart on average (1: one every step)
TOLERANCE = 0.01  # goodputs within 1 % of each other count as equal
REFERENCE = "kvcourse.quizzes.labs.solution_scheduler"  # the instructor's scheduler: found and read, never imported


class SchedulerBase:
    """The scheduling policy the engine asks (lab C). Subclass it and write the two choices."""

    def choose_admission(self, waiting: list[SeqView], free_blocks: int) -> int | Refuse | None:
        """The index into ``waiting`` to admit next, None to admit nobody more this step, or
        ``Refuse(index, reason)`` to turn a request that has not started away for good."""
        raise NotImplementedError("choose_admission: write it (lab C, step 1)")

    def choose_victim(self, running: list[SeqView], needy: SeqView) -> int:
        """The ``seq_id`` of the running sequence to preempt so that ``needy`` gets a block (``needy``
        itself is allowed)."""
        raise NotImplementedError("choose_victim: write it (lab C, step 2)")


def _call(what: str, method, *args):
    try:
        return method(*args)
    except LabViolation:  # the feeder's stand-in for a policy in another process says what that policy raised
        raise
    except Exception as err:  # noqa: BLE001 - the learner's code: its error is the verdict
        raise LabViolation(f"{what} raised {type(err).__name__}: {str(err)[:200]}") from None


def _plain_choice(choice: object) -> object:
    if isinstance(choice, Refuse):
        return ["refuse", choice.index, str(choice.reason)[:200] if isinstance(choice.reason, str) else ""]
    if choice is None or (isinstance(choice, int) and not isinstance(choice, bool)):
        return choice
    return ["bad", repr(choice)[:60]]


class RecordingPolicy:
    """The learner's policy as the scheduler sees it, writing down each choice (in the learner's process)."""

    def __init__(self, inner, entries: list) -> None:
        self.inner, self.entries = inner, entries

    def choose_admission(self, waiting: list[SeqView], free_blocks: int):
        choice = _call("choose_admission", self.inner.choose_admission, list(waiting), free_blocks)
        self.entries.append(["admit", [v.seq_id for v in waiting], _plain_choice(choice)])
        return choice

    def choose_victim(self, running: list[SeqView], needy: SeqView) -> int:
        choice = _call("choose_victim", self.inner.choose_victim, list(running), needy)
        self.entries.append(["victim", [v.seq_id for v in running], needy.seq_id, _plain_choice(choice)])
        return choice


class ReplayPolicy:
    """Answers the scheduler from a recorded run (in the grader's process); the scheduler checks each answer."""

    def __init__(self, entries: list) -> None:
        self.cursor = Cursor(entries)

    @staticmethod
    def _choice(plain: object):
        if isinstance(plain, list) and len(plain) == 3 and plain[0] == "refuse":
            return Refuse(plain[1], plain[2])
        if isinstance(plain, list):
            return str(plain[1]) if len(plain) > 1 else "?"
        return plain

    def choose_admission(self, waiting: list[SeqView], free_blocks: int):
        ids, choice = self.cursor.next("admit")
        if ids != [v.seq_id for v in waiting]:
            raise ReplayMismatch("the recorded queue differs from the scheduler's: the run was not the engine's")
        return self._choice(choice)

    def choose_victim(self, running: list[SeqView], needy: SeqView) -> int:
        ids, needy_id, choice = self.cursor.next("victim")
        if ids != [v.seq_id for v in running] or needy_id != needy.seq_id:
            raise ReplayMismatch("the recorded running set differs from the scheduler's: the run was not the engine's")
        return self._choice(choice)


def record(policy, trace: LabTrace) -> dict:
    """Serve ``trace`` with the learner's scheduling policy and write down every choice."""
    log = {"entries": [], "error": None}
    try:
        serve(
            LLMEngine(lab_model(), lab_config(trace), scheduling_policy=RecordingPolicy(policy, log["entries"])), trace
        )
    except (LabViolation, SchedulingPolicyError) as err:
        log["error"] = str(err)
    except Exception as err:  # noqa: BLE001
        log["error"] = f"the engine stopped: {type(err).__name__}: {str(err)[:200]}"
    return log


def good(latency: RequestLatency | None) -> bool:
    """Whether a request met both targets (a request never finished, or refused, has no latency: it did not)."""
    if latency is None:
        return False
    return latency.ttft_steps <= TTFT_TARGET_STEPS and (latency.tpot_steps or 0.0) <= TPOT_TARGET_STEPS


def _figures(served: Served, trace: LabTrace, fewest_steps: int = 1) -> dict[str, float]:
    """Goodput over the steps the run took, counted as at least ``fewest_steps`` (first come, first served's), plus,
    for each request turned away, the steps it would have taken alone after the run (one per answer token, the first
    with its prompt): a run that turns work away must not gain by ending sooner."""
    num_good = sum(good(lat) for lat in served.latencies)
    refused = [r for r, s in zip(trace.requests, served.statuses, strict=True) if s.startswith("refused")]
    steps = max(fewest_steps, served.num_steps) + sum(r.max_new_tokens for r in refused)
    return {
        "goodput": round(num_good / max(1, steps), 4),
        "good requests": num_good,
        "requests": len(served.statuses),
        "steps": steps,
        "refused": len(refused),
    }


@lru_cache(maxsize=64)  # a class's public traces are judged once per student: serve FCFS once
def _fcfs(trace: LabTrace, limit: int) -> Served:
    return serve(LLMEngine(lab_model(), lab_config(trace), scheduling_policy=FCFSPolicy()), trace, limit)


@cache
def reference_policy() -> type:
    """The reference scheduler's class, run from its source text (``REFERENCE``: the instructor's side)."""
    return reference_class(REFERENCE, "MyScheduler", "lab C's reference scheduler")


@lru_cache(maxsize=64)
def goodputs(trace: LabTrace) -> dict[str, float]:
    """The two goodputs a scheduler is set between on ``trace``: first come, first served's and the reference's."""
    limit = max_steps_for(trace)
    fcfs = _fcfs(trace, limit)
    reference = serve(LLMEngine(lab_model(), lab_config(trace), scheduling_policy=reference_policy()()), trace, limit)
    return {
        "FCFS": _figures(fcfs, trace)["goodput"],
        "reference": _figures(reference, trace, fcfs.num_steps)["goodput"],
    }


def targets_in_words() -> str:
    return f"first token within {TTFT_TARGET_STEPS} steps, then at most {TPOT_TARGET_STEPS:g} steps per token"


def judge(trace: LabTrace, log: object) -> TraceResult:
    """Replay the choices on the engine; score goodput between first come, first served's and the reference's."""
    limit = max_steps_for(trace)
    line = goodputs(trace)
    reference = dict(line)  # the verdict sets yours between them
    error = run_error(log)

    def fail(reason: str, kind: str, metrics: dict | None = None) -> TraceResult:
        return TraceResult(trace.name, trace.public, 0.0, reason, metrics or {}, reference, kind)

    try:
        replay = ReplayPolicy(check_log(log)["entries"])
        mine = serve(LLMEngine(lab_model(), lab_config(trace), scheduling_policy=replay), trace, limit)
        if replay.cursor.index != len(replay.cursor.entries):
            raise ReplayMismatch("the recorded run goes on after the engine stopped")
    except SchedulingPolicyError as err:
        return fail(str(err), "no reason" if "needs a reason" in str(err) else "choice")
    except ReplayMismatch as err:
        return fail(error, "raised") if error else fail(f"the recorded run cannot be replayed: {err}", "replay")
    if error:
        return fail(error, "raised")
    metrics = _figures(mine, trace, _fcfs(trace, limit).num_steps)
    for i, status in enumerate(mine.statuses):
        if status == "lost":
            return fail(f"request {i} was lost: not finished after {limit} steps", "lost", metrics)
        if STUCK in status:
            return fail(
                f"request {i} was left waiting while the pool stood idle (the engine refused it: "
                f"{status.removeprefix('refused: ')})",
                "lost",
                metrics,
            )
    rate = metrics["goodput"]
    points = score_between(rate, line["FCFS"], line["reference"], TOLERANCE * line["FCFS"])
    verdict = (
        f"{metrics['good requests']:g} of {metrics['requests']:g} requests good ({targets_in_words()}) in "
        f"{metrics['steps']:g} steps; good requests per step: first come, first served {line['FCFS']:.3f}, "
        f"yours {rate:.3f}, the reference {line['reference']:.3f}"
    )
    if rate > line["reference"] * (1 + TOLERANCE):
        verdict += f"; yours beats the reference by {rate / line['reference'] - 1:.0%}"
    return TraceResult(trace.name, trace.public, points, verdict, metrics, reference, "" if points >= 1 else "goodput")
