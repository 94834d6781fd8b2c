"""The labs' simulators (lessons 18-20) replay a learner's policy: lesson 12's on a block manager, lesson 13's on
an eviction policy, lesson 11's on a scheduling policy.

On the engine's own policy written as a learner writes it (the reference solution for labs A and C, least
recently used for lab B), each gives the engine's own figures; on another policy it gives that policy's figures
(and those agree with the engine run on it); a learner's error, or a rule broken, is a message in the widget,
never a traceback.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from factories import serve_beside_replay
from sim_checks import shows_png

from kvcourse.kernels import EngineConfig, EventKind, LLMEngine, PagingReplay, SamplingParams, workload
from kvcourse.kernels.workload import TraceConfig
from kvcourse.labs import BlockManagerBase, EvictionBase, Refuse, SchedulerBase
from kvcourse.quizzes.labs import reference
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.learner_policy import (
    EvictionError,
    LearnerPagingSim,
    LearnerPrefixCache,
    LearnerSharing,
    ManagerError,
    PolicyError,
    ServingFigures,
    hit_rate,
)
from kvcourse.simulators.paging import PagingConfig, PagingView
from kvcourse.simulators.prefix_cache import PrefixCache, PrefixCacheConfig, PrefixCacheView, words_to_ids
from kvcourse.simulators.sharing import Sharing, SharingConfig, SharingView

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

ReferenceManager, ReferenceScheduler = (reference(lab) for lab in ("block_manager", "scheduler"))


class LeastRecent(EvictionBase):
    """The engine's own order written as a learner writes it (lab B's reference does better than LRU: issue 43)."""

    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return min(tails, key=lambda c: (c.last_used, -c.depth)).block_id


# -- lab A: a block manager in lesson 12's simulator ---------------------------------------------------------
class LowestFirst(ReferenceManager):
    """A correct manager that hands out the lowest free block, as the engine's pool does here."""

    def _take(self):
        self.free_list.sort(reverse=True)
        return super()._take()


class NoCopy(ReferenceManager):
    """Forgets copy on write: writes into the shared block."""

    def append_slots(self, seq):
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self._take())
        return []


class CopiesUnsaid(ReferenceManager):
    """Copies on write but returns no copies: the engine would not copy the keys and values."""

    def append_slots(self, seq):
        super().append_slots(seq)
        return []


class ForkCopies(ReferenceManager):
    """Gives the child fresh blocks at the fork instead of sharing."""

    def fork(self, parent, child):
        child.block_table = [self._take() for _ in parent.block_table]
        child.num_computed_tokens = parent.num_computed_tokens


class CountsWrong(ReferenceManager):
    @property
    def num_free_blocks(self):
        return len(self.free_list) + 1


class Skeleton(BlockManagerBase):
    pass


def _figures(sim: Sharing) -> tuple:
    return (
        sim.num_used_blocks,
        sim.num_copies,
        sim.last_new_blocks,
        sim.blocks_saved,
        sorted(sim.ref_counts),
        [len(t) for t in sim.tables],
    )


@pytest.mark.parametrize(
    "prompt_len, block_size, num_samples, tokens_per_step",
    [
        (94, 16, 4, 1),
        (10, 4, 3, 1),
        (96, 16, 4, 3),
        (37, 8, 3, 5),
        (33, 16, 1, 7),
        (50, 1, 2, 2),
    ],
)
def test_the_reference_manager_gives_the_engine_s_figures_at_every_step(
    prompt_len, block_size, num_samples, tokens_per_step
):
    config = SharingConfig(prompt_len, block_size, num_samples, tokens_per_step, num_blocks=400)
    mine, own = LearnerSharing(config, ReferenceManager), Sharing(config)
    for _ in range(12):
        assert _figures(mine) == _figures(own) == _figures(mine.engine)
        mine.step()
        own.step()
    assert mine.tables != own.tables  # the same counts in other blocks: the reference takes the last free block


