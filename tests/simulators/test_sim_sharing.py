"""Lesson 12's simulator: forked samples share blocks until they write, as a model, as a view, and on the engine.

The model must keep exactly the block tables and reference counts of the engine's
``KVCacheManager`` (fork, then append_slots step by step) and of a real ``LLMEngine`` serving a
request with n samples.
"""

from __future__ import annotations

import pytest
from sim_checks import assert_bad_input_is_shown, shows_png

from kvcourse.kernels import EngineConfig, KVCacheManager, LLMEngine, SamplingParams, Sequence
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.sharing import CopyOnWrite, Sharing, SharingConfig, SharingView

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def _sim(prompt_len=94, block_size=16, num_samples=4, tokens_per_step=1, num_blocks=48) -> Sharing:
    return Sharing(SharingConfig(prompt_len, block_size, num_samples, tokens_per_step, num_blocks))


# -- the model -----------------------------------------------------------------------------------
def test_fork_shares_every_prompt_block_with_count_n():
    sim = _sim()
    assert sim.tables == [[0, 1, 2, 3, 4, 5]] and sim.num_used_blocks == 6 and not sim.forked
    sim.step()
    assert sim.forked and sim.tables == [[0, 1, 2, 3, 4, 5]] * 4
    assert sim.ref_counts[:6] == [4] * 6 and sim.ref_counts[6:] == [0] * 42
    assert sim.num_used_blocks == 6 and sim.num_blocks_unshared == 24 and sim.blocks_saved == 18


def test_first_write_copies_the_partial_block_for_all_but_the_last_holder():
    sim = _sim()
    sim.step()
    sim.step()
    assert sim.last_copies == [CopyOnWrite(0, 5, 6), CopyOnWrite(1, 5, 7), CopyOnWrite(2, 5, 8)]
    assert [t[-1] for t in sim.tables] == [6, 7, 8, 5]  # the last holder writes into the original
    assert sim.shared_blocks == [0, 1, 2, 3, 4] and sim.ref_counts[5:9] == [1, 1, 1, 1]
    assert sim.blocks_saved == 3 * 5 == (4 - 1) * sim.config.full_prompt_blocks
    for _ in range(40):  # later writes never copy: full blocks are never written again
        sim.step()
        assert sim.last_copies == [] and sim.blocks_saved == 15
    assert sim.num_copies == 3 and sim.num_tokens == 94 + 41


def test_a_prompt_that_fills_whole_blocks_is_never_copied():
    sim = _sim(prompt_len=96)
    sim.step()
    sim.step()
    assert sim.num_copies == 0 and sim.last_new_blocks == 4
    assert sim.blocks_saved == 3 * 6


