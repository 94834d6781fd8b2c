"""Lab A: your block manager. The engine serves traces on it; a replay outside your code judges it.

The engine calls seven things of a block manager (lessons 10-12): ``can_allocate``/``allocate`` when
it admits a sequence, ``can_append``/``append_slots`` before each step writes tokens, ``fork`` when a
request's samples split after the prompt (and for every surviving beam), ``free`` when a sequence
finishes or is preempted, and ``num_free_blocks``. ``BlockManagerBase`` is where a learner starts.

Judging happens in two places. ``RecordingManager`` wraps the learner's manager while the engine
serves a trace and writes down every call and its outcome (the block tables, the copies, the free
count the manager reports). ``ReplayManager`` (block_replay.py) then answers the same engine's calls
from that log, outside the learner's code, and checks each answer against the rules the engine's own
tests check:
- a block handed out must be free (held by no block table), inside the pool, once per table;
- ``can_allocate``/``can_append`` may say yes only when enough blocks are free;
- ``fork`` gives the child exactly the parent's blocks: samples share until one writes;
- ``append_slots`` gives a sequence its own copy (copy on write) of every shared block it is about
  to write into, with the copy in the list it returns, and never changes blocks of computed tokens;
- ``free`` empties the table; the reported free count is right after every call (no leak);
- when everything has finished, no table holds a block.
The replay then runs the model on those block tables, so a copy-on-write mistake shows up as wrong
tokens, and compares each request's tokens with the engine's own manager's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.memory.kv_pool import BlockCopy

from .block_replay import ReplayManager
from .common import LabViolation, ReplayMismatch, TraceResult, check_log, run_error
from .drive import Served, serve
from .model import lab_beam_search, lab_config, lab_model
from .traces import LabTrace


class BlockManagerBase:
    """The block manager the engine calls (lab A). Subclass it and write the methods that raise.

    The engine's scheduler asks exactly these of any manager (``kvcourse.kernels.memory.block_manager``'s
    ``BlockManager``), the same questions it asks its own ``KVCacheManager``.

    A sequence ``seq`` brings what you need: ``seq.seq_id``, ``seq.num_tokens``, ``seq.num_blocks``
    (blocks its tokens fill: ``ceil(num_tokens / block_size)``), ``seq.num_computed_tokens`` (tokens
    whose K/V are already in the pool) and ``seq.block_table``, the list of physical block ids that you
    fill in, one per ``block_size`` tokens.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size

    def can_allocate(self, seq) -> bool:
        """Could ``allocate(seq)`` give a new sequence blocks for all its tokens now?"""
        raise NotImplementedError("can_allocate: write it (lab A, step 1)")

    def allocate(self, seq) -> None:
        """Fill the empty ``seq.block_table`` with ``seq.num_blocks`` free blocks, one holder each."""
        raise NotImplementedError("allocate: write it (lab A, step 1)")

    def can_append(self, seq) -> bool:
        """Could ``append_slots(seq)`` get the blocks this step writes (new blocks and copies)?"""
        raise NotImplementedError("can_append: write it (lab A, step 2)")

    def append_slots(self, seq) -> list[BlockCopy]:
        """Before the step writes tokens ``num_computed_tokens`` to ``num_tokens - 1``: add blocks until the
        table has ``seq.num_blocks``, and replace each shared block among those written by a copy of its
        own. Return the copies as ``BlockCopy(src, dst)``: the engine copies the K/V before the step."""
        raise NotImplementedError("append_slots: write it (lab A, step 2)")

    def fork(self, parent, child) -> None:
        """The child shares every block of the parent (one more holder each) and has computed as much."""
        raise NotImplementedError("fork: write it (lab A, step 3)")

    def free(self, seq) -> None:
        """Drop the sequence's hold on each of its blocks, empty its table, set num_computed_tokens to 0."""
        raise NotImplementedError("free: write it (lab A, step 1)")

    @property
    def num_free_blocks(self) -> int:
        """Blocks no table holds."""
        raise NotImplementedError("num_free_blocks: write it (lab A, step 1)")

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def cache_full_blocks(self, seq) -> None:
        """Prefix caching is the engine's own manager's (lab B): yours caches nothing."""


