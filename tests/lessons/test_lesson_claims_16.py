"""Lesson 16's claims on SmolLM2 (float32), recomputed here another way than the lesson computes them.

* The head-merging experiment: the lesson reports next-token agreement of SmolLM2 with its KV heads
  averaged into one (``regroup_kv_heads`` + ``next_token_agreement``, on the course's engine). Here
  the same experiment is redone in Hugging Face's own model, whose key and value projections are
  overwritten with each group's mean (three equal heads read like one), and scored independently.
* int8 bytes: the lesson's figure (the int8 cache's bytes per token) equals the cost model, scales
  included, and the bytes of the tensors the real Int8KVBackend stores, counted here from their
  shapes and dtypes.
* The sliding window: tokens equal the full cache's up to the first token computed without the
  prompt's first token, and differ exactly there (float32; an exact check tied to this model).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from kvcourse.kernels import (
    MERGE_TEXTS,
    costs,
    first_difference,
    generate,
    next_token_agreement,
    regroup_kv_heads,
)
from kvcourse.kernels.attention.sinks import attention_to_key
from kvcourse.simulators.qkv import attend_one, record_qkv
from kvcourse.simulators.shrink import Shrink, ShrinkConfig

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

STORY = "Write a short story about a robot who learns to paint."  # the lesson's prompt
WINDOW, NUM_NEW = 48, 40  # the lesson's window and story length


@pytest.fixture(scope="module")
def lesson(real_model, smol_model):
    (hf_model, tokenizer), model = real_model, smol_model
    story = tokenizer.apply_chat_template([{"role": "user", "content": STORY}], add_generation_prompt=True)["input_ids"]
    texts = [tokenizer(t)["input_ids"] for t in MERGE_TEXTS]
    return hf_model, model, story, texts


@pytest.fixture(scope="module")
def full_story(lesson):
    """The lesson's reference: SmolLM2's greedy story with the full cache."""
    _, model, story, _ = lesson
    return generate(model, story, NUM_NEW)


def hf_with_heads_averaged(hf_model):
    """A copy of the Hugging Face model whose KV heads all carry their group's mean projection."""
    merged = copy.deepcopy(hf_model)
    cfg = merged.config
    head_dim, num_kv = cfg.hidden_size // cfg.num_attention_heads, cfg.num_key_value_heads
    with torch.no_grad():
        for layer in merged.model.layers:
            for proj in (layer.self_attn.k_proj, layer.self_attn.v_proj):
                heads = proj.weight.view(num_kv, head_dim, -1)
                heads.copy_(heads.mean(0, keepdim=True).expand_as(heads))
    return merged


@pytest.mark.slow
def test_16_the_merged_heads_agreement_is_what_hugging_face_measures(lesson):
    hf_model, model, _, texts = lesson
    reported = next_token_agreement(model, regroup_kv_heads(model, 1), texts)
    merged = hf_with_heads_averaged(hf_model)
    same, kl, positions = 0, 0.0, 0
    with torch.inference_mode():
        for ids in texts:
            batch = torch.tensor([ids])
            p = torch.log_softmax(hf_model(batch).logits[0].float(), -1)
            q = torch.log_softmax(merged(batch).logits[0].float(), -1)
            same += int((p.argmax(-1) == q.argmax(-1)).sum())
            kl += float(torch.nn.functional.kl_div(q, p, log_target=True, reduction="sum"))
            positions += len(ids)
    assert reported.num_positions == positions == 128
    assert abs(reported.num_same_top1 - same) <= 1  # an argmax of a broken model may sit on a near tie
    assert reported.mean_kl == pytest.approx(kl / positions, rel=0.02)
    assert reported.top1 < 0.2 and reported.mean_kl > 3  # the lesson's finding: averaging breaks the model


