"""Claims lesson 08 makes, recomputed here: the card sold as "80 GB" (80 GiB), its table, the exercises, the tables.

The lesson's card cells are read from the notebook by id and run with stubbed widgets; each number is
recomputed by hand from the cost model (80 x 2**30 bytes, minus the weights, in whole blocks of 16
tokens, ceil(tokens / 16) blocks per user). The wall's two tables are checked on the tiny model.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from kvcourse.exactness import expect_same_answers
from kvcourse.kernels import EXAMPLE_13B, EngineConfig, LLMEngine, SamplingParams, costs, request_stories
from kvcourse.kernels.measure.wall_tables import decision_table, story_table
from kvcourse.simulators.memory_wall import MemoryWall, MemoryWallConfig
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

NOTEBOOK = REPO_ROOT / "lessons" / "08_memory_wall.ipynb"
GIB = 2**30


def _cells() -> dict[str, str]:
    return {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}


def _expect(condition, sentence):
    assert condition, sentence


@pytest.fixture(scope="module")
def card():
    revealed: dict = {}
    ns = dict(
        math=math,
        costs=costs,
        EXAMPLE_13B=EXAMPLE_13B,
        MemoryWall=MemoryWall,
        MemoryWallConfig=MemoryWallConfig,
        predict=lambda *a, **k: None,
        reveal=lambda key, value: revealed.__setitem__(key, value),
        expect=_expect,
    )
    for cell_id in ("08-21", "08-22"):
        exec(_cells()[cell_id], ns)  # noqa: S102  (the lesson's own code)
    return ns, revealed


def test_the_card_holds_80_gib_and_17_users_fit_at_4096_tokens(card):
    ns, revealed = card
    card_bytes = 80 * GIB
    weights = costs.weight_bytes(EXAMPLE_13B, 2)
    per_block = costs.kv_bytes_per_token(EXAMPLE_13B, 2) * 16
    blocks = (card_bytes - weights) // per_block  # the pool: whole blocks, rounded down
    assert ns["card_bytes_80"] == card_bytes and f"{card_bytes / 1e9:.1f}" == "85.9"
    assert ns["card_80"].num_blocks == blocks == 4567
    expected = {n: blocks // math.ceil(n / 16) for n in (1024, 4096, 16384)}
    assert ns["users"] == expected == {1024: 71, 4096: 17, 16384: 4}
    assert ns["users"][1024] > 4 * ns["users"][4096]  # whole users: a quarter of the context gives more than 4x
    assert revealed["08.quarter_context"] == "a little more than 4x as many"


def test_the_exercises_reserve_and_eight_bits(card):
    ns, _ = card
    reserve = 0.1 * ns["card_bytes_80"] / 1e9
    reserved = MemoryWall(MemoryWallConfig(80, "llama-2-13b", 2, reserve_gb=reserve, context_tokens=4096))
    assert reserved.users_fit == ns["card_80"].users_fit - 2  # "two fewer whole users fit"
    per_user = costs.kv_cache_bytes(EXAMPLE_13B, 4096, 1, 2)
    assert 2 < reserve * 1e9 / per_user < 3  # "about two and a half 4,096-token caches"
    int8 = MemoryWall(MemoryWallConfig(80, "llama-2-13b", 1, context_tokens=4096))
    assert int8.users_fit > 2 * ns["card_80"].users_fit  # "more than double"


def test_no_cell_rounds_with_the_negated_floor_idiom():
    assert all("-(-" not in src.replace(" ", "") for src in _cells().values())


# -- the wall's tables, on the tiny model -------------------------------------------------------
PROMPTS = [[5 + i, 6, 7, 8, 9, 10, 11, 12, 13] for i in range(6)]  # 3 blocks of 4 each
PARAMS = [SamplingParams(max_new_tokens=12)] * 6 + [SamplingParams(max_new_tokens=60)]  # the last could never fit


def test_the_decision_and_story_tables_read_the_log_back(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=12, eos_token_id=0))
    engine.generate([*PROMPTS, PROMPTS[0]], PARAMS)
    decisions = decision_table(engine)
    kinds = {"admit", "preempt", "refuse", "finish"}
    logged = [e for e in engine.events.events if e.kind.value in kinds]
    assert list(decisions["decision"]) == [e.kind.value for e in logged]
    assert list(decisions["step"]) == [e.step for e in logged]
    assert (decisions["decision"] == "refuse").sum() == 1 and (decisions["decision"] == "preempt").sum() >= 1
    stories = request_stories(engine)
    table = story_table(stories)
    assert list(table.index) == [s.request_id for s in stories]
    assert table.loc[6, "finish"] == "refused" and table.loc[6, "ended at step"] == ""
    preempted = [s for s in stories if s.preempted]
    assert preempted and all(table.loc[s.request_id, "preempted at step"] != "" for s in preempted)


def test_the_same_answers_verdict_checks_in_float32_and_explains_in_bfloat16(capsys):
    expect_same_answers(6, 6, torch.float32, claim="same", cause="other batches")
    assert "same" in capsys.readouterr().out
    expect_same_answers(5, 6, torch.bfloat16, claim="same", cause="other batches")
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(
        "Only 5 of 6 answers agree in this run. In torch.bfloat16 identical answers are not guaranteed: other batches"
    )
