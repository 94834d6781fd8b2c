"""The engine with a disk tier under its prefix cache (issue 46 item 2): blocks the pool evicts are written to
files and read back on a later prefix hit, a preempted sequence's included; the tokens equal recomputing them; a
full tier drops its least recently used tails; an unreadable file falls back to recomputing and says so; the
files go when the tier closes."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant
from test_engine_state_machine import EngineMachine, packed_model, reference

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.kernels.memory.block_pool import CachedBlock, block_hash
from kvcourse.kernels.memory.disk_tier import DiskTier, TieredKVCacheManager
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

PARAMS = SamplingParams(max_new_tokens=5, stop_on_eos=False)
FIRST = list(range(10, 31))  # 21 tokens: 5 full blocks of 4 may come from a cache
OTHERS = [list(range(40 + 7 * i, 61 + 7 * i)) for i in range(3)]  # enough to push FIRST out of 12 blocks


def engine(tmp: Path | None, num_blocks: int = 12, capacity: int | None = None, **kw: object) -> LLMEngine:
    tier = {} if tmp is None else {"disk_tier": tmp, **({"disk_tier_bytes": capacity} if capacity else {})}
    config = EngineConfig(block_size=4, num_blocks=num_blocks, enable_prefix_caching=True, **tier, **kw)
    return LLMEngine(packed_model(), config)


def tier_of(e: LLMEngine) -> DiskTier:
    assert isinstance(e.kv_cache_manager, TieredKVCacheManager)
    return e.kv_cache_manager.tier


def run_all(e: LLMEngine, prompts: list[list[int]], params: SamplingParams = PARAMS) -> list[int]:
    """Requests served together to the end, the pool's invariants checked after every step; their ids."""
    request_ids = [e.add_request(prompt, params) for prompt in prompts]
    while e.has_unfinished_requests:
        e.step()
        held = [0] * e.num_blocks
        for seq in e.scheduler.running:
            for block_id in seq.block_table:
                held[block_id] += 1
        e.kv_cache_manager.block_pool.check_invariants(held)
    return request_ids


def serve(e: LLMEngine, prompt: list[int]) -> tuple[list[int], int]:
    """One request to the end, the pool's invariants checked after every step; its tokens and cached tokens."""
    (request_id,) = run_all(e, [prompt])
    out = e.requests[request_id].output()
    return out.tokens, out.num_cached_tokens


def evict_first(e: LLMEngine) -> list[int]:
    tokens, _ = serve(e, FIRST)
    for prompt in OTHERS:
        serve(e, prompt)
    return tokens


def test_blocks_restored_from_the_tier_give_the_recomputed_tokens(tmp_path):
    e = engine(tmp_path)
    first = evict_first(e)
    tier = tier_of(e)
    assert tier.stats.writes >= 5 and len(tier.files()) == tier.stats.writes
    again, cached = serve(e, FIRST)
    assert again == first == reference(FIRST, PARAMS.max_new_tokens)
    assert cached == 20  # all 5 full blocks, read back from files: a hit
    assert tier.stats.restores == 5
    assert len(e.events.of_kind(EventKind.TIER_RESTORE)) == 5
    plain = engine(None)  # the same pool without the tier recomputes
    evict_first(plain)
    assert serve(plain, FIRST) == (first, 0)
    assert e.kv_cache_manager.num_free_blocks == e.num_blocks


@pytest.mark.parametrize("damage", ["truncated", "missing", "longer"])
def test_an_unreadable_file_is_recomputed_and_said(tmp_path, damage):
    e = engine(tmp_path)
    first = evict_first(e)
    tier = tier_of(e)
    victim = tier.root / f"{block_hash(None, FIRST[:4]).hex()}.kv"  # FIRST's first block: nothing restored
    assert victim in tier.files()
    if damage == "missing":
        victim.unlink()
    elif damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:-3])
    else:
        victim.write_bytes(victim.read_bytes() + b"x")
    again, cached = serve(e, FIRST)
    assert again == first
    assert cached == 0 and tier.stats.unreadable == 1 and tier.stats.restores == 0
    (fallback,) = e.events.of_kind(EventKind.TIER_FALLBACK)
    assert "unreadable" in fallback.detail and victim.name in fallback.detail


