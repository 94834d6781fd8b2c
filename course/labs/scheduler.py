"""Lab C: your scheduler's two choices, admission and preemption, under a tight KV pool; a replay judges it.

The engine's scheduler keeps the mechanics (the token budget, the sequence limit, the blocks) and asks
the learner's policy who is admitted next and who gives way when blocks run out (lessons 08 and 14;
``kvcourse.kernels.engine.policy``). ``RecordingPolicy`` writes down every question and answer;
``ReplayPolicy`` answers the same questions from that log in the grader's process, where the scheduler
itself refuses an impossible choice. Graded against first come, first served on the same trace, half
on tokens per engine step (throughput), half on the 95th-percentile steps from arrival to finish
(what the slowest users wait). A request lost (never finished, or left waiting while the pool stood
idle) or refused without a reason scores 0 on that trace; one refused with a reason counts as served
at the last step, so turning work away never pays.
"""

from __future__ import annotations

from functools import lru_cache

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.engine.policy import FCFSPolicy, Refuse, SchedulingPolicyError, SeqView
from kvcourse.kernels.engine.stuck import STUCK
from kvcourse.kernels.measure.spread import percentile

from .common import Cursor, LabViolation, ReplayMismatch, TraceResult, check_log, run_error
from .drive import Served, max_steps_for, serve
from .model import lab_config, lab_model
from .traces import LabTrace

TOLERANCE = 0.01  # within 1 % of first come, first served counts as equal


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


def _figures(served: Served, limit: int) -> dict[str, float]:
    waits = [
        (finish if finish is not None else limit) - (arrival or 0)
        for finish, arrival in zip(served.finishes, served.arrivals, strict=True)
    ]
    return {
        "tokens per step": round(served.num_answer_tokens / max(1, served.num_steps), 4),
        "p95 steps to finish": percentile(waits, 95),
        "steps": served.num_steps,
        "refused": sum(s.startswith("refused") for s in served.statuses),
    }


@lru_cache(maxsize=64)  # a class's public traces are judged once per student: serve FCFS once
def _fcfs(trace: LabTrace, limit: int) -> Served:
    return serve(LLMEngine(lab_model(), lab_config(trace), scheduling_policy=FCFSPolicy()), trace, limit)


def judge(trace: LabTrace, log: object) -> TraceResult:
    """Replay the choices on the engine; score throughput and the slowest finishes against FCFS."""
    limit = max_steps_for(trace)
    fcfs = _fcfs(trace, limit)
    reference = _figures(fcfs, limit)
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
    metrics = _figures(mine, limit)
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
    tps, ref_tps = metrics["tokens per step"], reference["tokens per step"]
    p95, ref_p95 = metrics["p95 steps to finish"], reference["p95 steps to finish"]
    throughput = 1.0 if tps >= ref_tps * (1 - TOLERANCE) else tps / ref_tps
    latency = 1.0 if p95 <= ref_p95 * (1 + TOLERANCE) else ref_p95 / p95
    score = round(0.5 * throughput + 0.5 * latency, 4)
    reasons = []
    if throughput < 1:
        reasons.append(f"{tps:.2f} tokens per step against first come, first served's {ref_tps:.2f}")
    if latency < 1:
        reasons.append(f"95th-percentile finish after {p95:g} steps against {ref_p95:g}")
    kind = "throughput" if throughput < latency else "latency" if latency < 1 else ""
    return TraceResult(trace.name, trace.public, score, "; ".join(reasons), metrics, reference, kind)
