"""The engine with the radix-tree prefix index (issue 46): a multi-turn chat served token for token as without
any cache, more prompt tokens found than the hash chain finds, refusals with reasons, and random traffic."""

from __future__ import annotations

import pytest
from factories import make_tiny_model
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize
from test_engine_state_machine import EngineMachine, packed_model

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.engine.policy import LongestPrefixFirst
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.memory.radix_chat import chat_trace, serve_chat
from kvcourse.kernels.memory.radix_manager import RadixKVCacheManager

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

ANSWER = SamplingParams(max_new_tokens=4, stop_on_eos=False)


def engine(index: str | None, block_size: int = 4, num_blocks: int | None = None) -> LLMEngine:
    config = EngineConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        enable_prefix_caching=index is not None,
        prefix_index=index or "hash",
    )
    return LLMEngine(packed_model(), config)


@pytest.mark.parametrize("num_blocks", [None, 40], ids=["ample", "pressed"])
def test_a_multi_turn_chat_is_served_token_for_token_as_without_a_cache(num_blocks):
    trace = chat_trace(5, turns=(3, 6), system_len=10, user_len=(3, 9), seed=1)
    params = SamplingParams(max_new_tokens=6, stop_on_eos=False)
    served = {}
    for index in (None, "hash", "radix"):
        e = engine(index, num_blocks=num_blocks)
        served[index] = serve_chat(lambda prompts, e=e: e.generate(prompts, params), trace)
        assert e.kv_cache_manager.num_free_blocks == e.num_blocks
        if index == "radix":
            e.kv_cache_manager.block_pool.check_invariants()
            assert e.kv_cache_manager.events.of_kind(EventKind.EVICT) or num_blocks is None
    assert [t.answer for t in served["radix"]] == [t.answer for t in served[None]]
    assert [t.answer for t in served["hash"]] == [t.answer for t in served[None]]
    hash_found = [t.num_cached_tokens for t in served["hash"]]
    radix_found = [t.num_cached_tokens for t in served["radix"]]
    if num_blocks is None:  # nothing evicted: the tree finds every block the chain finds, and more
        assert all(r >= h for r, h in zip(radix_found, hash_found, strict=True))
        assert sum(radix_found) > sum(hash_found)
    # Pressed, the two evict differently (the tree keeps answers' partly filled blocks, the chain frees them
    # as empty): either may find more. Here the tokens must be equal, which they are (above).


def test_the_next_turn_finds_the_answer_in_a_partly_filled_block():
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # 10 tokens: blocks of 4, 4 and 2
    found = {}
    for index in ("hash", "radix"):
        e = engine(index)
        answer = e.generate([prompt], ANSWER)[0].tokens  # 4 tokens, the last never computed: 13 computed
        turn2 = prompt + answer + [20, 21, 22]  # 17 tokens; at most 16 may come from the cache
        out = e.generate([turn2], ANSWER)[0]
        found[index] = out.num_cached_tokens
        assert out.tokens == e.generate([turn2], ANSWER)[0].tokens
    assert found == {"hash": 12, "radix": 13}  # 3 full blocks; the tree also has the answer's 13th token


def test_a_conversation_that_branches_inside_a_block_reuses_the_shared_part_of_it():
    system = [30, 31, 32, 33, 34, 35]  # 6 tokens: a block and a half
    first, second = system + [40, 41, 42, 43], system + [50, 51, 52, 53]
    found, events = {}, {}
    for index in ("hash", "radix"):
        e = engine(index)
        e.generate([first], ANSWER)
        out = e.generate([second], ANSWER)[0]
        found[index] = out.num_cached_tokens
        assert out.tokens == engine(None).generate([second], ANSWER)[0].tokens
        events[index] = [ev.detail for ev in e.events.of_kind(EventKind.COPY_ON_WRITE)]
    assert found == {"hash": 4, "radix": 6}  # block 0, then 2 of block 1's 4 tokens
    assert events["hash"] == [] and len(events["radix"]) == 1 and "2 of 4 tokens" in events["radix"][0]


def test_radix_is_an_option_of_the_engines_own_prefix_cache():
    assert EngineConfig().prefix_index == "hash"
    assert type(engine("hash").kv_cache_manager) is KVCacheManager
    assert isinstance(engine("radix").kv_cache_manager, RadixKVCacheManager)
    with pytest.raises(ValueError, match="needs enable_prefix_caching=True"):
        EngineConfig(prefix_index="radix")
    with pytest.raises(ValueError, match="not supported with layer_windows"):
        EngineConfig(prefix_index="radix", enable_prefix_caching=True, layer_windows=(None, 8))
    with pytest.raises(ValueError, match="prefix_index must be one of"):
        EngineConfig(prefix_index="trie", enable_prefix_caching=True)
    with pytest.raises(ValueError, match="not with block_manager"):
        LLMEngine(
            make_tiny_model(),
            EngineConfig(enable_prefix_caching=True, prefix_index="radix"),
            block_manager=lambda n, bs: KVCacheManager(n, bs),
        )


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_longest_prefix_first_admits_the_longest_cached_prefix_first(index):
    base = [30, 31, 32, 33, 34, 35, 36, 37, 38, 39]
    prompts = [[60, 61, 62, 63, 64], base[:6] + [70, 71], base + [80, 81]]  # share 0, 6 and 10 tokens
    admitted, outputs = {}, {}
    for policy in (None, LongestPrefixFirst()):
        e = LLMEngine(
            packed_model(),
            EngineConfig(block_size=4, max_num_seqs=1, enable_prefix_caching=True, prefix_index=index),
            scheduling_policy=policy,
        )
        e.generate([base], ANSWER)
        start = len(e.events.of_kind(EventKind.ADMIT))
        outputs[policy is None] = [o.tokens for o in e.generate(prompts, ANSWER)]
        admitted[policy is None] = [ev.seq_id for ev in e.events.of_kind(EventKind.ADMIT)[start:]]
    assert admitted == {True: [1, 2, 3], False: [3, 2, 1]}  # first come; longest prefix first
    assert outputs[True] == outputs[False]


class RadixEngineMachine(EngineMachine):
    """The engine's state machine (random requests, steps, aborts) with the radix index always on; the block
    pool's check covers the tree too."""

    @initialize(
        num_blocks=st.integers(3, 24),
        block_size=st.sampled_from([1, 2, 4, 8]),
        budget=st.integers(1, 40),
        max_num_seqs=st.integers(1, 6),
    )
    def make_engine(self, num_blocks, block_size, budget, max_num_seqs):
        config = EngineConfig(
            block_size=block_size,
            num_blocks=num_blocks,
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            enable_prefix_caching=True,
            prefix_index="radix",
        )
        self.engine = LLMEngine(packed_model(self.fast_paths), config)
        self.added = {}
        self.aborted = set()


RadixEngineMachine.TestCase.settings = settings(
    EngineMachine.TestCase.settings, max_examples=60, stateful_step_count=30
)
test_radix_engine_state_machine = RadixEngineMachine.TestCase
