"""Lesson 13's claims on SmolLM2 (float32), recomputed here from the tokens alone and checked on the engine.

The lesson prints how many prompt tokens a hit reused (from the engine's ``num_cached_tokens``);
here the same figure is computed independently from the two prompts (whole blocks of the shared
opening, never the block of the last token) and compared with the engine and the simulator.
Exact token equality between a hit and a miss is checked here, in float32, not in the lesson.
"""

from __future__ import annotations

import pytest

from kvcourse.kernels import (
    LIBRARY_QUESTIONS,
    LIBRARY_SYSTEM_PROMPT,
    EngineConfig,
    EventKind,
    LLMEngine,
    SamplingParams,
)
from kvcourse.simulators.prefix_cache import PrefixCache, PrefixCacheConfig

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

BLOCK_SIZE = 16  # the lesson's block size
EDITS = {"near the start": ("You are", "You're"), "near the end": ("calm.", "kind.")}  # the lesson's edits
SHOPS = {  # the lesson's three short system prompts and their questions
    "library": (
        "You are the help desk of a public library. Answer politely, in one short sentence.",
        "When do you open?",
    ),
    "bakery": ("You take orders for a small bakery. Answer politely, in one short sentence.", "Do you sell rye bread?"),
    "museum": (
        "You are the guide of a science museum. Answer politely, in one short sentence.",
        "Where is the dinosaur?",
    ),
}
VISITS = ["library", "bakery", "library", "museum", "bakery"]


