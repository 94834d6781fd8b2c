"""The three labs judged outside the learner's code: references score full marks, mistakes score what they earn.

Everything here runs on the lab's tiny model in a second or two per trace; the sandboxed path through
`kvcourse grade autograde` is tested in tests/quizzes/test_grading_labs.py.
"""

from __future__ import annotations

import ast
import copy
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kvcourse.kernels.engine.threads import thread_policy
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.labs import (
    LABS,
    EvictionBase,
    Refuse,
    SchedulerBase,
    check,
    draw_trace,
    eviction,
    judge_runs,
    model,
    public_traces,
    record_runs,
)
from kvcourse.labs.model import LAB_THREADS, lab_model
from kvcourse.labs.oracle import access_sequence
from kvcourse.labs.room import room, room_summary
from kvcourse.labs.traces import LabTrace
from kvcourse.quizzes.labs import reference, solution_source

DRAWN = (101, 20261202, 987654321)  # seeds standing in for the grader's hidden draws


def _judge(lab, answer, traces):
    return judge_runs(lab, traces, record_runs(lab, answer, [t.to_plain() for t in traces]))


def _traces(lab):
    return public_traces(lab) + [draw_trace(lab, seed) for seed in DRAWN]


@pytest.mark.parametrize("lab", list(LABS))
def test_the_reference_scores_full_marks_on_every_trace(lab):
    results = _judge(lab, reference(lab), _traces(lab))
    assert [(r.name, r.score) for r in results] == [(r.name, 1.0) for r in results]
    # labs B and C always set their figures side by side; lab A says nothing when all is well
    starts = {"eviction": "LRU ", "scheduler": ""}.get(lab)
    assert all(r.reason.startswith(starts) if starts is not None else r.reason == "" for r in results)
    if lab == "scheduler":
        assert all("good requests per step: first come, first served" in r.reason for r in results)
    assert all(r.metrics for r in results)


@pytest.mark.parametrize("lab", list(LABS))
def test_traces_travel_as_plain_json_and_are_validated(lab):
    for trace in _traces(lab):
        assert LabTrace.from_plain(copy.deepcopy(trace.to_plain())) == trace
    assert public_traces(lab) == public_traces(lab) and draw_trace(lab, 5) != draw_trace(lab, 6)
    plain = public_traces(lab)[0].to_plain()
    plain["requests"][0][0] = [500]
    with pytest.raises(ValueError, match="token ids"):
        LabTrace.from_plain(plain)


@pytest.mark.parametrize("lab", list(LABS))
def test_every_run_of_a_trace_holds_the_labs_thread_count_whatever_the_callers(lab, monkeypatch):
    # The sandbox runs on one core and the grader's replay in a process with more threads: a product summed in
    # another order there could change a token, and the replay would then fail a right answer.
    from kvcourse.kernels.model import layers

    seen, linear = set(), layers.F.linear

    def counted(*args, **kwargs):
        seen.add(torch.get_num_threads())
        return linear(*args, **kwargs)

    monkeypatch.setattr(layers.F, "linear", counted)
    with thread_policy(2):
        results = _judge(lab, reference(lab), public_traces(lab)[:1])
        assert torch.get_num_threads() == 2, "the caller's count is restored"
    assert [r.score for r in results] == [1.0] and seen == {LAB_THREADS}


def test_the_lab_model_is_the_same_every_time():
    state = lab_model().state_dict()
    model._built.cache_clear()
    assert all((state[k] == v).all() for k, v in lab_model().state_dict().items())


def test_the_lab_model_is_the_same_whatever_other_threads_draw():
    # The grader judges two submissions at once, in two threads of one process: weights drawn from torch's global
    # stream while the other thread drew from it too came out different, and a right answer failed its replay.
    state = lab_model().state_dict()
    model._built.cache_clear()
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            torch.randn(64)

    other = threading.Thread(target=draw)
    other.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            built = list(pool.map(lambda _: lab_model(), range(2)))
    finally:
        stop.set()
        other.join()
    assert built[0] is built[1]
    assert all((state[k] == v).all() for k, v in built[0].state_dict().items())