def test_a_manager_that_takes_the_lowest_block_makes_the_engine_s_very_tables():
    sim = LearnerSharing(SharingConfig(), LowestFirst)
    for _ in range(5):
        sim.step()
        assert sim.tables == sim.engine.tables and sim.ref_counts == sim.engine.ref_counts


@pytest.mark.parametrize(
    "manager, steps, message",
    [
        (Skeleton, 0, "your manager's allocate(sequence 0) raised NotImplementedError"),
        (NoCopy, 2, "copy on write missed"),
        (CopiesUnsaid, 2, "returned the copies []"),
        (ForkCopies, 1, "forked sequences share every block"),
        (CountsWrong, 0, "your manager counts 43 free blocks, but 42 are free"),
    ],
)
def test_a_broken_manager_is_named_and_stopped(manager, steps, message):
    def run():
        sim = LearnerSharing(SharingConfig(), manager)
        for _ in range(steps):
            sim.step()
        return sim

    with pytest.raises(ManagerError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        run()


def test_the_view_runs_a_learner_s_manager_beside_the_engine_s():
    view = SharingView(10, 4, 3, num_blocks=18, block_manager=ReferenceManager)
    assert (
        view.error is None and shows_png(view) and "the engine's own: 3 and 0 (the same figures)" in view.message.value
    )
    view.step_button.click()
    view.step_button.click()
    assert "2 copied on write" in view.message.value and "the engine's own: 5 and 2" in view.message.value
    assert "(engine's own: 5)" in view.axes[1].get_title() and "your manager's pool" in view.axes[1].get_xlabel()
    assert "Your manager" not in SharingView().message.value  # lesson 12 as it was


def test_the_view_shows_a_broken_manager_as_a_message_and_never_a_traceback():
    view = SharingView(block_manager=Skeleton)
    assert view.error is not None and "raised NotImplementedError" in view.message.value
    view = SharingView(block_manager=NoCopy)
    view.step_button.click()
    view.step_button.click()  # the first write: copy on write missed
    assert "copy on write missed" in view.message.value and view.error is None
    view.step_button.click()  # stepping a broken manager again says so again
    assert "copy on write missed" in view.message.value and "press Reset" in view.message.value
    view.reset_button.click()
    assert "Press <b>Fork</b>" in view.message.value


# -- lab B: an eviction policy in lesson 13's simulator ------------------------------------------------------
class LFU(EvictionBase):
    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return min(tails, key=lambda c: (c.num_hits, c.last_used)).block_id


class HeadFirst(EvictionBase):
    """Evicts the head of a chain while its tail could go: the pool refuses it."""

    def choose(self, candidates):
        return max(candidates, key=lambda c: (c.has_cached_children, -c.last_used)).block_id


class InUse(EvictionBase):
    def choose(self, candidates):
        return 10**6


class Raises(EvictionBase):
    def choose(self, candidates):
        raise ZeroDivisionError("oops")


SYSTEM = "you are a helpful librarian . answer briefly"
LAB_PROMPTS = [
    SYSTEM + " when do you open ?",
    "tell me a story about a dragon who loves tea",
    SYSTEM + " can i print here ?",
    "what is the capital city of france and why",
    "write a short poem about the sea at night",
    SYSTEM + " where is the map room ?",
    "list three birds that cannot fly at all please",
    SYSTEM + " do you lend e-books ?",
]


def _lab_config(num_blocks: int = 6) -> PrefixCacheConfig:
    return PrefixCacheConfig(tuple(tuple(p) for p in words_to_ids(LAB_PROMPTS)), 4, num_blocks)


def _random_config(seed: int) -> PrefixCacheConfig:
    rng = random.Random(seed)
    stems = [[rng.randrange(3, 96) for _ in range(rng.randrange(4, 20))] for _ in range(3)]
    prompts = [rng.choice(stems) + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 8))] for _ in range(8)]
    return PrefixCacheConfig(tuple(map(tuple, prompts)), rng.choice([2, 3, 4]), rng.randrange(4, 14))