def _call(what: str, method: Callable, *args):
    try:
        return method(*args)
    except LabViolation:
        raise
    except Exception as err:  # noqa: BLE001 - the learner's code: its error is the verdict
        raise LabViolation(f"{what} raised {type(err).__name__}: {str(err)[:200]}") from None


class RecordingManager:
    """The learner's manager as the engine sees it, writing down every call (in the learner's process)."""

    def __init__(self, manager_class: Callable, num_blocks: int, block_size: int, entries: list) -> None:
        name = getattr(manager_class, "__name__", "the manager class")
        self.inner = _call(f"{name}({num_blocks}, {block_size})", manager_class, num_blocks, block_size)
        self.entries, self.num_blocks, self.block_size = entries, num_blocks, block_size

    @property
    def num_free_blocks(self) -> int:
        value = _call("num_free_blocks", lambda: self.inner.num_free_blocks)
        return value if isinstance(value, int) and not isinstance(value, bool) else -1

    @property
    def num_used_blocks(self) -> int:
        return -1  # not asked of the learner's manager between calls: the replay counts blocks itself

    def can_allocate(self, seq) -> bool:
        ok = bool(_call(f"can_allocate(sequence {seq.seq_id})", self.inner.can_allocate, seq))
        self.entries.append(["can_allocate", seq.seq_id, ok])
        return ok

    def allocate(self, seq) -> None:
        _call(f"allocate(sequence {seq.seq_id})", self.inner.allocate, seq)
        self.entries.append(
            ["allocate", seq.seq_id, list(seq.block_table), seq.num_computed_tokens, self.num_free_blocks]
        )

    def can_append(self, seq) -> bool:
        ok = bool(_call(f"can_append(sequence {seq.seq_id})", self.inner.can_append, seq))
        self.entries.append(["can_append", seq.seq_id, ok])
        return ok

    def append_slots(self, seq) -> list[BlockCopy]:
        copies = _call(f"append_slots(sequence {seq.seq_id})", self.inner.append_slots, seq)
        try:
            pairs = [[int(c.src), int(c.dst)] for c in (copies or [])]
        except (TypeError, AttributeError, ValueError):
            raise LabViolation(
                f"append_slots(sequence {seq.seq_id}) returned {str(copies)[:80]}, not a list of BlockCopy(src, dst)"
            ) from None
        self.entries.append(["append", seq.seq_id, list(seq.block_table), pairs, self.num_free_blocks])
        return [BlockCopy(src, dst) for src, dst in pairs]

    def fork(self, parent, child) -> None:
        _call(f"fork(sequence {parent.seq_id}, sequence {child.seq_id})", self.inner.fork, parent, child)
        self.entries.append(
            [
                "fork",
                parent.seq_id,
                child.seq_id,
                list(child.block_table),
                child.num_computed_tokens,
                self.num_free_blocks,
            ]
        )

    def free(self, seq) -> None:
        _call(f"free(sequence {seq.seq_id})", self.inner.free, seq)
        self.entries.append(["free", seq.seq_id, seq.num_computed_tokens, self.num_free_blocks])

    def cache_full_blocks(self, seq) -> None:
        pass


# -- running and judging ----------------------------------------------------------------------------------


def record(manager_class: Callable, trace: LabTrace) -> dict:
    """Serve ``trace`` on the learner's manager and write down every call (run where the learner's code runs)."""
    model, log = lab_model(), {"entries": [], "beams": [], "error": None}
    try:
        engine = LLMEngine(
            model,
            lab_config(trace),
            block_manager=lambda nb, bs: RecordingManager(manager_class, nb, bs, log["entries"]),
        )
        serve(engine, trace)
        for run in trace.beams:
            entries: list = []
            log["beams"].append(entries)
            lab_beam_search(
                run,
                trace.block_size,
                block_manager=lambda nb, bs, e=entries: RecordingManager(manager_class, nb, bs, e),
            )
    except LabViolation as err:
        log["error"] = str(err)
    except Exception as err:  # noqa: BLE001 - whatever the learner's manager makes the engine raise
        log["error"] = f"the engine stopped: {type(err).__name__}: {str(err)[:200]}"
    return log


