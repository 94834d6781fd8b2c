"""One entry for the three labs: record a policy's runs, judge them, and the learner's instant feedback.

``record_runs`` is what runs where the learner's code runs (their notebook, or the grading sandbox):
it serves each trace on the learner's policy, each within a time limit, and returns plain JSON logs.
``judge_runs`` is what runs in the grader's process: it replays each log on the engine and scores it.
``check`` does both on the public traces and prints the verdict of each, for a learner in a notebook.
"""

from __future__ import annotations

from collections.abc import Callable

from kvcourse.time_limit import time_limit

from .common import LabViolation, TraceResult
from .spec import lab_spec
from .traces import LabTrace

TRACE_LIMIT_S = 60.0  # one trace served on the learner's policy


def record_runs(lab: str, answer: object, traces: list[dict]) -> list[dict]:
    """Each trace served on the learner's policy, as plain logs (never raises for the learner's code)."""
    spec, logs = lab_spec(lab), []
    for plain in traces:
        trace = LabTrace.from_plain(plain)
        if trace.lab != spec.key:
            raise ValueError(f"{trace.name} is a trace of lab {trace.lab!r}, not of {spec.key!r}")
        try:
            with time_limit(TRACE_LIMIT_S):
                policy = spec.policy(answer)  # a class gives a fresh instance per trace, where the engine wants one
                logs.append(spec.record(policy, trace))
        except LabViolation as err:
            logs.append({"entries": [], "beams": [], "error": str(err)})
        except TimeoutError:
            logs.append({"entries": [], "beams": [], "error": f"the trace ran for more than {TRACE_LIMIT_S:g} s"})
    return logs


def judge_runs(lab: str, traces: list[LabTrace], logs: object) -> list[TraceResult]:
    """Each recorded run replayed and scored, outside the learner's code (the grader's side)."""
    spec = lab_spec(lab)
    if not isinstance(logs, list) or len(logs) != len(traces):
        return [
            TraceResult(t.name, t.public, 0.0, "the run handed back no log for this trace", kind="replay")
            for t in traces
        ]
    return [spec.judge(trace, log) for trace, log in zip(traces, logs, strict=True)]


def summary(results: list[TraceResult]) -> str:
    """The verdict lines a learner reads: one per trace, the figures beside the engine's own policy's."""
    lines = []
    for r in results:
        mark = "pass" if r.passed else f"{r.score:.0%}"
        figures = ", ".join(
            f"{k} {v:g} (engine's own: {r.reference.get(k, float('nan')):g})"
            for k, v in r.metrics.items()
            if k in r.reference
        )
        lines.append(f"  [{mark}] {r.name}: " + (r.reason or "every rule kept") + (f". {figures}" if figures else ""))
    return "\n".join(lines)


def check(
    lab: str, answer: object, traces: list[LabTrace] | None = None, show: Callable[[str], None] = print
) -> list[TraceResult]:
    """Serve the public traces on your policy and print what the grader would say of each."""
    spec = lab_spec(lab)
    traces = traces if traces is not None else spec.public_traces()
    for trace in traces:
        show(f"{trace.name}: {trace.describe()}")
    results = judge_runs(lab, traces, record_runs(lab, answer, [t.to_plain() for t in traces]))
    passed = sum(r.passed for r in results)
    show(
        f"{spec.title}: {passed} of {len(results)} public traces pass, "
        f"score {sum(r.score for r in results) / max(1, len(results)):.0%}\n" + summary(results)
    )
    return results
