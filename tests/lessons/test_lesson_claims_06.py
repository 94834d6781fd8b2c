"""Lesson 06's claims, checked on a tiny model: what each decode step reads, and what each chat turn computes.

The lesson's key correction rests on two exact counts per decode step, read from the engine by
``kvcourse.kernels.measure.decode_growth``: the K and V bytes attention read (every cached token,
the new one included) and attention's FLOPs (4 x head_dim per score cell). Here they are checked
against the cost model, the interleaved stepping against ``generate``, and the chat helper
against the prefix cache's whole-block rule. Times are never checked, only their verdict's logic.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from kvcourse.kernels import EngineConfig, LLMEngine, costs, generate
from kvcourse.kernels.measure.conversation import Turn, serve_turn, turn_table
from kvcourse.kernels.measure.decode_growth import (
    _Decoding,
    decode_growth,
    growth_ratios,
    readable,
    time_verdict,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_each_decode_step_reads_every_cached_token_and_scores_it(tiny_model):
    config, bpv = tiny_model.config, tiny_model.dtype.itemsize
    ids = list(range(3, 3 + 40))
    table = decode_growth(tiny_model, ids, [4, 16, 40], num_steps=2)
    for p, row in table.iterrows():
        assert row.kv_bytes_read == costs.kv_cache_bytes(config, p + 1, bytes_per_value=bpv)
        assert row.attention_flops == 4 * config.head_dim * costs.score_cells(config, 1, p + 1)
        assert row.step_flops == costs.forward_flops(config, 1, p + 1, num_logits=1)
        assert row.weight_bytes_read == tiny_model.weight_bytes_read_per_pass()
        assert 0 < row.ms_fastest <= row.ms_median
    ratios = growth_ratios(table)
    assert (ratios.iloc[0] == 1).all()
    assert ratios.kv_bytes_read.iloc[-1] == pytest.approx(41 / 5)  # in proportion to the tokens attended
    assert 1 < ratios.step_bytes_read.iloc[-1] < ratios.kv_bytes_read.iloc[-1]  # the weights do not grow
    assert list(readable(table).columns)[0] == "K and V read (MB)"


def test_interleaved_decoding_matches_generate(tiny_model):
    """The helper's own decode loop writes the same cache, and picks the same tokens, as generate (greedy)."""
    prompt, steps = list(range(5, 17)), 4
    decoding = _Decoding(tiny_model, prompt, steps)
    for _ in range(steps):
        decoding.decode()
    run = generate(tiny_model, prompt, steps + 1, cache="contiguous", eos_token_id=[])
    n = len(prompt) + steps
    assert decoding.cache.num_computed_tokens == run.backend.num_computed_tokens == n
    for mine, theirs in zip(
        decoding.cache.k_cache + decoding.cache.v_cache, run.backend.k_cache + run.backend.v_cache, strict=True
    ):
        torch.testing.assert_close(mine[:, :n], theirs[:, :n])
    assert decoding.next_token == run.tokens[-1]


def test_decode_growth_refuses_positions_past_the_tokens(tiny_model):
    with pytest.raises(ValueError, match="positions"):
        decode_growth(tiny_model, [1, 2, 3], [2, 5])


def _table(fastest: list[float], median: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"ms_fastest": fastest, "ms_median": median}, index=pd.Index([64, 2048], name="position"))


def test_time_verdict_calls_a_move_only_beyond_the_spread():
    assert "within this run's step-to-step spread" in time_verdict(_table([60.0, 63.0], [66.0, 70.0]))
    assert "more time" in time_verdict(_table([40.0, 80.0], [42.0, 84.0]))
    assert "less time" in time_verdict(_table([80.0, 40.0], [84.0, 42.0]))


def test_a_kept_cache_reuses_whole_blocks_of_the_earlier_turn(tiny_model):
    block = 4
    engine = LLMEngine(tiny_model, EngineConfig(num_blocks=32, block_size=block, enable_prefix_caching=True))
    first = serve_turn(engine, list(range(3, 3 + 10)), 3)
    assert (first.prompt_tokens, first.computed, len(first.reply)) == (10, 10, 3)
    history = list(range(3, 3 + 10)) + first.reply[:-1]  # the reply's tokens that were fed, then a new message
    second_ids = history + [7, 8, 9, 10, 11]
    second = serve_turn(engine, second_ids, 2)
    cached_blocks = (10 + 2) // block  # turn 1's cache held P + n - 1 = 12 positions: three whole blocks
    assert second.cached == cached_blocks * block
    fresh = serve_turn(LLMEngine(tiny_model, EngineConfig(num_blocks=32, block_size=block)), second_ids, 1)
    assert fresh.computed == len(second_ids)
    table = turn_table([first, second], [first, fresh])
    assert list(table["cache kept: computed"]) == [10, len(second_ids) - second.cached]
    assert list(table["fresh start: computed"]) == [10, len(second_ids)]
    with pytest.raises(ValueError):
        turn_table([first], [first, fresh])


def test_the_answers_share_counts_p_plus_n_minus_1_tokens(tiny_model):
    """Lesson 06 c9/c29: n new tokens leave P + n - 1 positions cached; the answer's share is (n - 1) / (P + n - 1)."""
    prompt, n = list(range(3, 3 + 9)), 6
    held = [s.kv_cache_bytes for s in generate(tiny_model, prompt, n, cache="contiguous", eos_token_id=[]).stats]
    per_token = costs.kv_bytes_per_token(tiny_model.config, tiny_model.dtype.itemsize)
    assert held[-1] == per_token * (len(prompt) + n - 1)
    assert math.isclose((held[-1] - held[0]) / held[-1], (n - 1) / (len(prompt) + n - 1))
    assert Turn(5, 2, 0.1, []).cached == 3


def test_one_token_adds_the_same_bytes_to_every_layer_whichever_token_it_is(tiny_model):
    """Lesson 06 c3/c6 (06.layer_entry): every decode step adds one token's K and V, the same in every layer and for
    every token fed, so the reveal's (layers alike, steps alike) is (True, True): the first option."""
    prompt, n = list(range(3, 3 + 9)), 6
    run = generate(tiny_model, prompt, n, cache="contiguous", eos_token_id=[])
    held = [s.kv_cache_bytes for s in run.stats]
    added = [b - a for a, b in zip(held, held[1:], strict=False)]
    cache = run.backend
    layer_bytes = [
        k[:, : cache.num_tokens].nbytes + v[:, : cache.num_tokens].nbytes
        for k, v in zip(cache.k_cache, cache.v_cache, strict=True)
    ]
    config, bpv = tiny_model.config, tiny_model.dtype.itemsize
    assert len(set(layer_bytes)) == 1 and len(set(added)) == 1
    assert layer_bytes[0] == cache.num_tokens * 2 * config.num_kv_heads * config.head_dim * bpv
