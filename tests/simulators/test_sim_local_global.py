"""Lesson 24's simulator: one sequence's cache equal to the engine's local and global layers at every context, the
measured curve read between its windows (and nowhere else), the halving step, its refusals, and the view."""

from __future__ import annotations

import math

import pytest
import torch
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import costs
from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.sliding import LayerWindowsBackend, local_global_windows
from kvcourse.kernels.measure.local_global import window_sweep
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.local_global import (
    LocalGlobal,
    LocalGlobalConfig,
    LocalGlobalView,
    Quality,
    WindowCurve,
    curve_from_sweep,
)
from kvcourse.simulators.local_global_model import SMOLLM2_CURVE

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

CURVE = WindowCurve(Quality(10.0, 1.0), {64: Quality(40.0, 0.5), 16: Quality(160.0, 0.2)})


def test_smollm2_by_hand_a_sixth_of_its_layers_global():
    sim = LocalGlobal(LocalGlobalConfig(model="smollm2-135m", window=1024, bytes_per_value=4))
    per_layer_token = 2 * 3 * 64 * 4  # K and V of 3 KV heads of 64 values, float32
    assert sim.local_layers() == 25
    assert sim.bytes_at(8192) == (5 * 8192 + 25 * 1024) * per_layer_token == 102_236_160  # the benchmark's figure
    assert sim.all_global_at(8192) == 30 * 8192 * per_layer_token == 377_487_360
    assert sim.bytes_at(500) == sim.all_global_at(500)  # every window holds the whole sequence
    gpt_oss_like = LocalGlobal(LocalGlobalConfig(model="llama-3-8b", window=128, local_per_global=1))
    assert gpt_oss_like.local_layers() == 16 == MODEL_CONFIGS["llama-3-8b"].num_layers // 2


@pytest.mark.parametrize(("window", "ratio"), [(4, 5), (6, 1), (3, 2)])
def test_the_simulators_bytes_are_the_engines_held_tensors_at_every_length(window, ratio):
    """The simulator equals the engine: LayerWindowsBackend's kv_cache_bytes after a prefill and decodes."""
    model = make_tiny_model("auto", max_position_embeddings=64, num_layers=6)
    windows = local_global_windows(6, window, ratio)
    cache = LayerWindowsBackend(model.config, windows, 64, torch.float32, "cpu")
    sim = LocalGlobal(LocalGlobalConfig(model="custom", window=window, local_per_global=ratio, context=20,
                                        bytes_per_value=4, model_config=model.config))  # fmt: skip
    steps = [(0, 9), *((n, 1) for n in range(9, 20))]  # a prefill of 9 tokens, then one token at a time
    with torch.inference_mode():
        for start, count in steps:
            cache.begin_step(StepMetadata(start, count))
            model(torch.arange(3, 3 + count), torch.arange(start, start + count), cache)
            cache.end_step()
            assert sim.bytes_at(start + count) == cache.kv_cache_bytes
    assert sim.all_global_at(20) == costs.kv_bytes_per_token(model.config, 4) * 20


def test_the_curve_is_read_at_its_windows_between_them_on_a_log_scale_and_nowhere_else():
    assert CURVE.at(64) == Quality(40.0, 0.5) and CURVE.at(16) == Quality(160.0, 0.2)
    between = CURVE.at(32)  # half way from 16 to 64 on a log scale
    assert between is not None
    assert between.perplexity == pytest.approx(math.sqrt(40.0 * 160.0)) and between.agreement == pytest.approx(0.35)
    assert CURVE.at(8) is None and CURVE.at(65) is None
    with pytest.raises(ValueError, match="two or more"):
        WindowCurve(Quality(10.0, 1.0), {64: Quality(40.0, 0.5)})
    with pytest.raises(ValueError, match="at least 1"):
        WindowCurve(Quality(0.5, 1.0), {64: Quality(40.0, 0.5), 16: Quality(160.0, 0.2)})


def test_quality_only_at_the_measured_pattern_and_a_larger_model_reads_the_same_window():
    small = LocalGlobal(LocalGlobalConfig(model="smollm2-135m", window=512))
    big = LocalGlobal(LocalGlobalConfig(model="llama-3-70b", window=512))
    assert small.quality == big.quality == SMOLLM2_CURVE.points[512]
    assert LocalGlobal(LocalGlobalConfig(window=512, local_per_global=1)).quality is None


def test_the_curve_from_the_engines_sweep():
    model = make_tiny_model("auto", max_position_embeddings=64, num_layers=6)  # layers 0-4 local, 5 global
    table = window_sweep(model, list(range(3, 40)), [16, 8, 4])
    curve = curve_from_sweep(table)
    assert curve.windows == [4, 8, 16] and curve.everything == Quality(table["perplexity"].iloc[0], 1.0)
    for name, row in table.iloc[1:].iterrows():
        assert curve.at(int(str(name).split()[-1])) == Quality(row["perplexity"], row["next-token agreement"])


def test_step_halves_the_window_down_to_one_and_reset_goes_back():
    sim = LocalGlobal(LocalGlobalConfig(window=5))
    assert [sim.step(), sim.step()] == [2, 1]
    with pytest.raises(InvalidInput, match="smallest"):
        sim.step()
    sim.reset()
    assert sim.window == 5


@pytest.mark.parametrize(
    "changes",
    [{"window": 0}, {"window": 2.5}, {"local_per_global": 0}, {"local_per_global": 12}, {"context": 0},
     {"bytes_per_value": 3}, {"model": "x"}],
)  # fmt: skip
def test_bad_input_is_refused_with_the_control_named(changes):
    with pytest.raises(InvalidInput):
        LocalGlobalConfig(**changes)


def test_the_view_draws_redraws_and_says_where_nothing_was_measured():
    view = LocalGlobalView()
    assert view.error is None and shows_png(view) and "assumption" in view.message.value
    view.step_button.click()
    assert view.controls["window"].value == 512 and view.model.window == 512
    view.reset_button.click()
    assert_each_control_redraws(
        view, {"window": 300, "local_per_global": 3, "context": 131072, "bytes_per_value": 4, "model": "smollm2-135m"}
    )
    assert "not measured" in view.message.value  # three local layers per global: not the measured pattern
    view.controls["local_per_global"].value = 5
    assert "assumption" not in view.message.value and "perplexity" in view.message.value


@pytest.mark.parametrize(
    ("name", "bad"), [("window", 0), ("context", 10**9), ("window", float("nan")), ("local_per_global", -3)]
)
def test_the_view_shows_bad_input_instead_of_a_traceback(name, bad):
    assert_bad_input_is_shown(LocalGlobalView(), name, bad)