@pytest.mark.parametrize("num_samples", [1, 2, 7])
def test_saving_is_n_minus_1_times_the_full_prompt_blocks(num_samples):
    sim = _sim(prompt_len=50, block_size=8, num_samples=num_samples, tokens_per_step=5, num_blocks=200)
    sim.step()
    sim.step()
    assert sim.blocks_saved == (num_samples - 1) * (50 // 8)
    assert sim.num_copies == (num_samples - 1 if num_samples > 1 else 0)


def test_a_full_pool_is_a_message_and_changes_nothing():
    sim = _sim(num_blocks=8)
    sim.step()
    assert sim.blocks_needed(1) == 3 and sim.num_free_blocks == 2  # three copies of block 5, two free
    before = ([list(t) for t in sim.tables], list(sim.ref_counts), sim.num_tokens)
    with pytest.raises(InvalidInput, match="the pool is full"):
        sim.step()
    assert ([list(t) for t in sim.tables], list(sim.ref_counts), sim.num_tokens) == before


def test_a_full_pool_after_some_steps_names_the_numbers():
    sim = _sim(num_blocks=9, tokens_per_step=1)
    sim.step()
    sim.step()  # 9 blocks in use now, none free
    with pytest.raises(InvalidInput, match=r"needs 4 free blocks, and only 0 of 9 are free"):
        for _ in range(3):
            sim.step()
    assert sim.num_tokens == 96  # two more tokens fitted in the last blocks, the third needs new ones


def test_reset_goes_back_to_the_unforked_prompt():
    sim = _sim()
    for _ in range(5):
        sim.step()
    sim.reset()
    assert not sim.forked and sim.tables == [[0, 1, 2, 3, 4, 5]] and sim.num_steps_done == 0


@pytest.mark.parametrize(
    "field, label, bad",
    [
        ("prompt_len", "Prompt length", 0),
        ("block_size", "Block size", 0),
        ("num_samples", "Samples n", 0),
        ("tokens_per_step", "Tokens per step", 0),
        ("num_blocks", "Pool size", 0),
        ("num_samples", "Samples n", 65),
        ("block_size", "Block size", 2.5),
    ],
)
def test_invalid_inputs_name_their_control(field, label, bad):
    values = dict(prompt_len=94, block_size=16, num_samples=4, tokens_per_step=1, num_blocks=48)
    values[field] = bad
    with pytest.raises(InvalidInput, match=label):
        SharingConfig(**values)


def test_a_prompt_larger_than_the_pool_is_refused():
    with pytest.raises(InvalidInput, match="could never start"):
        SharingConfig(prompt_len=1000, block_size=16, num_blocks=10)


# -- the model against the engine's KV-cache manager ----------------------------------------------
def _manager_run(prompt_len, block_size, num_samples, tokens_per_step, num_steps, num_blocks=400):
    """Fork and append_slots on the engine's own manager; the tables and counts after each step."""
    manager = KVCacheManager(num_blocks, block_size)
    parent = Sequence(0, list(range(prompt_len)), prompt_len, block_size)
    manager.allocate(parent)
    parent.num_computed_tokens = prompt_len  # the prefill wrote the prompt
    seqs = [parent]
    for i in range(1, num_samples):
        child = Sequence(i, list(parent.token_ids), prompt_len, block_size)
        manager.fork(parent, child)
        seqs.append(child)
    states = [([list(s.block_table) for s in seqs], list(manager.block_pool.ref_counts))]
    for _ in range(num_steps):
        for seq in seqs:
            seq.token_ids += [7] * tokens_per_step
            manager.append_slots(seq)
            seq.num_computed_tokens += tokens_per_step
        states.append(([list(s.block_table) for s in seqs], list(manager.block_pool.ref_counts)))
    return states, manager


@pytest.mark.parametrize(
    "prompt_len, block_size, num_samples, tokens_per_step",
    [
        (94, 16, 4, 1),
        (96, 16, 4, 1),
        (18, 4, 4, 1),
        (37, 8, 3, 5),
        (5, 16, 6, 3),
        (50, 1, 2, 2),
        (33, 16, 1, 7),
    ],
)
def test_the_simulator_keeps_the_managers_tables_and_counts(prompt_len, block_size, num_samples, tokens_per_step):
    num_steps = 12
    states, manager = _manager_run(prompt_len, block_size, num_samples, tokens_per_step, num_steps)
    sim = _sim(prompt_len, block_size, num_samples, tokens_per_step, num_blocks=400)
    sim.step()  # the fork
    for tables, counts in states:
        assert sim.tables == tables and sim.ref_counts == counts
        if sim.num_written < num_steps * tokens_per_step:
            sim.step()
    assert sim.num_used_blocks == manager.num_used_blocks
    assert sim.num_copies == len([e for e in manager.events.events if e.kind.value == "copy_on_write"])


def test_blocks_needed_is_what_the_manager_asks_for():
    states, manager = _manager_run(94, 16, 4, 1, 0)
    sim = _sim(num_blocks=400)
    sim.step()
    free_before = manager.num_free_blocks
    _, manager = _manager_run(94, 16, 4, 1, 1)
    assert sim.blocks_needed(1) == free_before - manager.num_free_blocks == 3
    assert ceil_div(94, 16) == 6 and ceil_div(96, 16) == 6 and ceil_div(97, 16) == 7


# -- the model against a real engine serving n samples --------------------------------------------
@pytest.mark.parametrize("prompt_len, n", [(18, 4), (16, 3), (9, 2)])
def test_the_simulator_matches_the_engines_blocks_at_every_step(tiny_model, prompt_len, n):
    new_tokens = 10
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64))
    rid = engine.add_request(
        [3 + i % 90 for i in range(prompt_len)],
        SamplingParams(max_new_tokens=new_tokens, n=n, temperature=1.0, seed=5, stop_on_eos=False),
    )
    sim = _sim(prompt_len, 4, n, 1, num_blocks=64)
    for step in range(new_tokens - 1):  # the last step finishes every sample and frees its blocks
        engine.step()
        sim.step()  # engine step 0 = prefill + fork; engine step k = every sample writes its token k - 1
        assert [s.block_table for s in engine.requests[rid].seqs] == sim.tables, step
        assert engine.kv_cache_manager.block_pool.ref_counts == sim.ref_counts, step
        assert engine.kv_cache_manager.num_used_blocks == sim.num_used_blocks
    engine.step()
    assert not engine.has_unfinished_requests


# -- the view ------------------------------------------------------------------------------------
def test_view_forks_then_writes_and_relabels_its_button():
    view = SharingView()
    assert shows_png(view) and view.step_button.description == "Fork"
    assert "Press <b>Fork</b>" in view.message.value
    view.step_button.click()
    assert "each with reference count 4" in view.message.value and view.step_button.description == "Write tokens"
    view.step_button.click()
    assert "3 copied on write (5→6, 5→7, 5→8)" in view.message.value
    assert "sharing saves 15" in view.message.value
    view.reset_button.click()
    assert view.step_button.description == "Fork" and not view.model.forked


def test_every_control_rebuilds_the_model_and_redraws():
    view = SharingView()
    for name, value in dict(prompt_len=40, block_size=8, num_samples=3, tokens_per_step=4, num_blocks=30).items():
        renders = view.num_renders
        view.controls[name].value = value
        assert view.error is None and view.num_renders == renders + 1
        assert getattr(view.model.config, name) == value
    view.step_button.click()
    view.step_button.click()
    assert "Each sample holds 44 tokens (40 prompt + 4 written)" in view.message.value


def test_a_full_pool_shows_a_message_not_a_traceback():
    view = SharingView(num_blocks=8)
    view.step_button.click()
    renders = view.num_renders
    view.step_button.click()
    assert view.error is None and "pool is full" in view.message.value  # information: nothing typed was wrong
    assert view.num_renders == renders
    view.reset_button.click()
    assert view.error is None


@pytest.mark.parametrize(
    "name, bad",
    [
        ("prompt_len", 0),
        ("block_size", -1),
        ("num_samples", 1000),
        ("tokens_per_step", 0),
        ("num_blocks", 10**9),
        ("prompt_len", 10**6),
    ],
)
def test_bad_input_is_shown(name, bad):
    assert_bad_input_is_shown(SharingView(), name, bad)


def test_big_cases_draw_without_labels():
    view = SharingView(prompt_len=1000, block_size=4, num_samples=64, tokens_per_step=40, num_blocks=100_000)
    view.step_button.click()
    view.step_button.click()
    assert view.error is None and not view.axes[0].texts
    assert view.axes[0].get_xlabel() == "logical blocks 212–259 of 4 tokens"
    assert "first 512 drawn" in view.axes[1].get_xlabel()
