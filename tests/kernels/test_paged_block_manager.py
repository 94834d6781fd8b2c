"""Block pool and KV-cache manager: unit tests and a 10,000-operation random walk (lessons 10-13).

Invariant checked after every operation, stated precisely: for every physical block,
``ref_count == number of live block tables that contain it`` (the prefix cache holds no
references); a block with reference count 0 sits in the pool's one free queue exactly once,
and no used block does; ``num_free_blocks + num_used_blocks == num_blocks``. A simulated
pool stores token ids in place of K/V, so every computed token of every live sequence must be
found at its slot: sharing and copy-on-write never corrupt another sequence's data.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.block_pool import BlockPool, OutOfBlocksError, block_hash
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

BS = 4


def make_seq(seq_id: int, tokens: list[int], block_size: int = BS) -> Sequence:
    return Sequence(seq_id, list(tokens), len(tokens), block_size)


class PoolSim:
    """A pool whose slots hold token ids instead of K/V, to check what attention would read."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.slots: list[int | None] = [None] * (num_blocks * block_size)
        self.block_size = block_size

    def compute(self, seq: Sequence) -> None:
        for pos in range(seq.num_computed_tokens, seq.num_tokens):
            self.slots[seq.slot(pos)] = seq.token_ids[pos]
        seq.num_computed_tokens = seq.num_tokens

    def copy(self, copies) -> None:
        for c in copies:
            bs = self.block_size
            self.slots[c.dst * bs : (c.dst + 1) * bs] = self.slots[c.src * bs : (c.src + 1) * bs]

    def check(self, seq: Sequence) -> None:
        for pos in range(seq.num_computed_tokens):
            assert self.slots[seq.slot(pos)] == seq.token_ids[pos], (seq.seq_id, pos)


def check_invariants(bm: KVCacheManager, seqs: list[Sequence]) -> None:
    pool = bm.block_pool
    held = [0] * bm.num_blocks
    for s in seqs:
        assert len(set(s.block_table)) == len(s.block_table)
        for b in s.block_table:
            held[b] += 1
    pool.check_invariants(held)
    free = pool.free_block_ids
    assert set(free) == {b for b in range(bm.num_blocks) if held[b] == 0}
    assert len(free) == len(set(free))  # no block listed twice
    assert bm.num_free_blocks + bm.num_used_blocks == bm.num_blocks
    assert bm.num_used_blocks == sum(1 for h in held if h > 0)


def random_walk(seed: int, num_ops: int, num_blocks: int = 24, prefix: bool = True) -> KVCacheManager:
    rng = random.Random(seed)
    bm = KVCacheManager(num_blocks, BS, enable_prefix_caching=prefix)
    pool = PoolSim(num_blocks, BS)
    live: list[Sequence] = []
    next_id = 0
    for _ in range(num_ops):
        op = rng.choice(["admit", "admit", "append", "append", "append", "fork", "free", "preempt"])
        if op == "admit":
            # a tiny vocabulary and shared stems make prefix hits and collisions of content common
            stem = [1, 2, 3, 4, 5, 6, 7, 8][: rng.randrange(0, 9)]
            seq = make_seq(next_id, stem + [rng.randrange(3) for _ in range(rng.randrange(1, 10))])
            next_id += 1
            needed = bm.num_blocks_to_allocate(seq)
            if bm.can_allocate(seq):
                free_before = bm.num_free_blocks
                bm.allocate(seq)
                assert bm.num_free_blocks == free_before - needed  # the ask predicted the do
                pool.check(seq)  # prefix hits must hold exactly this sequence's tokens
                pool.compute(seq)
                bm.cache_full_blocks(seq)
                live.append(seq)
            else:
                assert needed > bm.num_free_blocks
        elif op == "append" and live:
            seq = rng.choice(live)
            seq.token_ids.append(rng.randrange(3))
            if bm.can_append(seq):
                needed, free_before = bm.num_blocks_to_append(seq), bm.num_free_blocks
                pool.copy(bm.append_slots(seq))
                assert bm.num_free_blocks == free_before - needed
                pool.compute(seq)
                bm.cache_full_blocks(seq)
            else:
                seq.token_ids.pop()
        elif op == "fork" and live:
            parent = rng.choice(live)
            child = Sequence(next_id, list(parent.token_ids), parent.num_prompt_tokens, BS)
            next_id += 1
            bm.fork(parent, child)
            live.append(child)
        elif op in ("free", "preempt") and live:
            seq = live.pop(rng.randrange(len(live)))
            bm.free(seq)
            assert seq.block_table == [] and seq.num_computed_tokens == 0
        check_invariants(bm, live)
        for s in live:
            pool.check(s)
    for s in live:
        bm.free(s)
    check_invariants(bm, [])
    assert bm.num_free_blocks == bm.num_blocks  # no leaked block
    return bm


def test_random_walk_10000_ops_with_prefix_cache():
    bm = random_walk(seed=0, num_ops=10_000)
    counts = bm.events.counts()
    # the walk must actually exercise the interesting paths, or it proves nothing
    for kind in (EventKind.PREFIX_HIT, EventKind.EVICT, EventKind.COPY_ON_WRITE, EventKind.FORK):
        assert counts.get(kind.value, 0) > 10, (kind, counts)


