"""Lesson 23's claims that do not need the real model, checked on the tiny model and on the sweep's sizes.

The lesson factors SmolLM2's stacked key and value projections, checks absorption on layer 0, and sweeps the
latent's rank on a held-out text (kernels/measure/latent_rank.py), beside int8 and MQA. Its expects on the real
model run with the notebook (tests/lessons/test_notebooks.py); here: the sweep always holds the ranks the lesson
reads (a half, a third and a quarter of the full rank), the short path reads 600 tokens (and 500 of calibration),
the held-out and the calibration texts are the public-domain ones named, the sweep's first row is the model
itself, the tables are ordered as the lesson reads them, and absorption holds within the lesson's 2 % in bfloat16
too.
"""

from __future__ import annotations

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels import LIBRARY_SYSTEM_PROMPT, MERGE_TEXTS
from kvcourse.kernels.measure import latent_rank
from kvcourse.kernels.model.latent import absorbed_attention, full_rank, layer_factors, layer_svds
from kvcourse.kernels.model.latent_rope import absorbed_partial_attention, partial_layers
from kvcourse.latent_sweep import latent_sweep_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

IDS = [int(t) for t in torch.randint(1, 90, (40,), generator=torch.Generator().manual_seed(23))]


@pytest.mark.parametrize("headless", [True, False])
def test_every_sweep_holds_the_ranks_the_lesson_reads(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    sweep = latent_sweep_size(384)
    assert {192, 128, 96} <= set(sweep.ranks) and all(rank < 384 for rank in sweep.ranks)
    assert list(sweep.ranks) == sorted(sweep.ranks, reverse=True)
    assert sweep.max_tokens == 600 if headless else sweep.max_tokens > 2 * len(latent_rank.held_out_text())
    assert 192 in sweep.aware_ranks and set(sweep.aware_ranks) <= set(sweep.ranks)
    assert headless or {128, 96} <= set(sweep.aware_ranks)
    assert sweep.partial_ranks[0] == 384 and 192 in sweep.partial_ranks  # partial RoPE alone, and at half's bytes
    assert min(sweep.partial_ranks) > 3 * 2 * 4  # room beside the lesson's 4 rotated pairs per KV head
    assert sweep.calibration_tokens == 500 if headless else sweep.calibration_tokens == 2000
    with pytest.raises(ValueError, match="no room"):
        latent_sweep_size(4)


def test_the_texts_are_the_public_domain_ones_named_apart_and_none_of_the_course_prompts():
    text, calibration = latent_rank.held_out_text(), latent_rank.calibration_text()
    assert text.startswith("CHAPTER I. Down the Rabbit-Hole") and len(text) > 10_000  # about 3,000 tokens
    assert "Gutenberg" not in text and "CHAPTER II" not in text  # the header, the licence, chapter II cut
    assert "Alice" in latent_rank.HELD_OUT_SOURCE and "Constitution" in latent_rank.CALIBRATION_SOURCE
    assert calibration.startswith("We the People") and "Article. VII." in calibration and len(calibration) > 20_000
    assert all(prompt[:60] not in text + calibration for prompt in (LIBRARY_SYSTEM_PROMPT, *MERGE_TEXTS))


def test_the_sweeps_first_row_is_the_model_and_its_tables_read_as_the_lesson_reads_them(tiny_model):
    top = full_rank(tiny_model.config)
    svds = layer_svds(tiny_model)
    table = latent_rank.rank_sweep(tiny_model, IDS, [top // 2, 2], svds)
    assert list(table.index) == [top, top // 2, 2]
    assert table["next-token agreement"].iloc[0] == 1.0 and table["share of the shipped cache"].iloc[0] == 1.0
    assert table["next-token agreement"].iloc[-1] < 1.0  # a random tiny model: its perplexity means nothing
    with pytest.raises(ValueError, match="below the full rank"):
        latent_rank.rank_sweep(tiny_model, IDS, [top], svds)
    shrinks = latent_rank.other_shrinks(tiny_model, IDS)
    assert list(shrinks.index)[1:] == [latent_rank.INT8_ROW, latent_rank.MQA_ROW]
    assert shrinks["next-token agreement"].iloc[0] == 1.0
    energy = latent_rank.energy_table(svds, [top, top // 2, 2])
    assert (energy["least kept"] <= energy["median layer"]).all() and (
        energy["median layer"] <= energy["most kept"]
    ).all()
    assert energy["median layer"].is_monotonic_decreasing and energy["median layer"][top] == pytest.approx(1.0)


def test_absorption_holds_within_the_lessons_two_percent_in_bfloat16():
    model = make_tiny_model().to(torch.bfloat16)
    attention = model.layers[0].self_attn
    with torch.no_grad():
        x = model.layers[0].input_layernorm(model.embed_tokens(torch.tensor(IDS[:24])))
    for rank in (2, full_rank(model.config) // 2):
        both = absorbed_attention(attention, layer_factors(attention, rank), x)
        assert both.largest_difference < 0.02 * float(both.decompressed.abs().max())
    rotated, svds = partial_layers(model, 1)  # and with partial RoPE, away from position 0
    rope = model.rotary.at(torch.arange(90, 90 + x.shape[0]), x.dtype)
    both = absorbed_partial_attention(attention, svds[0].factors(3), rotated[0], x, rope)
    assert both.largest_difference < 0.02 * float(both.decompressed.abs().max())


def test_the_fits_and_partial_rope_tables_read_as_the_lesson_reads_them(tiny_model):
    top = full_rank(tiny_model.config)
    moments = latent_rank.input_second_moments(tiny_model, IDS)
    plain = latent_rank.rank_sweep(tiny_model, IDS, [top // 2, 2], layer_svds(tiny_model))
    aware = latent_rank.rank_sweep(tiny_model, IDS, [2], layer_svds(tiny_model, moments))
    fits = latent_rank.fits_table(plain, aware)
    assert list(fits.index) == [top, 2] and (fits["bytes per token"] == plain["bytes per token"][[top, 2]]).all()
    rotated, svds = partial_layers(tiny_model, 1, moments)
    rotated_values = tiny_model.config.num_kv_heads * 2
    partial = latent_rank.partial_rope_sweep(tiny_model, IDS, 1, rotated, svds, plain.loc[[top, top // 2]])
    assert list(partial.index) == [top, top // 2]
    assert (partial["bytes per token"] == plain["bytes per token"][[top, top // 2]]).all()  # equal bytes
    assert partial["latent rank, partial RoPE"][top // 2] == top // 2 - rotated_values
    assert partial["agreement, full RoPE"][top] == 1.0 and partial["agreement, partial RoPE"][top] < 1.0
    with pytest.raises(ValueError, match="rotated values"):
        latent_rank.partial_rope_sweep(tiny_model, IDS, 1, rotated, svds, plain.loc[[2]])
