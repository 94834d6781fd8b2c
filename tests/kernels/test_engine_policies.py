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


def test_generate_refuses_a_parameter_list_of_the_wrong_length(tiny_model):
    """Three prompts and one SamplingParams in a list: a clear error, never one result for three prompts."""
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4))
    with pytest.raises(ValueError, match="3 prompts but 1 SamplingParams"):
        engine.generate([PROMPT, PROMPT[:3], PROMPT[2:]], [SamplingParams(max_new_tokens=2)])
    assert not engine.requests, "nothing was queued"
    outs = engine.generate([PROMPT, PROMPT[:3], PROMPT[2:]], SamplingParams(max_new_tokens=2))
    assert len(outs) == 3 and all(len(o.tokens) == 2 for o in outs)


class _AdmitsNoOne:
    """A lab C policy that never admits anyone (a learner's bug): the engine must not spin forever."""

    def choose_admission(self, waiting, free_blocks):
        return None

    def choose_victim(self, running, needy):
        return running[-1].seq_id


def test_a_stuck_engine_refuses_through_the_scheduler_ending_the_whole_request_with_the_real_cause(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=32), scheduling_policy=_AdmitsNoOne())
    rid = engine.add_request(PROMPT, SamplingParams(max_new_tokens=3, n=2))
    other = engine.add_request(PROMPT[:4], SamplingParams(max_new_tokens=3))
    steps = 0
    while engine.has_unfinished_requests:
        engine.step()
        steps += 1
    assert steps == 2, "one refusal per idle step, each through the scheduler"
    for request_id in (rid, other):
        req = engine.requests[request_id]
        assert req.status.value == "refused" and all(s.status.value == "finished" for s in req.seqs)
        assert "the scheduling policy admitted none of the" in req.refusal, "the cause, not 'no blocks'"
    assert not engine.scheduler.refused and engine.kv_cache_manager.num_free_blocks == 32
    assert engine.events.counts()["refuse"] == 2


def test_a_started_sequence_is_never_refused_as_stuck(tiny_model):
    """A sequence that has begun its answer (preempted, waiting to resume) is not refused: with only such
    sequences stuck the engine raises, naming the cause, and keeps every request."""
    from kvcourse.kernels.engine.scheduler import Scheduler

    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=8))
    rid = engine.add_request(PROMPT, SamplingParams(max_new_tokens=4))
    engine.step()
    engine.step()
    seq = engine.requests[rid].seqs[0]
    assert seq.num_completion_tokens >= 1
    engine.scheduler.preempt(seq)
    for _ in range(engine.kv_cache_manager.num_free_blocks - 1):  # a leak: it can never get its blocks back
        engine.kv_cache_manager.block_pool.allocate()
    with pytest.raises(RuntimeError, match="no waiting sequence can start again: sequence .* needs"):
        Scheduler.schedule(engine.scheduler)
    assert engine.requests[rid].status.value == "running" and seq in engine.scheduler.waiting
    assert not engine.scheduler.refused


def test_an_engine_never_changes_the_model_it_is_given(tiny_model):
    """EngineConfig(fast_paths=...) sets the fast paths on a twin sharing the weights: the caller's model keeps
    its modules, and a second engine on the same model with fast paths off really runs without them."""
    from kvcourse.kernels.model import cpu_fast, layers

    before = {name: type(m) for name, m in tiny_model.named_modules()}
    fast = LLMEngine(tiny_model, EngineConfig(block_size=4, fast_paths="auto"))
    assert {name: type(m) for name, m in tiny_model.named_modules()} == before
    assert fast.model is not tiny_model and type(fast.model.lm_head) is cpu_fast.FastLinear
    assert fast.model.lm_head.weight is tiny_model.lm_head.weight, "the weights are shared, not copied"
    off = LLMEngine(tiny_model, EngineConfig(block_size=4, fast_paths="off"))
    assert not any(isinstance(m, cpu_fast.FastLinear) for m in off.model.modules())
    assert type(off.model.lm_head) is layers.Linear and type(fast.model.lm_head) is cpu_fast.FastLinear
    params = SamplingParams(max_new_tokens=5, stop_on_eos=False)
    assert fast.generate([PROMPT], params)[0].tokens == off.generate([PROMPT], params)[0].tokens
    as_given = LLMEngine(tiny_model, EngineConfig(block_size=4))
    assert as_given.model is tiny_model, "fast_paths None runs the model as it is given"


def test_a_scheduling_policy_sees_the_step_being_scheduled(tiny_model):
    """SeqView.now is the engine step being scheduled: now - arrival is how long a request has been in the engine
    (lab C's first-token target is counted from it)."""
    from kvcourse.kernels.engine.policy import FCFSPolicy

    seen: list[tuple[int, int, int]] = []

    class Watching(FCFSPolicy):
        def choose_admission(self, waiting, free_blocks):
            seen.extend((view.now, view.arrival, engine.num_steps) for view in waiting)
            return None if not waiting or waiting[0].preempted_this_step else 0

    engine = LLMEngine(tiny_model, EngineConfig(max_num_seqs=1, num_blocks=32), scheduling_policy=Watching())
    for prompt in ([1, 2, 3], [4, 5], [6]):
        engine.add_request(prompt, SamplingParams(max_new_tokens=3, stop_on_eos=False))
    while engine.has_unfinished_requests:
        engine.step()
    assert seen and all(now == step for now, _, step in seen)
    assert max(now - arrival for now, arrival, _ in seen) >= 3  # the third request waited for two before it
