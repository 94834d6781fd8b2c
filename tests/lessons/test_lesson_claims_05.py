"""Exact claims lesson 05 makes, checked here rather than in front of the learner (docs/lessons.md)."""

from __future__ import annotations

import json

import pytest

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels import MODEL_CONFIGS, costs, generate
from kvcourse.simulators.kv_cache import ANSWER_LENGTHS, SHORT_ANSWER_LENGTHS, answer_lengths_to_time
from kvcourse.syllabus import REPO_ROOT

MESSAGES = [{"role": "user", "content": "Describe a sunrise over the sea."}]  # lesson 05's chat prompt


@pytest.mark.slow
def test_05_the_cache_writes_the_same_tokens_in_fp32(real_model, smol_model):
    """05-08: "in float32 they write the same tokens"; the lesson prints the agreement in either dtype."""
    _, tokenizer = real_model
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt")["input_ids"]
    plain = generate(smol_model, prompt, 20, cache="none", eos_token_id=[])
    cached = generate(smol_model, prompt, 20, cache="contiguous", eos_token_id=[])
    assert plain.tokens == cached.tokens


def test_05_the_cache_holds_every_token_fed_and_the_fed_ratio_is_the_reveal():
    """05-06 and 05-10: P + n - 1 tokens fed with the cache; without it the prompt and t - 1 answer tokens at step t."""
    prompt_len, num_new = 37, 20
    with_cache = costs.tokens_processed(prompt_len, num_new, True)
    without = costs.tokens_processed(prompt_len, num_new, False)
    assert with_cache == prompt_len + num_new - 1
    assert without == sum(prompt_len + t for t in range(num_new))
    for bytes_per_value in (4, 2):  # 05.cache_span: the span "1 MB to 10 MB" in float32 and in bfloat16
        assert 1e6 <= costs.kv_cache_bytes(MODEL_CONFIGS["smollm2-135m"], with_cache, 1, bytes_per_value) < 1e7


def _code() -> str:
    """Lesson 05's code cells, joined."""
    cells = json.loads((REPO_ROOT / "lessons" / "05_the_kv_cache.ipynb").read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


def test_05_the_timing_sweep_is_sized_by_a_helper_out_of_the_learners_sight(monkeypatch):
    """The lesson reads its answer lengths from one helper and never branches on how it is run (docs/lessons.md)."""
    code = _code()
    assert "lengths = answer_lengths_to_time()" in code and "headless" not in code
    monkeypatch.setenv(HEADLESS_ENV, "1")
    assert answer_lengths_to_time() == list(SHORT_ANSWER_LENGTHS) == [4, 16]
    monkeypatch.delenv(HEADLESS_ENV)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert answer_lengths_to_time() == list(ANSWER_LENGTHS) == [4, 8, 16, 32]


def test_05_the_dozen_line_cache_is_checked_against_the_loop_without_it():
    """The lesson's own cache (a K and a V tensor per layer, concatenated) is diffed token for token by an expect."""
    code = _code()
    assert "class ListKVCache" in code and "torch.cat" in code
    assert "expect(cached_tokens == plain_tokens" in code
