"""Build-it labs: the learner writes a policy of the engine, the engine runs on it, a replay judges it.

Lab A (lesson 18): the block manager. Lab B (lesson 19): the prefix cache's eviction policy. Lab C
(lesson 20): the scheduler's admission and preemption. ``check(lab, policy)`` serves the public
traces on the learner's policy and prints the verdict of each beside the engine's own policy's
figures; the grader (``kvcourse grade autograde``) does the same on hidden traces drawn per student.
Each lab's definition (its interface, traces, judge, reference and counts) is one ``LabSpec`` in ``LABS``.
"""

from kvcourse.kernels.engine.policy import Refuse, SeqView
from kvcourse.kernels.memory.eviction import EvictionCandidate
from kvcourse.kernels.memory.kv_pool import BlockCopy

from .block_manager import BlockManagerBase
from .common import TraceResult
from .eviction import EvictionBase
from .run import check, judge_runs, record_runs
from .scheduler import TPOT_TARGET_STEPS, TTFT_TARGET_STEPS, SchedulerBase
from .spec import LABS, LabSpec, draw_trace, lab_spec, public_traces
from .traces import LabTrace

__all__ = [
    "LABS",
    "BlockCopy",
    "EvictionCandidate",
    "Refuse",
    "SeqView",
    "BlockManagerBase",
    "EvictionBase",
    "SchedulerBase",
    "TPOT_TARGET_STEPS",
    "TTFT_TARGET_STEPS",
    "LabSpec",
    "LabTrace",
    "TraceResult",
    "check",
    "draw_trace",
    "judge_runs",
    "lab_spec",
    "public_traces",
    "record_runs",
]
