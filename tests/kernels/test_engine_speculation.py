"""N-gram speculative decoding in the engine (issue 46 item 3): drafts verified in one pass, the cache rolled back.

Greedy outputs with speculation equal plain greedy decoding token for token in float32: n-gram drafts on the tiny
model, and "oracle" drafts (the plain answer, made wrong at a chosen place) that force every case: all k accepted,
the first rejected, rollbacks across block boundaries (blocks of 4), a stop token among the accepted drafts. After
every step the pool agrees with the block tables, no draft is left on a sequence, every table holds exactly the
blocks its computed tokens fill; at the end every block is free, and nothing rejected was ever hashed into the
prefix cache. In bfloat16 the outputs are equal up to the first near-tie (ARCHITECTURE's "equality under new
shapes"): verifying k + 1 tokens changes the matrix shapes and so the rounding.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from factories import make_tiny_model
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule
from test_engine_state_machine import STEMS, EngineMachine, packed_model, reference

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine import speculation
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig, propose_ngram_drafts
from kvcourse.kernels.engine.sequence import SequenceStatus
from kvcourse.kernels.measure.agreement import all_logits

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

PROMPTS = [[5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9], [40, 41, 42, 40, 41, 42, 43]]
NEW = 24
GREEDY = SamplingParams(max_new_tokens=NEW, stop_on_eos=False)
# A near-tie in bfloat16: the plain path's top-2 logits closer than this share of the top logit's size (8 bits
# of mantissa round at 2**-8 relative; several layers of sums reach a few percent: course.exactness).
NEAR_TIE = 5e-2

_MODELS: dict[torch.dtype, object] = {}


def model(dtype: torch.dtype = torch.float32):
    if dtype not in _MODELS:
        _MODELS[dtype] = make_tiny_model("auto", dtype=dtype)
    return _MODELS[dtype]


def config(k: int | None = 4, **kw) -> EngineConfig:
    return EngineConfig(block_size=4, speculation=None if k is None else SpeculativeConfig(k), **kw)


def plain(prompts, params=GREEDY, dtype=torch.float32, **kw) -> list[list[int]]:
    return [o.tokens for o in LLMEngine(model(dtype), config(None, **kw)).generate(prompts, params)]


def check_step(engine: LLMEngine) -> None:
    """The pool agrees with the block tables; no draft is left; a decoding table holds just its computed blocks."""
    held = [0] * engine.num_blocks
    for seq in engine.scheduler.running:
        assert seq.num_draft_tokens == 0
        if seq.num_uncomputed_tokens == 1:
            assert len(seq.block_table) == ceil_div(seq.num_computed_tokens, engine.config.block_size)
        for block_id in seq.block_table:
            held[block_id] += 1
    engine.kv_cache_manager.block_pool.check_invariants(held)


def serve(engine: LLMEngine, prompts, params=GREEDY) -> list[list[int]]:
    ids = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished_requests:
        engine.step()
        check_step(engine)
    return [engine.requests[i].output().tokens for i in ids]


def oracle(answers: dict[tuple[int, ...], list[int]], wrong_at: itertools.cycle):
    """A drafter that knows the plain answers: the next k tokens of the answer, the one at ``next(wrong_at)``
    made wrong (past k: all right), so acceptance stops wherever the test wants it to."""

    def propose(token_ids, k, max_ngram=3, min_ngram=1):
        for prompt, answer in answers.items():
            if tuple(token_ids[: len(prompt)]) == prompt:
                done = len(token_ids) - len(prompt)
                drafts = list(answer[done : done + k])
                bad = next(wrong_at)
                if bad < len(drafts):
                    drafts[bad] = (drafts[bad] + 1) % 64
                return drafts
        return []

    return propose


def test_ngram_drafts_take_the_longest_recurring_suffix_and_its_latest_occurrence():
    assert propose_ngram_drafts([1, 2, 3, 4, 9, 1, 2], k=2) == [3, 4]
    assert propose_ngram_drafts([7, 2, 5, 1, 2, 6, 8, 1, 2], k=3) == [6, 8, 1]  # the latest "1 2"
    assert propose_ngram_drafts([1, 2, 3, 9, 2, 3, 7, 5, 2, 3], k=1, max_ngram=3) == [7]  # "2 3", latest
    assert propose_ngram_drafts([1, 2, 3, 5, 1, 2, 3], k=9) == [5, 1, 2, 3]  # up to the end, not past it
    assert propose_ngram_drafts([4, 4, 4], k=2) == [4]
    assert propose_ngram_drafts([1, 2, 3], k=3) == []
    assert propose_ngram_drafts([1, 2, 1], k=0) == []
    assert propose_ngram_drafts([5, 1, 2, 6, 1, 2], k=2, min_ngram=3) == []


def test_settings_that_cannot_speculate_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="min_ngram"):
        SpeculativeConfig(4, max_ngram=2, min_ngram=3)
    with pytest.raises(ValueError, match="num_tokens"):
        SpeculativeConfig(0)
    with pytest.raises(ValueError, match="layer_windows"):
        EngineConfig(speculation=SpeculativeConfig(), layer_windows=(8, None))

    class NoRollback:  # a lab's block manager (BlockManager) without rollback
        def __init__(self, num_blocks, block_size):
            self.num_blocks = num_blocks

    with pytest.raises(ValueError, match="rollback"):
        LLMEngine(model(), config(), block_manager=NoRollback)


@pytest.mark.parametrize("budget", [2048, 3], ids=["ample", "budget-3"])
def test_ngram_drafts_equal_plain_greedy_decoding(budget):
    engine = LLMEngine(model(), config(max_num_batched_tokens=budget))
    assert serve(engine, PROMPTS) == plain(PROMPTS, max_num_batched_tokens=budget)
    counts = engine.speculator.counts
    assert sum(c.drafted for c in counts.values()) > 0
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks


@pytest.mark.parametrize("index", [None, "hash", "radix"])
@pytest.mark.parametrize("num_blocks", [None, 14], ids=["ample", "tight"])
def test_oracle_drafts_roll_back_across_blocks_and_never_reach_the_prefix_cache(monkeypatch, index, num_blocks):
    kw = {"num_blocks": num_blocks, "enable_prefix_caching": index is not None, "prefix_index": index or "hash"}
    expected = plain(PROMPTS, **kw)
    wrong_at = itertools.cycle([9, 0, 2, 1, 9, 3, 9])  # 9: every draft right
    answers = {tuple(p): a for p, a in zip(PROMPTS, expected, strict=True)}
    monkeypatch.setattr(speculation, "propose_ngram_drafts", oracle(answers, wrong_at))
    engine = LLMEngine(model(), config(5, **kw))
    assert serve(engine, PROMPTS) == expected
    counts = list(engine.speculator.counts.values())
    assert sum(c.accepted for c in counts) > sum(c.drafted for c in counts) / 3
    assert sum(c.blocks_freed for c in counts) > 0  # rollbacks emptied blocks: the tables shrank
    again = serve(engine, PROMPTS)  # the same prompts: prefix hits where caching is on, the same answers
    assert again == expected
    if index is not None:
        hits = [engine.requests[i].num_cached_tokens > 0 for i in range(3, 6)]
        assert all(hits) if num_blocks is None else any(hits)  # a tight pool evicts some
        texts = [p + a for p, a in zip(PROMPTS, expected, strict=True)]
        pool = engine.kv_cache_manager.block_pool
        for block_id in range(engine.num_blocks):
            if pool.is_cached(block_id):  # every cached block holds tokens of a plain answer, no rejected draft
                tokens = list(pool._cached[block_id].token_ids)
                assert any(text[i : i + len(tokens)] == tokens for text in texts for i in range(0, len(text), 4)), (
                    tokens
                )
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7])
def test_a_stop_token_or_the_length_limit_among_accepted_drafts_ends_the_answer_there(monkeypatch, max_new_tokens):
    answer = plain(PROMPTS[:1])[0]
    eos = answer[5]  # the sixth token becomes the stop token: plain decoding stops there
    params = SamplingParams(max_new_tokens=max_new_tokens)
    expected = plain(PROMPTS[:1], params, eos_token_id=eos)
    assert len(expected[0]) == min(max_new_tokens, answer.index(eos) + 1)
    monkeypatch.setattr(speculation, "propose_ngram_drafts", oracle({tuple(PROMPTS[0]): answer}, itertools.cycle([9])))
    engine = LLMEngine(model(), config(4, eos_token_id=eos))
    assert serve(engine, PROMPTS[:1], params) == expected
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks


def test_sampling_and_n_samples_do_not_speculate_and_are_served_as_without_it():
    sampled = SamplingParams(max_new_tokens=12, temperature=0.8, seed=3, stop_on_eos=False)
    two = SamplingParams(max_new_tokens=12, n=2, stop_on_eos=False)
    engine = LLMEngine(model(), config())
    outputs = engine.generate(PROMPTS[:2], [sampled, two])
    reference = LLMEngine(model(), config(None)).generate(PROMPTS[:2], [sampled, two])
    assert [o.samples for o in outputs] == [o.samples for o in reference]
    assert all(c.drafted == 0 for c in engine.speculator.counts.values())
    assert all(seq.status is SequenceStatus.FINISHED for r in engine.requests.values() for seq in r.seqs)


def test_bfloat16_equals_plain_greedy_up_to_the_first_near_tie(monkeypatch):
    dtype = torch.bfloat16
    expected = plain(PROMPTS, dtype=dtype)
    answers = {tuple(p): a for p, a in zip(PROMPTS, expected, strict=True)}
    monkeypatch.setattr(speculation, "propose_ngram_drafts", oracle(answers, itertools.cycle([9, 1, 3])))
    engine = LLMEngine(model(dtype), config(4))
    got = serve(engine, PROMPTS)
    # The answers part at a near-tie only: there the plain path's top two logits are within NEAR_TIE.
    for prompt, want, have in zip(PROMPTS, expected, got, strict=True):
        assert first_difference_is_a_near_tie(model(dtype), prompt, want, have), (want, have)


def first_difference_is_a_near_tie(model_, prompt: list[int], want: list[int], have: list[int]) -> bool:
    """True when ``have`` equals ``want`` or first differs where the plain path's top two logits are within
    NEAR_TIE of the top logit's size (the bfloat16 rule; float32 asks for equality)."""
    first = next((i for i, (w, h) in enumerate(zip(want, have, strict=True)) if w != h), None)
    if first is None:
        return True
    top2 = all_logits(model_, prompt + want)[len(prompt) - 1 + first].topk(2).values
    return bool(top2[0] - top2[1] < NEAR_TIE * top2[0].abs().clamp(min=1.0))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_smollm2_repeating_a_text_accepts_most_drafts_and_answers_as_plain_greedy(real_model, dtype):
    from kvcourse.kernels import Transformer
    from kvcourse.kernels.measure.texts import held_out_text

    hf, tok = real_model
    smol = Transformer.from_hf(hf).to(dtype).accelerate()
    paragraph = [p for p in held_out_text().split("\n\n") if len(p) > 300][1].replace("\n", " ")
    users = [f"Repeat the following text exactly:\n\n{paragraph}", "Name three colours."]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": u}], add_generation_prompt=True, return_tensors="pt")[
            "input_ids"
        ][0].tolist()
        for u in users
    ]
    params = SamplingParams(max_new_tokens=24, stop_on_eos=False)
    want = [o.tokens for o in LLMEngine(smol, EngineConfig()).generate(prompts, params)]
    engine = LLMEngine(smol, EngineConfig(speculation=SpeculativeConfig(4)))
    have = [o.tokens for o in engine.generate(prompts, params)]  # a batch of 2: one drafts, one mostly not
    if dtype == torch.float32:
        assert have == want
    else:
        assert all(first_difference_is_a_near_tie(smol, p, w, h) for p, w, h in zip(prompts, want, have, strict=True))
    assert engine.speculator.counts[0].acceptance_rate > 0.5
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks


