"""Lesson 25's claims that do not need the real model, checked on a tiny model, on planted tensors and on the sweep's
sizes.

The lesson reads SmolLM2's keys and values for outlier channels, stores them in each format and compares the error
with its bound, and reads the held-out text through every engine format (kernels/measure/low_bit.py). Its expects on
the real model run with the notebook (tests/lessons/test_notebooks.py); here: the sweep's sizes, the bytes the table
reports are the cache's own tensors and the layout's, the 2-bit cache keeps exactly kivi_split's recent tokens
however the text arrives, a planted outlier channel is found, every format's round trip stays within its bound, and
scale 1.0 is what loses accuracy on small numbers.
"""

from __future__ import annotations

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels import costs
from kvcourse.kernels.measure import low_bit
from kvcourse.low_bit_sweep import format_sweep_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model():
    """A tiny model whose head_dim (32) holds a KIVI group of 32 channels."""
    return make_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2, max_position_embeddings=256)


@pytest.mark.parametrize("headless", [True, False])
def test_the_sweep_reads_640_tokens_headless_and_the_whole_text_for_people(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    sweep = format_sweep_size()
    assert sweep.step_tokens == low_bit.GROUP
    assert sweep.max_tokens == 640 if headless else sweep.max_tokens > 10_000  # the whole held-out text


@pytest.mark.parametrize("tokens", [10, 63, 64, 95, 96, 200])
@pytest.mark.parametrize("step", [1, 7, 32])
def test_the_two_bit_cache_keeps_kivi_splits_recent_tokens_however_the_text_arrives(model, tokens, step):
    _, cache = low_bit.read_through(model, [i % 90 + 3 for i in range(tokens)], "kivi2", step)
    quantised, recent = low_bit.kivi_split(tokens)
    assert cache.num_quantized_tokens == quantised and cache.recent_k[0].shape[1] == recent
    assert cache.kv_cache_bytes == low_bit.format_bytes(model.config, "kivi2", tokens, 4).total


def test_the_tables_bytes_are_the_caches_and_the_layouts(model):
    ids = [(7 * i) % 90 + 3 for i in range(150)]
    table = low_bit.format_sweep(model, ids, step=32)
    assert list(table.index) == list(low_bit.FORMATS)
    for name, row in table.iterrows():
        parts = low_bit.format_bytes(model.config, str(name), len(ids), 4)
        assert row["cache at the text's length (bytes)"] == parts.total
        assert row["per sequence (bytes)"] == parts.bounded + parts.state
    assert table.loc["kivi2", "bytes per token"] == costs.kivi_kv_bytes_per_token(model.config)
    assert table.loc["int8", "bytes per token"] == costs.quantized_kv_bytes_per_token(model.config, 1, 4)
    assert table.loc["as computed", "next-token agreement"] == 1.0
    assert table.loc["fp8, scale 1.0", "values clipped"] == 0  # a tiny model's numbers are far below 448


def _planted(tokens: int = 96, heads: int = 2, dim: int = 64, channel: int = 5) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(heads, tokens, dim, generator=generator)
    x[1, :, channel] += 20  # large at every token
    return x


def test_a_planted_outlier_channel_is_named_and_large_at_every_token():
    keys, values = [_planted()], [torch.randn(2, 96, 64, generator=torch.Generator().manual_seed(1))]
    table = low_bit.channel_outliers(keys, values)
    assert table.loc[0, "K largest channel"] == "head 1, channel 5"
    assert table.loc[0, "K largest among a token's 4"] == 1.0
    assert table.loc[0, "K largest / median channel"] > table.loc[0, "V largest / median channel"]
    assert table.loc[0, "V largest among a token's 4"] < 0.5


@pytest.mark.parametrize("factor", [1 / 512, 1.0, 100.0])
def test_every_format_round_trips_within_its_bound(factor):
    keys, values = [_planted() * factor, _planted(channel=9) * factor], [_planted() * factor]
    trips = low_bit.round_trips(keys, values)
    assert (trips["worst error / its bound"] <= 1 + 1e-3).all()
    assert trips.loc["int8", "K error (relative RMS)"] < trips.loc["kivi2", "K error (relative RMS)"]


def test_scale_one_loses_small_numbers_and_clips_large_ones_where_a_calibrated_scale_does_not():
    risk = low_bit.scale_risk([_planted()], [1 / 256, 1, 64])
    calibrated = risk["error, calibrated"]
    assert calibrated.max() - calibrated.min() < 1e-6  # a calibrated scale: the same relative error at any size
    assert risk.iloc[0]["error, scale 1.0"] > 2 * risk.iloc[0]["error, calibrated"]
    assert risk.iloc[-1]["at scale 1.0: share clipped"] > 0 and risk.iloc[1]["at scale 1.0: share clipped"] == 0
    assert low_bit.e4m3_range([torch.tensor([0.001, 1.0, 500.0])]) == pytest.approx(
        {"largest": 500.0, "share clipped": 1 / 3, "share below 2^-6": 1 / 3}
    )


def test_the_formats_per_token_bytes_are_the_costs():
    config = make_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2).config
    assert low_bit.per_token_bytes(config, "fp8", 4) == costs.fp8_kv_bytes_per_token(config)
    assert low_bit.per_token_bytes(config, "as computed", 2) == costs.kv_bytes_per_token(config, 2)
    with pytest.raises(ValueError, match="format"):
        low_bit.per_token_bytes(config, "int4", 2)
