"""One definition per lab (lessons 18-20): what the notebook, the simulator and the grader all read.

A ``LabSpec`` is a lab whole: the interface the learner implements (the base class, the methods the engine
calls, the class an answer defines), how its traces are drawn (a family, the public seeds every learner
sees, how many hidden traces the grader draws per student), how a run is recorded and judged, what of the
engine an answer must not borrow, and where its reference solution lives. ``LABS`` holds the three, by key.

The reference solution is named here, never imported: it is the instructor's (``kvcourse.quizzes.labs``,
which the grading sandbox hides), and a self-learner's notebook reads it as text only on request
(kvcourse.labs.notebook). A lab's title and notebook are its lesson's, in course/syllabus.toml.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcourse.syllabus import get_lesson

from . import block_manager, eviction, scheduler
from .common import LabViolation, TraceResult
from .traces import LabTrace, block_manager_trace, eviction_trace, scheduler_trace
from .with_room import leaving_room

INSTRUCTOR_SIDE = "kvcourse.quizzes.labs"  # where every reference solution lives: hidden in the grading sandbox


@dataclass(frozen=True)
class LabSpec:
    """A lab's definition, read by its notebook, its simulator (kvcourse.simulators.learner_policy), the
    grader (kvcourse.quizzes.grading) and the lab guard; nothing about a lab is kept in a second place."""

    key: str  # how checks, traces, the bank and the grader name the lab: "block_manager"
    lesson: str  # its lesson, whose title and notebook course/syllabus.toml gives: "18"
    work: str  # what the learner writes, in words: "block manager"
    # the interface the learner implements
    base: type  # the class an answer subclasses (its methods raise until written)
    methods: tuple[str, ...]  # what the engine calls of it: the base's stubs a learner writes
    class_name: str  # the class a lab's answer cell defines (the bank's lab question, the reference)
    takes_class: bool  # the engine is handed the class itself (it makes one per pool), not an instance
    # the traces: the public ones drawn from public_seeds, then num_hidden_traces per student (the course secret)
    family: Callable[[random.Random, str, bool], LabTrace]
    public_seeds: tuple[int, ...]
    num_hidden_traces: int
    # running and scoring: record runs where the learner's code runs, judge replays it in the grader's process
    record: Callable[[Any, LabTrace], dict]
    judge: Callable[[LabTrace, object], TraceResult]
    engine_own: tuple[str, ...]  # the engine's own implementation, by name: an answer using it scores 0
    reference: str  # the reference solution's module, on the instructor's side: read as text, never imported
    # what the grade sets between lines, for the instructor's report: a trace's figure (a key of its metrics) and
    # the lines it is set between (keys of its reference figures, the baseline first); none for a pass/fail lab
    figure: str = ""
    lines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"lab {self.key!r}"
        if not self.key.isidentifier() or not re.fullmatch(r"\d\d", self.lesson):
            raise ValueError(f"{where}: the key must be a Python name and the lesson two digits, got {self.lesson!r}")
        missing = [name for name in self.methods if not hasattr(self.base, name)]
        if not self.methods or missing:
            raise ValueError(
                f"{where}: {self.base.__name__} must declare every method the engine calls; missing {missing or 'all'}"
            )
        if not self.class_name.isidentifier() or self.class_name == self.base.__name__:
            raise ValueError(f"{where}: the answer's class needs a name of its own, got {self.class_name!r}")
        if not self.public_seeds or len(set(self.public_seeds)) != len(self.public_seeds):
            raise ValueError(f"{where}: the public seeds must be distinct, and at least one, got {self.public_seeds}")
        if self.num_hidden_traces < 1:
            raise ValueError(f"{where}: the grader needs at least one hidden trace, got {self.num_hidden_traces}")
        if not self.reference.startswith(INSTRUCTOR_SIDE + "."):
            raise ValueError(
                f"{where}: the reference must live on the instructor's side ({INSTRUCTOR_SIDE}), got {self.reference!r}"
            )

    @property
    def title(self) -> str:
        """The lab's title, its lesson's: "Lab A: your block manager"."""
        return get_lesson(self.lesson).title

    @property
    def num_public_traces(self) -> int:
        return len(self.public_seeds)

    def draw(self, seed: int, name: str | None = None, public: bool = False) -> LabTrace:
        """One trace of the lab's family, drawn from ``seed``."""
        trace = self.family(random.Random(seed), name or f"hidden {seed % 10_000:04d}", public)
        if trace.lab != self.key:
            raise ValueError(f"lab {self.key!r}: its family drew a trace of lab {trace.lab!r}")
        return trace

    def public_traces(self) -> list[LabTrace]:
        """The traces a learner is shown: the same for everyone."""
        return [self.draw(seed, f"public {i + 1}", public=True) for i, seed in enumerate(self.public_seeds)]

    def graded_traces(self, hidden_seed: Callable[[int], int]) -> list[LabTrace]:
        """What an answer is graded on: the public traces, then ``num_hidden_traces`` more, the i-th drawn from
        ``hidden_seed(i)`` (the grader's seeds come from the course's secret: nobody can predict them)."""
        hidden = [self.draw(hidden_seed(i), f"hidden {i + 1}") for i in range(self.num_hidden_traces)]
        return self.public_traces() + hidden

    def policy(self, answer: object) -> object:
        """What the engine is given for a learner's answer: the class itself where the engine makes one per pool,
        else an instance (a class given is made here, a fresh one per call). LabViolation says what is wrong."""
        if self.takes_class:
            if not callable(answer):
                raise LabViolation(f"the answer is not a class: define class {self.class_name}({self.base.__name__})")
            return answer
        if isinstance(answer, type):
            try:
                return answer()
            except Exception as err:  # noqa: BLE001 - the learner's code: its error is the verdict
                raise LabViolation(f"{answer.__name__}() raised {type(err).__name__}: {str(err)[:200]}") from None
        return answer


