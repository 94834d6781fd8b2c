"""The paged engine with a window per layer (issue 45 item 3): KV-cache groups on one pool, local blocks freed.

The reference is the attention mask: ``NoCacheBackend(layer_windows=...)`` over the whole sequence at every step,
as generate(cache="local_global") is tested against it (test_local_global.py).
"""

from __future__ import annotations

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.backends.sliding import local_global_windows
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.model_runner import ModelRunner
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_groups import NULL_BLOCK, KVCacheGroup, kv_cache_groups
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

BLOCK = 4
WINDOW = 7  # not a multiple of the block size
LAYERS = 12  # Gemma 3's pattern: layers 5 and 11 global, ten local: groups of two layers
NEW = 20


def _prompts(lengths=(5, 23, 40)):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 90, (n,), generator=g).tolist() for n in lengths]


def _reference(model, prompt, windows, steps=NEW):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor(ids), torch.arange(len(ids)), NoCacheBackend(layer_windows=windows))
            ids.append(int(logits[-1].argmax()))
    return ids[len(prompt) :]


def _engine(model, windows, num_blocks=200, **overrides):
    config = EngineConfig(block_size=BLOCK, num_blocks=num_blocks, layer_windows=windows, **overrides)
    return LLMEngine(model, config)


PARAMS = SamplingParams(max_new_tokens=NEW, stop_on_eos=False)


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def model(request):
    return make_tiny_model(request.param, max_position_embeddings=256, num_layers=LAYERS)


def test_layers_with_one_window_form_groups_of_equal_size_global_first():
    groups = kv_cache_groups(local_global_windows(30, 1024))  # SmolLM2 with Gemma 3's pattern
    assert [len(g.layers) for g in groups] == [5] * 6
    assert groups[0] == KVCacheGroup(None, (5, 11, 17, 23, 29))
    assert groups[1] == KVCacheGroup(1024, (0, 1, 2, 3, 4)) and all(g.window == 1024 for g in groups[1:])
    # Counts that share no divisor (7 local, 3 global) make groups of one layer: the gcd rule
    assert [len(g.layers) for g in kv_cache_groups((8,) * 7 + (None,) * 3)] == [1] * 10
    assert [g.window for g in kv_cache_groups((4, None, 6, None, 4, 9))] == [None, None, 4, 4, 6, 9]
    with pytest.raises(ValueError, match="window"):
        kv_cache_groups((0, None))


@pytest.mark.parametrize("batched_tokens", [2048, 8, 3], ids=["whole prompts", "chunks of 8", "chunks of 3"])
def test_engine_with_windows_equals_the_mask_reference_token_for_token(model, batched_tokens):
    windows = local_global_windows(LAYERS, WINDOW)
    prompts = _prompts()
    engine = _engine(model, windows, max_num_batched_tokens=batched_tokens)
    outputs = engine.generate(prompts, PARAMS)
    for prompt, out in zip(prompts, outputs, strict=True):
        assert out.tokens == _reference(model, prompt, windows)
    assert _reference(model, prompts[2], windows) != _reference(model, prompts[2], None)  # the windows matter
    assert engine.kv_cache_manager.num_used_blocks == 0


def test_windows_of_several_sizes_each_their_own_group():
    windows = (4, None, 6, None, 4, 9)
    model = make_tiny_model("auto", max_position_embeddings=256, num_layers=len(windows))
    prompts = _prompts((9, 17))
    outputs = _engine(model, windows, max_num_batched_tokens=5).generate(prompts, PARAMS)
    assert [o.tokens for o in outputs] == [_reference(model, p, windows) for p in prompts]