@pytest.mark.parametrize(("capacity_blocks", "found"), [(2, 4), (6, 20)])
def test_a_full_tier_drops_tails_and_keeps_the_start_of_a_prompt(tmp_path, capacity_blocks, found):
    block_bytes = tier_of(engine(tmp_path)).block_bytes
    e = engine(tmp_path, capacity=capacity_blocks * block_bytes)
    evict_first(e)
    tier = tier_of(e)
    assert tier.num_blocks == capacity_blocks and tier.nbytes <= tier.capacity_bytes
    assert tier.stats.dropped == tier.stats.writes - capacity_blocks > 0 and tier.stats.full == 0
    assert len(e.events.of_kind(EventKind.TIER_DROP)) == tier.stats.dropped
    assert not e.events.of_kind(EventKind.TIER_FALLBACK)
    # The pool evicts a prompt's tail before its head, and the tier drops the oldest tail first: what stays of
    # OTHERS[0] is its first blocks (its later ones made room), reached from its first block. Allocating the
    # request evicts more blocks into the full tier: the blocks it is about to restore are never dropped for them.
    tokens, cached = serve(e, OTHERS[0])
    assert tokens == reference(OTHERS[0], PARAMS.max_new_tokens)
    assert cached == found and tier.stats.restores == found // 4


def test_the_tier_never_drops_a_block_whose_child_it_keeps(tmp_path):
    e = engine(tmp_path)
    tier = tier_of(e)
    tier.capacity_bytes = 2 * tier.block_bytes
    chain, parent = [], None
    for i in range(3):
        tokens = FIRST[4 * i : 4 * i + 4]
        chain.append(CachedBlock(block_hash(parent, tokens), tuple(tokens), parent, depth=i))
        parent = chain[-1].block_hash
    tier.save(0, chain[0])
    tier.save(1, chain[1])
    assert tier.droppable() == [chain[1].block_hash]  # the head is kept while its child is
    tier.save(2, chain[2])  # would need its parent dropped, or the head it continues: not kept
    assert [h in tier for h in (b.block_hash for b in chain)] == [True, True, False]
    assert tier.stats.full == 1 and tier.stats.dropped == 0
    other = CachedBlock(block_hash(None, OTHERS[0][:4]), tuple(OTHERS[0][:4]))
    tier.pinned.add(chain[1].block_hash)  # about to be restored
    tier.save(3, other)
    assert other.block_hash not in tier and tier.stats.full == 2
    tier.pinned.clear()
    tier.save(3, other)  # the tail goes; the head stays, reachable
    assert [h in tier for h in (chain[0].block_hash, chain[1].block_hash, other.block_hash)] == [True, False, True]
    assert tier.stats.dropped == 1 and not (tier.root / f"{chain[1].block_hash.hex()}.kv").exists()


def test_a_preempted_sequence_restores_its_blocks_from_the_tier(tmp_path):
    """Recompute preemption: the victim's full blocks are cached when computed, so the pool evicts them into the
    tier, and readmission reads them back instead of recomputing; tokens equal serving each request alone."""
    params = SamplingParams(max_new_tokens=12, stop_on_eos=False)
    prompts = [list(range(3 + 19 * k, 16 + 19 * k)) for k in range(3)]  # 13 tokens; 25 with the answer: 7 blocks
    e = engine(tmp_path, num_blocks=12)  # too few for all three at once
    request_ids = run_all(e, prompts, params)
    for request_id, prompt in zip(request_ids, prompts, strict=True):
        assert e.requests[request_id].output().tokens == reference(prompt, params.max_new_tokens)
    preempted = {ev.seq_id for ev in e.events.of_kind(EventKind.PREEMPT)}
    restored = [ev.seq_id for ev in e.events.of_kind(EventKind.PREFIX_HIT) if "disk tier" in ev.detail]
    assert preempted and restored and set(restored) <= preempted
    assert tier_of(e).stats.restores == len(restored) == len(e.events.of_kind(EventKind.TIER_RESTORE))


