"""What students hand in for the three labs (lessons 18-20) in the grading tests: the reference solutions,
changed in one place, and policies that break one rule each (test_grading_labs.py, test_quiz_nbgrader.py).
"""

from __future__ import annotations

from kvcourse.quizzes.labs import solution_source

# A hostile eviction policy's helper (test_feeder.py and test_grading_labs.py): everything of the traces it can reach
# from inside its own process. Source text, for the answer cells those tests hand in; it needs gc and sys imported.
FUTURE_IN_REACH = '''def future_in_reach():
    """Every trace, request or plain trace this process holds: the objects gc tracks, and the callers' frames."""
    found = [o for o in gc.get_objects() if type(o).__name__ in ("LabTrace", "LabRequest")]
    found += [o for o in gc.get_objects() if type(o) is dict and isinstance(o.get("requests"), list)]
    frame = sys._getframe()
    while frame is not None:
        found += [v for v in frame.f_locals.values() if type(v).__name__ in ("LabTrace", "LabRequest")]
        frame = frame.f_back
    return found
'''


def with_imports(lab: str, body: str) -> str:
    """A class cell: the reference's import line, then ``body``."""
    return solution_source(lab).split("\n\n", 1)[0] + "\n\n\n" + body


def reference_with(lab: str, old: str, new: str) -> str:
    """The reference solution with one passage changed (a hostile student's one mistake)."""
    source = solution_source(lab)
    assert old in source, old
    return source.replace(old, new)


# Lab A: free drops the table but never gives a block back, and a write into a shared block goes in place.
LEAKER = reference_with(
    "block_manager", "        for block in reversed(seq.block_table):\n            self._release(block)\n", ""
)
IN_PLACE = reference_with("block_manager", "            if self.ref_counts[old] > 1:", "            if False:")

# Lab B: always a block in use (the one a running sequence took last), never a candidate.
IN_USE = with_imports(
    "eviction",
    '''class MyEviction(EvictionBase):
    """Evicts a block no candidate names: one that a running sequence holds."""

    def choose(self, candidates):
        ids = {c.block_id for c in candidates}
        return next(b for b in range(64) if b not in ids)
''',
)

# Lab B: the same choice, after removing the pool's own check in the sandbox (past the static guard).
ENGINE_PATCHER = with_imports(
    "eviction",
    '''import sys


class MyEviction(EvictionBase):
    """Switches the block pool's refusal off in this process, then evicts a block in use."""

    def choose(self, candidates):
        frame = getattr(sys, "_get" + "frame")(2)  # the block pool asking
        getattr(frame, "f_" + "globals")["rejection"] = lambda *args: None
        ids = {c.block_id for c in candidates}
        return next(b for b in range(64) if b not in ids)
''',
)

# Lab C: refuses every request, giving no reason; admits the newest first (a partial score).
REFUSER = with_imports(
    "scheduler",
    '''class MyScheduler(SchedulerBase):
    """Turns every request away without a word."""

    def choose_admission(self, waiting, free_blocks):
        return Refuse(0, "") if waiting else None

    def choose_victim(self, running, needy):
        return running[-1].seq_id
''',
).replace("SchedulerBase\n", "Refuse, SchedulerBase\n", 1)
NEWEST_FIRST = with_imports(
    "scheduler",
    '''class MyScheduler(SchedulerBase):
    """Last come, first served: the newest waiting request first; the oldest running one gives way."""

    def choose_admission(self, waiting, free_blocks):
        ready = [i for i, s in enumerate(waiting) if not s.preempted_this_step]
        return ready[-1] if ready else None

    def choose_victim(self, running, needy):
        return running[0].seq_id
''',
)