def _expected_blocks(seq, windows):
    """Global group: every block up to its computed tokens (or the whole prompt, mid-prefill); a local group of
    window w: the blocks that overlap positions c - w + 1 .. c - 1, what the next token (at c) sees."""
    done = seq.num_computed_tokens
    expected = []
    for group in kv_cache_groups(windows):
        if group.window is None:
            expected.append(ceil_div(max(done, seq.num_prompt_tokens), BLOCK))
        else:
            expected.append(ceil_div(done, BLOCK) - max(0, done - group.window + 1) // BLOCK)
    return expected


def test_blocks_held_after_every_step_follow_the_window(model):
    windows = local_global_windows(LAYERS, WINDOW)
    engine = _engine(model, windows, max_num_batched_tokens=16)
    for prompt in _prompts():
        engine.add_request(prompt, PARAMS)
    manager, pool = engine.kv_cache_manager, engine.kv_cache_manager.block_pool
    steps = 0
    while engine.has_unfinished_requests:
        engine.step()
        steps += 1
        held = [0] * pool.num_blocks
        for seq in engine.scheduler.running:
            assert [sum(b != NULL_BLOCK for b in t) for t in seq.group_tables] == _expected_blocks(seq, windows)
            for table in seq.group_tables:
                for b in table:
                    if b != NULL_BLOCK:
                        held[b] += 1
        pool.check_invariants(held)  # every block held once, by one table, or free
    assert steps > NEW and pool.num_free_blocks == pool.num_blocks
    global_blocks = ceil_div(40 + NEW - 1, BLOCK)  # the longest sequence, every group global
    assert max(manager.peak_blocks.values()) < global_blocks * len(kv_cache_groups(windows)) / 2


def test_a_request_that_fits_with_windows_is_admitted_where_all_global_is_refused(model):
    """The same bytes: 10 blocks of every layer, or 60 blocks of one group's two layers."""
    windows = local_global_windows(LAYERS, WINDOW)
    prompt = _prompts((50,))[0]
    plain = LLMEngine(model, EngineConfig(block_size=BLOCK, num_blocks=10))
    assert "could never fit" in (plain.generate([prompt], PARAMS)[0].refusal or "")
    engine = _engine(model, windows, num_blocks=10 * len(kv_cache_groups(windows)))
    assert engine.pool.nbytes == plain.pool.nbytes
    out = engine.generate([prompt], PARAMS)[0]
    assert out.refusal is None and out.tokens == _reference(model, prompt, windows)


def test_without_windows_the_engine_is_what_it_was(model):
    prompts = _prompts()
    plain = LLMEngine(model, EngineConfig(block_size=BLOCK, num_blocks=200))
    assert type(plain.kv_cache_manager) is KVCacheManager and type(plain.model_runner) is ModelRunner
    assert plain.pool.k.shape[0] == LAYERS
    everyone_global = _engine(model, (None,) * LAYERS, max_num_batched_tokens=8)  # one group of every layer
    tokens = [o.tokens for o in plain.generate(prompts, PARAMS)]
    assert [o.tokens for o in everyone_global.generate(prompts, PARAMS)] == tokens
    wide = _engine(model, local_global_windows(LAYERS, 64))  # a window longer than every sequence
    assert [o.tokens for o in wide.generate(prompts, PARAMS)] == tokens


def test_what_windows_do_not_support_is_refused_with_the_reason(model):
    windows = local_global_windows(LAYERS, WINDOW)
    with pytest.raises(ValueError, match="not supported with windows: prefix caching"):
        EngineConfig(layer_windows=windows, enable_prefix_caching=True)
    with pytest.raises(ValueError, match="not supported with windows"):
        LLMEngine(model, EngineConfig(layer_windows=windows), block_manager=KVCacheManager)
    with pytest.raises(ValueError, match="12 layers"):
        _engine(model, windows[:-1])
    with pytest.raises(ValueError, match="window"):
        EngineConfig(layer_windows=(0,) * LAYERS)
    out = _engine(model, windows).generate([[5, 6, 7]], SamplingParams(max_new_tokens=3, n=2))[0]
    assert "not supported with windows: n = 2" in (out.refusal or "")


def test_a_tight_pool_preempts_and_recomputes_with_windows_to_the_same_tokens(model):
    windows = local_global_windows(LAYERS, WINDOW)
    prompts = _prompts((30, 26, 34))
    engine = _engine(model, windows, num_blocks=40, max_num_batched_tokens=16)
    outputs = engine.generate(prompts, PARAMS)
    assert engine.events.of_kind(EventKind.PREEMPT)  # the pool could not hold all three at once
    assert [o.tokens for o in outputs] == [_reference(model, p, windows) for p in prompts]
    assert engine.kv_cache_manager.num_free_blocks == 40
