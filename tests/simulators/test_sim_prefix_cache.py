"""Lesson 13's simulator: the prefix cache as a pure model, as a view, and against LLMEngine.

The model walks each prompt's chain of block names on the engine's own BlockPool; here its hits,
its evictions and its refusals must be exactly the engine's, block id for block id, for requests
served one after another (the engine with ``max_new_tokens=1``).
"""

from __future__ import annotations

import random

import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import EngineConfig, EventKind, LLMEngine, SamplingParams, block_hash
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.prefix_cache import (
    EXAMPLE_PROMPTS,
    MAX_DRAWN_POOL,
    MAX_REQUESTS,
    PrefixCache,
    PrefixCacheConfig,
    PrefixCacheView,
    full_block_hashes,
    words_to_ids,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def _serve(prompts, block_size=4, num_blocks=24, num_served=None) -> PrefixCache:
    config = PrefixCacheConfig(tuple(tuple(p) for p in prompts), block_size, num_blocks)
    return PrefixCache(config, len(prompts) if num_served is None else num_served)


# -- the model -----------------------------------------------------------------------------------
def test_block_names_chain_the_parent_and_skip_the_partial_block():
    ids = list(range(10))
    names = full_block_hashes(ids, 4)
    assert len(names) == 2  # 10 tokens: two full blocks of 4, two tokens left over
    assert names[0] == block_hash(None, [0, 1, 2, 3])
    assert names[1] == block_hash(names[0], [4, 5, 6, 7]) != block_hash(None, [4, 5, 6, 7])


def test_words_become_equal_ids_for_equal_words():
    a, b = words_to_ids(["the cat sat", "a cat sat on the mat"])
    assert a == [0, 1, 2] and b[1:3] == [1, 2] and b[4] == a[0]


def test_the_example_prompts_hit_where_the_chain_matches():
    m = _serve(words_to_ids(EXAMPLE_PROMPTS))
    first, second, word_in_front, last_word = m.results
    assert first.num_cached_tokens == 0 and first.num_computed_tokens == 19
    assert [b.hit for b in second.blocks] == [True, True, True, False, False]  # differ in block 3 (word 13)
    assert second.num_cached_tokens == 12 and second.hit_block_ids == first.hit_block_ids + [
        b.block_id for b in first.blocks[:3]
    ]
    assert word_in_front.num_cached_tokens == 0  # one word in front shifts and renames everything
    assert last_word.num_cached_tokens == 8  # "!" in block 2: blocks 0 and 1 still hit
    assert m.num_cached_tokens == 20 and m.num_prompt_tokens == 76 and m.num_computed_tokens == 56


def test_a_prompt_seen_before_still_computes_the_block_of_its_last_token():
    m = _serve([list(range(8)), list(range(8)), list(range(9))])
    assert m.results[1].num_cached_tokens == 4  # two full blocks, but the second holds the last token
    assert m.results[2].num_cached_tokens == 8  # one more token: both full blocks end before it


def test_partial_blocks_are_never_named_or_cached():
    m = _serve([list(range(6)), list(range(6)) + [50, 51]])
    assert [b.block_hash is None for b in m.results[0].blocks] == [False, True]
    assert m.results[1].num_cached_tokens == 4
    assert sum(b.origin is not None for b in m.pool_blocks()) == 2  # block 0 and request 2's block 1


def test_least_recently_used_blocks_are_evicted_first_and_tails_before_heads():
    lib, bakery, museum = ([k, k + 1, k + 2, k + 3, k + 4, k + 5, k + 6, k + 7, 99] for k in (0, 10, 20))
    m = _serve([lib, bakery, lib, museum, bakery], block_size=4, num_blocks=5)
    assert [r.num_cached_tokens for r in m.results] == [0, 0, 8, 0, 0]
    assert m.results[3].evicted == ((1, 1), (1, 0))  # the bakery's: idle longest; its tail first
    assert m.results[4].evicted == ((0, 1), (0, 0))  # then the library's, now older than the museum's
    assert m.evicted_by == {(1, 1): 3, (1, 0): 3, (0, 1): 4, (0, 0): 4}
    ranks = {b.eviction_rank: b.origin for b in m.pool_blocks() if b.origin is not None}
    assert ranks == {1: (3, 1), 2: (3, 0), 3: (4, 1), 4: (4, 0)}  # the bakery's return cached its own


def test_a_request_longer_than_the_pool_is_refused_and_changes_nothing():
    m = _serve([list(range(8)), list(range(20)), list(range(8)) + [40]], block_size=4, num_blocks=5)
    refused = m.results[1]
    assert refused.refusal and "need 6 blocks" in refused.refusal and refused.blocks == ()
    assert refused.num_computed_tokens == 0 and m.results[2].num_cached_tokens == 8


def test_step_serves_one_at_a_time_and_reset_forgets_the_cache():
    m = _serve(words_to_ids(EXAMPLE_PROMPTS[:2]), num_served=0)
    assert m.num_served == 0 and not m.done
    m.step()
    assert m.step().num_cached_tokens == 12 and m.done
    with pytest.raises(InvalidInput, match="Reset"):
        m.step()
    m.reset()
    assert m.num_served == 0 and m.pool.num_cached_blocks == 0


@pytest.mark.parametrize(
    "prompts, block_size, num_blocks, name",
    [
        ((), 4, 8, "between 1 and"),
        (((1,),) * (MAX_REQUESTS + 1), 4, 8, "between 1 and"),
        (((1, 2), ()), 4, 8, "Request 2's prompt is empty"),
        (((1, -2),), 4, 8, "whole numbers"),
        (((1, True),), 4, 8, "whole numbers"),
        (((1, 2.5),), 4, 8, "whole numbers"),
        (((1,),), 0, 8, "Block size"),
        (((1,),), 2.5, 8, "Block size"),
        (((1,),), 4, 0, "Pool size"),
        (((1,),), 4, 10**6, "Pool size"),
    ],
)
def test_invalid_inputs_name_the_control(prompts, block_size, num_blocks, name):
    with pytest.raises(InvalidInput, match=name):
        PrefixCacheConfig(prompts, block_size, num_blocks)


# -- the view ------------------------------------------------------------------------------------
def test_view_serves_every_prompt_and_reports_the_last():
    view = PrefixCacheView()
    assert view.error is None and shows_png(view)
    assert "Request 4 of 4" in view.message.value and "<b>2 hit</b>" in view.message.value
    requests_ax, pool_ax = view.axes
    assert "20 of 76 prompt tokens reused" in requests_ax.get_title()
    assert "after request 4" in pool_ax.get_title()


def test_every_control_changes_the_status_and_the_figure_stays():
    view = PrefixCacheView()
    figure, axes = view.figure, list(view.axes)
    changes = {
        "prompt_3": EXAMPLE_PROMPTS[0].replace("open", "close"),
        "block_size": 2,
        "num_blocks": 12,
        "prompt_0": "a completely different opening",
    }
    assert_each_control_redraws(view, changes)
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2
    assert "evicted" in view.message.value  # 12 blocks of 2 tokens: request 4 reclaims cached blocks


def test_step_serves_the_next_request_and_reset_returns_to_the_start():
    view = PrefixCacheView(num_served=1)
    assert "Request 1 of 4" in view.message.value and "Serve next request" in view.message.value
    view.step_button.click()
    assert view.model.num_served == 2 and "<b>3 hit</b>" in view.message.value
    view.controls["block_size"].value = 2  # a rebuild keeps the requests served so far
    assert view.model.num_served == 2
    view.step_button.click()
    view.step_button.click()
    view.step_button.click()  # nothing left to serve: a message, not a traceback
    assert view.error is None and "press Reset" in view.message.value  # information, not an input error
    view.reset_button.click()
    assert view.error is None and view.model.num_served == 1 and view.values["block_size"] == 4


@pytest.mark.parametrize(
    "name, bad", [("block_size", 0), ("num_blocks", 0), ("num_blocks", 10**7), ("prompt_1", "   ")]
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(PrefixCacheView(), name, bad)


def test_a_tokenizer_that_fails_shows_a_message():
    def fussy(text: str) -> list[int]:
        if "forbidden" in text:
            raise ValueError("cannot read that")
        return [len(word) for word in text.split()]

    view = PrefixCacheView(["one two three four five", "one two three four six"], tokenize=fussy)
    assert view.error is None and view.model.results[1].num_cached_tokens == 4
    view.controls["prompt_1"].value = "a forbidden word"
    assert view.error is not None and "Request 2: the tokenizer could not read" in view.message.value


def test_long_prompts_hide_the_labels_and_huge_pools_are_summarised():
    long = " ".join(f"w{i}" for i in range(200))
    view = PrefixCacheView([long, long + " more"], block_size=4, num_blocks=MAX_DRAWN_POOL + 1)
    assert "hashes hidden" in view.axes[0].get_xlabel()
    assert any("too many to draw" in t.get_text() for t in view.axes[1].texts)


def test_a_refusal_is_shown_in_the_status():
    view = PrefixCacheView(["a b c d e f g h i j"], block_size=2, num_blocks=4)
    assert view.error is None and "<b>refused</b>" in view.message.value and "could never fit" in view.message.value


# -- the simulator against the engine ------------------------------------------------------------
def _engine_story(model, prompts, block_size, num_blocks):
    """Serve the prompts one after another; per request: cached tokens, hit blocks, evicted blocks, refused."""
    engine = LLMEngine(model, EngineConfig(block_size=block_size, num_blocks=num_blocks, enable_prefix_caching=True))
    story = []
    for prompt in prompts:
        seen = len(engine.events.events)
        out = engine.generate([prompt], SamplingParams(max_new_tokens=1))[0]
        new = list(engine.events.events)[seen:]
        story.append(
            (
                out.num_cached_tokens,
                [e.block_id for e in new if e.kind is EventKind.PREFIX_HIT],
                [e.block_id for e in new if e.kind is EventKind.EVICT],
                out.refusal is not None,
            )
        )
    return story


def _sim_story(prompts, block_size, num_blocks):
    m = _serve(prompts, block_size, num_blocks)
    origin_block = {}  # (request, index) -> physical block, to name evicted blocks by id
    story = []
    for r in m.results:
        for b in r.blocks:
            origin_block.setdefault((r.number, b.index), b.block_id)
        story.append(
            (r.num_cached_tokens, r.hit_block_ids, [origin_block[o] for o in r.evicted], r.refusal is not None)
        )
    return story


def _random_prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    stems = [[rng.randrange(3, 96) for _ in range(rng.randrange(0, 24))] for _ in range(3)]
    prompts = []
    for _ in range(rng.randrange(3, MAX_REQUESTS + 1)):
        stem = rng.choice(stems)
        prompt = stem[: rng.randrange(len(stem) + 1)] + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.2 and prompts:
            prompt = list(rng.choice(prompts))  # the same prompt again: the last block's rule
        prompts.append(prompt)
    return prompts


SEEDS = range(12)


def test_the_random_scenarios_exercise_hits_evictions_and_refusals():
    stories = [_sim_story(_random_prompts(seed), *_sizes(seed)) for seed in SEEDS]
    requests = [r for story in stories for r in story]
    assert sum(len(r[1]) for r in requests) > 20 and sum(len(r[2]) for r in requests) > 20
    assert sum(r[3] for r in requests) > 0


def _sizes(seed: int) -> tuple[int, int]:
    rng = random.Random(1000 + seed)
    return rng.choice([2, 3, 4, 5]), rng.randrange(3, 16)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_simulator_hits_and_evicts_exactly_as_the_engine(tiny_model, seed):
    prompts, (block_size, num_blocks) = _random_prompts(seed), _sizes(seed)
    assert _sim_story(prompts, block_size, num_blocks) == _engine_story(tiny_model, prompts, block_size, num_blocks)


def test_the_library_bakery_museum_visits_agree_with_the_engine(tiny_model):
    lib, bakery, museum = ([k, k + 1, k + 2, k + 3, k + 4, k + 5, k + 6, k + 7, 90] for k in (3, 30, 60))
    prompts = [lib, bakery, lib, museum, bakery]
    story = _engine_story(tiny_model, prompts, 4, 5)
    assert story == _sim_story(prompts, 4, 5)
    assert [cached for cached, *_ in story] == [0, 0, 8, 0, 0] and len(story[3][2]) == 2
