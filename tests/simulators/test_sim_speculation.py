"""Lesson 28's simulator: one draft, verify and rollback step through a block table, by hand and against the
engine's real block tables on a tiny model (drafts from an oracle that knows plain decoding's answer, made wrong
at a chosen place, so every accepted count occurs); the expected tokens a pass; refusals; the view."""

from __future__ import annotations

import itertools

import pytest
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.engine import speculation
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.speculation import (
    SpeculationConfig,
    SpeculationStep,
    SpeculationView,
    expected_tokens_per_pass,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_a_step_by_hand():
    step = SpeculationStep(SpeculationConfig(computed=30, block_size=16, k=4, accepted=1))
    assert (step.blocks_before, step.slots_written, step.blocks_during) == (2, 5, 3)  # slots 30..34
    assert (step.computed_after, step.blocks_after, step.blocks_freed) == (32, 2, 1)
    assert (step.slots_overwritten, step.tokens_out) == (3, 2)
    kinds = step.slot_kinds()
    assert len(kinds) == 3 and kinds[1][14:] == ["last", "accepted"] and kinds[2][:3] == ["rejected"] * 3
    full = SpeculationStep(SpeculationConfig(computed=30, block_size=16, k=4, accepted=4))
    assert (full.blocks_freed, full.tokens_out, full.computed_after) == (0, 5, 35)


def test_expected_tokens_per_pass():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(1.0, 4) == 5.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    with pytest.raises(ValueError):
        expected_tokens_per_pass(1.5, 4)


@pytest.mark.parametrize("changes", [{"computed": 0}, {"block_size": 0}, {"k": -1}, {"accepted": 5}])
def test_refusals(changes):
    with pytest.raises(InvalidInput):
        SpeculationConfig(**{"k": 4, **changes})


@pytest.mark.parametrize("k", [3, 5])
def test_the_simulator_predicts_the_engines_block_tables(monkeypatch, k):
    model, block = make_tiny_model("auto"), 4
    prompt, params = [5, 6, 7, 8, 9, 10, 11], SamplingParams(max_new_tokens=40, stop_on_eos=False)
    answer = LLMEngine(model, EngineConfig(block_size=block)).generate([prompt], params)[0].tokens
    wrong_at = itertools.cycle(range(k + 1))  # accept 0, 1, ..., k drafts in turn

    def oracle(token_ids, k_, max_ngram=3, min_ngram=1):
        done = len(token_ids) - len(prompt)
        drafts, bad = list(answer[done : done + k_]), next(wrong_at)
        if bad < len(drafts):
            drafts[bad] = (drafts[bad] + 1) % 64
        return drafts

    monkeypatch.setattr(speculation, "propose_ngram_drafts", oracle)
    engine = LLMEngine(model, EngineConfig(block_size=block, speculation=SpeculativeConfig(k)))
    engine.add_request(prompt, params)
    engine.step()  # the prefill
    seen = set()
    while engine.has_unfinished_requests:
        seq = engine.scheduler.running[0]
        computed, table = seq.num_computed_tokens, len(seq.block_table)
        counts = engine.speculator.counts
        before = next(iter(counts.values())).accepted if counts else 0
        freed = next(iter(counts.values())).blocks_freed if counts else 0
        engine.step()
        if not engine.has_unfinished_requests or len(seq.completion_token_ids) >= 40:
            break
        accepted = next(iter(counts.values())).accepted - before
        sim = SpeculationStep(SpeculationConfig(computed, block, k, accepted))
        assert sim.blocks_before == table
        assert sim.computed_after == seq.num_computed_tokens and sim.blocks_after == len(seq.block_table)
        assert sim.blocks_freed == next(iter(counts.values())).blocks_freed - freed
        seen.add((accepted, sim.blocks_freed))
    assert {a for a, _ in seen} == set(range(k + 1)) and any(f > 0 for _, f in seen)


def test_the_view_draws_steps_and_redraws():
    view = SpeculationView(30, 16, 4, 1)
    assert view.error is None and shows_png(view) and "1</b> freed" in view.message.value
    view.step_button.click()
    assert view.controls["computed"].value == 31 and view.model.computed == 31
    view.reset_button.click()
    assert_each_control_redraws(view, {"computed": 62, "block_size": 4, "k": 8, "accepted": 0})


@pytest.mark.parametrize(("name", "bad"), [("computed", 0), ("accepted", 9), ("block_size", float("nan"))])
def test_the_view_shows_bad_input_instead_of_a_traceback(name, bad):
    assert_bad_input_is_shown(SpeculationView(), name, bad)
