"""What the three labs share: a trace's verdict, the violation a replay finds, the recorded log's checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path


class LabViolation(Exception):
    """The learner's policy broke a rule of the engine; the message names the rule and the step."""


class ReplayMismatch(Exception):
    """A recorded run does not follow the engine that replays it: the log was changed, or the run was."""


@dataclass(frozen=True)
class TraceResult:
    """One trace judged: a score in [0, 1], why it is not 1, and the figures shown beside the reference's."""

    name: str
    public: bool
    score: float
    reason: str = ""  # empty when full marks
    metrics: dict[str, float] = field(default_factory=dict)
    reference: dict[str, float] = field(default_factory=dict)
    kind: str = ""  # the rule or figure that cost points (the report counts them)

    @property
    def passed(self) -> bool:
        return self.score >= 1.0


MAX_LOG_ENTRIES = 200_000


def check_log(log: object) -> dict:
    """A recorded run as it came back from the sandbox: a dict with a list of entries, or ReplayMismatch.

    A run that stopped on an error is still replayed up to that point, so the verdict names the first
    rule broken (a leak, say) rather than what it led to later (no free block left)."""
    if not isinstance(log, dict):
        raise ReplayMismatch("the run handed back no log")
    entries = log.get("entries")
    if not isinstance(entries, list) or len(entries) > MAX_LOG_ENTRIES:
        raise ReplayMismatch("the run's log is not a list of entries")
    return log


class Cursor:
    """Reads a recorded log in order; each call of the replay must find the entry the run recorded."""

    def __init__(self, entries: list) -> None:
        self.entries = entries
        self.index = 0

    def next(self, op: str, *ids: int) -> list:
        if self.index >= len(self.entries):
            raise ReplayMismatch(
                f"the engine asks for {op} {list(ids)}, but the recorded run ends here "
                f"(after {len(self.entries)} entries)"
            )
        entry = self.entries[self.index]
        self.index += 1
        if (
            not isinstance(entry, list)
            or len(entry) < 1 + len(ids)
            or entry[0] != op
            or list(entry[1 : 1 + len(ids)]) != list(ids)
        ):
            raise ReplayMismatch(
                f"entry {self.index - 1} of the recorded run is {str(entry)[:80]}, but the engine "
                f"asks for {op} {list(ids)}: the run was not the engine's"
            )
        return entry[1 + len(ids) :]


def int_list(value: object, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise LabViolation(f"{what} is not a list of block ids: {str(value)[:80]}")
    return list(value)


def run_error(log: object) -> str:
    """The error a recorded run stopped on, or "" when it ran to the end."""
    error = log.get("error") if isinstance(log, dict) else None
    return str(error)[:400] if error else ""


def reference_class(module: str, class_name: str, what: str) -> type:
    """A lab's reference policy, run from its source text (the instructor's side: found and read, never
    imported, so that kvcourse.labs never imports kvcourse.quizzes). ``what`` names it in the error."""
    try:
        found = find_spec(module)
    except ImportError:  # the instructor's side is hidden here (the grading sandbox records runs, never judges)
        found = None
    if found is None or found.origin is None:
        raise FileNotFoundError(f"{what} {module} is missing")
    namespace: dict = {}
    source = Path(found.origin).read_text(encoding="utf-8")
    exec(compile(source, f"<{what}>", "exec"), namespace)  # our own file
    return namespace[class_name]


BASELINE_SCORE = 0.6  # a lab graded between lines (B, C): the baseline's figure scores this, the reference's 1


def score_between(
    mine: float, baseline: float, reference: float, tolerance: float, at_baseline: float = BASELINE_SCORE
) -> float:
    """The baseline's figure scores ``at_baseline``, the reference's 1, linear between; below the baseline, its
    share of ``at_baseline``; above the reference, still 1. Where the reference is within ``tolerance`` of the
    baseline (no room on this trace), reaching the baseline is full marks. Higher figures are better."""
    if reference <= baseline + tolerance:
        return 1.0 if mine >= baseline - tolerance else round(at_baseline * mine / baseline, 4)
    if mine >= reference - tolerance:
        return 1.0
    if mine >= baseline:
        return round(at_baseline + (1 - at_baseline) * (mine - baseline) / (reference - baseline), 4)
    return round(at_baseline * mine / baseline, 4) if baseline > 0 else 0.0
