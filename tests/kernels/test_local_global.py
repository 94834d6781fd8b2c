"""Local and global layers (issue 45 item 3): a window per layer, equal to its attention-mask reference."""

from __future__ import annotations

import pytest
import torch
from factories import make_config, make_tiny_model, run_chunks

from kvcourse.kernels import costs, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.backends.sliding import LayerWindowsBackend, local_global_windows
from kvcourse.kernels.measure.local_global import local_global_layout, masked_logits, window_sweep

PROMPT = [5, 17, 33, 42, 61, 8, 90, 12]
WINDOWS = (4, None, 6, None, 4, 9)  # local and global layers, windows of different sizes


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def model(request):
    return make_tiny_model(request.param, max_position_embeddings=256, num_layers=len(WINDOWS))


def test_gemma_3s_pattern_makes_every_sixth_layer_global():
    windows = local_global_windows(30, 1024)
    assert [layer for layer, w in enumerate(windows) if w is None] == [5, 11, 17, 23, 29]
    assert set(windows) == {1024, None} and local_global_windows(4, 128, local_per_global=1) == (128, None, 128, None)
    with pytest.raises(ValueError, match="window"):
        local_global_windows(30, 0)


@pytest.mark.parametrize(
    "chunks",
    [
        [(0, 12), (12, 13), (13, 14), (14, 20)],  # a prefill longer than every window, then decode
        [(0, 3)] + [(i, i + 1) for i in range(3, 20)],  # windows fill while decoding
        [(0, 7), (7, 16), (16, 20)],  # chunks that straddle the windows
    ],
)
def test_a_window_per_layer_equals_the_masked_full_attention(model, chunks):
    ids = torch.arange(3, 23)
    with torch.no_grad():
        reference = model(ids, torch.arange(20), NoCacheBackend(layer_windows=WINDOWS))
        unwindowed = model(ids, torch.arange(20), NoCacheBackend())
    cache = LayerWindowsBackend(model.config, WINDOWS, 20, torch.float32, "cpu")
    assert (run_chunks(model, cache, ids, chunks) - reference).abs().max().item() <= 5e-5  # rounding, over 6 layers
    assert (reference - unwindowed).abs().max().item() > 1e-3  # the windows did change what the layers saw
    assert [cache.held_tokens(layer) for layer in range(len(WINDOWS))] == [4, 20, 6, 20, 4, 9]


def test_local_layers_hold_their_window_and_global_layers_everything(model):
    result = generate(
        model,
        PROMPT,
        30,
        cache=lambda req: LayerWindowsBackend(
            req.model.config, WINDOWS, req.max_tokens, req.model.dtype, req.model.device
        ),
        eos_token_id=[],
    )
    per_token = costs.kv_bytes_per_token(model.config, 4) // len(WINDOWS)  # one layer's K and V, float32
    for stat in result.stats:
        held = sum(stat.context_len if w is None else min(stat.context_len, w) for w in WINDOWS)
        assert stat.kv_cache_bytes == held * per_token
    last = result.stats[-1]  # a decode step: its local layers score at most their windows' keys
    assert last.flops == costs.forward_flops(model.config, 1, last.context_len, num_logits=1, window=WINDOWS)
    assert last.flops < costs.forward_flops(model.config, 1, last.context_len, num_logits=1)


def test_generate_local_global_equals_the_mask_reference_token_for_token():
    model = make_tiny_model("auto", max_position_embeddings=256, num_layers=12)
    windows = local_global_windows(12, 6)
    ids, tokens = list(PROMPT), []
    with torch.no_grad():
        for _ in range(25):  # the reference: no cache, every step the whole sequence under the windows' masks
            logits = model(torch.tensor(ids), torch.arange(len(ids)), NoCacheBackend(layer_windows=windows))
            ids.append(int(logits[-1].argmax()))
    tokens = ids[len(PROMPT) :]
    assert generate(model, PROMPT, 25, cache="local_global", window=6, eos_token_id=[]).tokens == tokens
    assert generate(model, PROMPT, 25, cache="local_global", window=64, eos_token_id=[]).tokens == (
        generate(model, PROMPT, 25, eos_token_id=[]).tokens
    )  # windows longer than the sequence: the plain cache


