"""Lesson 15's printed numbers, recomputed independently.

The window the lesson prints for its tiny card must be the real engine's admission limit, in
float32 and in bfloat16: a request of exactly that many tokens is admitted and served to the
end, one token more is refused. The figures on paper (real models on real cards, many users with
a shared prompt, the prefill FLOPs) are recomputed here by hand from the models' shapes and the
cost model's formulas, without the simulator where the lesson used it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from kvcourse.kernels import (
    MODEL_CONFIGS,
    EngineConfig,
    LLMEngine,
    MemoryBudget,
    SamplingParams,
    Transformer,
    costs,
)
from kvcourse.kernels.measure import prefill
from kvcourse.kernels.measure.block_sizes import closest_option
from kvcourse.kernels.model import context_windows
from kvcourse.simulators.context_window import (
    MEMORY,
    MODEL,
    ContextWindow,
    ContextWindowConfig,
    ContextWindowView,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

SMOL = MODEL_CONFIGS["smollm2-135m"]
ROOM_TOKENS, BLOCK_SIZE = 200, 16  # the lesson's card: SmolLM2's weights + the bytes of 200 tokens


def lesson_window(config, bytes_per_value: int) -> tuple[int, MemoryBudget]:
    """The lesson's card and the window it prints, by the same public calls."""
    per_token = costs.kv_bytes_per_token(config, bytes_per_value)
    card_bytes = costs.weight_bytes(config, bytes_per_value) + ROOM_TOKENS * per_token
    budget = MemoryBudget.for_model(config, card_bytes, bytes_per_value)
    return costs.context_window(config, budget.kv_bytes, bytes_per_value, block_size=BLOCK_SIZE), budget


