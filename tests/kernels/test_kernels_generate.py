"""generate(): identical greedy tokens across cache modes, honest per-step stats, clear errors (lessons 02-06)."""

from __future__ import annotations

import pytest
import torch
from factories import make_tiny_hf_llama

from kvcourse.kernels import CACHE_MODES, SamplingParams, Transformer, costs, generate
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend
from kvcourse.kernels.engine.generate import Phase, as_transformer

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

PROMPT = [5, 17, 33, 2 + 40, 61, 8, 90, 12]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_tokens_identical_without_and_with_cache_and_equal_hf(arch):
    hf = make_tiny_hf_llama(arch)
    no_cache = generate(hf, PROMPT, 30, cache="none", eos_token_id=[])
    cached = generate(hf, PROMPT, 30, cache="contiguous", eos_token_id=[])
    assert no_cache.tokens == cached.tokens
    assert len(set(cached.tokens)) > 5  # a real sequence, not one token repeated
    with torch.no_grad():
        ref = hf.generate(torch.tensor([PROMPT]), max_new_tokens=30, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert ref[0, len(PROMPT) :].tolist() == cached.tokens


def test_sampling_with_a_seed_is_repeatable_and_cache_independent(tiny_model_each_path):
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, seed=7)
    a = generate(tiny_model_each_path, PROMPT, 25, cache="none", sampling=params, eos_token_id=[])
    b = generate(tiny_model_each_path, PROMPT, 25, cache="contiguous", sampling=params, eos_token_id=[])
    c = generate(
        tiny_model_each_path,
        PROMPT,
        25,
        cache="contiguous",
        sampling=SamplingParams(temperature=0.9, seed=8),
        eos_token_id=[],
    )
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


def test_prompt_forms_are_equivalent(tiny_model_each_path):
    expected = generate(tiny_model_each_path, PROMPT, 5).tokens
    assert generate(tiny_model_each_path, torch.tensor(PROMPT), 5).tokens == expected
    assert generate(tiny_model_each_path, torch.tensor([PROMPT]), 5).tokens == expected


def test_stops_on_eos_and_includes_it(tiny_model_each_path):
    full = generate(tiny_model_each_path, PROMPT, 20, eos_token_id=[])
    eos = full.tokens[5]
    first = full.tokens.index(eos)
    stopped = generate(tiny_model_each_path, PROMPT, 20, eos_token_id=eos)
    assert stopped.tokens == full.tokens[: first + 1] and stopped.stopped_on_eos
    ignored = generate(tiny_model_each_path, PROMPT, 20, eos_token_id=eos, sampling=SamplingParams(stop_on_eos=False))
    assert ignored.tokens == full.tokens


def test_hf_model_eos_comes_from_its_config(tiny_hf):
    result = generate(tiny_hf, PROMPT, 40)
    assert tiny_hf.config.eos_token_id == 2
    assert 2 not in result.tokens[:-1]


def test_hf_conversion_is_explicit_and_never_stored_on_the_model(tiny_hf):
    """Regression: a converted copy kept on the HF model doubled memory and went stale after a weight update."""
    first, second = as_transformer(tiny_hf), as_transformer(tiny_hf)
    assert first is not second and "_kvcourse_transformer" not in tiny_hf.__dict__
    result = generate(tiny_hf, PROMPT, 3)
    assert result.converted and not generate(first, PROMPT, 3).converted


@pytest.mark.parametrize("cache", ["none", "contiguous", "int8", "sliding"])
def test_step_stats_equal_the_cost_model(tiny_model_each_path, cache):
    config = tiny_model_each_path.config
    window = 6 if cache == "sliding" else None
    result = generate(tiny_model_each_path, PROMPT, 6, cache=cache, window=window, eos_token_id=[])
    assert [s.phase for s in result.stats] == [Phase.PREFILL] + [Phase.DECODE] * 5
    for step, stats in enumerate(result.stats):
        length = len(PROMPT) + step
        new = length if cache == "none" else (len(PROMPT) if step == 0 else 1)
        assert stats.context_len == length and stats.num_tokens_processed == new
        assert stats.flops == costs.forward_flops(config, new, length, num_logits=1, window=window)
        assert stats.score_cells == costs.score_cells(config, new, length, window)
        assert stats.weight_bytes == costs.weight_bytes_read_per_pass(config, 4)
        expected_kv = {
            "none": 0,
            "contiguous": costs.kv_cache_bytes(config, length, bytes_per_value=4),
            "int8": length * costs.quantized_kv_bytes_per_token(config, 1, 4),
            "sliding": costs.kv_cache_bytes(config, min(length, 6), bytes_per_value=4),
        }[cache]
        assert stats.kv_cache_bytes == expected_kv
        assert stats.seconds > 0


def test_no_cache_work_grows_cache_work_is_flat(tiny_model_each_path):
    none = generate(tiny_model_each_path, PROMPT, 10, cache="none", eos_token_id=[])
    cached = generate(tiny_model_each_path, PROMPT, 10, cache="contiguous", eos_token_id=[])
    assert [s.num_tokens_processed for s in none.stats] == list(range(8, 18))
    assert [s.num_tokens_processed for s in cached.stats] == [8] + [1] * 9
    assert sum(s.flops for s in none.stats) > 3 * sum(s.flops for s in cached.stats)


def test_zero_new_tokens(tiny_model_each_path):
    result = generate(tiny_model_each_path, PROMPT, 0)
    assert result.tokens == [] and result.stats == []


@pytest.mark.parametrize(
    "ids,kwargs,match",
    [
        ([], {}, "empty"),
        (PROMPT, {"max_new_tokens": -1}, "max_new_tokens"),
        (list(range(129)), {}, "longer than the model's context"),
        (list(range(120)), {"max_new_tokens": 20}, "exceeds the model's context"),
        (PROMPT, {"cache": "mmap"}, "unknown cache"),
        (PROMPT, {"cache": "sliding"}, "needs window"),
        (PROMPT, {"cache": "contiguous", "window": 4}, "window only applies"),
        (torch.zeros(2, 3, dtype=torch.long), {}, "exactly one row"),
    ],
)
def test_bad_input_is_a_clear_error(tiny_model_each_path, ids, kwargs, match):
    kwargs = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        generate(tiny_model_each_path, ids, **kwargs)


def test_not_a_model_is_a_type_error():
    with pytest.raises(TypeError, match="Transformer"):
        generate("gpt2", PROMPT, 3)


def test_a_cache_factory_of_your_own_is_used(tiny_model_each_path):
    built = []

    def tiny_contiguous(req):
        backend = ContiguousKVBackend(req.model.config, 2, req.model.dtype, req.model.device)
        built.append(backend)
        return backend

    result = generate(tiny_model_each_path, PROMPT, 12, cache=tiny_contiguous, eos_token_id=[])
    assert "tiny_contiguous" not in str(dict(CACHE_MODES)), "a factory is used, never registered"
    assert result.tokens == generate(tiny_model_each_path, PROMPT, 12, eos_token_id=[]).tokens
    assert built and built[0].capacity >= len(PROMPT) + 11  # it grew from 2 slots


def test_bf16_generation_tracks_fp32():
    hf = make_tiny_hf_llama()
    fp32 = generate(hf, PROMPT, 8, eos_token_id=[]).tokens
    bf16 = generate(Transformer.from_hf(hf).to(torch.bfloat16), PROMPT, 8, eos_token_id=[]).tokens
    assert bf16[:3] == fp32[:3]