# -- lab A: block managers that break a rule -------------------------------------------------------


Manager = reference("block_manager")


class InPlace(Manager):
    """Copy on write forgotten: a shared block is written in place."""

    def can_append(self, seq):
        return seq.num_blocks - len(seq.block_table) <= len(self.free_list)

    def append_slots(self, seq):
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self._take())
        return []


class Leaky(Manager):
    def free(self, seq):
        seq.block_table, seq.num_computed_tokens = [], 0


class SilentCopy(Manager):
    """Copies on write but does not tell the engine: the new block holds no K/V."""

    def append_slots(self, seq):
        super().append_slots(seq)
        return []


class DoubleBooked(Manager):
    """Hands out a block another sequence holds."""

    def allocate(self, seq):
        super().allocate(seq)
        if seq.seq_id == 1:
            seq.block_table[0] = 0


class Eager(Manager):
    """Fork copies nothing and shares nothing."""

    def fork(self, parent, child):
        child.block_table = [self._take() for _ in parent.block_table]
        child.num_computed_tokens = parent.num_computed_tokens


@pytest.mark.parametrize(
    ("manager", "kind", "words"),
    [
        (InPlace, "copy on write", "copy on write missed"),
        (Leaky, "leak", "leaks"),
        (SilentCopy, "other", "without returning the copy"),
        (DoubleBooked, "block in two tables", "still holds"),
        (Eager, "fork", "forked sequences share every block"),
        (reference("block_manager").__mro__[1], "raised", "write it (lab A"),
    ],
)
def test_block_manager_mistakes_score_zero_with_the_rule(manager, kind, words):
    results = _judge("block_manager", manager, public_traces("block_manager"))
    failed = [r for r in results if not r.passed]
    assert failed and all(r.score == 0 for r in failed)
    assert words in failed[0].reason and failed[0].kind == kind


# -- lab B: eviction policies ---------------------------------------------------------------------


class MostRecent:
    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return max(tails, key=lambda c: c.last_used).block_id


class LeastRecent:
    """Least recently used, written as a learner would (the engine's own LRUEviction is barred from answers)."""

    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return min(tails, key=lambda c: (c.last_used, -c.depth)).block_id


class Heads:
    def choose(self, candidates):
        return min(candidates, key=lambda c: c.depth).block_id


class Busy:
    def choose(self, candidates):
        free = {c.block_id for c in candidates}
        return next(b for b in range(1000) if b not in free)


def test_the_score_runs_from_lru_at_60_to_the_reference_at_100():
    assert eviction.score(0.30, 0.30, 0.40) == 0.6
    assert eviction.score(0.35, 0.30, 0.40) == pytest.approx(0.8)
    assert eviction.score(0.40, 0.30, 0.40) == eviction.score(0.55, 0.30, 0.40) == 1.0  # capped above the reference
    assert eviction.score(0.15, 0.30, 0.40) == pytest.approx(0.3)  # proportional below LRU: 0 at a hit rate of 0
    assert eviction.score(0.0, 0.30, 0.40) == 0.0
    assert eviction.score(0.30, 0.30, 0.30) == 1.0  # no room for the reference on this trace: LRU's rate is the target
    assert eviction.score(0.0, 0.0, 0.10) == 0.6  # LRU finds nothing: 60 % for nothing, as LRU


def test_lru_scores_60_and_the_verdict_sets_four_rates_side_by_side():
    results = _judge("eviction", LeastRecent, _traces("eviction"))
    for r in results:
        line = r.reference
        assert set(line) == {"LRU", "reference", "oracle"} and r.metrics["hit rate"] == line["LRU"]
        assert line["oracle"] >= line["reference"] - 0.02, (r.name, line)
        assert r.reason == eviction.four_rates(line["LRU"], line) and r.reason.startswith("LRU ")
        assert line["reference"] > line["LRU"] + eviction.TOLERANCE, (r.name, line)  # every trace drawn leaves room
        assert r.score == 0.6, (r.name, line)


