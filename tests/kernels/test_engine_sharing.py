"""Sharing (lesson 12): parallel samples and beams hold the prompt's blocks by reference count."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_engine_llm import prompts

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.engine.beam_search import beam_search
from kvcourse.kernels.engine.sampling import params_for_sample
from kvcourse.kernels.memory.events import EventKind

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def test_greedy_parallel_samples_equal_single_generation_and_share_blocks(tiny_model):
    p = prompts([18])[0]  # 4 full blocks of 4 and a partial one: the partial one is copied on write
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    rid = engine.add_request(p, SamplingParams(max_new_tokens=10, n=4))
    peak_used, peak_private = 0, 0
    while engine.has_unfinished_requests:
        engine.step()
        seqs = engine.requests[rid].seqs
        if engine.kv_cache_manager.num_used_blocks > peak_used:
            peak_used = engine.kv_cache_manager.num_used_blocks
            peak_private = sum(len(s.block_table) for s in seqs)
    out = engine.requests[rid].output()
    expected = generate(tiny_model, p, 10, cache="none").tokens
    assert out.samples == [expected] * 4
    assert len(engine.events.of_kind(EventKind.COPY_ON_WRITE)) == 3  # three of four writers copy, the last owns it
    assert peak_used < peak_private  # 4 full prompt blocks held once instead of four times
    assert peak_private - peak_used == 3 * 4


def test_sampled_parallel_samples_differ_and_repeat_with_a_seed(tiny_model):
    p = prompts([9])[0]
    params = SamplingParams(max_new_tokens=12, n=3, temperature=1.5, seed=7, stop_on_eos=False)
    first = LLMEngine(tiny_model, EngineConfig(block_size=4)).generate([p], params)[0]
    again = LLMEngine(tiny_model, EngineConfig(block_size=4)).generate([p], params)[0]
    assert first.samples == again.samples
    assert len({tuple(s) for s in first.samples}) > 1
    assert all(len(s) == 12 for s in first.samples)


def naive_beam_search(model, prompt, width, steps):
    """Beam search that recomputes every beam from scratch: the reference."""
    beams = [(0.0, list(prompt))]
    for _ in range(steps):
        candidates = []
        for score, seq in beams:
            ids = torch.tensor(seq)
            logits = model(ids, torch.arange(len(seq)), NoCacheBackend(), torch.tensor([len(seq) - 1]))[0]
            logprobs = torch.log_softmax(logits.float(), -1)
            for tok in range(logprobs.shape[0]):
                candidates.append((score + float(logprobs[tok]), seq + [tok]))
        candidates.sort(key=lambda c: -c[0])
        beams = candidates[:width]
    return [seq[len(prompt) :] for _, seq in beams]


def test_beam_search_matches_naive_reference(tiny_model):
    p = prompts([10], seed=1)[0]
    with torch.inference_mode():
        expected = naive_beam_search(tiny_model, p, width=3, steps=6)
    result = beam_search(tiny_model, p, beam_width=3, max_new_tokens=6, block_size=4)
    assert result.beams == expected
    assert result.events.of_kind(EventKind.COPY_ON_WRITE)


def test_beam_search_width_4_saves_at_least_40_percent_of_blocks(tiny_model):
    p = prompts([64], seed=2)[0]
    result = beam_search(tiny_model, p, beam_width=4, max_new_tokens=16, block_size=4)
    assert result.blocks_saved >= 0.4, (result.peak_blocks_shared, result.peak_blocks_unshared)
    with pytest.raises(ValueError):
        beam_search(tiny_model, p, beam_width=0, max_new_tokens=4)


def test_regression_each_sample_repeats_alone_with_seed_plus_index(tiny_model):
    """Samples used to share one generator, so sample i depended on its siblings' draws (lesson 12)."""
    p, other = prompts([9, 13], seed=3)
    params = SamplingParams(max_new_tokens=12, n=3, temperature=1.5, seed=7)
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    rid = engine.add_request(p, params)
    engine.add_request(other, SamplingParams(max_new_tokens=5, temperature=1.0, seed=1))  # a neighbour
    while engine.has_unfinished_requests:
        engine.step()
    together = engine.requests[rid].output().samples
    for i, sample in enumerate(together):
        alone = params_for_sample(params, i)
        assert alone.seed == 7 + i and alone.n == 1
        assert LLMEngine(tiny_model, EngineConfig(block_size=4)).generate([p], alone)[0].tokens == sample
        assert generate(tiny_model, p, 12, sampling=replace(alone, max_new_tokens=None)).tokens == sample
    with pytest.raises(ValueError, match="sample index"):
        params_for_sample(params, 3)