def test_random_walk_without_prefix_cache():
    random_walk(seed=1, num_ops=3_000, prefix=False)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_blocks=st.integers(4, 40))
def test_random_walks_hypothesis(seed, num_blocks):
    random_walk(seed, num_ops=300, num_blocks=num_blocks)


def test_block_pool_free_plus_used_and_errors():
    alloc = BlockPool(3)
    blocks = [alloc.allocate() for _ in range(3)]
    assert alloc.num_used_blocks == 3 and alloc.num_free_blocks == 0
    with pytest.raises(OutOfBlocksError):
        alloc.allocate()
    alloc.hold(blocks[0])
    alloc.release(blocks[0])
    assert alloc.num_used_blocks == 3
    for b in blocks:
        alloc.release(b)
    assert alloc.num_free_blocks == 3
    with pytest.raises(ValueError):
        alloc.release(blocks[0])
    with pytest.raises(ValueError):
        alloc.hold(blocks[0])


def test_fork_then_diverge_copies_only_the_shared_partial_block():
    bm = KVCacheManager(16, BS)
    parent = make_seq(0, list(range(10)))  # blocks: [0..3] [4..7] [8, 9]
    bm.allocate(parent)
    parent.num_computed_tokens = parent.num_tokens
    child = make_seq(1, list(range(10)))
    bm.fork(parent, child)
    assert bm.num_used_blocks == 3  # shared, not copied
    child.token_ids.append(99)
    copies = bm.append_slots(child)
    assert len(copies) == 1 and copies[0].src == parent.block_table[2]
    assert child.block_table[:2] == parent.block_table[:2]
    assert child.block_table[2] != parent.block_table[2]
    parent.token_ids.append(42)
    assert bm.append_slots(parent) == []  # now the sole owner: writes in place
    assert bm.num_used_blocks == 4


def test_prefix_hit_leaves_the_last_token_to_compute():
    """Regression: a fully cached prompt must still compute its last token (and own its block)."""
    bm = KVCacheManager(16, BS, enable_prefix_caching=True)
    first = make_seq(0, list(range(8)))  # exactly two full blocks
    bm.allocate(first)
    first.num_computed_tokens = 8
    bm.cache_full_blocks(first)
    second = make_seq(1, list(range(8)))
    bm.allocate(second)
    assert second.num_cached_tokens == 4 and second.num_uncomputed_tokens == 4
    assert second.block_table[0] == first.block_table[0]
    assert second.block_table[1] != first.block_table[1]


def test_hash_chain_depends_on_the_parent():
    a = block_hash(None, [1, 2, 3, 4])
    assert block_hash(a, [5, 6, 7, 8]) != block_hash(None, [5, 6, 7, 8])
    assert block_hash(None, [1, 2, 3, 4]) == a  # stable: no salted hash()


def test_token_guard_rejects_a_colliding_hash():
    bm = KVCacheManager(8, BS, enable_prefix_caching=True)
    seq = make_seq(0, [1, 2, 3, 4, 5])
    bm.allocate(seq)
    seq.num_computed_tokens = 5
    bm.cache_full_blocks(seq)
    # forge a collision: the same hash now claims different tokens
    h = seq.block_hashes[0]
    assert bm.block_pool.lookup(h, [1, 2, 3, 4]) == seq.block_table[0]
    assert bm.block_pool.lookup(h, [9, 9, 9, 9]) is None


def test_lru_evicts_least_recently_used_unreferenced_block():
    bm = KVCacheManager(4, BS, enable_prefix_caching=True)
    seqs = []
    for i in range(2):
        s = make_seq(i, [10 * i + t for t in range(5)])  # one full block + one partial
        bm.allocate(s)
        s.num_computed_tokens = 5
        bm.cache_full_blocks(s)
        seqs.append(s)
    cached_first = seqs[0].block_table[0]
    for s in seqs:
        bm.free(s)
    assert bm.num_free_blocks == 4
    big = make_seq(9, list(range(100, 113)))  # 4 blocks: takes the 2 free, then evicts 2
    bm.allocate(big)
    evicted = [e.block_id for e in bm.events.of_kind(EventKind.EVICT)]
    assert evicted[0] == cached_first


def test_free_queue_hands_out_uncached_blocks_before_cached_ones():
    """One queue in eviction order: a freed plain block goes first, cached blocks wait, oldest first."""
    pool = BlockPool(4)
    a, b, c, d = (pool.allocate() for _ in range(4))
    pool.cache_block(a, block_hash(None, [1]), [1])
    pool.cache_block(b, block_hash(None, [2]), [2])
    for block_id in (a, c, b, d):
        pool.release(block_id)
    assert pool.free_block_ids == [d, c, a, b]
    assert [pool.allocate() for _ in range(3)] == [d, c, a]
    assert pool.num_cached_blocks == 1 and pool.lookup(block_hash(None, [2]), [2]) == b
