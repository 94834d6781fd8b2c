"""LLMEngine: greedy tokens equal plain generation under batching, chunking, preemption, eviction (lessons 08-14)."""

from __future__ import annotations

import random

import pytest
import torch

from kvcourse.kernels import EngineConfig, LLMEngine, RequestStatus, SamplingParams, generate
from kvcourse.kernels.memory.events import EventKind

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

NEW = 12


def prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 96) for _ in range(n)] for n in lengths]


_REFERENCES: dict[tuple, list[int]] = {}


def reference(model, prompt, num_new=NEW) -> list[int]:
    """Single-sequence greedy tokens with a contiguous cache (equal to no cache: first test below)."""
    key = (id(model), tuple(prompt), num_new)
    if key not in _REFERENCES:
        _REFERENCES[key] = generate(model, prompt, num_new, cache="contiguous").tokens
    return _REFERENCES[key]


def run(model, ps, num_new=NEW, **config) -> tuple[LLMEngine, list]:
    engine = LLMEngine(model, EngineConfig(**{"block_size": 4, **config}))
    outs = engine.generate(ps, SamplingParams(max_new_tokens=num_new))
    assert not engine.has_unfinished_requests
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks  # every block came back
    return engine, outs


def test_generate_paged_equals_none_and_contiguous(tiny_model_each_path):
    for p in prompts([1, 7, 16, 30]):
        none = generate(tiny_model_each_path, p, NEW, cache="none").tokens
        assert generate(tiny_model_each_path, p, NEW, cache="contiguous").tokens == none
        assert generate(tiny_model_each_path, p, NEW, cache="paged").tokens == none


def test_paged_cache_with_scattered_blocks(tiny_model_each_path):
    from kvcourse.kernels.engine.paged_generate import PagedSequenceCache

    def scattered(req):
        return PagedSequenceCache(req.model, req.max_tokens, block_size=4, scatter=True, seed=3)

    p = prompts([21])[0]
    result = generate(tiny_model_each_path, p, 15, cache=scattered)
    assert result.tokens == reference(tiny_model_each_path, p, 15)
    table = result.backend.block_table
    assert table != sorted(table)  # the blocks really were out of order


def test_batched_engine_equals_single_generation(tiny_model_each_path):
    ps = prompts([5, 12, 16, 33, 1, 9])
    engine, outs = run(tiny_model_each_path, ps)
    for p, out in zip(ps, outs, strict=True):
        assert out.finished and out.tokens == reference(tiny_model_each_path, p)
    assert engine.num_steps < len(ps) * NEW  # requests really shared steps


def test_requests_join_and_leave_between_steps(tiny_model_each_path):
    ps = prompts([6, 10, 3], seed=1)
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4))
    first = engine.add_request(ps[0], SamplingParams(max_new_tokens=NEW))
    for _ in range(4):
        engine.step()
    later = [engine.add_request(p, SamplingParams(max_new_tokens=NEW)) for p in ps[1:]]
    outputs = []
    while engine.has_unfinished_requests:
        outputs += engine.step()
    finished = {o.request_id: o for o in outputs if o.finished}
    assert set(finished) == {first, *later}
    for rid, p in zip([first, *later], ps, strict=True):
        assert finished[rid].tokens == reference(tiny_model_each_path, p)


def test_chunked_prefill_under_a_small_token_budget(tiny_model_each_path):
    ps = prompts([30, 17, 4], seed=2)
    _, outs = run(tiny_model_each_path, ps, max_num_batched_tokens=5)
    assert [o.tokens for o in outs] == [reference(tiny_model_each_path, p) for p in ps]


def test_preemption_under_memory_pressure_keeps_outputs(tiny_model_each_path):
    ps = prompts([20, 18, 22, 15, 19], seed=3)
    engine, outs = run(tiny_model_each_path, ps, num_blocks=16)  # each request alone needs 8-9 blocks
    assert engine.events.of_kind(EventKind.PREEMPT)
    assert [o.tokens for o in outs] == [reference(tiny_model_each_path, p) for p in ps]


def test_prefix_caching_with_eviction_keeps_outputs(tiny_model_each_path):
    system = prompts([16], seed=4)[0]
    ps = [system + tail for tail in prompts([3, 7, 1, 9, 5, 2], seed=5)]
    engine, outs = run(tiny_model_each_path, ps, num_blocks=20, enable_prefix_caching=True, max_num_seqs=2)
    counts = engine.events.counts()
    assert counts.get("prefix_hit", 0) > 0 and counts.get("evict", 0) > 0
    assert [o.tokens for o in outs] == [reference(tiny_model_each_path, p) for p in ps]
    assert any(o.num_cached_tokens >= 16 for o in outs)