def test_the_window_is_200_tokens_of_bytes_rounded_down_to_12_blocks():
    for bpv in (4, 2):
        window, budget = lesson_window(SMOL, bpv)
        assert budget.kv_bytes == 200 * 2 * 30 * 3 * 64 * bpv
        assert window == 192 == (200 // 16) * 16


@pytest.mark.slow
@pytest.mark.parametrize("dtype, bytes_per_value", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_the_window_the_lesson_prints_is_the_engines_admission_limit(real_model, dtype, bytes_per_value):
    hf_model, _ = real_model
    model = Transformer.from_hf(copy.deepcopy(hf_model).to(dtype)).accelerate()
    window, budget = lesson_window(model.config, bytes_per_value)
    engine = LLMEngine(model, EngineConfig(block_size=BLOCK_SIZE, memory_budget=budget))
    assert engine.pool.nbytes == engine.num_blocks * BLOCK_SIZE * costs.kv_bytes_per_token(
        model.config, bytes_per_value
    )
    prompt = list(range(100, 100 + window - 3))
    fits = SamplingParams(max_new_tokens=3, stop_on_eos=False)
    served, refused = engine.generate([prompt, prompt], [fits, SamplingParams(max_new_tokens=4, stop_on_eos=False)])
    assert (
        served.refusal is None and served.finish_reasons == ("length",) and len(prompt) + len(served.tokens) == window
    )
    assert refused.refusal == (
        f"a sequence of {window + 1} tokens needs {window // BLOCK_SIZE + 1} blocks of 16, "
        f"but the whole KV pool holds {window // BLOCK_SIZE}: it could never fit, even alone"
    )
    sim = ContextWindowView(
        card_gib=budget.total_bytes / 2**30,
        model="smollm2-135m",
        bytes_per_value=bytes_per_value,
        block_size=BLOCK_SIZE,
    )
    assert sim.model.window == window and sim.model.budget == budget  # the preset's shape is SmolLM2's


def test_one_user_on_real_cards_by_hand():
    def by_hand(name, gb):
        shape = MODEL_CONFIGS[name]
        per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 2
        spare = gb * 2**30 - costs.num_parameters(shape) * 2  # a card sold as "80 GB" holds 80 GiB
        return spare // (per_token * 16) * 16 if spare > 0 else 0

    names, cards = (
        ["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-3-70b"],
        (24, 40, 80, 141),
    )
    table = context_windows.one_user_table(names, {f"{gb} GB": gb for gb in cards})  # the lesson's table
    for name in names:
        for gb in cards:
            assert table.loc[name, f"{gb} GB"] == by_hand(name, gb), (name, gb)
    assert by_hand("llama-3-8b", 80) == 532_816 and by_hand("llama-2-13b", 24) == 0
    # 15.llama_80 is revealed as the order of magnitude nearest the table's count on a log scale
    llama_80 = {f"about {n:,}": n for n in (5_000, 50_000, 500_000, 5_000_000)}
    assert closest_option(llama_80, by_hand("llama-3-8b", 80)) == "about 500,000"
    # 141 GiB is 151.4e9 bytes: llama-3-70b's 141.1e9 bytes of 16-bit weights fit the H200 alone, barely
    assert by_hand("llama-3-70b", 141) == 31_392 and by_hand("llama-3-70b", 80) == 0
    # every model that fits reads fewer tokens than one user's memory allows
    assert all(
        by_hand(n, gb) > MODEL_CONFIGS[n].max_position_embeddings or by_hand(n, gb) == 0 for n in names for gb in cards
    )


def qwen_window(users: int, shared_percent: float) -> int:
    """Lesson 15's qwen(): Qwen2.5-7B on an 80 GB card, 16-bit, blocks of 16."""
    return ContextWindow(ContextWindowConfig(80.0, "qwen2.5-7b", 2, users, shared_percent, 16)).window


def test_many_users_of_qwen_with_half_of_each_conversation_shared():
    shape = MODEL_CONFIGS["qwen2.5-7b"]
    blocks = (80 * 2**30 - costs.weight_bytes(shape, 2)) // (57_344 * 16)
    assert blocks == 77_022
    assert (blocks // 64) * 16 == 19_248 and (blocks // 512) * 16 == 2_400
    # half shared, 64 users: k blocks each need k // 2 shared blocks + 64 x the rest (k even: k / 2 own)
    k = max(k for k in range(2, 5000, 2) if k // 2 + 64 * (k - k // 2) <= blocks)
    assert k * 16 == 37_888
    for users, alone, shared, limit in (
        (1, 131_072, 131_072, MODEL),
        (8, 131_072, 131_072, MODEL),
        (64, 19_248, 37_888, MEMORY),
        (512, 2_400, 4_800, MEMORY),
    ):
        a = ContextWindow(ContextWindowConfig(80.0, "qwen2.5-7b", 2, users, 0.0, 16))
        s = ContextWindow(ContextWindowConfig(80.0, "qwen2.5-7b", 2, users, 50.0, 16))
        assert (a.window, s.window, a.limit, s.limit) == (alone, shared, limit, limit)
    # 15.sharing_binds: revealed from the windows' ratios, rounded, at 8 and at 64 users
    gains = [qwen_window(u, 50.0) / qwen_window(u, 0.0) for u in (8, 64)]
    assert [round(g) for g in gains] == [1, 2]
    int8 = (80 * 2**30 - costs.weight_bytes(shape, 2)) // ((2 * 28 * 4 * (128 + 4)) * 16)  # scales counted
    assert round(max(k for k in range(2, 20_000, 2) if k // 2 + 64 * (k // 2) <= int8) * 16 / 19_248, 1) == 3.8


def test_prefill_flops_grow_faster_than_the_prompt_and_attention_with_its_square():
    for short in (128, 256):
        long = 4 * short
        cells = costs.score_cells(SMOL, long, long) / costs.score_cells(SMOL, short, short)
        assert cells == (long * (long + 1)) / (short * (short + 1)) and round(cells) == 16
        assert costs.forward_flops(SMOL, long, long, 1) / costs.forward_flops(SMOL, short, short, 1) > 4
    share_8k = 4 * 64 * costs.score_cells(SMOL, 8192, 8192) / costs.forward_flops(SMOL, 8192, 8192, 1)
    assert 0.5 < share_8k < 0.6  # "more than half of the prefill" at SmolLM2's full window
    qwen = MODEL_CONFIGS["qwen2.5-7b"]
    ten_x = costs.forward_flops(qwen, 131_072, 131_072, 1) / costs.forward_flops(qwen, 13_107, 13_107, 1)
    assert round(ten_x) == 25
    assert round(costs.forward_flops(qwen, 131_072, 131_072, 1) / (0.5 * 989e12), 1) == 10.4  # exercise 3
    assert round(costs.forward_flops(qwen, 13_107, 13_107, 1) / (0.5 * 989e12), 2) == 0.42


def test_the_exercises_answers():
    assert costs.context_window(SMOL, 200 * 46_080, 4, block_size=128) == 128
    for percent, bpv, users in ((0.0, 2, 18), (50.0, 2, 35), (50.0, 1, 75)):  # 141 GiB
        fit = [
            u
            for u in range(1, 200)
            if ContextWindow(ContextWindowConfig(141.0, "qwen2.5-7b", bpv, u, percent, 16)).window >= 131_072
        ]
        assert max(fit) == users


def test_the_prefill_tables_split_and_the_fastest_round():
    split = prefill.flops_split(SMOL, [128, 8192])
    total = split.sum(axis=1)
    assert total[8192] * 1e9 == pytest.approx(costs.forward_flops(SMOL, 8192, 8192, 1))
    assert 0.5 < split.loc[8192, "attention (grows with the square)"] / total[8192] < 0.6
    rounds = [{128: (0.2, 0.05), 512: (1.0, 0.06)}, {128: (0.1, 0.07), 512: (1.5, 0.04)}]
    table = prefill.prefill_table(rounds, SMOL)
    assert list(table["prefill s"]) == [0.1, 1.0] and list(table["next token ms"]) == [50.0, 40.0]


CARDS = {"24 GB": 24, "40 GB": 40, "80 GB": 80, "141 GB": 141}  # the lesson's cards, as sold: GiB


def test_the_2026_one_user_table_by_hand_per_attention_kind():
    """Issue 42: a window layer's part stops at its window; full and latent layers grow with every token."""
    table = context_windows.one_user_table_2026(list(context_windows.PUBLISHED_2026), CARDS, 131_072)

    def by_hand(weights: int, gib: int, per_token: int, local: int, window: int) -> int:
        spare = gib * 2**30 - weights
        if spare <= 0:
            return 0
        if spare < window * (per_token + local):  # the window is not yet full
            return spare // ((per_token + local) * 16) * 16
        return (spare - window * local) // (per_token * 16) * 16

    llama = 2 * 32 * 8 * 128 * 2  # Llama-3.1-8B: 32 layers, 8 KV heads of 128, 16 bits
    gemma_global, gemma_local = 2 * 10 * 16 * 128 * 2, 2 * 52 * 16 * 128 * 2
    oss_120b = 2 * 18 * 8 * 64 * 2  # gpt-oss-120b: 18 full and 18 window layers alike
    deepseek = 61 * (512 + 64) * 2
    for gib in CARDS.values():
        card = f"{gib} GB"
        assert table.loc["llama-3.1-8b", card] == by_hand(8_030_261_248 * 2, gib, llama, 0, 1)
        assert table.loc["gemma-3-27b", card] == by_hand(round(27.4e9) * 2, gib, gemma_global, gemma_local, 1024)
        assert table.loc["gpt-oss-120b", card] == by_hand(round(60.8 * 2**30), gib, oss_120b, oss_120b, 128)
        assert table.loc["deepseek-v3", card] == 0  # 671 GB of FP8 weights fit no card here
    assert table.loc["deepseek-v3", "cache at 131,072 (GB)"] == round(deepseek * 131_072 / 1e9, 1) == 9.2
    assert table.loc["gemma-3-27b", "cache at 131,072 (GB)"] == round(
        (gemma_global * 131_072 + gemma_local * 1024) / 1e9, 1
    )
    # the same shapes as 2023's Llama-3-8B, the same weights: the same windows as the lesson's first table
    assert list(table.loc["llama-3.1-8b", list(CARDS)]) == [74_064, 205_136, 532_816, 1_032_528]


def test_which_limit_binds_for_one_user_in_2023_and_in_2026():
    table_2026 = context_windows.one_user_table_2026(list(context_windows.PUBLISHED_2026), CARDS, 131_072)
    names_2023 = ["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-3-70b"]
    table_2023 = context_windows.one_user_table(names_2023, CARDS)
    binds_2023 = context_windows.what_binds(table_2023, list(CARDS), 131_072)
    binds_2026 = context_windows.what_binds(table_2026, list(CARDS), 131_072)
    assert context_windows.limit_counts(binds_2023)["memory"] == 0  # 2023: "memory never bound first"
    assert context_windows.cases_of(binds_2026, "memory") == ["llama-3.1-8b on 24 GB", "llama-3.1-70b on 141 GB"]
    assert context_windows.limit_counts(binds_2026) == {"fits": 13, "model": 6, "memory": 2, "weights": 15}
    # "read with YaRN's 131,072, its memory column is what binds on the smallest card that holds its weights"
    for name in ("qwen3-8b", "qwen3-32b"):
        smallest = next(card for card in CARDS if table_2026.loc[name, card] > 0)
        assert table_2026.loc[name, "config's positions"] < table_2026.loc[name, smallest] < 131_072
    # "for the dense 8B models about as much as the weights; for the dense larger ones a good share of them"
    ratio = table_2026["cache at 131,072 (GB)"] / table_2026["weights (GB)"]
    assert all(1.0 <= ratio[n] < 1.25 for n in ("llama-3.1-8b", "qwen3-8b"))
    assert all(0.25 < ratio[n] < 0.6 for n in ("llama-3.1-70b", "qwen3-32b", "mistral-small-3.1"))
    assert ratio.idxmin() == "deepseek-v3"


def test_the_memory_window_bisection_is_the_closed_form_on_full_attention():
    from kvcourse.kernels.model.cache_layouts import LAYOUTS_2023

    for name, shape in MODEL_CONFIGS.items():
        spare = 7 * 10**9 + 12_345
        assert context_windows.memory_window(LAYOUTS_2023[name], spare) == costs.context_window(
            shape, spare, 2, block_size=16
        )


def test_the_prompt_lengths_to_time_are_short_only_under_the_harness(monkeypatch):
    from kvcourse.kernel_env import HEADLESS_ENV
    from kvcourse.simulators.context_window import prompt_lengths_to_time

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv(HEADLESS_ENV, "1")
    assert prompt_lengths_to_time() == [128, 512]  # four times the prompt, as the lesson's prediction asks
    monkeypatch.delenv(HEADLESS_ENV)
    assert prompt_lengths_to_time() == [128, 256, 512, 1024]
