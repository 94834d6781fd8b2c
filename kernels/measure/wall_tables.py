"""The memory wall as two tables: the scheduler's decisions and each request's path (lesson 08).

``decision_table`` keeps the event log's ADMIT, PREEMPT, REFUSE and FINISH lines (not the one ALLOCATE
or FREE per block); ``story_table`` lays ``request_stories`` out one row per request. Both return a
pandas DataFrame, which renders as a table in the lab and on the static site.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.measure.event_log import RequestStory
from kvcourse.kernels.memory.events import EventKind

__all__ = ["DECISIONS", "decision_table", "story_table"]

DECISIONS = (EventKind.ADMIT, EventKind.PREEMPT, EventKind.REFUSE, EventKind.FINISH)


def _steps(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps))


def decision_table(engine: LLMEngine) -> pd.DataFrame:
    """One row per scheduler decision, in the order the engine took them, stamped with its step."""
    rows = [
        {
            "step": e.step,
            "decision": e.kind.value,
            "sequence": "" if e.seq_id is None else str(e.seq_id),
            "detail": "" if e.kind is EventKind.ADMIT else e.detail,
        }  # an admit's detail: prefix-cache hits
        for e in engine.events.events
        if e.kind in DECISIONS
    ]
    return pd.DataFrame(rows, columns=["step", "decision", "sequence", "detail"])


def story_table(stories: Sequence[RequestStory]) -> pd.DataFrame:
    """One row per request: when it first got memory, when it lost and regained it, how it ended (a refusal
    says why in ``RequestStory.refusal`` and in the decision table)."""
    rows = [
        {
            "request": s.request_id,
            "prompt tokens": s.prompt_tokens,
            "admitted at step": _steps(s.admitted[:1]),
            "preempted at step": _steps(s.preempted),
            "readmitted at step": _steps(s.admitted[1:]),
            "ended at step": "" if s.finished is None else str(s.finished),
            "finish": s.finish_reason,
            "tokens written": len(s.tokens),
        }
        for s in stories
    ]
    return pd.DataFrame(rows).set_index("request")