def test_refused_requests_carry_a_reason_and_nothing_is_lost(tiny_model_each_path):
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, num_blocks=10))
    good = prompts([5])[0]
    outs = engine.generate(
        [good, [], [500], good * 30, prompts([20])[0], good],
        [SamplingParams(max_new_tokens=NEW)] * 4
        + [SamplingParams(max_new_tokens=30), SamplingParams(max_new_tokens=0)],
    )
    assert outs[0].finished and outs[0].refusal is None and outs[0].tokens == reference(tiny_model_each_path, good)
    assert "empty" in outs[1].refusal
    assert "token ids" in outs[2].refusal
    assert "context" in outs[3].refusal  # 150 + 12 > 128 positions
    assert "could never fit" in outs[4].refusal  # 50 tokens need 13 blocks, the pool has 10
    assert outs[5].finished and outs[5].tokens == [] and outs[5].refusal is None
    assert all(o.finished for o in outs)
    assert engine.requests[1].status is RequestStatus.REFUSED


def test_fully_cached_prompt_still_computes_its_last_token(tiny_model_each_path):
    """Regression: a prompt whose every block is cached must still run its last token for logits."""
    p = prompts([16], seed=6)[0]
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, enable_prefix_caching=True))
    first = engine.generate([p], SamplingParams(max_new_tokens=NEW))[0]
    second = engine.generate([p], SamplingParams(max_new_tokens=NEW))[0]
    assert first.tokens == second.tokens == reference(tiny_model_each_path, p)
    assert second.num_cached_tokens == 12  # the last block is recomputed, not shared and overwritten


def test_identical_prompts_in_the_same_step(tiny_model_each_path):
    """Regression: identical prompts admitted together must not read each other's unwritten blocks."""
    p = prompts([14], seed=7)[0]
    engine, outs = run(tiny_model_each_path, [p, p, p], enable_prefix_caching=True)
    assert all(o.tokens == reference(tiny_model_each_path, p) for o in outs)
    late = engine.generate([p], SamplingParams(max_new_tokens=NEW))[0]
    assert late.tokens == reference(tiny_model_each_path, p) and late.num_cached_tokens == 12


def test_prefix_hit_right_after_preemption(tiny_model_each_path):
    """Regression: a preempted sequence finds its own computed blocks in the cache when it resumes."""
    ps = prompts([8, 8], seed=8)
    engine, outs = run(tiny_model_each_path, ps, num_blocks=8, enable_prefix_caching=True)  # 2 x 5 blocks wanted
    preempted = {e.seq_id for e in engine.events.of_kind(EventKind.PREEMPT)}
    hits_after = [e for e in engine.events.of_kind(EventKind.PREFIX_HIT) if e.seq_id in preempted]
    assert preempted == {1} and len(hits_after) == 3  # its own computed blocks, parked, were found again
    assert [o.tokens for o in outs] == [reference(tiny_model_each_path, p) for p in ps]


def test_cached_kv_is_really_read(tiny_model_each_path):
    """Regression: a hit must read the cached K/V (corrupting them changes the answer)."""
    system = prompts([12], seed=9)[0]
    a, b = system + [5, 6, 7], system + [8, 9]
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, enable_prefix_caching=True))
    engine.generate([a], SamplingParams(max_new_tokens=NEW))
    out = engine.generate([b], SamplingParams(max_new_tokens=NEW))[0]
    assert out.num_cached_tokens == 12 and out.tokens == reference(tiny_model_each_path, b)
    corrupt = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, enable_prefix_caching=True))
    corrupt.generate([a], SamplingParams(max_new_tokens=NEW))
    cached = [e.block_id for e in corrupt.events.of_kind(EventKind.CACHE_INSERT)][:3]
    corrupt.pool.k[:, cached] = torch.randn_like(corrupt.pool.k[:, cached]) * 10
    bad = corrupt.generate([b], SamplingParams(max_new_tokens=NEW))[0]
    assert bad.num_cached_tokens == 12 and bad.tokens != out.tokens