def expected_reuse(cached_prompt: list[int], prompt: list[int], block_size: int = BLOCK_SIZE) -> int:
    """Tokens a prefix cache holding ``cached_prompt`` can give ``prompt``: whole shared blocks, never the last."""
    common = 0
    while common < min(len(cached_prompt), len(prompt)) and cached_prompt[common] == prompt[common]:
        common += 1
    return block_size * min(common // block_size, (len(prompt) - 1) // block_size)


@pytest.fixture(scope="module")
def lesson(real_model, smol_model):
    """The lesson's model (SmolLM2, converted once per session) and its encode(chat text) pipeline."""
    tokenizer = real_model[1]

    def encode(system: str, question: str) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return smol_model, encode


def _cached_engine(model, num_blocks=128) -> LLMEngine:
    return LLMEngine(model, EngineConfig(block_size=BLOCK_SIZE, num_blocks=num_blocks, enable_prefix_caching=True))


@pytest.mark.slow
def test_13_the_tokens_a_hit_skips_are_the_whole_blocks_of_the_shared_opening(lesson):
    model, encode = lesson
    first, second = (encode(LIBRARY_SYSTEM_PROMPT, q) for q in LIBRARY_QUESTIONS[:2])
    engine = _cached_engine(model)
    out_first, out_second = (engine.generate([p], SamplingParams(max_new_tokens=8))[0] for p in (first, second))
    skipped = expected_reuse(first, second)
    assert out_first.num_cached_tokens == 0
    assert out_second.num_cached_tokens == skipped == len(engine.events.of_kind(EventKind.PREFIX_HIT)) * BLOCK_SIZE
    assert (
        300 < skipped < len(second) and len(second) - skipped < 2 * BLOCK_SIZE
    )  # several hundred tokens, a short tail
    sim = PrefixCache(PrefixCacheConfig((tuple(first), tuple(second)), BLOCK_SIZE, engine.num_blocks), 2)
    assert sim.results[1].num_cached_tokens == skipped


@pytest.mark.slow
def test_13_a_hit_and_a_miss_write_the_same_tokens_in_float32(lesson):
    model, encode = lesson
    readers = [encode(LIBRARY_SYSTEM_PROMPT, q) for q in LIBRARY_QUESTIONS]
    cached = _cached_engine(model)
    plain = LLMEngine(model, EngineConfig(block_size=BLOCK_SIZE, num_blocks=128))
    params = SamplingParams(max_new_tokens=8)
    hits = [cached.generate([p], params)[0] for p in readers]
    misses = plain.generate(readers[1:], params)
    assert all(h.num_cached_tokens > 0 for h in hits[1:]) and all(m.num_cached_tokens == 0 for m in misses)
    assert [h.tokens for h in hits[1:]] == [m.tokens for m in misses]


@pytest.mark.slow
def test_13_one_token_near_the_start_breaks_everything_near_the_end_almost_nothing(lesson):
    model, encode = lesson
    first = encode(LIBRARY_SYSTEM_PROMPT, LIBRARY_QUESTIONS[0])
    engine = _cached_engine(model)
    engine.generate([first], SamplingParams(max_new_tokens=1))
    reused = {}
    for where, (old, new) in EDITS.items():
        edited = encode(LIBRARY_SYSTEM_PROMPT.replace(old, new, 1), LIBRARY_QUESTIONS[0])
        assert len(edited) == len(first) and sum(a != b for a, b in zip(first, edited, strict=True)) == 1
        reused[where] = engine.generate([edited], SamplingParams(max_new_tokens=1))[0].num_cached_tokens
        assert reused[where] == expected_reuse(first, edited)
    assert reused["near the start"] == 0 and reused["near the end"] >= len(first) - 2 * BLOCK_SIZE


@pytest.mark.slow
def test_13_the_five_block_pool_evicts_the_bakery_and_the_simulator_agrees(lesson):
    model, encode = lesson
    prompts = [encode(*SHOPS[name]) for name in VISITS]
    engine = _cached_engine(model, num_blocks=5)
    outs = [engine.generate([p], SamplingParams(max_new_tokens=1))[0] for p in prompts]
    holder, evicted = {}, []
    for e in engine.events.events:
        if e.kind is EventKind.CACHE_INSERT:
            holder[e.block_id] = e.seq_id
        elif e.kind is EventKind.EVICT:
            evicted.append((e.seq_id, holder.pop(e.block_id)))
    assert [o.num_cached_tokens for o in outs] == [0, 0, 2 * BLOCK_SIZE, 0, 0]
    assert evicted == [(3, 1), (3, 1), (4, 0), (4, 0)]  # the museum takes the bakery's, the bakery the library's
    sim = PrefixCache(PrefixCacheConfig(tuple(map(tuple, prompts)), BLOCK_SIZE, 5), len(prompts))
    assert [r.num_cached_tokens for r in sim.results] == [o.num_cached_tokens for o in outs]
    assert [(r.number, o[0]) for r in sim.results for o in r.evicted] == evicted


@pytest.mark.slow
def test_13_the_eviction_tables_read_the_event_log_as_the_lesson_prints_it(lesson):
    from kvcourse.kernels.measure.prefix_evictions import eviction_queue, evictions, visit_table

    model, encode = lesson
    engine = _cached_engine(model, num_blocks=5)
    outs = [engine.generate([encode(*SHOPS[name])], SamplingParams(max_new_tokens=1))[0] for name in VISITS]
    evicted = evictions(engine, VISITS)
    assert list(zip(evicted["taken by visit"], evicted["held the prefix of"], strict=True)) == [
        (4, "bakery"),
        (4, "bakery"),
        (5, "library"),
        (5, "library"),
    ]
    table = visit_table(VISITS, outs, evicted)
    assert list(table["tokens reused"]) == [0, 0, 2 * BLOCK_SIZE, 0, 0]
    assert table.loc[1, "evicted"] == "nothing" and "bakery, visit 2" in table.loc[4, "evicted"]
    assert [entry.split(" (")[1] for entry in eviction_queue(engine, VISITS)] == [
        "museum)",
        "museum)",
        "bakery)",
        "bakery)",
    ]


def test_13_a_reused_token_costs_about_one_percent_of_a_computed_one():
    """Cell 13-31: the whole prefill's saving (about 94 %) is not a reused token's cost (under 2 % of a computed one).

    The lesson's counts: a 473-token prompt, 25 tokens computed on the hit (tests above check them on SmolLM2).
    """
    from kvcourse.kernels import MODEL_CONFIGS, costs

    config, length, computed = MODEL_CONFIGS["smollm2-135m"], 473, 25
    miss = costs.forward_flops(config, length, length, num_logits=1)
    hit = costs.forward_flops(config, computed, length, num_logits=1)
    per_reused = (hit - costs.forward_flops(config, computed, computed, num_logits=1)) / (length - computed)
    assert 0.93 < 1 - hit / miss < 0.95
    assert 0.005 < per_reused / (miss / length) < 0.02
