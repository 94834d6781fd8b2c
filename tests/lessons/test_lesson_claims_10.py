"""Claims lesson 10 makes, checked here exactly: block tables, the gather, paged = contiguous in float32.

The lesson states them with ``expect`` and tolerances that hold in float32 and bfloat16, or prints
them for the learner to compare (the simulator's table beside the engine's); the exact versions
live here. The tiny model covers the mechanism; the real model the lesson's own run (slow).
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest
import torch
from factories import make_tiny_model

import kvcourse.kernels as kernels
from kvcourse.kernels import (
    EngineConfig,
    LLMEngine,
    SamplingParams,
    Transformer,
    costs,
    gather_kv,
    generate,
    paged_attention_reference,
    paged_decode_attention,
    write_kv,
)
from kvcourse.kernels.attention import cpu_paged
from kvcourse.simulators.block_table import BlockTableConfig, BlockTables, engine_tables, num_adjacent

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

QUESTIONS = ["Why is the sky blue?", "Describe a sunset over the sea.", "What do bees do all day?"]  # the lesson's
BLOCK_SIZE, NUM_BLOCKS, NUM_NEW, NUM_STEPS, SEED = 8, 48, 16, 12, 0


def _run(model: Transformer, prompts: list[list[int]], shuffle: bool = True):
    """The lesson's engine run: shuffled pool, NUM_STEPS steps, then the tables, the last layer's keys, the end."""
    engine = LLMEngine(model, EngineConfig(block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS))
    if shuffle:
        engine.kv_cache_manager.block_pool.shuffle_free_blocks(seed=SEED)
    params = SamplingParams(max_new_tokens=NUM_NEW, stop_on_eos=False)
    ids = [engine.add_request(p, params) for p in prompts]
    for _ in range(NUM_STEPS):
        engine.step()
    tables, lengths = engine_tables(engine)
    layer = model.config.num_layers - 1
    keys = gather_kv(engine.pool.k[layer], torch.tensor(tables[0]), lengths[0])
    while engine.has_unfinished_requests:
        engine.step()
    return engine, tables, lengths, keys, [engine.requests[r].output().tokens for r in ids]


def test_the_toy_pool_stores_scattered_and_gathers_in_order():
    k = torch.zeros(6, 2, 1, 1)
    table = torch.tensor([4, 1, 5])
    positions = torch.arange(5)
    slots = table[positions // 2] * 2 + positions % 2
    numbers = (100 + positions).float().view(5, 1, 1)
    write_kv(k, torch.zeros_like(k), numbers, numbers, slots)
    assert slots.tolist() == [8, 9, 2, 3, 10]
    assert k.view(6, 2).int().tolist() == [[0, 0], [102, 103], [0, 0], [0, 0], [100, 101], [104, 0]]
    assert gather_kv(k, table, 5).flatten().int().tolist() == [100, 101, 102, 103, 104]


def test_the_sources_the_lesson_shows_side_by_side_still_have_their_landmarks():
    """The lesson cuts the Triton loop and the PyTorch body out of the files by these strings."""
    triton_source = (Path(kernels.__file__).parent / "attention" / "triton_paged.py").read_text(encoding="utf-8")
    start, end = triton_source.index("    for start in range"), triton_source.index("    out = acc")
    assert start < end and "block_tables_ptr" in triton_source[start:end] and "running_max" in triton_source[start:end]
    assert "    batch, num_heads" in inspect.getsource(paged_decode_attention)
    twin = inspect.getsource(cpu_paged._kernel)  # the CPU twin's walk, cut by the lesson's two markers
    walk = twin[
        twin.index("        for logical_block") : twin.index("\n        for h in range(num_heads):\n            for d")
    ]
    assert "block_tables[seq, logical_block]" in walk and "k_cache[block, t, h // group, d]" in walk
    assert "running_max" in walk and "out[" not in walk


def test_on_the_tiny_model_paged_with_scattered_blocks_equals_contiguous(tiny_model):
    prompts = [[5 + i] * n for i, n in enumerate((36, 37, 37))]  # the lesson's prompt lengths
    engine, tables, lengths, keys, paged = _run(tiny_model, prompts)
    contiguous = [generate(tiny_model, p, NUM_NEW, cache="contiguous", eos_token_id=[]) for p in prompts]
    assert paged == [c.tokens for c in contiguous]
    contiguous_keys = contiguous[0].backend.k_cache[-1].transpose(0, 1)[: lengths[0]]
    torch.testing.assert_close(keys, contiguous_keys, rtol=1e-5, atol=1e-5)
    per_block = engine.pool.nbytes // NUM_BLOCKS
    assert per_block == costs.kv_bytes_per_token(tiny_model.config, 4) * BLOCK_SIZE  # the lesson's expect, exactly
    assert per_block == 2 * tiny_model.config.num_layers * engine.pool.k[0, 0].nbytes


def test_on_the_tiny_model_the_batched_decode_path_equals_the_definition(tiny_model):
    prompts = [[5 + i] * n for i, n in enumerate((36, 37, 37))]
    engine = LLMEngine(tiny_model, EngineConfig(block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS))
    engine.kv_cache_manager.block_pool.shuffle_free_blocks(seed=SEED)
    for p in prompts:
        engine.add_request(p, SamplingParams(max_new_tokens=NUM_NEW, stop_on_eos=False))
    for _ in range(NUM_STEPS):
        engine.step()
    tables, lengths = engine_tables(engine)
    cfg, layer = tiny_model.config, tiny_model.config.num_layers - 1
    torch.manual_seed(0)
    q = torch.randn(3, cfg.num_heads, cfg.head_dim)
    padded = torch.tensor([t + [0] * (max(map(len, tables)) - len(t)) for t in tables])
    k_pool, v_pool = engine.pool.k[layer], engine.pool.v[layer]
    ref = paged_attention_reference(q, k_pool, v_pool, padded, lengths, [1, 1, 1], cfg.head_dim**-0.5)
    out = paged_decode_attention(q, k_pool, v_pool, padded, torch.tensor(lengths), cfg.head_dim**-0.5)
    gap, size = (ref - out).abs().max().item(), out.abs().max().item()
    assert gap <= 16 * torch.finfo(torch.float32).eps * size  # the lesson's tolerance


def test_the_unshuffled_pool_of_exercise_1_keeps_only_the_prompt_blocks_together():
    sim = BlockTables(BlockTableConfig(BLOCK_SIZE, NUM_BLOCKS, (36, 37, 37), False, 0, 0, NUM_STEPS - 1))
    assert sim.tables[0][:5] == [0, 1, 2, 3, 4]  # "request 0 gets 0-4"
    assert [num_adjacent(t) for t in sim.tables] == [len(t[:5]) - 1 for t in sim.tables]  # only the prompts'


def test_exercise_2_bigger_blocks_shorter_tables_more_empty_slots_on_average():
    by_size = {
        size: BlockTables(BlockTableConfig(size, NUM_BLOCKS, (36, 37, 37), True, 0, 0, NUM_STEPS - 1))
        for size in (8, 16)
    }
    assert [len(t) for t in by_size[16].tables] == [3, 3, 3] and [len(t) for t in by_size[8].tables] == [6, 6, 6]
    average = {}
    for size, sim in by_size.items():
        empty = []
        for _ in range(16):
            sim.step()
            empty.append(sim.num_empty_slots)
        average[size] = sum(empty) / 16
    assert average == {8: 3 * 3.5, 16: 3 * 7.5}  # half a block each, less half a slot


@pytest.mark.slow
def test_lesson_10_run_on_smollm2_in_float32(real_model, smol_model):
    """The lesson's run: prompt lengths, the table it prints, the simulator's equal table, same tokens and keys."""
    tokenizer, model = real_model[1], smol_model
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
        for q in QUESTIONS
    ]
    assert [len(p) for p in prompts] == [36, 37, 37]
    engine, tables, lengths, keys, paged = _run(model, prompts)
    sim = BlockTables(
        BlockTableConfig(BLOCK_SIZE, NUM_BLOCKS, tuple(len(p) for p in prompts), True, SEED, 0, NUM_STEPS - 1)
    )
    assert (tables, lengths) == (sim.tables, sim.lengths)
    assert lengths == [47, 48, 48] and [len(t) for t in tables] == [6, 6, 6]
    # 10.table_size's options name three different counts: the whole answer's blocks, those stored, one per token
    assert (math.ceil((36 + NUM_NEW - 1) / BLOCK_SIZE), len(tables[0]), lengths[0]) == (7, 6, 47)
    assert sum(num_adjacent(t) for t in tables) == 0  # "0 of 15 neighbours" with seed 0
    contiguous = [generate(model, p, NUM_NEW, cache="contiguous", eos_token_id=[]) for p in prompts]
    assert paged == [c.tokens for c in contiguous]  # token for token, all three
    contiguous_keys = contiguous[0].backend.k_cache[-1].transpose(0, 1)[: lengths[0]]
    assert (keys - contiguous_keys).abs().max() <= 1e-4 * contiguous_keys.abs().max()  # the lesson's fp32 tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_same_batch_with_blocks_in_order_or_shuffled_gives_the_same_bits(dtype):
    """The lesson's bf16 note: paging is not why bf16 answers may differ from generate; batching is."""
    model = make_tiny_model(dtype=dtype)
    prompts = [[5 + i] * n for i, n in enumerate((36, 37, 37))]
    _, shuffled_tables, _, shuffled_keys, shuffled = _run(model, prompts, shuffle=True)
    _, plain_tables, _, plain_keys, plain = _run(model, prompts, shuffle=False)
    assert shuffled_tables != plain_tables
    assert shuffled == plain and torch.equal(shuffled_keys, plain_keys)