def test_bad_windows_are_refused_with_a_reason():
    config = make_config(num_layers=2)
    with pytest.raises(ValueError, match="one window per layer"):
        LayerWindowsBackend(config, (4,), 10, torch.float32, "cpu")
    with pytest.raises(ValueError, match="window"):
        LayerWindowsBackend(config, (4, 0), 10, torch.float32, "cpu")
    with pytest.raises(ValueError, match="needs window"):
        generate(make_tiny_model("off"), PROMPT, 2, cache="local_global")
    with pytest.raises(ValueError, match="not both"):
        NoCacheBackend(window=3, layer_windows=(3, None))
    with pytest.raises(ValueError, match="per-layer windows"):
        costs.score_cells(config, 1, 10, window=(4,))


def test_the_cache_held_equals_the_layout_of_local_and_global_layers():
    model = make_tiny_model("off", max_position_embeddings=256, num_layers=12)
    window, n = 6, 20
    cache = LayerWindowsBackend(model.config, local_global_windows(12, window), n, torch.float32, "cpu")
    run_chunks(model, cache, torch.arange(3, 3 + n), [(0, 9), (9, n)])
    layout = local_global_layout(model.config, window, bytes_per_value=4)
    assert cache.kv_cache_bytes == layout.bytes_at(n).total
    assert layout.bytes_at(n).growing == 2 * n * 2 * model.config.num_kv_heads * model.config.head_dim * 4  # 2 global
    assert layout.bytes_at(n).bounded == 10 * window * 2 * model.config.num_kv_heads * model.config.head_dim * 4
    short = local_global_layout(make_config(num_layers=4), window, bytes_per_value=4)  # every layer local
    assert short.bytes_at(n).growing == 0 and short.layers_of("window") == 4


def test_window_sweep_rows_start_at_the_model_itself():
    model = make_tiny_model("off", max_position_embeddings=256, num_layers=12)
    ids = list(range(3, 43))
    assert list(window_sweep(model, ids, [4]).index) == ["all global", "window 4"]
    table = window_sweep(model, ids, [4, 64], sinks=4)
    assert list(table.index) == ["all global", "window 64", "window 64 + 4 sinks", "window 4", "window 4 + 4 sinks"]
    shipped, roomy, narrow = (table.loc[row] for row in ("all global", "window 64", "window 4"))
    assert shipped["next-token agreement"] == roomy["next-token agreement"] == 1.0  # 64 keys hold all 40 tokens
    assert shipped["perplexity"] == pytest.approx(roomy["perplexity"], rel=1e-6) and roomy["share of all global"] == 1
    assert narrow["share of all global"] == pytest.approx((2 * 40 + 10 * 4) / (12 * 40))
    assert narrow["next-token agreement"] < 1.0
    sunk = table.loc["window 4 + 4 sinks"]  # four more tokens on each local layer
    assert sunk["share of all global"] == pytest.approx((2 * 40 + 10 * 8) / (12 * 40))


def test_sinks_keep_the_first_tokens_beside_the_window():
    model = make_tiny_model("off", max_position_embeddings=256, num_layers=12)
    ids = list(range(3, 33))
    windows = local_global_windows(12, 4)
    plain = masked_logits(model, ids, windows)
    assert torch.equal(masked_logits(model, ids, windows, sinks=0), plain)
    sunk = masked_logits(model, ids, windows, sinks=4)
    assert torch.allclose(sunk[:4], plain[:4], atol=1e-5)  # positions 0-3: the window still holds tokens 0-3
    assert not torch.allclose(sunk[4:], plain[4:], atol=1e-3)  # from position 4 the window has let token 0 go
    wide = local_global_windows(12, 8)  # a window of 8 with 4 sinks, against a window of 12 for the first 12 tokens
    assert torch.allclose(
        masked_logits(model, ids[:12], wide, sinks=4), masked_logits(model, ids[:12], None), atol=1e-5
    )