class SpeculativeEngineMachine(EngineMachine):
    """The engine's state machine (random requests with n up to 3, steps, aborts, tight pools, small budgets) with
    speculation on, drafting from the plain answers made wrong at a rotating place: whatever the drafts, every
    answer must equal plain greedy decoding, and the pool must agree with the block tables after every step."""

    @initialize(
        num_blocks=st.integers(3, 24),
        block_size=st.sampled_from([1, 2, 4]),
        budget=st.integers(1, 40),
        max_num_seqs=st.integers(1, 6),
        index=st.sampled_from([None, "hash", "radix"]),
        k=st.integers(1, 5),
        wrong_at=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    )
    def make_engine(self, num_blocks, block_size, budget, max_num_seqs, index, k, wrong_at):
        config = EngineConfig(
            block_size=block_size,
            num_blocks=num_blocks,
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            enable_prefix_caching=index is not None,
            prefix_index=index or "hash",
            speculation=SpeculativeConfig(k),
        )
        self.engine = LLMEngine(packed_model(self.fast_paths), config)
        self.added, self.aborted = {}, set()
        self.answers: dict[tuple[int, ...], list[int]] = {}  # each prompt's plain answer, filled as requests arrive
        self.saved = speculation.propose_ngram_drafts
        speculation.propose_ngram_drafts = oracle(self.answers, itertools.cycle(wrong_at))

    @rule(
        stem=st.sampled_from(STEMS),
        tail=st.lists(st.integers(3, 9), min_size=1, max_size=8),
        max_new_tokens=st.integers(0, 8),
        n=st.sampled_from([1, 1, 1, 3]),  # mostly one: n > 1 does not speculate
    )
    def add_request(self, stem, tail, max_new_tokens, n):
        super().add_request(stem, tail, max_new_tokens, n)
        self.answers.setdefault(tuple(stem + tail), reference(stem + tail, 8, self.fast_paths))

    @invariant()
    def no_draft_outlives_its_step(self):
        for seq in self.engine.scheduler.running:
            assert seq.num_draft_tokens == 0
            if seq.num_uncomputed_tokens == 1:
                assert len(seq.block_table) == ceil_div(seq.num_computed_tokens, self.engine.config.block_size)

    def teardown(self):
        try:
            super().teardown()
        finally:
            speculation.propose_ngram_drafts = self.saved


SpeculativeEngineMachine.TestCase.settings = settings(EngineMachine.TestCase.settings, max_examples=80)
test_speculative_engine_state_machine = SpeculativeEngineMachine.TestCase