def test_lab_b_draws_again_where_the_reference_finds_no_room_over_lru():
    """with_room.py: a draw the reference cannot improve on is replaced by the next draw of the same stream."""
    import random

    from kvcourse.labs.traces import eviction_trace
    from kvcourse.labs.with_room import leaving_room

    def has_room(trace: LabTrace) -> bool:
        line = eviction.rates(trace)
        return line["reference"] > line["LRU"] + eviction.TOLERANCE

    roomless = next(seed for seed in range(40) if not has_room(eviction_trace(random.Random(seed), "x", False)))
    redrawn = leaving_room(eviction_trace)(random.Random(roomless), "x", False)
    assert has_room(redrawn) and redrawn == leaving_room(eviction_trace)(
        random.Random(roomless), "x", False
    )  # the seed still decides it


def test_a_policy_above_the_reference_is_told_by_how_much(monkeypatch):
    trace = public_traces("eviction")[0]
    honest = eviction.rates(trace)
    monkeypatch.setattr(eviction, "rates", lambda t: {**honest, "reference": honest["LRU"] - 0.05})
    [result] = _judge("eviction", LeastRecent, [trace])
    assert result.score == 1.0 and result.passed
    assert result.reason.endswith("yours beats the reference by 5.0 points"), result.reason


def test_a_worse_eviction_policy_earns_its_share_of_60_below_lru():
    results = _judge("eviction", Lowest, _traces("eviction"))
    worse = [r for r in results if r.metrics["hit rate"] < r.reference["LRU"]]
    assert worse, "the lowest block id must lose to LRU on some trace"
    for r in worse:
        assert 0 <= r.score < 0.6 and r.kind == "hit rate"
        assert r.score == pytest.approx(0.6 * r.metrics["hit rate"] / r.reference["LRU"], abs=1e-3)


class Lowest:
    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return min(tails, key=lambda c: c.block_id).block_id


ROOM_SEEDS = range(2000, 2040)  # the suite's short path of benchmarks/bench_eviction_room.py (1,000 traces)


def test_the_traces_leave_room_above_lru_and_above_the_reference():
    """Issue 43: over drawn traces the oracle stands well above LRU and above the reference, and the reference
    clearly above LRU (the benchmark measures 1,000 traces; this is its short path)."""
    gaps = room_summary(room(ROOM_SEEDS))
    assert gaps["oracle over LRU"] >= 9, gaps  # 11.0 points on these 40 traces, 9.5 on the benchmark's 1,000
    assert gaps["oracle over reference"] >= 4.5, gaps  # 5.5 here, 5.8 on 1,000
    assert gaps["reference over LRU"] >= 4 and gaps["reference above LRU"] >= 0.85, gaps  # 5.5 and 95 % here


@pytest.mark.parametrize(
    ("policy", "kind", "words"), [(Heads, "hash chain", "breaks the hash chain"), (Busy, "in use", "in use")]
)
def test_an_eviction_the_pool_must_refuse_scores_zero(policy, kind, words):
    results = _judge("eviction", policy, public_traces("eviction"))
    failed = [r for r in results if not r.passed]
    assert failed and all(r.score == 0 and r.kind == kind and words in r.reason for r in failed)


def test_the_oracle_replays_the_future_of_the_trace_it_serves():
    trace = public_traces("eviction")[0]
    accesses = access_sequence(trace)
    assert len(accesses) >= len(trace.requests) and any(accesses)
    line = eviction.rates(trace)
    assert line["oracle"] > line["LRU"]


# -- lab B's notebook shows no solution -------------------------------------------------------------------

LESSON_19 = Path(__file__).resolve().parents[2] / "lessons" / "19_lab_eviction.ipynb"


LESSON_20 = LESSON_19.with_name("20_lab_scheduler.ipynb")
SHOWN = {  # lab -> its lesson, the method its policies define, the base a learner's class subclasses
    "eviction": (LESSON_19, "choose", EvictionBase),
    "scheduler": (LESSON_20, "choose_admission", SchedulerBase),
}


