"""The 8-bit and 2-bit caches of issue 45 (backends/fp8.py, backends/kivi.py): each round trip within its stated
error, the bytes each stores equal to its formula in costs, and each cache in the engine's generate()."""

from __future__ import annotations

import pytest
import torch
from factories import make_config, make_tiny_model

from kvcourse.kernels import costs, generate
from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend
from kvcourse.kernels.attention.backends.fp8 import FP8, FP8_MAX, FP8KVBackend, dequantize_fp8, quantize_fp8, scale_for
from kvcourse.kernels.attention.backends.kivi import Kivi2Backend, dequantize_2bit, pack, quantize_2bit, unpack
from kvcourse.kernels.measure.agreement import all_logits
from kvcourse.kernels.measure.perplexity import perplexity


@pytest.fixture(scope="module")
def model():
    """A tiny model whose head_dim (32) holds a KIVI group of 32 channels."""
    return make_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2, max_position_embeddings=256)


def feed(model, backend, ids, step):
    """The logits of every position, the text fed ``step`` tokens at a time."""
    out = []
    with torch.no_grad():
        for start in range(0, len(ids), step):
            end = min(len(ids), start + step)
            backend.begin_step(StepMetadata(start, end - start))
            out.append(model(ids[start:end], torch.arange(start, end), backend))
            backend.end_step()
    return torch.cat(out)


def test_fp8_round_trip_is_within_e4m3s_step_and_saturates_past_448_times_the_scale():
    x = torch.randn(3, 50, 16) * torch.logspace(-2, 1, 50)[None, :, None]
    scale = scale_for(x)
    x8, saturated = quantize_fp8(x, scale)
    assert x8.dtype == FP8 and x8.element_size() == 1 and saturated == 0
    back = dequantize_fp8(x8, scale, torch.float32)
    normal = x.abs() >= 2**-6 * scale  # E4M3's normal numbers: 3 mantissa bits, a step of 1/8 of the power of two
    assert ((back - x).abs()[normal] <= x.abs()[normal] / 16 + 1e-7).all()
    assert ((back - x).abs() <= 2**-9 * scale + x.abs() / 16).all()  # below: subnormal steps of 2**-9
    assert float(x.abs().max()) / scale == pytest.approx(FP8_MAX)
    big, saturated = quantize_fp8(torch.tensor([1000.0, -3.0]), scale=1.0)
    assert saturated == 1 and big.float().tolist() == [FP8_MAX, -3.0]


def test_fp8_cache_stores_one_byte_a_value_and_stays_close(model):
    ids = torch.arange(3, 63)
    exact = feed(model, ContiguousKVBackend(model.config, 60, torch.float32, "cpu"), ids, 20)
    fp8 = FP8KVBackend(model.config, 8, torch.float32, "cpu")  # grows as it fills, as the contiguous cache does
    approx = feed(model, fp8, ids, 20)
    assert not torch.equal(approx, exact) and approx.argmax(-1).eq(exact.argmax(-1)).float().mean() > 0.6  # flat
    assert 0 < fp8.error.relative_rms_error < 0.04  # E4M3: at most 1/16 of a value, about 2-3 % on average
    assert fp8.kv_cache_bytes == 60 * costs.fp8_kv_bytes_per_token(model.config) + 2 * model.config.num_layers * 4
    assert costs.fp8_kv_bytes_per_token(model.config) * 2 == costs.kv_bytes_per_token(model.config, 2)  # half of bf16
    assert all(s is not None for s in fp8.k_scale + fp8.v_scale)  # set by the first 20 tokens, kept after


def test_two_bit_codes_pack_four_to_a_byte_and_round_trip_within_half_a_step():
    codes = torch.randint(0, 4, (2, 5, 16), dtype=torch.uint8)
    packed = pack(codes)
    assert packed.shape == (2, 5, 4) and torch.equal(unpack(packed), codes)
    x = torch.randn(2, 32, 8) * 3
    for dim in (1, 2):  # keys per channel (over tokens), values per token (over channels)
        q, low, step = quantize_2bit(x, dim)
        assert q.max() <= 3 and low.dtype == step.dtype == torch.float16
        back = dequantize_2bit(q, low, step, torch.float32)
        assert ((back - x).abs() <= step.float() / 2 + 2e-3 * x.abs().amax()).all()  # float16 low and step


