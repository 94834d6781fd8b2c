"""Lesson 12's printed claims, recomputed independently: blocks saved by sharing, equal answers, beam peaks.

Parallel sampling: one request with n samples against n separate requests seeded seed + i, on
the same engine; the blocks saved while all samples run must be (n - 1) x the prompt's full blocks
and the answers identical. Beam search: a plain beam search on the Hugging Face model, every beam
with its own cache rows (nothing shared), gives the beams after each step; counting the distinct
blocks those beams would share (a full block is shared by beams whose tokens agree up to its end,
the block being written is each beam's own) must give the peak ``beam_search`` reports. The real-
model tests run the lesson's own set-up cells (12-03, 12-16) and check the numbers it prints.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, beam_search
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

LESSON = REPO_ROOT / "lessons" / "12_sharing.ipynb"


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def run_shared_and_separate(model, prompt, params, block_size):
    """Blocks in use after every step and the answers: one n-sample request, then n separate requests."""
    shared = LLMEngine(model, EngineConfig(block_size=block_size))
    rid = shared.add_request(prompt, params)
    alone = LLMEngine(model, EngineConfig(block_size=block_size))
    ids = [alone.add_request(prompt, replace(params, n=1, seed=params.seed + i)) for i in range(params.n)]
    used = {}
    for name, engine in (("shared", shared), ("alone", alone)):
        used[name] = []
        while engine.has_unfinished_requests:
            engine.step()
            used[name].append(engine.kv_cache_manager.num_used_blocks)
    answers = shared.requests[rid].output().samples
    return used["shared"], used["alone"], answers, [alone.requests[i].output().tokens for i in ids]


def reference_beams(hf_model, prompt: list[int], width: int, steps: int) -> tuple[list[list[list[int]]], list[float]]:
    """Plain beam search with private cache rows per beam (reordered, as Hugging Face does): beams after each step."""
    device = hf_model.device
    with torch.inference_mode():
        out = hf_model(torch.tensor([prompt], device=device), use_cache=True)
        cache, beams = out.cache, [list(prompt)]
        scores = torch.zeros(1, device=device)
        history = []
        for step in range(steps):
            candidates = scores[:, None] + torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (beams, vocab)
            best = torch.topk(candidates.flatten(), width)
            parents, tokens = best.indices // candidates.shape[1], best.indices % candidates.shape[1]
            beams = [beams[p] + [t] for p, t in zip(parents.tolist(), tokens.tolist(), strict=True)]
            scores = best.values
            history.append(beams)
            if step < steps - 1:
                cache.reorder_cache(parents)  # each survivor gets a private copy of its parent's rows
                out = hf_model(tokens[:, None], cache=cache, use_cache=True)
    return history, scores.tolist()


def distinct_blocks(beams: list[list[int]], block_size: int) -> int:
    """Blocks in use while these beams write their last token: shared full blocks once, the written block per beam."""
    written = (len(beams[0]) - 1) // block_size  # the block that receives this step's key and value
    shared = sum(len({tuple(b[: (i + 1) * block_size]) for b in beams}) for i in range(written))
    return shared + len(beams)


def expected_peaks(history: list[list[list[int]]], block_size: int) -> tuple[int, int]:
    """(peak blocks in use, private copies at that moment) over the steps that beam_search measures."""
    counts = [distinct_blocks(beams, block_size) for beams in history[:-1]]  # steps 1 .. T - 1
    first_peak = counts.index(max(counts))
    beams = history[first_peak]
    return max(counts), len(beams) * blocks_for(len(beams[0]), block_size)


# -- the tiny model ------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt_len, n, block_size", [(18, 4, 4), (16, 4, 4), (23, 3, 8), (9, 2, 4)])
def test_sharing_saves_n_minus_1_full_prompt_blocks_and_changes_no_answer(tiny_model, prompt_len, n, block_size):
    prompt = [3 + (7 * i) % 90 for i in range(prompt_len)]
    params = SamplingParams(temperature=1.2, seed=11, n=n, max_new_tokens=12, stop_on_eos=False)  # all run
    used_shared, used_alone, answers, separately = run_shared_and_separate(tiny_model, prompt, params, block_size)
    assert answers == separately
    assert len(used_shared) == len(used_alone)
    assert used_alone[1] - used_shared[1] == (n - 1) * (prompt_len // block_size)
    assert used_alone[0] - used_shared[0] == (n - 1) * blocks_for(prompt_len, block_size)  # before the copies


@pytest.mark.parametrize("prompt_len, block_size", [(18, 4), (16, 4), (23, 8)])
def test_after_the_first_write_all_tables_share_the_full_prompt_blocks_only(tiny_model, prompt_len, block_size):
    """12-10: 12.shared_after_write is revealed from the blocks every table holds with reference count n."""
    n = 4
    prompt = [3 + (7 * i) % 90 for i in range(prompt_len)]
    engine = LLMEngine(tiny_model, EngineConfig(block_size=block_size))
    rid = engine.add_request(prompt, SamplingParams(temperature=1.2, seed=11, n=n, max_new_tokens=6, stop_on_eos=False))
    engine.step()
    engine.step()  # every sample has written its first token
    counts = engine.kv_cache_manager.block_pool.ref_counts
    for seq in engine.requests[rid].seqs:
        assert sum(counts[b] == n for b in seq.block_table) == prompt_len // block_size


@pytest.mark.parametrize("prompt_len, width, steps, block_size", [(10, 3, 8, 4), (17, 4, 12, 4), (30, 4, 9, 8)])
def test_beam_search_peak_is_the_distinct_blocks_of_the_beams(
    tiny_hf, tiny_model, prompt_len, width, steps, block_size
):
    prompt = [3 + (5 * i) % 90 for i in range(prompt_len)]
    history, scores = reference_beams(tiny_hf, prompt, width, steps)
    result = beam_search(tiny_model, prompt, beam_width=width, max_new_tokens=steps, block_size=block_size)
    assert result.beams == [b[prompt_len:] for b in history[-1]]
    assert result.scores == pytest.approx(scores, abs=1e-4)
    assert (result.peak_blocks_shared, result.peak_blocks_unshared) == expected_peaks(history, block_size)


def test_distinct_blocks_by_hand():
    # blocks of 2; beams of 5 tokens writing token 4 (block 2): block 0 shared by all, block 1 by two
    beams = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 9, 9, 7]]
    assert distinct_blocks(beams, 2) == 1 + 2 + 3


# -- the real model, with the lesson's own set-up --------------------------------------------------
def lesson_cell(cell_id: str, namespace: dict) -> dict:
    """Run one code cell of the lesson in ``namespace`` (the set-up cells define the prompt and sizes)."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(LESSON.read_text())["cells"]}
    exec(cells[cell_id], namespace)
    return namespace