@lru_cache(maxsize=64)  # a class's public traces are judged once per student: serve the reference once
def _reference(trace: LabTrace) -> tuple[Served, list[list[list[int]]]]:
    model = lab_model()
    served = serve(LLMEngine(model, lab_config(trace)), trace)
    beams = [lab_beam_search(run, trace.block_size) for run in trace.beams]
    return served, beams


def _figures(served: Served) -> dict[str, float]:
    used = [b for b in served.blocks_in_use if b >= 0]
    return {
        "steps": served.num_steps,
        "mean blocks in use": round(sum(used) / max(1, len(used)), 2),
        "peak blocks in use": max(used, default=0),
    }


def judge(trace: LabTrace, log: object) -> TraceResult:
    """Replay a recorded run outside the learner's code: the rules at every call, then the tokens."""
    served, beams = _reference(trace)
    reference = _figures(served)

    def fail(reason: str, kind: str, metrics: dict | None = None) -> TraceResult:
        return TraceResult(trace.name, trace.public, 0.0, reason, metrics or {}, reference, kind)

    model = lab_model()
    error = run_error(log)
    try:
        log = check_log(log)
        beam_logs = log.get("beams")
        if (
            not isinstance(beam_logs, list)
            or len(beam_logs) > len(trace.beams)
            or (len(beam_logs) < len(trace.beams) and not error)
        ):
            raise ReplayMismatch("the run's log has not one beam search per beam run")
        replay = ReplayManager(log["entries"], trace.num_blocks, trace.block_size)
        mine = serve(LLMEngine(model, lab_config(trace), block_manager=lambda nb, bs: replay), trace)
        replay.finish("the trace")
        my_beams = []
        for run, entries in zip(trace.beams, beam_logs, strict=True):
            if not isinstance(entries, list):
                raise ReplayMismatch("a beam search's log is not a list")
            holder: list[ReplayManager] = []

            def factory(nb, bs, entries=entries, holder=holder):
                holder.append(ReplayManager(entries, nb, bs))
                return holder[-1]

            my_beams.append(lab_beam_search(run, trace.block_size, block_manager=factory))
            holder[0].finish("a beam search")
    except LabViolation as err:
        return fail(str(err), _rule(str(err)))
    except ReplayMismatch as err:  # where the run stopped on its error, the replay finds its log ends
        return fail(error, _rule(error)) if error else fail(f"the recorded run cannot be replayed: {err}", "replay")
    except RuntimeError as err:  # beam_search's own leak check, on the replay's true count
        return fail(str(err), "leak")
    if error:
        return fail(error, _rule(error))
    metrics = _figures(mine)
    for i, (want, got, status) in enumerate(zip(served.answers, mine.answers, mine.statuses, strict=True)):
        if status != "finished" and served.statuses[i] == "finished":
            return fail(f"request {i} was not served: {status}", "not served", metrics)
        if got != want:
            return fail(
                f"request {i}'s tokens differ from those on the engine's own manager: a block's K/V was "
                "overwritten or lost",
                "tokens",
                metrics,
            )
    for i, (want, got) in enumerate(zip(beams, my_beams, strict=True)):
        if got != want:
            return fail(f"beam search {i} found other beams than on the engine's own manager", "tokens", metrics)
    return TraceResult(trace.name, trace.public, 1.0, "", metrics, reference)


_RULES = (
    ("copy on write", "copy on write"),
    ("leaks", "leak"),
    ("still held", "leak"),
    ("never shared", "block in two tables"),
    ("said yes", "said yes without room"),
    ("raised", "raised"),
    ("fork(", "fork"),
    ("counts", "free count"),
)


def _rule(reason: str) -> str:
    """The rule a violation broke, in a few words (the instructor's report counts them)."""
    return next((kind for key, kind in _RULES if key in reason), "other")