# -- the lesson's helpers: the token-by-token comparison and the dtype verdict ---------------------
def test_match_answers_counts_answers_tokens_and_the_first_difference():
    from kvcourse.kernels.measure.answers import match_answers

    same = match_answers([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]])
    assert (same.same_answers, same.same_tokens, same.num_tokens, same.first_difference) == (2, 5, 5, (3, 2))
    assert same.verdict(same="same", different="some differ") == "same"
    one_off = match_answers([[1, 2, 3], [4, 5]], [[1, 2, 9], [4, 5]])
    assert (one_off.same_answers, one_off.same_tokens, one_off.first_difference) == (1, 4, (2, 2))
    assert one_off.verdict(same="same", different="some differ") == "some differ"
    assert match_answers([[1, 2, 3]], [[7, 8, 9]]).first_difference == (0,)
    with pytest.raises(ValueError):
        match_answers([[1]], [[1], [2]])


def test_the_lesson_states_no_block_count_with_the_negated_floor_idiom_and_no_dtype_branch():
    import json

    from kvcourse.exactness import batching_tolerance
    from kvcourse.syllabus import REPO_ROOT

    cells = json.loads((REPO_ROOT / "lessons" / "10_paged_attention.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    assert not any("-(-" in src.replace(" ", "") or "dtype == torch" in src for src in code)
    assert batching_tolerance(torch.float32) < batching_tolerance(torch.bfloat16)