@pytest.mark.slow
def test_16_copying_heads_changes_nothing_and_costs_three_times_the_bytes(lesson):
    _, model, story, texts = lesson
    copied = regroup_kv_heads(model, model.config.num_heads)
    agreement = next_token_agreement(model, copied, texts)
    assert agreement.num_same_top1 == agreement.num_positions and agreement.mean_kl < 1e-6
    for heads, expected in ((9, 138_240), (3, 46_080), (1, 15_360)):
        regrouped = regroup_kv_heads(model, heads)
        last = generate(regrouped, story, 1).stats[-1]
        assert last.kv_cache_bytes == last.context_len * expected
        assert expected == costs.kv_bytes_per_token(regrouped.config, 4)


@pytest.mark.slow
def test_16_int8_bytes_per_token_count_the_scales_exactly(lesson):
    _, model, story, _ = lesson
    cache = generate(model, story, 4, cache="int8").backend
    per_token = cache.kv_cache_bytes // cache.num_tokens  # the lesson's figure
    c = model.config
    assert all(t.dtype == torch.int8 for t in cache.k_q + cache.v_q)
    assert all(t.dtype == torch.float32 for t in cache.k_scale + cache.v_scale)
    stored = sum(t[:, : cache.num_tokens].nbytes for t in cache.k_q + cache.v_q + cache.k_scale + cache.v_scale)
    by_hand = c.num_layers * 2 * c.num_kv_heads * (c.head_dim * 1 + 4)
    assert per_token * cache.num_tokens == cache.kv_cache_bytes == stored
    assert per_token == by_hand == costs.quantized_kv_bytes_per_token(c, 1, 4) == 12_240
    assert per_token == Shrink(ShrinkConfig(int8=True)).bytes_per_token


@pytest.mark.slow
def test_16_the_window_changes_the_story_exactly_when_token_0_leaves(lesson, full_story):
    _, model, story, _ = lesson
    full = full_story
    windowed = generate(model, story, NUM_NEW, cache="sliding", window=WINDOW)
    first_drop = WINDOW - len(story) + 1
    assert 0 < first_drop < NUM_NEW
    assert windowed.tokens[:first_drop] == full.tokens[:first_drop]
    assert first_difference(full.tokens, windowed.tokens) == first_drop
    held = {s.kv_cache_bytes for s in windowed.stats if s.context_len >= WINDOW}
    assert held == {WINDOW * costs.kv_bytes_per_token(model.config, 4)}


@pytest.mark.slow
def test_16_the_last_token_s_attention_on_token_0_recomputed_with_torch(lesson, full_story):
    """The lesson averages attend_one's weight on token 0 over every head; here softmax(q k^T / sqrt(d)) in torch."""
    _, model, story, _ = lesson
    sequence = story + full_story.tokens
    qkv, recorder = record_qkv(model, sequence)
    shares = []
    for layer in range(model.config.num_layers):
        q = recorder.q[layer][-1].float()  # (heads, D), the last token's queries
        k = recorder.k[layer].float().repeat_interleave(model.config.num_queries_per_kv, dim=1)  # (T, heads, D)
        weights = torch.softmax(torch.einsum("hd,thd->ht", q, k) / model.config.head_dim**0.5, dim=-1)
        shares.append(weights[:, 0])
    mean = torch.stack(shares).mean().item()
    last = len(sequence) - 1
    on_first = attention_to_key(qkv.q, qkv.k, query=last, key=0)  # the lesson's figure, every layer and head
    assert on_first.shape == (qkv.num_layers, qkv.num_heads)
    assert float(on_first.mean()) == pytest.approx(mean, abs=1e-4)
    for i, h in ((0, 0), (7, 4), (qkv.num_layers - 1, qkv.num_heads - 1)):  # lesson 04's one-query attention agrees
        one = attend_one(qkv.q[i, h, last], qkv.k[i, qkv.kv_head(h)], qkv.v[i, qkv.kv_head(h)], last).weights[0]
        assert float(on_first[i, h]) == pytest.approx(float(one), abs=1e-5)
    assert mean > 10 / len(sequence)  # far more than an even share: token 0 is an attention sink


