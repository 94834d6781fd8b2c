"""Lesson 23's simulator: a latent's bytes per token against the cost model and the engine's sweep, the measured
curve read between its ranks, the halving step, its refusals, and the view."""

from __future__ import annotations

import math

import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import costs
from kvcourse.kernels.measure.latent_rank import other_shrinks, rank_sweep
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.kernels.model.latent import full_rank, latent_bytes_per_token
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.latent_rank import (
    LatentRank,
    LatentRankConfig,
    LatentRankView,
    QualityCurve,
    curve_from_table,
    ways_from_table,
)
from kvcourse.simulators.latent_rank_model import SMOLLM2_CURVE, Quality

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

CURVE = QualityCurve(8, {8: Quality(10.0, 1.0), 4: Quality(40.0, 0.5), 2: Quality(160.0, 0.2)})


def test_bytes_per_token_are_layers_times_rank_and_smollm2s_full_rank_is_its_own_cache():
    sim = LatentRank(LatentRankConfig(rank=96, bytes_per_value=2))
    smol = MODEL_CONFIGS["smollm2-135m"]
    assert sim.full_rank == 384 and sim.bytes_per_token == 30 * 96 * 2 == latent_bytes_per_token(smol, 96, 2)
    assert sim.bytes_at(384) == sim.shipped_bytes == costs.kv_bytes_per_token(smol, 2)
    ways = sim.ways()
    assert ways["int8"][1] == costs.quantized_kv_bytes_per_token(smol, 1, 4)
    assert ways["mqa"][1] == 30 * 2 * 64 * 2 and ways["mha"][1] == 30 * 2 * 9 * 64 * 2
    assert [b for _, b in ways.values()] == sorted((b for _, b in ways.values()), reverse=True)


def test_a_multi_head_model_has_a_free_half_and_no_mha_line_of_its_own():
    sim = LatentRank(LatentRankConfig(model="llama-2-7b", rank=4096, bytes_per_value=2))
    assert sim.full_rank == 4096 == MODEL_CONFIGS["llama-2-7b"].hidden_size
    assert sim.bytes_per_token * 2 == sim.shipped_bytes and "mha" not in sim.ways()


def test_the_curve_is_read_at_its_ranks_between_them_and_nowhere_else():
    assert CURVE.at(1.0) == CURVE.full == Quality(10.0, 1.0) and CURVE.at(0.5) == Quality(40.0, 0.5)
    between = CURVE.at(0.375)  # half way from rank 2 to rank 4: perplexity on a log scale
    assert between is not None
    assert between.perplexity == pytest.approx(math.sqrt(40.0 * 160.0)) and between.agreement == pytest.approx(0.35)
    assert CURVE.at(0.2) is None and CURVE.at(1.01) is None
    with pytest.raises(ValueError, match="two or more"):
        QualityCurve(8, {8: Quality(10.0, 1.0)})
    with pytest.raises(ValueError, match="full rank"):
        QualityCurve(8, {4: Quality(10.0, 1.0), 2: Quality(20.0, 0.5)})
    with pytest.raises(ValueError, match="at least 1"):
        QualityCurve(8, {8: Quality(0.5, 1.0), 4: Quality(20.0, 0.5)})


def test_a_larger_model_is_read_at_the_same_share_of_smollm2s_curve():
    small = LatentRank(LatentRankConfig(rank=192))
    big = LatentRank(LatentRankConfig(model="llama-3-70b", rank=full_rank(MODEL_CONFIGS["llama-3-70b"]) // 2))
    assert small.share == big.share == 0.5 and small.quality == big.quality == SMOLLM2_CURVE.points[192]


def test_step_halves_the_rank_down_to_one_and_reset_goes_back():
    sim = LatentRank(LatentRankConfig(rank=5))
    assert [sim.step(), sim.step()] == [2, 1]
    with pytest.raises(InvalidInput, match="smallest"):
        sim.step()
    sim.reset()
    assert sim.rank == 5


@pytest.mark.parametrize("changes", [{"rank": 0}, {"rank": 385}, {"rank": 2.5}, {"bytes_per_value": 3}, {"model": "x"}])
def test_bad_input_is_refused_with_the_control_named(changes):
    with pytest.raises(InvalidInput):
        LatentRankConfig(**changes)


def test_the_simulators_bytes_are_the_engines_sweep_and_its_curve_is_the_sweeps(tiny_model):
    """The simulator equals the engine: its bytes per token are rank_sweep's and other_shrinks', at every rank."""
    ids = list(range(3, 40))
    top = full_rank(tiny_model.config)
    table = rank_sweep(tiny_model, ids, [top // 2, top // 4])
    shrinks = other_shrinks(tiny_model, ids)
    curve, ways = curve_from_table(table), ways_from_table(shrinks)
    config = LatentRankConfig(model="custom", rank=top // 2, bytes_per_value=4, curve=curve, others=ways,
                              model_config=tiny_model.config)  # fmt: skip
    sim = LatentRank(config)
    for rank, row in table.iterrows():
        assert sim.bytes_at(int(rank)) == row["bytes per token"]
        assert curve.at(int(rank) / top) == Quality(row["perplexity"], row["next-token agreement"])
    assert sim.ways()["int8"][1] == shrinks["bytes per token"].iloc[1]
    assert sim.ways()["shipped"][1] == shrinks["bytes per token"].iloc[0]
    assert set(sim.measured_ways()) == {"int8", "mqa"}  # a shape of one's own: the quality measured on it


def test_the_view_draws_redraws_and_keeps_the_share_when_the_model_changes():
    view = LatentRankView(others={"int8": Quality(13.1, 0.98), "mqa": Quality(9000.0, 0.01)})
    assert view.error is None and shows_png(view) and "agreement" in view.message.value
    view.step_button.click()
    assert view.controls["rank"].value == 96 and view.model.rank == 96
    view.controls["model"].value = "llama-2-7b"  # a quarter of 384, then of 4,096
    assert view.controls["rank"].value == 1024 and "same share" in view.message.value
    view.reset_button.click()
    assert_each_control_redraws(view, {"rank": 300, "bytes_per_value": 4, "model": "qwen2.5-7b"})
    view.controls["rank"].value = 1
    assert "not measured" in view.message.value


@pytest.mark.parametrize(("name", "bad"), [("rank", 0), ("rank", 10**6), ("rank", float("nan")), ("rank", -3)])
def test_the_view_shows_bad_input_instead_of_a_traceback(name, bad):
    assert_bad_input_is_shown(LatentRankView(), name, bad)