def _shown_policies(lesson: Path, method: str) -> list[tuple[str, str]]:
    """Every class with ``method`` that a lab lesson's body defines: in a code cell, or in a solution's code."""
    sources = []
    for cell in json.loads(lesson.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        text = "".join(cell["source"])
        sources.append(text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "solution":
                codes = [k.value for k in node.keywords if k.arg == "code"]
                sources += [c.value for c in codes if isinstance(c, ast.Constant)]
    shown = []
    for text in sources:
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == method for f in node.body
            ):
                shown.append((node.name, ast.unparse(node)))
    return shown


@pytest.mark.parametrize("lab", list(SHOWN))
def test_no_policy_the_lesson_shows_scores_above_70_and_the_reference_is_not_on_the_page(lab):
    lesson, method, base = SHOWN[lab]
    shown = _shown_policies(lesson, method)
    assert f"My{base.__name__.removesuffix('Base')}" in [name for name, _ in shown]  # the skeleton, at least
    traces = _traces(lab)
    for name, source in shown:
        namespace: dict = {base.__name__: base, "Refuse": Refuse}
        exec(compile(source, f"<{lesson.stem}: {name}>", "exec"), namespace)
        results = _judge(lab, namespace[name], traces)
        assert sum(r.score for r in results) / len(results) <= 0.7, (name, [r.score for r in results])
    text = lesson.read_text(encoding="utf-8")
    assert "passing_run" not in text and "solution_source" not in text and "kvcourse.quizzes.labs" not in text
    for line in solution_source(lab).splitlines():  # every statement of the reference's method
        if line.startswith(" " * 8) and len(line.strip()) > 12:
            assert json.dumps(line.strip())[1:-1] not in text, line


# -- lab C: schedulers -------------------------------------------------------------------------------


class Idle:
    def choose_admission(self, waiting, free_blocks):
        return None

    def choose_victim(self, running, needy):
        return running[-1].seq_id


class Mute(Idle):
    def choose_admission(self, waiting, free_blocks):
        return Refuse(0, "")


class Shedder(Idle):
    """Turns long requests away, with a reason: never pays."""

    def choose_admission(self, waiting, free_blocks):
        if waiting and waiting[0].max_new_tokens > 15 and not waiting[0].num_preemptions:
            return Refuse(0, "too long for today")
        return None if not waiting or waiting[0].preempted_this_step else 0


@pytest.mark.parametrize(
    ("policy", "kind", "words"), [(Idle, "lost", "stood idle"), (Mute, "no reason", "needs a reason")]
)
def test_a_scheduler_that_loses_a_request_scores_zero(policy, kind, words):
    results = _judge("scheduler", policy, public_traces("scheduler"))
    assert all(r.score == 0 and r.kind == kind and words in r.reason for r in results)


def test_refusing_work_with_a_reason_never_pays():
    results = _judge("scheduler", Shedder, public_traces("scheduler"))
    refused = [r for r in results if r.metrics.get("refused")]
    assert refused and all(r.score < 1 and r.kind == "goodput" for r in refused)


class FirstComeFirstServed(Idle):
    def choose_admission(self, waiting, free_blocks):
        return None if not waiting or waiting[0].preempted_this_step else 0


class LongestFirst(Idle):
    """Lesson 20's example: the order that overtakes the wrong way."""

    def choose_admission(self, waiting, free_blocks):
        ready = [i for i, seq in enumerate(waiting) if not seq.preempted_this_step]
        return max(ready, key=lambda i: waiting[i].num_prompt_tokens + waiting[i].max_new_tokens) if ready else None


class ShortestFirst(Idle):
    """An hour's honest improvement: shortest job first, the engine's own victim."""

    def choose_admission(self, waiting, free_blocks):
        ready = [i for i, seq in enumerate(waiting) if not seq.preempted_this_step]
        return min(ready, key=lambda i: waiting[i].num_prompt_tokens + waiting[i].max_new_tokens) if ready else None


def test_lab_c_scores_goodput_from_first_come_first_served_at_60_to_the_reference_at_100():
    """On the public and drawn traces: FCFS 60 % (the reference beats it on every one), lesson 20's example at
    most 70 %, shortest job first (an hour's work) between 60 and 100."""
    from kvcourse.labs.scheduler import goodputs

    traces = _traces("scheduler")
    assert all(goodputs(t)["reference"] > goodputs(t)["FCFS"] * 1.01 for t in traces), "room on every trace"
    fcfs = [r.score for r in _judge("scheduler", FirstComeFirstServed, traces)]
    assert fcfs == [0.6] * len(traces)
    assert sum(r.score for r in _judge("scheduler", LongestFirst, traces)) / len(traces) <= 0.7
    middle = sum(r.score for r in _judge("scheduler", ShortestFirst, traces)) / len(traces)
    assert 0.6 < middle < 1.0


def test_lab_c_counts_a_request_good_by_the_engines_own_latency_stamps():
    """TTFT and TPOT in steps, from the engine's RequestLatency: a request is good when both meet the targets."""
    from kvcourse.kernels.engine.latency import RequestLatency
    from kvcourse.labs.scheduler import TPOT_TARGET_STEPS, TTFT_TARGET_STEPS, good

    def latency(ttft: int, steps: int, tokens: int) -> RequestLatency:
        return RequestLatency(0, ttft, ttft + steps, tokens, 0.0, 1.0, None, (), 1.0, ())

    assert good(latency(TTFT_TARGET_STEPS, 9, 10)) and not good(latency(TTFT_TARGET_STEPS + 1, 9, 10))
    assert not good(latency(1, int(9 * TPOT_TARGET_STEPS) + 1, 10)) and good(latency(1, 0, 1))
    assert not good(None)


# -- the grader's side trusts no log ------------------------------------------------------------------


@pytest.mark.parametrize("lab", list(LABS))
def test_a_changed_or_borrowed_log_cannot_be_replayed(lab):
    traces = public_traces(lab)
    logs = record_runs(lab, reference(lab), [t.to_plain() for t in traces])
    borrowed = [logs[1], logs[0], logs[2]]  # perfect logs, of other traces
    results = judge_runs(lab, traces, borrowed)
    assert all(r.score == 0 and r.kind == "replay" for r in results[:2])
    tampered = copy.deepcopy(logs)
    del tampered[2]["entries"][len(tampered[2]["entries"]) // 2]
    assert judge_runs(lab, traces, tampered)[2].score == 0
    for junk in (None, "x", {"entries": "no"}, {"entries": [["??"]]}):
        assert judge_runs(lab, traces[:1], [junk])[0].score == 0
    assert all(r.score == 0 for r in judge_runs(lab, traces, logs[:1]))


def test_a_policy_that_patches_the_recorder_gains_nothing(monkeypatch):
    """A learner's code can replace the recorder where it runs; the grader's replay still judges the run."""
    import kvcourse.labs.block_manager as module

    traces = public_traces("block_manager")
    honest = record_runs("block_manager", InPlace, [t.to_plain() for t in traces])
    monkeypatch.setattr(module, "record", lambda cls, trace: {"entries": [], "beams": [], "error": None})
    faked = record_runs("block_manager", InPlace, [t.to_plain() for t in traces])
    monkeypatch.undo()
    for logs in (honest, faked):
        assert all(r.score == 0 for r in judge_runs("block_manager", traces, logs))


def test_check_prints_a_verdict_per_public_trace():
    lines: list[str] = []
    results = check("block_manager", reference("block_manager").__mro__[1], show=lines.append)
    text = "\n".join(lines)
    assert len(results) == 3 and "0 of 3 public traces pass" in text
    assert "NotImplementedError" in text and "write it (lab A, step 1)" in text
    lines.clear()
    check("block_manager", reference("block_manager"), show=lines.append)
    assert "3 of 3 public traces pass, score 100%" in "\n".join(lines)


def test_block_copy_is_what_the_base_class_documents():
    from kvcourse.labs import BlockManagerBase

    assert "BlockCopy(src, dst)" in BlockManagerBase.append_slots.__doc__
    assert BlockCopy(1, 2).dst == 2