def test_16_attention_to_key_is_causal_softmax_attention_with_grouped_heads():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 6, 5, 8)), rng.normal(size=(2, 2, 5, 8))  # 6 query heads share 2 KV heads
    weights = attention_to_key(q, k, query=3, key=1)
    by_hand = np.exp(q[1, 4, 3] @ k[1, 1, :4].T / np.sqrt(8))  # query head 4 reads KV head 4 // 3 = 1
    assert weights[1, 4] == pytest.approx(by_hand[1] / by_hand.sum())
    assert sum(attention_to_key(q, k, query=3, key=j) for j in range(4)) == pytest.approx(np.ones((2, 6)))
    with pytest.raises(ValueError):
        attention_to_key(q, k, query=3, key=4)  # a later key is masked: never asked for


@pytest.mark.slow
def test_16_each_later_reader_reuses_the_whole_blocks_of_the_common_opening(real_model):
    from kvcourse.kernels import LIBRARY_QUESTIONS, LIBRARY_SYSTEM_PROMPT
    from kvcourse.simulators.prefix_cache import PrefixCache, PrefixCacheConfig

    _, tokenizer = real_model
    readers = [
        tuple(
            tokenizer.apply_chat_template(
                [{"role": "system", "content": LIBRARY_SYSTEM_PROMPT}, {"role": "user", "content": q}],
                add_generation_prompt=True,
            )["input_ids"]
        )
        for q in LIBRARY_QUESTIONS
    ]
    served = PrefixCache(PrefixCacheConfig(tuple(readers), 16, 256), len(readers))
    for earlier, later, result in zip(readers, readers[1:], served.results[1:], strict=False):
        common = next(i for i, (a, b) in enumerate(zip(earlier, later, strict=False)) if a != b)
        assert result.num_cached_tokens == 16 * min(common // 16, (len(later) - 1) // 16) > 400


def _chain_links() -> list[tuple[str, str]]:
    """The `links = [...]` of lesson 16's closing figure, read from the notebook's source."""
    import ast
    import json

    from kvcourse.syllabus import REPO_ROOT

    cells = json.loads((REPO_ROOT / "lessons" / "16_shrinking_the_cache.ipynb").read_text())["cells"]
    source = next(
        "".join(c["source"]) for c in cells if c["cell_type"] == "code" and "links = [" in "".join(c["source"])
    )
    assign = next(n for n in ast.parse(source).body if isinstance(n, ast.Assign) and n.targets[0].id == "links")
    return ast.literal_eval(assign.value)


def test_16_the_closing_chain_names_every_lesson_once_in_order():
    from kvcourse import plots
    from kvcourse.syllabus import load_syllabus

    links = _chain_links()
    numbers = [n for _, lessons in links for n in lessons.split()]
    assert numbers == [lesson.number for lesson in load_syllabus()] == [f"{i:02d}" for i in range(29)]
    titles = {lesson.number: f"{lesson.number} · {lesson.title}" for lesson in load_syllabus()}
    ax = plots.chain([(head, "   ".join(titles[n] for n in lessons.split())) for head, lessons in links], title="t")
    texts = [t.get_text() for t in ax.texts]
    assert (
        all(head in texts for head, _ in links)
        and any("17 · Lab" in t for t in texts)
        and any("20 · Lab C" in t for t in texts)
    )
    assert len(ax.texts) == 3 * len(links) - 1 and ax.get_title() == "t"  # a headline, a detail, an arrow between


def _lesson_16_cell(marker: str) -> str:
    import json

    from kvcourse.syllabus import REPO_ROOT

    cells = json.loads((REPO_ROOT / "lessons" / "16_shrinking_the_cache.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))


def test_16_the_decode_step_context_is_inside_every_compared_model_s_trained_window():
    """Issue 42: Llama-2-7B was trained on 4,096 positions, so the decode-step comparison stays within them."""
    from dataclasses import replace

    from kvcourse.kernels import MODEL_CONFIGS

    revealed: dict[str, object] = {}
    ns = {"MODEL_CONFIGS": MODEL_CONFIGS, "replace": replace, "costs": costs, "predict": lambda *a, **k: None}
    ns["reveal"] = lambda key, value: revealed.update({key: value})
    exec(_lesson_16_cell("mqa_share = {"), ns)  # noqa: S102  (the lesson's own code)
    exec(_lesson_16_cell('llama3 = MODEL_CONFIGS["llama-3-8b"]'), ns)  # noqa: S102
    assert revealed == {"16.mqa_share": "an eighth"}  # 1 KV head where Llama-3-8B has 8: the cache per token / 8
    exec(_lesson_16_cell("context = min("), ns)  # noqa: S102
    assert ns["context"] == MODEL_CONFIGS["llama-2-7b"].max_position_embeddings == 4096
    assert all(ns["context"] <= ns["shapes"][name].max_position_embeddings for name in ns["compared"])


def test_16_one_scale_per_tensor_halves_the_cache_and_one_per_token_does_not():
    """Lesson 16's two 8-bit layouts: a scale per token costs 4 bytes per head vector; per tensor, 2 per layer."""
    from kvcourse.kernels import MODEL_CONFIGS

    for name in ("smollm2-135m", "llama-3-8b"):
        shape = MODEL_CONFIGS[name]
        assert 2 * costs.kv_bytes_per_token(shape, 1) == costs.kv_bytes_per_token(shape, 2)
        scales = 2 * shape.num_layers * shape.num_kv_heads * 4
        assert costs.quantized_kv_bytes_per_token(shape, 1, 4) == costs.kv_bytes_per_token(shape, 1) + scales
    # 16.int8_share's answer for SmolLM2: codes and scales are a little more than half of 16 bits
    smol = MODEL_CONFIGS["smollm2-135m"]
    assert costs.quantized_kv_bytes_per_token(smol, 1, 4) / costs.kv_bytes_per_token(smol, 2) == 12_240 / 23_040


def test_16_the_ways_of_2026_per_token_at_128k_by_hand():
    """Issue 42: the lesson's 2026 cell, by hand from the config fields; its sentences hold on every row."""
    from dataclasses import replace

    from kvcourse.kernels import MODEL_CONFIGS
    from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026

    ns = {"expect": lambda ok, message: None}
    exec(_lesson_16_cell("names_2026 = ["), ns)  # noqa: S102  (the lesson's own code)
    n, per_token = ns["long_context"], ns["per_token_2026"]
    assert n == 131_072
    by_hand = {
        "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
        "qwen3-32b": 2 * 64 * 8 * 128 * 2,
        "gemma-3-27b": (2 * 10 * 16 * 128 * 2 * n + 2 * 52 * 16 * 128 * 2 * 1024) / n,  # locals stop at 1,024
        "gpt-oss-120b": (2 * 18 * 8 * 64 * 2 * n + 2 * 18 * 8 * 64 * 2 * 128) / n,  # locals stop at 128
        "deepseek-v3": 61 * (512 + 64) * 2,  # one latent vector and one RoPE key per layer
    }
    assert per_token == pytest.approx(by_hand, rel=1e-12)
    # "the dense models follow the 2023 rule": full attention on every layer, the formula exact
    assert per_token["llama-3.1-8b"] == costs.kv_bytes_per_token(MODEL_CONFIGS["llama-3-8b"], 2)
    for name in ("gemma-3-27b", "gpt-oss-120b"):  # "little more per token than their global layers alone"
        assert LAYOUTS_2026[name].per_token_bytes < per_token[name] < 1.05 * LAYOUTS_2026[name].per_token_bytes
    assert per_token["deepseek-v3"] < per_token["llama-3.1-8b"]
    assert round(ns["every_head"] / per_token["deepseek-v3"]) == 71
    # "in a model whose every layer is full attention, the saving against MHA is exactly the size of a group"
    for name in ("llama-3-8b", "llama-2-70b", "smollm2-135m"):
        shape = MODEL_CONFIGS[name]
        mha = costs.kv_bytes_per_token(replace(shape, num_kv_heads=shape.num_heads), 2)
        assert mha == shape.num_queries_per_kv * costs.kv_bytes_per_token(shape, 2)
