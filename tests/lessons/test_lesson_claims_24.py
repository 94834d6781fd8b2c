"""Lesson 24's claims that do not need the real model, checked on a tiny model and on the sweep's sizes.

The lesson generates with local and global layers and weighs what each kind holds (kernels/measure/window_growth.py),
checks the tokens against the attention-mask reference, and sweeps the window on the held-out text
(kernels/measure/local_global.py). Its expects on the real model run with the notebook
(tests/lessons/test_notebooks.py); here: every sweep ends in two halvings with every window shorter than the text it
reads, the weighed table is the cache's own bytes and the layout's at every step, the generation is generate's
local_global mode token for token, and a prompt longer than the window leaves the local layers flat from the first
step.
"""

from __future__ import annotations

import pytest
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels import generate
from kvcourse.kernels.measure import engine_windows, window_growth
from kvcourse.kernels.measure.local_global import local_global_layout
from kvcourse.local_global_sweep import engine_blocks_size, window_sweep_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

PROMPT = [3, 17, 5, 42, 8, 23, 11, 60, 2, 9, 31, 14]


@pytest.mark.parametrize("headless", [True, False])
def test_every_sweep_ends_in_two_halvings_of_windows_shorter_than_its_text(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    sweep = window_sweep_size()
    windows = sweep.windows
    assert len(windows) >= 3 and all(a == 2 * b for a, b in zip(windows, windows[1:], strict=False))
    assert max(windows) < min(sweep.max_tokens, 2_938)  # the held-out text (Alice, chapter I) has 2,938 tokens
    assert sweep.max_tokens == 800 if headless else sweep.max_tokens > 2_938


@pytest.mark.parametrize("window", [4, 20])
def test_the_weighed_generation_is_generates_and_its_bytes_the_layouts(window):
    model = make_tiny_model("auto", max_position_embeddings=128, num_layers=6)
    result, held = window_growth.generate_held(model, PROMPT, 15, window)
    assert result.tokens == generate(model, PROMPT, 15, cache="local_global", window=window, eos_token_id=[]).tokens
    assert list(held.index) == list(range(len(PROMPT), len(PROMPT) + 15))
    layout = local_global_layout(model.config, window, bytes_per_value=4)
    for tokens, row in held.iterrows():
        parts = layout.bytes_at(int(tokens))
        assert row["local layers (bytes)"] == parts.bounded and row["global layers (bytes)"] == parts.growing
        assert row["all layers (bytes)"] == parts.total
    assert [s.kv_cache_bytes for s in result.stats] == list(held["all layers (bytes)"])
    flat = held["local layers (bytes)"].nunique() == 1
    assert flat == (window <= len(PROMPT))  # full after the prompt only where the prompt is longer than the window


@pytest.mark.parametrize("headless", [True, False])
def test_the_engine_run_serves_a_prompt_longer_than_every_window(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    size = engine_blocks_size()
    assert size.new_tokens > 1 and max(size.windows) < size.prompt_tokens <= 2_938  # the held-out text's tokens
    assert list(size.windows) == sorted(size.windows, reverse=True)


def test_the_engine_holds_fewer_blocks_of_every_layer_with_windows_and_writes_the_reference_tokens():
    model = make_tiny_model("auto", max_position_embeddings=128, num_layers=12)
    prompt = [(7 * i) % 90 + 3 for i in range(40)]
    table = engine_windows.engine_peak_blocks(model, prompt, 10, [12, 6], block_size=4)
    assert list(table.index) == ["all global", "window 12", "window 6"]
    assert table["peak blocks"].iloc[0] == 13  # 49 tokens computed at most (the last is sampled): 13 blocks of 4
    assert table["layers per block"].tolist() == [12, 2, 2]  # Gemma 3's pattern on 12 layers: groups of two
    full = table["in blocks of every layer"]
    assert full.iloc[0] > full.iloc[1] > full.iloc[2]
    per_layer = 4 * 2 * 2 * 8 * 4  # a block's K and V in one layer: 4 tokens, 2 KV heads of 8 dims, float32
    layers = table["layers per block"]
    assert (table["peak bytes"] == table["peak blocks"] * layers * per_layer).all()
    assert (table["agreement with the mask reference"] == 1).all()
