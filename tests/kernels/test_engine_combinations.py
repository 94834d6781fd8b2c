"""The engine's features two at a time: each pair is served, token for token as plain greedy decoding, or refused
with a message that names the pair (issues 45 and 46: per-layer windows, the radix prefix index, speculation, the
disk tier, n > 1 samples and a block manager of one's own).

The features' own tests go deeper (test_engine_windows, _radix, _speculation, _disk_tier, _seams and the state
machines); this file is the map of which pairs combine. A pair refused at ``EngineConfig`` or ``LLMEngine`` raises
ValueError; one refused per request (windows with n > 1) ends that request with the reason.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from test_engine_state_machine import packed_model

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.kernels.memory.disk_tier import TieredKVCacheManager
from kvcourse.kernels.memory.eviction import LRUEviction
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

FEATURES = ("windows", "radix", "speculation", "disk_tier", "n2", "block_manager")
PROMPTS = [[5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9], [40, 41, 42, 40, 41, 42, 43]]
GREEDY = SamplingParams(max_new_tokens=12, stop_on_eos=False)
NUM_BLOCKS = 14  # blocks of 4: the three requests (n = 2 too) do not fit at once, so some are preempted

REFUSED = {
    ("windows", "radix"): "not supported with layer_windows",
    ("windows", "speculation"): "speculation is not supported with layer_windows",
    ("windows", "disk_tier"): "not supported with windows: disk_tier",
    ("windows", "n2"): "not supported with windows: n = 2 samples",
    ("windows", "block_manager"): "not supported with windows: a block_manager",
    ("radix", "disk_tier"): "disk_tier keeps evicted prefix blocks: .*prefix_index='hash'",
    ("radix", "block_manager"): "prefix_index='radix' is the engine's own manager's: not with block_manager",
    ("disk_tier", "block_manager"): "disk_tier is a part of the engine's own KV-cache manager: not with block_manager",
}
PAIRS = list(itertools.combinations(FEATURES, 2))
SUPPORTED = [pair for pair in PAIRS if pair not in REFUSED]


def parts(features: tuple[str, ...], tmp_path) -> tuple[dict, dict, SamplingParams]:
    """EngineConfig keywords, LLMEngine keywords and the requests' parameters that turn ``features`` on."""
    num_layers = packed_model().config.num_layers
    config: dict = {"block_size": 4, "num_blocks": NUM_BLOCKS}
    engine: dict = {}
    params = GREEDY
    for feature in features:
        if feature == "windows":  # every layer local but the last
            config["layer_windows"] = (6,) * (num_layers - 1) + (None,)
        elif feature == "radix":
            config |= {"enable_prefix_caching": True, "prefix_index": "radix"}
        elif feature == "speculation":
            config["speculation"] = SpeculativeConfig(4)
        elif feature == "disk_tier":
            config |= {"enable_prefix_caching": True, "disk_tier": tmp_path}
        elif feature == "n2":
            params = replace(GREEDY, n=2)
        elif feature == "block_manager":  # a class called as (num_blocks, block_size), as lab A's is
            engine["block_manager"] = KVCacheManager
    return config, engine, params


def served(engine: LLMEngine, params: SamplingParams) -> list:
    """The prompts served twice (the second pass may find the first's blocks in a prefix cache)."""
    return [engine.generate(PROMPTS, params) for _ in range(2)]


@pytest.mark.parametrize("pair", REFUSED, ids="-".join)
def test_a_pair_that_does_not_combine_is_refused_with_a_message_that_names_it(pair, tmp_path):
    config, kw, params = parts(pair, tmp_path)
    try:
        engine = LLMEngine(packed_model(), EngineConfig(**config), **kw)
    except ValueError as err:
        assert re.search(REFUSED[pair], str(err)), str(err)
        return
    outputs = engine.generate(PROMPTS, params)  # refused per request: each one ends with the reason
    assert all(re.search(REFUSED[pair], o.refusal or "") for o in outputs), [o.refusal for o in outputs]


def test_windows_refuse_an_eviction_policy_as_they_refuse_a_block_manager():
    config, kw, _ = parts(("windows",), None)
    with pytest.raises(ValueError, match="not supported with windows: a block_manager or an eviction policy"):
        LLMEngine(packed_model(), EngineConfig(**config), eviction=LRUEviction())


@pytest.mark.parametrize("pair", SUPPORTED, ids="-".join)
def test_a_pair_that_combines_answers_as_plain_greedy_decoding(pair, tmp_path):
    config, kw, params = parts(pair, tmp_path)
    engine = LLMEngine(packed_model(), EngineConfig(**config), **kw)
    plain = LLMEngine(packed_model(), EngineConfig(block_size=4, num_blocks=NUM_BLOCKS))
    got, want = served(engine, params), served(plain, params)
    assert [[o.samples for o in run] for run in got] == [[o.samples for o in run] for run in want]
    assert all(o.refusal is None for run in got for o in run)
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks  # nothing held at the end
    if "speculation" in pair and "n2" not in pair:
        assert sum(c.drafted for c in engine.speculator.counts.values()) > 0
    if "speculation" in pair and "n2" in pair:  # n > 1 does not speculate: served as without it
        assert all(c.drafted == 0 for c in engine.speculator.counts.values())
    assert engine.events.counts().get("preempt", 0) > 0  # the pool is tight: the pair meets preemption too
    if {"radix", "disk_tier"} & set(pair):
        assert sum(o.num_cached_tokens for o in got[1]) > 0
    if "disk_tier" in pair:  # the second pass reads blocks the first one's evictions wrote
        assert isinstance(engine.kv_cache_manager, TieredKVCacheManager)
        assert engine.kv_cache_manager.tier.stats.restores > 0


def test_every_pair_is_either_refused_or_served():
    assert len(PAIRS) == 15 and len(SUPPORTED) == 7
    assert set(REFUSED) <= set(PAIRS)
