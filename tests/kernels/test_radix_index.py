"""The radix-tree prefix index (issue 46): the tree alone, and a Hypothesis state machine over its manager.

The machine plays a model without a model: every computed token "writes its K/V" as the token id into
the slot its block table names, and block copies copy those slots. After every rule, each running
sequence must find its own tokens in the slots of its computed positions, every cached node's block must
still hold the node's tokens, the tree must hang together (every node's parent cached), reference counts
must equal the block tables that hold each block, and the block pool's own invariants must hold.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.eviction import EvictionCandidate, EvictionPolicyError
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.kernels.memory.radix_index import RadixIndex, RadixInvariantError
from kvcourse.kernels.memory.radix_manager import RadixKVCacheManager

STEMS = [[], [1, 2, 3, 1, 2], [1, 2, 3, 3], [2, 2]]  # shared beginnings that diverge inside blocks


def test_match_is_to_the_token_and_whole_blocks_walk_like_the_hash_chain():
    index = RadixIndex(4)
    index.insert([1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11, 12])  # two full blocks and a leaf of one token
    index.insert([1, 2, 3, 4, 5, 6, 0], [20, 21, 22])  # shares block 10, branches inside the second block
    index.check()
    assert sorted(index.nodes) == [10, 11, 12, 21]
    m = index.match([1, 2, 3, 4, 5, 6, 7, 8, 9, 9], limit=9)
    assert (m.blocks, m.partial_block, m.num_tokens) == ([10, 11], 12, 9)  # the answer's partial block
    m = index.match([1, 2, 3, 4, 5, 6, 0, 5, 5], limit=8)
    assert (m.blocks, m.partial_block, m.partial_len) == ([10], 21, 3)  # to the token inside a block
    m = index.match([1, 2, 3, 4, 5, 6], limit=5)  # never the last token: 5 of 6
    assert (m.blocks, m.partial_block, m.num_tokens) == ([10], 11, 5)
    assert index.match([9, 9], limit=1).num_tokens == 0


def test_a_leaf_grows_in_place_and_remove_takes_the_subtree():
    index = RadixIndex(2)
    assert [n.block_id for n in index.insert([1, 2, 3], [5, 6])[0]] == [5, 6]
    grown, covered = index.insert([1, 2, 3, 4], [5, 6])  # the same sequence computed one more token into block 6
    assert [(n.block_id, n.tokens) for n in grown] == [(6, (3, 4))] and covered == []
    index.insert([1, 2, 3, 4, 7], [5, 6, 8])
    index.check()
    assert sorted(index.remove(6)) == [6, 8]
    assert sorted(index.nodes) == [5]
    index.check()
    index.nodes[5].children[(9, 9)] = 99  # a child that is no node: the check says so
    with pytest.raises(RadixInvariantError, match="is not a node"):
        index.check()


def test_a_longer_block_covers_a_partly_filled_leaf_which_leaves_the_cache():
    index = RadixIndex(4)
    index.insert([1, 2, 3, 4, 5], [0, 1])  # an answer's last block: (5,)
    added, covered = index.insert([1, 2, 3, 4, 5, 6, 7], [0, 2])  # the next turn copied it and wrote on
    assert [n.block_id for n in added] == [2] and covered == [1]
    assert index.match([1, 2, 3, 4, 5, 6, 9], limit=6).partial_block == 2
    index.check()


def test_insert_refuses_a_table_too_short():
    with pytest.raises(ValueError, match="more than the 1 blocks"):
        RadixIndex(2).insert([1, 2, 3], [0])


class ParentFirst:
    """A policy that wants the block with cached children: the pool must refuse it while a leaf could go."""

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        return next((c.block_id for c in candidates if c.has_cached_children), candidates[0].block_id)


def test_a_policy_that_evicts_a_parent_before_a_free_leaf_is_refused():
    manager = RadixKVCacheManager(3, 2, eviction=ParentFirst())
    seq = Sequence(0, [1, 2, 3, 4, 5], 5, 2)
    manager.allocate(seq)
    seq.num_computed_tokens = 4
    manager.free(seq)  # blocks (1, 2) and (3, 4) cached, the second the first's child; one empty block
    other = Sequence(1, [7, 7, 7, 7, 7], 5, 2)
    with pytest.raises(EvictionPolicyError, match="evict from the tail"):
        manager.allocate(other)


def test_evicting_a_parent_when_no_leaf_is_free_takes_its_subtree_out_of_the_cache():
    manager = RadixKVCacheManager(5, 2)
    a, b = Sequence(0, [1, 2, 3], 3, 2), Sequence(1, [1, 2, 4, 4, 5], 5, 2)
    manager.allocate(a)
    manager.allocate(b)  # side by side: b computes its own copy of the block (1, 2)
    a.num_computed_tokens, b.num_computed_tokens = 2, 4
    manager.cache_full_blocks(a)
    manager.cache_full_blocks(b)  # b's (4, 4) hangs under a's (1, 2) in the tree
    manager.free(a)  # a's (1, 2) is free but has a cached child that b uses: not a leaf
    manager.allocate(Sequence(2, [7, 7], 2, 2))  # takes the empty block
    manager.allocate(Sequence(3, [8, 8], 2, 2))  # only (1, 2) is left: it goes, and (4, 4) leaves the cache
    assert len(manager.index) == 0
    manager.block_pool.check_invariants()
    assert manager.block_pool.ref_counts[b.block_table[1]] == 1  # still b's, only no longer cached


def test_a_partly_matched_block_is_not_copied_when_the_copy_would_not_fit():
    manager = RadixKVCacheManager(3, 2)
    first = Sequence(0, [1, 2, 3, 4, 5, 9], 6, 2)
    manager.allocate(first)
    first.num_computed_tokens = 5
    manager.free(first)  # (1, 2), (3, 4) and (5,) cached: the whole pool
    seq = Sequence(1, [1, 2, 3, 4, 5, 6], 6, 2)  # fills the pool alone: no room to hold (5,) while copying it
    assert manager.can_allocate(seq)
    manager.allocate(seq)
    assert seq.num_computed_tokens == 4 and manager.pop_copies() == []
    manager.block_pool.check_invariants([1, 1, 1])


class RadixMachine(RuleBasedStateMachine):
    """Admit, compute (prompt chunks or one generated token), fork, finish or preempt against one manager."""

    @initialize(num_blocks=st.integers(2, 14), block_size=st.sampled_from([1, 2, 3, 4]))
    def make_manager(self, num_blocks, block_size):
        self.manager = RadixKVCacheManager(num_blocks, block_size)
        self.bs = block_size
        self.slots: dict[int, dict[int, int]] = {b: {} for b in range(num_blocks)}  # block -> offset -> token
        self.running: list[Sequence] = []
        self.ids = itertools.count()

    def _copy(self, copies: list[BlockCopy]) -> None:
        sources = [dict(self.slots[c.src]) for c in copies]  # gather, then scatter: as KVPool.copy_blocks
        for c, source in zip(copies, sources, strict=True):
            self.slots[c.dst] = source

    @rule(stem=st.sampled_from(STEMS), tail=st.lists(st.integers(1, 3), min_size=1, max_size=6))
    def admit(self, stem, tail):
        seq = Sequence(next(self.ids), stem + tail, len(stem + tail), self.bs)
        if not self.manager.can_allocate(seq):
            return
        need, free = self.manager.num_blocks_to_allocate(seq), self.manager.num_free_blocks
        self.manager.allocate(seq)
        self._copy(self.manager.pop_copies())
        assert free - self.manager.num_free_blocks <= need
        assert seq.num_computed_tokens == seq.num_cached_tokens < seq.num_tokens  # the last token is computed
        self.running.append(seq)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), n=st.integers(1, 5), token=st.integers(1, 3))
    def compute(self, data, n, token):
        seq = data.draw(st.sampled_from(self.running))
        if not seq.num_uncomputed_tokens:
            seq.token_ids.append(token)  # the token sampled last step: computed now
        if not self.manager.can_append(seq):
            return
        self._copy(self.manager.append_slots(seq))
        for pos in range(seq.num_computed_tokens, seq.num_computed_tokens + min(n, seq.num_uncomputed_tokens)):
            self.slots[seq.block_table[pos // self.bs]][pos % self.bs] = seq.token_ids[pos]
            seq.num_computed_tokens += 1
        self.manager.cache_full_blocks(seq)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self.running))
        child = parent.fork(next(self.ids), list(parent.token_ids))
        self.manager.fork(parent, child)  # shares every block, a cached partly filled one included
        self.running.append(child)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        seq = data.draw(st.sampled_from(self.running))
        self.running.remove(seq)
        self.manager.free(seq)  # finished or preempted alike: its computed tokens stay cached

    @invariant()
    def tree_pool_and_slots_agree(self):
        held = [0] * self.manager.num_blocks
        for seq in self.running:
            for block_id in seq.block_table:
                held[block_id] += 1
            for pos in range(seq.num_computed_tokens):
                assert self.slots[seq.block_table[pos // self.bs]].get(pos % self.bs) == seq.token_ids[pos]
        self.manager.block_pool.check_invariants(held)  # ref counts = holders; the tree; cached blocks = nodes
        for node in self.manager.index.nodes.values():
            assert node.parent is None or node.parent in self.manager.index.nodes
            assert self.manager.block_pool.ref_counts[node.block_id] == held[node.block_id]
            slots = self.slots[node.block_id]
            assert [slots.get(i) for i in range(len(node.tokens))] == list(node.tokens)

    def teardown(self):
        for seq in list(self.running):
            self.manager.free(seq)
        assert self.manager.num_free_blocks == self.manager.num_blocks


RadixMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_radix_state_machine = RadixMachine.TestCase
