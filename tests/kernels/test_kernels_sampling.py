"""Sampling: greedy, temperature, top-k, top-p, seeds, validation."""

from __future__ import annotations

import math

import pytest
import torch

from kvcourse.kernels.engine.sampling import SamplingParams, filter_logits, greedy, make_generator, sample

LOGITS = torch.tensor([1.0, 3.0, 2.0, 0.5, 2.9])


def test_greedy_is_argmax():
    assert int(sample(LOGITS, SamplingParams())) == 1
    assert sample(torch.stack([LOGITS, -LOGITS]), SamplingParams()).tolist() == [1, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_equals_argmax_ties_nan_and_infinities_included(dtype):
    """greedy() takes max's indices for speed; it must answer exactly what argmax answers, ties and NaN included."""
    gen = torch.Generator().manual_seed(0)
    few_values = torch.randint(0, 40, (64, 49152), generator=gen).to(dtype)  # many ties in every row
    odd = torch.tensor(
        [[1.0, 3.0, 3.0, 2.0], [-math.inf] * 4, [0.0, math.nan, 5.0, math.nan], [math.inf, 1.0, math.inf, 0.0]]
    )
    for logits in (few_values, torch.randn(32, 49152, generator=gen).to(dtype), odd.to(dtype), few_values[0]):
        assert torch.equal(greedy(logits), logits.argmax(dim=-1))


def test_top_k_keeps_only_the_best_k():
    params = SamplingParams(temperature=1.0, top_k=2, seed=0)
    gen = make_generator(params)
    drawn = {int(sample(LOGITS, params, gen)) for _ in range(200)}
    assert drawn == {1, 4}


def test_top_p_keeps_the_smallest_nucleus():
    params = SamplingParams(temperature=1.0, top_p=0.5)
    kept = torch.isfinite(filter_logits(LOGITS, params))
    probs = torch.softmax(LOGITS, -1)
    assert probs[1] < 0.5 and probs[1] + probs[4] >= 0.5  # so the nucleus is exactly {1, 4}
    assert kept.tolist() == [False, True, False, False, True]
    tiny = SamplingParams(temperature=1.0, top_p=1e-6, seed=3)
    assert {int(sample(LOGITS, tiny, make_generator(tiny))) for _ in range(20)} == {1}


def test_seed_makes_draws_repeatable():
    params = SamplingParams(temperature=1.5, seed=11)
    a = [int(sample(LOGITS, params, g)) for g in [make_generator(params)] for _ in range(30)]
    b = [int(sample(LOGITS, params, g)) for g in [make_generator(params)] for _ in range(30)]
    assert a == b and len(set(a)) > 1


def test_low_temperature_concentrates_on_the_argmax():
    params = SamplingParams(temperature=0.01, seed=0)
    gen = make_generator(params)
    assert {int(sample(LOGITS, params, gen)) for _ in range(50)} == {1}


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"seed": 1.5}, "seed"),
        ({"max_new_tokens": -2}, "max_new_tokens"),
    ],
)
def test_bad_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)