def test_events_replay_to_the_same_reference_counts(tiny_model_each_path):
    ps = prompts([20, 18, 22, 15, 7], seed=10)
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, num_blocks=20, enable_prefix_caching=True))
    engine.generate([ps[1], ps[0], ps[1]], SamplingParams(max_new_tokens=NEW, n=2, temperature=1.0, seed=1))
    events = engine.events.events
    assert [e.step for e in events] == sorted(e.step for e in events)
    refs: dict[int, int] = {}
    for e in events:
        if e.kind is EventKind.ALLOCATE:
            assert refs.get(e.block_id, 0) == 0
            refs[e.block_id] = 1
        elif e.kind in (EventKind.PREFIX_HIT, EventKind.FORK):
            refs[e.block_id] = refs.get(e.block_id, 0) + 1
        elif e.kind is EventKind.FREE:
            refs[e.block_id] -= 1
            assert refs[e.block_id] >= 0
    assert all(r == 0 for r in refs.values())
    assert {"fork", "copy_on_write", "preempt", "evict", "prefix_hit"} <= set(engine.events.counts())


def test_a_stuck_queue_head_is_refused_not_waited_on_forever(tiny_model_each_path):
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, num_blocks=8))
    rid = engine.add_request(prompts([20])[0], SamplingParams(max_new_tokens=4))  # its prompt needs 5 of the 8 blocks
    for _ in range(4):  # blocks leaked by a bug elsewhere: the head can never start
        engine.kv_cache_manager.block_pool.allocate()
    while engine.has_unfinished_requests:
        engine.step()
    out = engine.requests[rid].output()
    assert out.finished and "needs 5 free blocks to start and the block manager reports 4 of 8" in out.refusal
    assert "4 never given back" in out.refusal, "the refusal states the real cause"


def test_pool_sized_from_a_byte_budget(tiny_model_each_path):
    from kvcourse.kernels.memory.budget import MemoryBudget, block_bytes

    budget = MemoryBudget.for_model(tiny_model_each_path.config, total_bytes=2_000_000, bytes_per_value=4)
    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, memory_budget=budget))
    per_block = block_bytes(tiny_model_each_path.config, 4, 4)
    assert engine.num_blocks == budget.kv_bytes // per_block
    assert engine.pool.nbytes == engine.num_blocks * per_block <= budget.kv_bytes
    with pytest.raises(ValueError, match="not both"):
        EngineConfig(num_blocks=8, memory_budget=budget)
    with pytest.raises(ValueError, match="block_size"):
        EngineConfig(block_size=0)


def test_the_step_contract_is_fixed_when_scheduled(tiny_model_each_path):
    """schedule() returns a record of values (no live sequence): update() reads it even after it has advanced
    the sequences, and nothing the runner or update does changes it."""
    import dataclasses

    from kvcourse.kernels.engine.batch import ScheduledBatch, ScheduledSeq
    from kvcourse.kernels.engine.sequence import Sequence

    engine = LLMEngine(tiny_model_each_path, EngineConfig(block_size=4, max_num_batched_tokens=6))
    ids = prompts([9])[0]
    engine.add_request(ids, SamplingParams(max_new_tokens=3))  # 9 tokens: a chunk of 6, then 3
    first = engine.scheduler.schedule()
    assert first.num_scheduled_tokens == (6,) and first.sampled == () and first.sampled_ids == ()
    part = first.seqs[0]
    assert part.new_token_ids == tuple(ids[:6]) and part.start_position == 0 and len(part.block_table) == 3
    engine.scheduler.update(first, [])
    second = engine.scheduler.schedule()
    assert second.num_scheduled_tokens == (3,) and second.sampled == (0,)
    before = dataclasses.astuple(second)
    logits = engine.model_runner.run(second)
    assert logits.shape[0] == len(second.sampled_ids) == 1
    grown = engine.scheduler.update(second, [[int(logits[0].argmax())]])
    assert [s.seq_id for s in grown] == list(second.sampled_ids) and dataclasses.astuple(second) == before
    assert second.seqs[0].new_token_ids == tuple(ids[6:]) and second.seqs[0].start_position == 6
    values = (int, str, tuple, type(None), ScheduledSeq)
    for field in dataclasses.fields(second):
        assert not isinstance(getattr(second, field.name), Sequence), "no live object in the record"
    assert all(isinstance(v, values) or dataclasses.is_dataclass(v) for v in dataclasses.astuple(second.seqs[0]))
    with pytest.raises(ValueError, match="not the one this scheduler made last"):
        engine.scheduler.update(second, [[0]])  # a record is consumed once
    with pytest.raises(ValueError, match="2 sequences but 1 token counts"):
        ScheduledBatch.of(engine.scheduler.running * 2, [1])