def test_the_files_go_when_the_tier_closes_or_the_engine_is_collected(tmp_path):
    e = engine(tmp_path)
    evict_first(e)
    tier = tier_of(e)
    root = tier.root
    assert root.parent == tmp_path and any(root.iterdir())
    tier.close()
    assert not root.exists() and tier.num_blocks == 0
    e = engine(tmp_path)
    evict_first(e)
    root = tier_of(e).root
    del e
    gc.collect()
    assert not root.exists()


def test_speculation_over_restored_blocks_gives_the_plain_tokens(tmp_path):
    """Restored blocks are prompt blocks, cached: a rollback of rejected drafts never reaches them."""
    e = engine(tmp_path, speculation=SpeculativeConfig(4))
    repeat = FIRST[:8] * 2 + FIRST[:5]  # a prompt that repeats itself: drafts are found and some rejected
    for prompt in (repeat, *OTHERS):
        serve(e, prompt)
    tokens, cached = serve(e, repeat)
    assert tokens == reference(repeat, PARAMS.max_new_tokens) and cached == 20
    assert tier_of(e).stats.restores == 5
    counts = e.speculator.counts[max(e.requests)]
    assert counts.drafted > counts.accepted  # drafts were checked over the restored blocks, and some rolled back


def test_the_tier_is_refused_where_it_is_not_right(tmp_path):
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        EngineConfig(disk_tier=tmp_path)
    with pytest.raises(ValueError, match="radix"):
        EngineConfig(disk_tier=tmp_path, enable_prefix_caching=True, prefix_index="radix")
    with pytest.raises(ValueError, match="disk_tier_bytes"):
        EngineConfig(disk_tier=tmp_path, enable_prefix_caching=True, disk_tier_bytes=0)
    config = EngineConfig(disk_tier=tmp_path, enable_prefix_caching=True)
    with pytest.raises(ValueError, match="block_manager"):
        LLMEngine(packed_model(), config, block_manager=KVCacheManager)
    assert EngineConfig().disk_tier is None  # off by default


class TierEngineMachine(EngineMachine):
    """The engine's state machine (random requests, steps, aborts) over a small pool with the disk tier on: the
    block pool's invariants after every step, every request's tokens equal to serving it alone."""

    @initialize(
        num_blocks=st.integers(3, 16),
        block_size=st.sampled_from([1, 2, 4]),
        budget=st.integers(1, 40),
        max_num_seqs=st.integers(1, 6),
        capacity_blocks=st.integers(1, 40),
    )
    def make_engine(self, num_blocks, block_size, budget, max_num_seqs, capacity_blocks):
        # The tiny model's block: 2 (K, V) x layers x block_size x kv_heads x head_dim x 4 bytes.
        mc = packed_model().config
        block_bytes = 2 * mc.num_layers * block_size * mc.num_kv_heads * mc.head_dim * 4
        config = EngineConfig(
            block_size=block_size,
            num_blocks=num_blocks,
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            enable_prefix_caching=True,
            disk_tier=self.tmp,
            disk_tier_bytes=capacity_blocks * block_bytes,
        )
        self.engine = LLMEngine(packed_model(self.fast_paths), config)
        self.added = {}
        self.aborted = set()

    @invariant()
    def the_tier_keeps_within_its_bytes_one_file_a_block(self):
        tier = tier_of(self.engine)
        assert tier.nbytes <= tier.capacity_bytes and not tier.pinned
        assert sorted(tier.files()) == sorted(tier.root.iterdir())
        assert tier.stats.writes - tier.stats.dropped - tier.stats.unreadable == tier.num_blocks

    def teardown(self):
        try:
            super().teardown()
        finally:
            tier_of(self.engine).close()


TierEngineMachine.TestCase.settings = settings(EngineMachine.TestCase.settings, max_examples=40, stateful_step_count=30)


@pytest.fixture
def tier_machine(tmp_path):
    TierEngineMachine.tmp = tmp_path
    return TierEngineMachine.TestCase


def test_tier_engine_state_machine(tier_machine):
    tier_machine().runTest()
    assert not [p for p in TierEngineMachine.tmp.iterdir() if any(p.iterdir())]  # every tier closed its files