def _story(cache: PrefixCache) -> list:
    return [(r.num_cached_tokens, r.hit_block_ids, r.evicted, r.refusal) for r in cache.results]


@pytest.mark.parametrize("seed", range(10))
def test_least_recently_used_as_a_learner_writes_it_evicts_as_the_engine_s_own_order(seed):
    config = _random_config(seed)
    mine = LearnerPrefixCache(config, len(config.prompts), LeastRecent())
    assert _story(mine) == _story(PrefixCache(config, len(config.prompts))) == _story(mine.engine)


def test_the_random_scenarios_make_the_policy_choose():
    chosen = []

    class Counting(LeastRecent):
        def choose(self, candidates):
            chosen.append(len(candidates))
            return super().choose(candidates)

    for seed in range(10):
        config = _random_config(seed)
        LearnerPrefixCache(config, len(config.prompts), Counting())
    assert len(chosen) > 20 and max(chosen) > 1


def test_frequency_keeps_the_popular_system_prompt_that_recency_forgets():
    lru, lfu = PrefixCache(_lab_config(), 8), LearnerPrefixCache(_lab_config(), 8, LFU())
    assert [r.num_cached_tokens for r in lru.results] == [0, 0, 8, 0, 0, 4, 0, 8]
    assert [r.num_cached_tokens for r in lfu.results] == [0, 0, 8, 0, 0, 8, 0, 8]
    assert lfu.engine.num_cached_tokens == lru.num_cached_tokens == 20 and lfu.hit_rate > hit_rate(lru)


def _engine_story(model, config: PrefixCacheConfig, eviction) -> list:
    """The prompts served one after another to their first token on LLMEngine with ``eviction``."""
    engine = LLMEngine(
        model,
        EngineConfig(block_size=config.block_size, num_blocks=config.num_blocks, enable_prefix_caching=True),
        eviction=eviction,
    )
    story = []
    for prompt in config.prompts:
        seen = len(engine.events.events)
        out = engine.generate([list(prompt)], SamplingParams(max_new_tokens=1))[0]
        new = list(engine.events.events)[seen:]
        story.append(
            (
                out.num_cached_tokens,
                [e.block_id for e in new if e.kind is EventKind.PREFIX_HIT],
                sorted(e.block_id for e in new if e.kind is EventKind.EVICT),
            )
        )
    return story


def _sim_story(config: PrefixCacheConfig, eviction) -> list:
    cache = LearnerPrefixCache(config, len(config.prompts), eviction)
    where = {}  # (request, block index) -> physical block, to name an evicted block by its id
    story = []
    for r in cache.results:
        where.update({(r.number, b.index): b.block_id for b in r.blocks if (r.number, b.index) not in where})
        story.append((r.num_cached_tokens, r.hit_block_ids, sorted(where[o] for o in r.evicted)))
    return story


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_simulator_on_a_learner_s_policy_is_the_engine_on_it(tiny_model, seed):
    config = _lab_config() if seed == 0 else _random_config(seed)
    assert _sim_story(config, LFU()) == _engine_story(tiny_model, config, LFU())


@pytest.mark.parametrize(
    "policy, message",
    [
        (HeadFirst(), "chose a block the pool refuses: block .* is the parent of a block still cached"),
        (InUse(), "chose a block the pool refuses: block 1000000 does not exist"),
        (Raises(), "raised ZeroDivisionError: oops"),
        (EvictionBase(), "raised NotImplementedError"),
    ],
)
def test_a_policy_the_pool_refuses_is_named_and_stopped(policy, message):
    cache = LearnerPrefixCache(_lab_config(), 0, policy)
    with pytest.raises(EvictionError, match=message):
        for _ in range(8):
            cache.step()
    with pytest.raises(EvictionError, match="Fix the policy"):
        cache.step()


