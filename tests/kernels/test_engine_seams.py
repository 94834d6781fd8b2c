"""The labs' seams into the engine: an eviction policy, a scheduling policy, a block manager (lessons 18-20).

Each default stands equal to the engine without a seam, token for token and step for step; a policy's
bad choice is refused with the reason and changes nothing.
"""

from __future__ import annotations

import pytest

from kvcourse.kernels import EngineConfig, KVCacheManager, LLMEngine, SamplingParams, beam_search
from kvcourse.kernels.engine.policy import FCFSPolicy, Refuse, SchedulingPolicyError
from kvcourse.kernels.memory.block_pool import BlockPool, block_hash
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.eviction import EvictionPolicyError, LRUEviction

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SYSTEM = list(range(10, 26))  # four blocks of 4 shared by every prompt


def _prompts(count: int = 12) -> list[list[int]]:
    return [SYSTEM + [30 + i, 40 + i % 3, 50 + i % 5] + ([60 + i] * (i % 4)) for i in range(count)]


def _serve(model, prompts, **seams):
    config = EngineConfig(block_size=4, num_blocks=14, max_num_seqs=3, enable_prefix_caching="eviction" in seams)
    engine = LLMEngine(model, config, **seams)
    params = SamplingParams(max_new_tokens=5, stop_on_eos=False)
    outputs = engine.generate(prompts, params)
    return [o.tokens for o in outputs], [o.num_cached_tokens for o in outputs], engine


def test_lru_policy_equals_the_pools_own_order(tiny_model):
    base_tokens, base_cached, base = _serve(tiny_model, _prompts(), eviction=None)
    lru_tokens, lru_cached, engine = _serve(tiny_model, _prompts(), eviction=LRUEviction())
    assert lru_tokens == base_tokens
    assert lru_cached == base_cached and sum(lru_cached) > 0
    evictions = engine.events.counts().get(EventKind.EVICT.value, 0)
    assert evictions == base.events.counts().get(EventKind.EVICT.value, 0) > 0


def _cached_pool(eviction) -> BlockPool:
    """Three blocks: a cached chain 0 -> 1 (block 1 extends block 0), and block 2 cached alone; all free."""
    pool = BlockPool(3, eviction=eviction)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    h0 = block_hash(None, [1, 2])
    pool.cache_block(a, h0, [1, 2])
    pool.cache_block(b, block_hash(h0, [3, 4]), [3, 4], parent=h0, depth=1)
    pool.cache_block(c, block_hash(None, [9, 9]), [9, 9])
    for block in (c, b, a):
        pool.release(block)
    return pool


class _Choose:
    def __init__(self, choice):
        self.choice, self.seen = choice, []

    def choose(self, candidates):
        self.seen.append(candidates)
        return self.choice


@pytest.mark.parametrize(
    ("choice", "message"),
    [(0, "breaks the hash chain"), (7, "does not exist"), ("1", "not a block id"), (True, "not a block id")],
)
def test_the_pool_refuses_a_bad_eviction_and_changes_nothing(choice, message):
    pool = _cached_pool(_Choose(choice))
    before = (pool.free_block_ids, pool.num_cached_blocks)
    with pytest.raises(EvictionPolicyError, match=message):
        pool.allocate()
    assert (pool.free_block_ids, pool.num_cached_blocks) == before
    pool.check_invariants()


def test_an_in_use_block_cannot_be_evicted():
    pool = _cached_pool(None)
    pool.hit(2)  # block 2 is held again: no longer a candidate
    pool.eviction = _Choose(2)
    with pytest.raises(EvictionPolicyError, match="in use"):
        pool.allocate()


def test_candidates_carry_what_a_policy_needs():
    policy = _Choose(1)
    pool = _cached_pool(policy)
    assert pool.allocate() == 1  # the tail of the chain may go
    candidates = {c.block_id: c for c in policy.seen[0]}
    assert set(candidates) == {0, 1, 2}
    assert candidates[0].has_cached_children and not candidates[1].has_cached_children
    assert (candidates[0].depth, candidates[1].depth) == (0, 1)
    assert candidates[1].last_used < candidates[0].last_used  # the tail was freed first
    pool.check_invariants()
    assert not {c.block_id: c for c in pool.eviction_candidates()}[0].has_cached_children  # its child is gone


def test_a_parent_may_go_when_no_tail_is_left():
    pool = BlockPool(2, eviction=LRUEviction())
    a, b = pool.allocate(), pool.allocate()
    h0 = block_hash(None, [1])
    pool.cache_block(a, h0, [1])
    pool.cache_block(b, block_hash(h0, [2]), [2], parent=h0, depth=1)
    pool.release(a)  # the parent is free; its child is still held
    pool.eviction = _Choose(a)
    assert pool.allocate() == a