LABS: dict[str, LabSpec] = {
    spec.key: spec
    for spec in (
        LabSpec(
            key="block_manager",
            lesson="18",
            work="block manager",
            base=block_manager.BlockManagerBase,
            methods=("can_allocate", "allocate", "can_append", "append_slots", "fork", "free", "num_free_blocks"),
            class_name="MyBlockManager",
            takes_class=True,
            family=block_manager_trace,
            public_seeds=(11, 22, 33),
            num_hidden_traces=3,
            record=block_manager.record,
            judge=block_manager.judge,
            engine_own=("KVCacheManager", "BlockPool"),
            reference=f"{INSTRUCTOR_SIDE}.solution_block_manager",
        ),
        # Lab B's public seeds are picked to show the room its hidden traces leave: on each, the reference policy is
        # above least recently used and the oracle above the reference (benchmarks/bench_eviction_room.py measures it).
        LabSpec(
            key="eviction",
            lesson="19",
            work="eviction policy",
            base=eviction.EvictionBase,
            methods=("choose",),
            class_name="MyEviction",
            takes_class=False,
            family=leaving_room(eviction_trace),  # only traces where the reference beats LRU (with_room.py)
            public_seeds=(2, 16, 23),
            num_hidden_traces=3,
            record=eviction.record,
            judge=eviction.judge,
            engine_own=("LRUEviction",),
            reference=eviction.REFERENCE,
            figure="hit rate",
            lines=("LRU", "reference", "oracle"),
        ),
        LabSpec(
            key="scheduler",
            lesson="20",
            work="scheduler",
            base=scheduler.SchedulerBase,
            methods=("choose_admission", "choose_victim"),
            class_name="MyScheduler",
            takes_class=False,
            family=scheduler_trace,
            public_seeds=(11, 22, 33),
            num_hidden_traces=3,
            record=scheduler.record,
            judge=scheduler.judge,
            engine_own=("FCFSPolicy", "Scheduler"),
            reference=scheduler.REFERENCE,
            figure="goodput",
            lines=("FCFS", "reference"),
        ),
    )
}


def lab_spec(lab: str) -> LabSpec:
    """The spec of the lab named ``lab``, or a ValueError naming the labs."""
    if lab not in LABS:
        raise ValueError(f"no lab {lab!r}: the labs are {', '.join(LABS)}")
    return LABS[lab]


def draw_trace(lab: str, seed: int, name: str | None = None, public: bool = False) -> LabTrace:
    """One trace of the lab's family, drawn from ``seed``."""
    return lab_spec(lab).draw(seed, name, public)


def public_traces(lab: str) -> list[LabTrace]:
    """The traces a learner is shown: the same for everyone."""
    return lab_spec(lab).public_traces()