def test_the_view_runs_a_learner_s_policy_beside_least_recently_used():
    view = PrefixCacheView(LAB_PROMPTS, block_size=4, num_blocks=6, eviction=LFU())
    assert view.error is None and shows_png(view)
    assert (
        "<b>Your policy</b> reused 24 of 90 prompt tokens (27%), more than the engine's own order" in view.message.value
    )
    assert ": 20 (22%)" in view.message.value and "your policy chooses" in view.axes[1].get_title()
    assert "Your policy" not in PrefixCacheView().message.value  # lesson 13 as it was


def test_the_view_shows_a_refused_choice_as_a_message_and_never_a_traceback():
    view = PrefixCacheView(LAB_PROMPTS, block_size=4, num_blocks=6, eviction=Raises())
    assert view.error is not None and "raised ZeroDivisionError" in view.message.value
    view = PrefixCacheView(LAB_PROMPTS, block_size=4, num_blocks=6, eviction=HeadFirst(), num_served=0)
    for _ in range(8):
        view.step_button.click()
    assert "the pool refuses" in view.message.value and "press Reset" in view.message.value
    view.reset_button.click()
    assert "No request served yet" in view.message.value


# -- lab C: a scheduling policy in lesson 11's simulator -----------------------------------------------------
class ShortestFirst(SchedulerBase):
    def choose_admission(self, waiting, free_blocks):
        ready = [i for i, seq in enumerate(waiting) if not seq.preempted_this_step]
        return min(ready, key=lambda i: waiting[i].num_prompt_tokens + waiting[i].max_new_tokens, default=None)

    def choose_victim(self, running, needy):
        return max(running, key=lambda seq: seq.max_new_tokens - (seq.num_tokens - seq.num_prompt_tokens)).seq_id


class Idle(SchedulerBase):
    def choose_admission(self, waiting, free_blocks):
        return None

    def choose_victim(self, running, needy):
        return needy.seq_id


class FirstComeFirstServed(SchedulerBase):
    """The engine's own order, as lesson 20 writes it: the head unless just preempted; the newest gives way."""

    def choose_admission(self, waiting, free_blocks):
        return None if not waiting or waiting[0].preempted_this_step else 0

    def choose_victim(self, running, needy):
        return running[-1].seq_id


class BadIndex(ReferenceScheduler):
    def choose_admission(self, waiting, free_blocks):
        return len(waiting)


class NoReason(ReferenceScheduler):
    def choose_admission(self, waiting, free_blocks):
        return Refuse(0, "")


class RefuseLong(ReferenceScheduler):
    def choose_admission(self, waiting, free_blocks):
        for i, seq in enumerate(waiting):
            if seq.num_prompt_tokens + seq.max_new_tokens > 400 and not seq.num_preemptions:
                return Refuse(i, "too long")
        return super().choose_admission(waiting, free_blocks)


SMALL = dict(num_requests=30, pool_slots=4096, answer_limit=256, answer_mean=80.0, arrivals_per_step=0.5)


def _records(replay: PagingReplay) -> list:
    return [dataclasses.astuple(r) for r in replay.report.history]


@pytest.mark.parametrize(
    "config",
    [PagingConfig(), PagingConfig(**SMALL), PagingConfig(block_size=4, **SMALL)],
    ids=["lesson", "small", "small blocks"],
)
def test_first_come_first_served_written_as_a_learner_writes_it_is_the_engines_own_step_for_step(config):
    sim = LearnerPagingSim(config, FirstComeFirstServed)
    sim.run()
    trace = workload.request_trace(config.trace_config)
    own = PagingReplay(trace, config.num_blocks, config.block_size)
    own.run()
    for replay in sim.replays:
        assert _records(replay) == _records(own) and replay.finish_steps == own.finish_steps
        assert replay.report.num_preemptions == own.report.num_preemptions
    assert own.report.num_preemptions > 0 or config != PagingConfig()  # the lesson's pool does preempt
    assert ServingFigures.of(sim.mine) == ServingFigures.of(sim.fcfs)


