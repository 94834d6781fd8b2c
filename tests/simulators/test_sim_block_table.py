"""Lesson 10's simulator: block tables as a pure model, as a view, and beside the engine's allocators.

The model keeps its own free list and tables; these tests drive ``KVCacheManager`` (with its
``BlockPool``) and a real ``LLMEngine`` on a tiny model side by side with it and require the
same block counts and the same physical blocks, shuffled or not.
"""

from __future__ import annotations

import random

import pytest
from matplotlib.patches import ConnectionPatch
from sim_checks import assert_bad_input_is_shown, shows_png

from kvcourse.kernels import (
    BlockPool,
    EngineConfig,
    KVCacheManager,
    LLMEngine,
    SamplingParams,
    Sequence,
)
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.block_table import (
    BlockTableConfig,
    BlockTables,
    BlockTableView,
    draw_tables,
    engine_tables,
    num_adjacent,
    parse_prompt_lens,
    plot_tables,
    source_side_by_side,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def _arrows(ax) -> list[ConnectionPatch]:
    return [p for p in ax.patches if isinstance(p, ConnectionPatch)]


def _sim(
    block_size=4, num_blocks=32, prompt_lens=(5, 9, 3), shuffle=True, seed=0, follow=0, start_steps=0
) -> BlockTables:
    return BlockTables(BlockTableConfig(block_size, num_blocks, tuple(prompt_lens), shuffle, seed, follow, start_steps))


# -- the model -----------------------------------------------------------------------------------
def test_blocks_arrive_only_when_the_last_one_is_full():
    sim = _sim(block_size=4, prompt_lens=(5, 8, 3), shuffle=False)
    assert sim.tables == [[0, 1], [2, 3], [4]]  # admitted in order, prompt blocks at once
    assert sim.lengths == [5, 8, 3] and sim.num_used == 5 and sim.num_empty_slots == 3 + 0 + 1
    assert sim.blocks_needed_next == [1]  # 8 tokens fill two blocks exactly: token 8 starts block 2
    sim.step()
    assert sim.tables == [[0, 1], [2, 3, 5], [4]] and sim.lengths == [6, 9, 4]
    for _ in range(10):
        sim.step()
    for table, n in zip(sim.tables, sim.lengths, strict=True):
        assert len(table) == ceil_div(n, 4) == -(-n // 4)
    assert sim.lengths == [16, 19, 14] and sim.num_used == 4 + 5 + 4 == 32 - sim.num_free


def test_a_seed_shuffles_the_free_list_exactly_as_the_block_pool_does():
    for seed in (0, 1, 7, 12345):
        pool = BlockPool(40)
        pool.shuffle_free_blocks(seed)
        sim = _sim(num_blocks=40, prompt_lens=(1,), seed=seed)
        assert [sim.tables[0][0], *sim.free] == pool.free_block_ids
    assert _sim(num_blocks=6, prompt_lens=(1,), shuffle=False).free == [1, 2, 3, 4, 5]


def test_slots_and_adjacency():
    sim = _sim(block_size=16, num_blocks=8, prompt_lens=(40,), shuffle=False)
    assert sim.tables == [[0, 1, 2]] and num_adjacent(sim.tables[0]) == 2
    assert [sim.slot(0, p) for p in (0, 17, 39)] == [0, 17, 39]
    sim = _sim(block_size=16, num_blocks=8, prompt_lens=(40,), shuffle=True, seed=3)
    table = sim.tables[0]
    assert sim.slot(0, 17) == table[1] * 16 + 1  # quiz bank 10's physical_slot, worked by the model
    assert num_adjacent([7, 2, 9]) == 0 and num_adjacent([4, 5, 9, 10]) == 2
    with pytest.raises(InvalidInput, match="positions 0 to 39"):
        sim.slot(0, 40)
    assert sim.owner()[table[2]] == (0, 2)


def test_a_full_pool_refuses_the_step_and_changes_nothing():
    sim = _sim(block_size=2, num_blocks=4, prompt_lens=(2, 1))  # 1 + 1 blocks: two free
    sim.step()  # sequence 0 takes a block for its token 2
    assert sim.num_free == 1 and sim.full_message is None
    sim.step()  # sequence 1 takes the last one for its token 2
    assert sim.num_free == 0 and sim.lengths == [4, 3]
    before = ([list(t) for t in sim.tables], list(sim.lengths))
    assert "sequence 0 needs a new block" in sim.full_message
    with pytest.raises(InvalidInput, match="The pool is full"):
        sim.step()
    assert ([list(t) for t in sim.tables], list(sim.lengths)) == before
    sim.reset()
    assert sim.lengths == [2, 1] and sim.num_steps_done == 0


@pytest.mark.parametrize(
    "field, value, name",
    [
        ("block_size", 0, "Block size"),
        ("block_size", 10**6, "Block size"),
        ("num_blocks", 0, "Physical blocks"),
        ("num_blocks", 2.5, "Physical blocks"),
        ("prompt_lens", (), "Sequences"),
        ("prompt_lens", (0,), "Prompt lengths"),
        ("prompt_lens", (1,) * 9, "Sequences"),
        ("seed", -1, "Shuffle seed"),
        ("follow", 3, "Follow sequence"),
        ("start_steps", -1, "Start after"),
        ("start_steps", 40, "Start after"),  # 12 + 13 + 11 blocks > 32
    ],
)
def test_invalid_inputs_name_the_control(field, value, name):
    values = dict(block_size=4, num_blocks=32, prompt_lens=(5, 9, 3), shuffle=True, seed=0, follow=0)
    with pytest.raises(InvalidInput, match=name):
        BlockTableConfig(**{**values, field: value})


def test_starting_after_some_steps_is_stepping_that_often():
    stepped = _sim(prompt_lens=(5, 9, 3))
    for _ in range(7):
        stepped.step()
    started = _sim(prompt_lens=(5, 9, 3), start_steps=7)
    assert (started.tables, started.lengths, started.num_steps_done) == (stepped.tables, stepped.lengths, 7)
    started.reset()
    assert started.lengths == [12, 16, 10]  # reset returns to the start, after its steps


def test_prompts_that_do_not_fit_are_refused_with_the_count():
    with pytest.raises(InvalidInput, match="need 6 blocks of 4 tokens, but the pool has 5"):
        BlockTableConfig(4, 5, (9, 9))
    BlockTableConfig(4, 5, (9, 8))  # 3 + 2 blocks: exactly the pool


def test_prompt_lengths_parse_from_text():
    assert parse_prompt_lens("37", 3) == (37, 37, 37)
    assert parse_prompt_lens(" 37, 41;35 ", 3) == (37, 41, 35)
    for bad, match in (("37, x", "whole numbers"), ("1, 2", "one per sequence"), ("0", "Prompt lengths")):
        with pytest.raises(InvalidInput, match=match):
            parse_prompt_lens(bad, 3)


# -- the simulator beside the engine's allocators ------------------------------------------------
def _manager_side_by_side(
    block_size: int, num_blocks: int, prompt_lens: list[int], seed: int | None, num_steps: int
) -> None:
    manager = KVCacheManager(num_blocks, block_size)
    if seed is not None:
        manager.block_pool.shuffle_free_blocks(seed)
    sim = _sim(block_size, num_blocks, prompt_lens, seed is not None, seed or 0)
    seqs = [Sequence(i, list(range(n)), n, block_size) for i, n in enumerate(prompt_lens)]
    for seq in seqs:  # admission, in order, then the prompt is computed
        assert manager.can_allocate(seq)
        manager.allocate(seq)
        seq.num_computed_tokens = seq.num_tokens
    assert [s.block_table for s in seqs] == sim.tables
    for _ in range(num_steps):
        for seq in seqs:
            seq.token_ids.append(0)
        fits = all(manager.can_append(s) for s in seqs) and manager.num_free_blocks >= sum(
            manager.num_blocks_to_append(s) for s in seqs
        )
        assert fits == (sim.full_message is None)
        if not fits:
            return
        for seq in seqs:
            manager.append_slots(seq)
            seq.num_computed_tokens += 1
        sim.step()
        assert [s.block_table for s in seqs] == sim.tables
        assert [len(s.block_table) for s in seqs] == [ceil_div(n, block_size) for n in sim.lengths]
        assert manager.num_used_blocks == sim.num_used and manager.num_free_blocks == sim.num_free
        assert [s.slot(s.num_computed_tokens - 1) for s in seqs] == [
            sim.slot(i, n - 1) for i, n in enumerate(sim.lengths)
        ]


@pytest.mark.parametrize(
    "block_size, num_blocks, prompt_lens, seed",
    [
        (16, 48, [37, 37, 36], 0),
        (8, 48, [37, 37, 36], 0),
        (4, 40, [1, 4, 5, 9], None),
        (1, 64, [3, 2], 5),
        (16, 512, [100, 7, 300], 11),
    ],
)
def test_kv_cache_manager_and_simulator_side_by_side(block_size, num_blocks, prompt_lens, seed):
    _manager_side_by_side(block_size, num_blocks, prompt_lens, seed, num_steps=70)


def test_kv_cache_manager_and_simulator_agree_on_random_cases_and_on_the_full_pool():
    rng = random.Random(0)
    for _ in range(40):
        block_size = rng.choice([1, 2, 3, 4, 8, 16])
        prompt_lens = [rng.randint(1, 40) for _ in range(rng.randint(1, 5))]
        least = sum(ceil_div(n, block_size) for n in prompt_lens)
        num_blocks = least + rng.randint(0, 12)  # small pools run full within the steps
        _manager_side_by_side(block_size, num_blocks, prompt_lens, rng.choice([None, rng.randint(0, 99)]), 30)


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_engine_fills_its_block_tables_as_the_simulator_says(tiny_model, shuffle):
    """LLMEngine with a shuffled free list: after the prompt step and each decode step, the same tables."""
    block_size, num_blocks, prompt_lens, seed = 4, 40, [9, 4, 6], 3
    engine = LLMEngine(tiny_model, EngineConfig(block_size=block_size, num_blocks=num_blocks))
    if shuffle:
        engine.kv_cache_manager.block_pool.shuffle_free_blocks(seed)
    for i, n in enumerate(prompt_lens):
        engine.add_request([3 + i] * n, SamplingParams(max_new_tokens=12, stop_on_eos=False))
    sim = _sim(block_size, num_blocks, prompt_lens, shuffle, seed)
    for step in range(11):  # the 12th step writes the last token and frees every block
        engine.step()
        if step:
            sim.step()
        assert engine_tables(engine) == (sim.tables, sim.lengths)
        assert engine.kv_cache_manager.num_used_blocks == sim.num_used


# -- the view ------------------------------------------------------------------------------------
def test_view_draws_tables_and_steps_a_token_into_each_sequence():
    view = BlockTableView(block_size=4, num_blocks=16, prompt_lens=(5, 3))
    assert view.error is None and shows_png(view)
    assert view.model.lengths == [5, 3] and "Step 0" in view.message.value
    figure, axes = view.figure, list(view.axes)
    view.step_button.click()
    assert view.model.lengths == [6, 4] and "Step 1" in view.message.value
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2
    assert "of 16 blocks in use" in view.axes[1].get_title()
    view.reset_button.click()
    assert view.model.lengths == [5, 3]


def test_every_control_changes_the_model_and_the_status():
    view = BlockTableView(block_size=4, num_blocks=16, prompt_lens=(5, 3))
    for name, value in (
        ("block_size", 2),
        ("num_blocks", 30),
        ("num_seqs", 3),
        ("prompt_lens", "5, 3, 7"),
        ("seed", 4),
        ("shuffle", False),
        ("follow", 2),
        ("start_steps", 3),
    ):
        before, renders = view.message.value, view.num_renders
        view.controls[name].value = value
        assert view.error is None, (name, view.message.value)
        assert view.num_renders == renders + 1
        assert view.message.value != before, name
        if name == "num_seqs":  # the last prompt length repeats for the new sequence
            assert view.controls["prompt_lens"].value == "5, 3, 3"
    assert view.model.config == BlockTableConfig(2, 30, (5, 3, 7), False, 4, 2, 3)
    assert view.model.tables[0][:3] == [0, 1, 2]  # unshuffled: blocks in order
    assert "Step 3:" in view.message.value and "Sequence 2: 10 tokens in 5 blocks" in view.message.value


def test_a_full_pool_is_a_message_never_a_traceback():
    view = BlockTableView(block_size=2, num_blocks=3, prompt_lens=(2, 1))
    view.step_button.click()  # both fit: sequence 0 takes the last block
    view.step_button.click()
    lengths = list(view.model.lengths)
    view.step_button.click()
    assert "The pool is full" in view.message.value and view.error is None
    assert view.model.lengths == lengths
    view.controls["num_blocks"].value = 10  # more blocks: a fresh start
    assert "The pool is full" not in view.message.value


@pytest.mark.parametrize(
    "name, bad",
    [
        ("block_size", 0),
        ("num_blocks", -1),
        ("num_seqs", 0),
        ("num_seqs", 9),
        ("prompt_lens", "ten"),
        ("prompt_lens", "1, 2, 3, 4"),
        ("seed", -2),
        ("follow", 5),
        ("num_blocks", 2),
        ("start_steps", -1),
        ("start_steps", 50),
    ],
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(BlockTableView(block_size=4, num_blocks=16, prompt_lens=(5, 3, 2)), name, bad)


def test_many_blocks_draw_without_labels_or_every_arrow():
    view = BlockTableView(block_size=1, num_blocks=512, prompt_lens=(60, 50, 40))
    assert view.error is None and shows_png(view)
    assert not view.axes[0].texts  # 150 logical blocks: unlabelled
    assert len(_arrows(view.axes[1])) == 60  # only the followed sequence's arrows


def test_engine_tables_plot_and_sources_side_by_side(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=16))
    engine.add_request([5, 6, 7, 8, 9], SamplingParams(max_new_tokens=3, stop_on_eos=False))
    engine.step()
    tables, lengths = engine_tables(engine)
    assert lengths == [5] and len(tables[0]) == 2
    left, right = plot_tables(tables, lengths, engine.num_blocks, 4)
    assert len(_arrows(right)) == 2 and left.get_figure() is right.get_figure()
    draw_tables(left, right, tables, lengths, 16, 4, next_free=3)
    html = source_side_by_side(("torch", "a < b"), ("triton", "x"))
    assert "a &lt; b" in html.data and "triton" in html.data


def test_the_status_line_speaks_in_singulars_and_plurals():
    view = BlockTableView(block_size=2, num_blocks=4, prompt_lens=(1,))
    assert "1 block in use" in view.message.value and "1 slot held" in view.message.value
    assert "Sequence 0: 1 token in 1 block," in view.message.value
    view.step_button.click()
    assert "0 slots held" in view.message.value and "2 tokens in 1 block," in view.message.value