@pytest.fixture(scope="module")
def lesson(real_model):
    hf_model, tokenizer = real_model
    ns = {"tokenizer": tokenizer, "SamplingParams": SamplingParams, "predict": lambda *args, **kwargs: None}
    for cell_id in ("12-03", "12-16"):  # the prompt, block size, n and params; the beam width and length
        lesson_cell(cell_id, ns)
    return ns


@pytest.mark.slow
def test_real_model_blocks_saved_and_answers_as_printed(smol_model, lesson):
    prompt, params, block_size = lesson["prompt"], lesson["params"], lesson["block_size"]
    used_shared, used_alone, answers, separately = run_shared_and_separate(smol_model, prompt, params, block_size)
    assert answers == separately  # float32
    assert len(prompt) == 94 and used_alone[1] - used_shared[1] == 3 * 5 == (params.n - 1) * (94 // 16)
    assert (used_shared[0], used_alone[0]) == (6, 24)
    saved = [a - s for s, a in zip(used_shared, used_alone, strict=True)]
    assert sum(saved) / sum(used_alone) < saved[1] / used_alone[1]  # the whole run saves less than its best moment


@pytest.mark.slow
def test_real_model_beam_peaks_as_printed(real_model, smol_model, lesson):
    hf_model, _ = real_model
    prompt, width, steps = lesson["prompt"], lesson["beam_width"], lesson["beam_tokens"]
    result = beam_search(smol_model, prompt, beam_width=width, max_new_tokens=steps, block_size=lesson["block_size"])
    history, scores = reference_beams(hf_model, prompt, width, steps)
    assert result.beams == [b[len(prompt) :] for b in history[-1]]
    assert result.scores == pytest.approx(scores, abs=1e-3)
    peak, unshared = expected_peaks(history, lesson["block_size"])
    assert (result.peak_blocks_shared, result.peak_blocks_unshared) == (peak, unshared)
    assert result.blocks_saved == pytest.approx(1 - peak / unshared)


# -- the dtype-aware checks the lesson calls (kvcourse.exactness) -----------------------------------
def test_exactness_helpers_require_equality_in_float32_and_explain_in_16_bits(monkeypatch, capsys):
    from kvcourse import exactness

    calls = []
    monkeypatch.setattr(exactness, "expect", lambda ok, sentence: calls.append(bool(ok)))
    exactness.expect_same_answers(3, 4, torch.float32, claim="same", cause="a batch of four")
    exactness.expect_same_answers(3, 4, torch.bfloat16, claim="same", cause="a batch of four")
    exactness.expect_same_answers(4, 4, torch.bfloat16, claim="same", cause="a batch of four")
    assert calls == [False, True]  # float32 must match; a 16-bit mismatch is explained, not expected
    assert "a batch of four" in " ".join(capsys.readouterr().out.split())  # the verdict is wrapped at 100 columns
    exactness.expect_close(5e-4, 15.0, torch.float32, "close")  # under 1e-3
    exactness.expect_close(2e-3, 15.0, torch.float32, "close")
    exactness.expect_close(0.5, 15.0, torch.bfloat16, "close")  # within 5 % of 15
    assert calls[2:] == [True, False, True]


@pytest.mark.slow
def test_the_beam_prediction_s_bounds_as_the_lesson_prints_them(lesson):
    """Cell 12-16 prints a beam's blocks alone and the prompt's full blocks: the private-copy total is the peak's."""
    prompt, block_size = lesson["prompt"], lesson["block_size"]
    assert lesson["per_beam"] == blocks_for(len(prompt) + lesson["beam_tokens"] - 1, block_size) == 7
    assert lesson["full"] == len(prompt) // block_size == 5