def test_shortest_job_first_shortens_the_median_and_lengthens_the_tail_on_the_lesson_trace():
    sim = LearnerPagingSim(PagingConfig(), ShortestFirst())
    sim.run()
    fcfs, sjf = ServingFigures.of(sim.fcfs), ServingFigures.of(sim.mine)
    assert sjf.num_finished == fcfs.num_finished == 200
    assert sjf.median_wait < fcfs.median_wait and sjf.p95_wait > fcfs.p95_wait
    assert sjf.num_preemptions != fcfs.num_preemptions


def test_the_replay_on_a_learner_s_scheduler_holds_the_engine_s_blocks_on_it():
    trace = workload.request_trace(TraceConfig(num_requests=40, arrivals_per_step=0.5, seed=3).scaled(1 / 16))
    for engine, replay, request_of in serve_beside_replay(trace, 40, 4, ShortestFirst):
        on_engine = {
            request_of[s.request_id]: (s.num_tokens, len(s.block_table))
            for r in engine.requests.values()
            for s in r.seqs
            if s.block_table
        }
        assert on_engine == {s.seq_id: (s.num_tokens, len(s.block_table)) for s in replay.running}
    assert not engine.has_unfinished_requests and engine.num_steps == replay.report.num_steps
    assert engine.events.counts().get("preempt", 0) == replay.report.num_preemptions > 0


def test_a_refusal_with_a_reason_ends_the_run_and_is_counted():
    sim = LearnerPagingSim(PagingConfig(**SMALL), RefuseLong())
    sim.run()
    mine = ServingFigures.of(sim.mine)
    assert sim.done and mine.num_refused > 0 and mine.num_finished + mine.num_refused == 30


@pytest.mark.parametrize(
    "policy, message",
    [
        (SchedulerBase(), "raised NotImplementedError: choose_admission"),
        (Idle(), "admitted nobody while the pool stood empty"),
        (BadIndex(), "made a choice the scheduler refuses: choose_admission returned 1"),
        (NoReason(), "a refusal needs a reason"),
    ],
)
def test_a_policy_the_scheduler_refuses_is_named_and_stopped(policy, message):
    sim = LearnerPagingSim(PagingConfig(**SMALL), policy)
    with pytest.raises(PolicyError, match=message):
        sim.run()
    with pytest.raises(PolicyError, match="Fix the policy"):
        sim.step()


def test_a_policy_class_that_cannot_be_made_is_a_message():
    class Broken(ReferenceScheduler):
        def __init__(self):
            raise ValueError("no")

    with pytest.raises(InvalidInput, match=r"Broken\(\) raised ValueError"):
        LearnerPagingSim(PagingConfig(**SMALL), Broken)


def test_the_view_runs_a_learner_s_scheduler_beside_first_come_first_served():
    view = PagingView(steps_per_click=50, scheduling_policy=ShortestFirst(), **SMALL)
    assert view.error is None and shows_png(view)
    assert "<b>first come, first served</b>" in view.message.value and "<b>your scheduler</b>" in view.message.value
    view.run_button.click()
    assert view.message.value.count("30 of 30 finished") == 2 and "median wait" in view.axes[0].get_title()
    assert "requests finished" in view.axes[0].get_ylabel()
    assert "reservation" in PagingView(steps_per_click=50, **SMALL).message.value  # lesson 11 as it was


def test_the_view_shows_a_stuck_policy_as_a_message_and_never_a_traceback():
    view = PagingView(steps_per_click=50, scheduling_policy=SchedulerBase(), **SMALL)
    assert view.error is not None and "raised NotImplementedError" in view.message.value
    view = PagingView(steps_per_click=50, scheduling_policy=Idle(), **SMALL)
    assert view.error is not None and "admitted nobody" in view.message.value
    view = PagingView(steps_per_click=50, scheduling_policy=ReferenceScheduler(), **SMALL)
    view.scheduling_policy = Idle()  # a learner's class rerun: the next build is stuck
    view.controls["seed"].value = 3
    assert view.error is not None and "admitted nobody" in view.message.value
