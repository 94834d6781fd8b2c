"""Named regressions for issue 18's "no hidden state" items (lessons 08, 12, 14)."""

from __future__ import annotations

import pytest
import torch

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, generate
from kvcourse.kernels.engine.threads import thread_policy
from kvcourse.kernels.memory.events import EventKind, EventLog

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

PROMPT = [5, 6, 7, 8, 9, 10]


def test_engine_takes_the_models_eos_by_default(tiny_model):
    assert tiny_model.config.eos_token_ids == (2,)
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    assert engine.eos_token_ids == {2}
    assert LLMEngine(tiny_model, EngineConfig(block_size=4, eos_token_id=7)).eos_token_ids == {7}


def test_forked_samples_respect_max_num_seqs(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, max_num_seqs=4))
    for _ in range(3):
        engine.add_request(PROMPT, SamplingParams(max_new_tokens=4, n=3))
    while engine.has_unfinished_requests:
        engine.step()
        assert len(engine.scheduler.running) <= 4
    refused = engine.requests[engine.add_request(PROMPT, SamplingParams(n=5))]
    assert "max_num_seqs" in refused.refusal


def test_generate_refuses_what_it_would_ignore(tiny_model):
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(tiny_model, PROMPT, 3, sampling=SamplingParams(max_new_tokens=3))
    with pytest.raises(ValueError, match="n = 2"):
        generate(tiny_model, PROMPT, 3, sampling=SamplingParams(n=2))
    with pytest.raises(ValueError, match="paged"):
        generate(tiny_model, PROMPT, 3, cache="paged", attention="naive")


def test_thread_policy_is_set_once_and_restored(tiny_model):
    before = torch.get_num_threads()
    with thread_policy(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    generate(tiny_model, PROMPT, 2, num_threads=1)
    assert torch.get_num_threads() == before
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_threads=1 if before != 1 else 2))
    assert torch.get_num_threads() == before, "making an engine leaves torch's threads alone"
    engine.add_request(PROMPT, SamplingParams(max_new_tokens=2))
    engine.step()
    assert torch.get_num_threads() == before, "a step restores what it found"
    engine.generate([PROMPT], SamplingParams(max_new_tokens=2))
    assert torch.get_num_threads() == before


def test_aborting_an_unknown_request_says_which_exist(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    with pytest.raises(KeyError, match="no request 7 to abort: this engine's requests are none yet"):
        engine.abort_request(7)
    engine.add_request(PROMPT, SamplingParams(max_new_tokens=2))
    with pytest.raises(KeyError, match="ids 0 to 0"):
        engine.abort_request(3)


def test_event_log_is_bounded_and_optional(tiny_model):
    log = EventLog(max_events=3)
    for _ in range(10):
        log.record(EventKind.ALLOCATE)
    assert len(log.events) == 3 and log.counts() == {"allocate": 10}
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, max_events=0))
    engine.generate([PROMPT], SamplingParams(max_new_tokens=3))
    assert not engine.events.events and engine.events.counts()["allocate"] > 0


def test_abort_frees_blocks_and_reports_the_reason(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    rid = engine.add_request(PROMPT, SamplingParams(max_new_tokens=20, n=2))
    engine.step()
    engine.abort_request(rid)
    out = engine.requests[rid].output()
    assert out.finished and set(out.finish_reasons) == {"abort"}
    assert engine.kv_cache_manager.num_free_blocks == engine.num_blocks