def test_kivi_keeps_the_recent_tokens_exact_and_quantises_the_rest_in_groups(model):
    ids = torch.arange(100) % 90 + 3
    exact = feed(model, ContiguousKVBackend(model.config, 100, torch.float32, "cpu"), ids, 1)
    short = Kivi2Backend(model.config, torch.float32, "cpu", group=32, residual=32)
    assert torch.allclose(feed(model, short, ids[:63], 1), exact[:63], atol=1e-5)  # under 64 tokens: nothing quantised
    assert short.num_quantized_tokens == 0
    kivi = Kivi2Backend(model.config, torch.float32, "cpu", group=32, residual=32)
    approx = feed(model, kivi, ids, 1)
    assert kivi.num_quantized_tokens == 64 and kivi.recent_k[0].shape[1] == 36  # 32 to 63 stay in full precision
    assert torch.allclose(approx[:63], exact[:63], atol=1e-5)  # the 64th token finds the first group quantised
    assert not torch.allclose(approx[63:], exact[63:], atol=1e-3)
    per_token = costs.kivi_kv_bytes_per_token(model.config, group=32)
    recent = 2 * model.config.num_layers * model.config.num_kv_heads * 36 * model.config.head_dim * 4  # float32
    assert kivi.kv_cache_bytes == 64 * per_token + recent
    assert 0 < kivi.error.relative_rms_error < 0.5


def test_the_low_bit_formats_against_their_hand_counts():
    smollm2 = make_config(num_layers=30, num_heads=9, num_kv_heads=3, hidden_size=576)
    assert smollm2.head_dim == 64
    assert costs.fp8_kv_bytes_per_token(smollm2) == 2 * 30 * 3 * 64 == 11_520
    # per layer and KV head: codes 2 x 64 / 4 = 32 bytes; K's low and step per channel over 32 tokens 2 x 2 x 64 / 32
    # = 8; V's per 32 channels 2 x 2 x 2 = 8: 48 bytes, x 30 layers x 3 KV heads
    assert costs.kivi_kv_bytes_per_token(smollm2) == 48 * 30 * 3 == 4_320
    with pytest.raises(ValueError, match="multiple"):
        costs.kivi_kv_bytes_per_token(smollm2, group=48)
    with pytest.raises(ValueError, match="multiple"):
        Kivi2Backend(make_config(), torch.float32, "cpu")  # head_dim 8 holds no group of 32 channels


@pytest.mark.parametrize("cache", ["fp8", "kivi2"])
def test_each_format_is_a_cache_generate_runs_and_perplexity_reads_through(model, cache):
    prompt = list(range(5, 45))  # 40 tokens, then 30 more: the 2-bit cache quantises its first group at 64
    result = generate(model, prompt, 30, cache=cache, eos_token_id=[])
    assert len(result.tokens) == 30 and result.backend.num_computed_tokens == 69
    ids = [3 + i % 90 for i in range(107)]
    assert all_logits(model, ids, cache, chunk=16).shape == (len(ids), model.config.vocab_size)
    assert perplexity(model, ids, cache, chunk=16) > 0
    with pytest.raises(ValueError, match="chunk"):
        all_logits(model, ids, "none", chunk=16)
    with pytest.raises(ValueError, match="one of"):
        all_logits(model, ids, "fp4")


def test_grouping_by_channel_suits_outlier_channels_and_the_model_k_v_are_read_from_the_cache(model):
    from kvcourse.kernels.measure.kv_grouping import cached_kv, grouped_error, kv_grouping, top_channel_share

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 64, 32, generator=gen)
    x[..., 3] += 40  # one channel large for every token, as keys have them
    assert top_channel_share(x, top=1) > 0.9 and top_channel_share(torch.ones(2, 8, 32), top=4) == pytest.approx(0.125)
    assert grouped_error(x, "channel", 32) < 0.5 * grouped_error(x, "token", 32)
    ids = [3 + i % 90 for i in range(70)]
    keys, values = cached_kv(model, ids)
    assert len(keys) == model.config.num_layers and keys[0].shape == (2, 70, model.config.head_dim)
    table = kv_grouping(model, ids)
    assert list(table.columns)[:2] == ["K in top 4 channels", "V in top 4 channels"] and len(table) == 2
    assert ((table > 0) & (table < 1)).all().all()
    with pytest.raises(ValueError, match="channel"):
        grouped_error(x, "head", 32)
    with pytest.raises(ValueError, match="at least one group"):
        kv_grouping(model, ids[:10])