class _Backfill(FCFSPolicy):
    """Admits the first waiting sequence that fits (overtaking the head); preempts the biggest."""

    def choose_admission(self, waiting, free_blocks):
        return next(
            (i for i, v in enumerate(waiting) if not v.preempted_this_step and v.num_blocks_needed <= free_blocks), None
        )

    def choose_victim(self, running, needy):
        return max(running, key=lambda v: v.num_blocks_held).seq_id


def _trace_engine(model, policy=None):
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=10, max_num_seqs=4), scheduling_policy=policy)
    prompts = [[5 + i] * (3 + 5 * (i % 3)) for i in range(8)]
    return engine, engine.generate(prompts, SamplingParams(max_new_tokens=8, stop_on_eos=False))


def test_fcfs_policy_object_equals_the_default_scheduler(tiny_model):
    class Spelled(FCFSPolicy):  # not the default type: goes through the views
        pass

    _, base = _trace_engine(tiny_model)
    engine, spelled = _trace_engine(tiny_model, Spelled())
    assert [o.tokens for o in spelled] == [o.tokens for o in base]


def test_another_policy_serves_every_request_with_the_same_tokens(tiny_model):
    _, base = _trace_engine(tiny_model)
    engine, mine = _trace_engine(tiny_model, _Backfill())
    assert [o.tokens for o in mine] == [o.tokens for o in base]  # greedy: batching changes no token
    assert all(o.finished for o in mine)


class _Refuser(FCFSPolicy):
    def __init__(self, reason):
        self.reason = reason

    def choose_admission(self, waiting, free_blocks):
        if waiting and waiting[0].request_id == 1 and waiting[0].num_preemptions == 0:
            return Refuse(0, self.reason)
        return super().choose_admission(waiting, free_blocks)


def test_a_refusal_reaches_the_request_with_its_reason(tiny_model):
    engine, outputs = _trace_engine(tiny_model, _Refuser("too long for this demo"))
    assert engine.requests[1].refusal == "too long for this demo"
    assert [o.request_id for o in outputs if o.refusal] == [1]
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (_Refuser("  "), "needs a reason"),
        (type("Wild", (FCFSPolicy,), {"choose_admission": lambda self, w, f: 99})(), "not an index"),
        (type("Ghost", (FCFSPolicy,), {"choose_victim": lambda self, r, n: -5})(), "not the seq_id"),
    ],
)
def test_a_choice_the_scheduler_cannot_honour_is_refused(tiny_model, policy, message):
    with pytest.raises(SchedulingPolicyError, match=message):
        _trace_engine(tiny_model, policy)


class _Spy(KVCacheManager):
    """The engine's own manager given through the seam, counting calls."""

    calls = 0

    def __init__(self, num_blocks, block_size):
        super().__init__(num_blocks, block_size)

    def allocate(self, seq):
        type(self).calls += 1
        super().allocate(seq)


def test_block_manager_seam_takes_a_class(tiny_model):
    _, base = _trace_engine(tiny_model)
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=10, max_num_seqs=4), block_manager=_Spy)
    prompts = [[5 + i] * (3 + 5 * (i % 3)) for i in range(8)]
    outputs = engine.generate(prompts, SamplingParams(max_new_tokens=8, stop_on_eos=False))
    assert [o.tokens for o in outputs] == [o.tokens for o in base]
    assert _Spy.calls >= 8 and isinstance(engine.kv_cache_manager, _Spy)
    result = beam_search(tiny_model, [5, 6, 7], 2, 4, block_size=4, block_manager=_Spy)
    assert result.beams == beam_search(tiny_model, [5, 6, 7], 2, 4, block_size=4).beams


def test_eviction_and_block_manager_together_are_refused(tiny_model):
    with pytest.raises(ValueError, match="not both"):
        LLMEngine(tiny_model, EngineConfig(block_size=4), block_manager=_Spy, eviction=LRUEviction())


def test_the_engines_manager_and_lab_as_base_answer_one_block_manager_interface():
    """The scheduler types its manager as ``BlockManager``: the engine's KVCacheManager and the class a learner
    subclasses in lab A (course.labs.BlockManagerBase) both provide every method and property it names."""
    from kvcourse.kernels.memory.block_manager import BlockManager
    from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
    from kvcourse.labs import BlockManagerBase

    assert isinstance(KVCacheManager(8, 4), BlockManager)
    names = [n for n in dir(BlockManager) if not n.startswith("_")]
    assert {
        "can_allocate",
        "allocate",
        "can_append",
        "append_slots",
        "fork",
        "free",
        "cache_full_blocks",
        "num_free_blocks",
        "num_used_blocks",
        "num_blocks",
    } <= set(names)
    assert all(hasattr(BlockManagerBase, n) or n == "num_blocks" for n in names)
    assert BlockManagerBase(8, 4).num_blocks == 8
