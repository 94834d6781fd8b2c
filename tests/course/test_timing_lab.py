"""The timing lab's library: config checks, token checks, interruption, report, predictions (lesson 17)."""

from __future__ import annotations

import json

import pytest
import torch
from factories import make_config, make_tiny_hf_llama

from kvcourse.kernels import costs
from kvcourse.kernels.costs import tokens_processed
from kvcourse.timing_lab import (
    HF_CACHE,
    HF_NO_CACHE,
    SweepConfig,
    Timing,
    first_difference,
    run_sweep,
)
from kvcourse.timing_lab.predict import (
    PassCostModel,
    calibrate,
    generation_work,
    predict_sweep,
)
from kvcourse.timing_lab.report import format_header, format_table, plot_sweep, write_json
from kvcourse.timing_lab.verdicts import (
    WITH,
    WITHOUT,
    bend_verdict,
    check_answers,
    cost_per_extra_token,
    direction,
)

PROMPT_WORDS = "once upon a time in a distant land"


def make_word_tokenizer():
    """A whitespace word tokenizer small enough for the tiny model's vocabulary (96 ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", *dict.fromkeys(PROMPT_WORDS.split())]
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


@pytest.fixture(scope="module")
def tiny():
    return make_tiny_hf_llama(), make_word_tokenizer()


def fake_runners(tokens_by_backend=None, interrupt_at=None):
    """Runners that answer instantly with 0, 1, 2, ... (or per-backend overrides)."""

    def make(name):
        def run(n):
            if interrupt_at is not None and n >= interrupt_at:
                raise KeyboardInterrupt
            if tokens_by_backend and name in tokens_by_backend:
                return tokens_by_backend[name](n)
            return list(range(n))

        return run

    return {HF_CACHE: make(HF_CACHE), HF_NO_CACHE: make(HF_NO_CACHE)}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lengths=()), "at least one"),
        (dict(lengths=(8, -1)), "positive"),
        (dict(lengths=(8, 0)), "positive"),
        (dict(lengths=(8.5,)), "positive"),
        (dict(num_repeats=0), "repeats"),
        (dict(num_warmup=-1), "warmup"),
        (dict(prompt="  "), "prompt"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SweepConfig(**kwargs)


def test_config_sorts_and_dedupes_lengths():
    assert SweepConfig(lengths=(64, 16, 16, 32)).lengths == (16, 32, 64)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_real_hf_sweep_on_tiny_model_matches_tokens(tiny):
    model, tok = tiny
    result = run_sweep(model, tok, [3, 6], 2, progress=False)
    assert result.tokens_match and not result.interrupted
    assert result.completed_lengths == [3, 6]
    for n in (3, 6):
        assert len(result.reference_tokens[n]) == n  # forced to full length
        for backend in (HF_CACHE, HF_NO_CACHE):
            assert len(result.timings[n][backend].seconds) == 2
    assert result.header["prompt_tokens"] == 8 and result.header["threads"] == torch.get_num_threads()


def test_mismatch_is_recorded_with_first_position(tiny):
    model, tok = tiny
    wrong = lambda n: list(range(n))[:-1] + [999]  # differs at the last token
    result = run_sweep(model, tok, [4, 8], 1, progress=False, runners=fake_runners({HF_NO_CACHE: wrong}))
    assert not result.tokens_match
    assert [(m.backend, m.num_new_tokens, m.position, m.expected, m.got) for m in result.mismatches] == [
        (HF_NO_CACHE, 4, 3, 3, 999),
        (HF_NO_CACHE, 8, 7, 7, 999),
    ]


def test_early_stop_is_an_error(tiny):
    model, tok = tiny
    with pytest.raises(RuntimeError, match="stopped early"):
        run_sweep(model, tok, [4], 1, progress=False, runners=fake_runners({HF_CACHE: lambda n: list(range(n - 1))}))


def test_interrupt_keeps_completed_lengths(tiny):
    model, tok = tiny
    result = run_sweep(model, tok, [2, 4, 8], 1, num_warmup=0, progress=False, runners=fake_runners(interrupt_at=8))
    assert result.interrupted
    assert result.completed_lengths == [2, 4]
    table = format_table(result)
    assert "\n         2 |" in table and "\n         8 |" not in table


def test_context_limit_is_checked(tiny):
    model, tok = tiny  # max_position_embeddings=128
    with pytest.raises(ValueError, match="at most 128"):
        run_sweep(model, tok, [200], 1, progress=False, runners=fake_runners())


def test_report_json_and_plot(tiny, tmp_path):
    model, tok = tiny
    result = run_sweep(model, tok, [2, 5], 3, progress=False, runners=fake_runners())
    result.timings[2][HF_CACHE].seconds[:] = [1.0, 2.0, 4.0]  # known numbers to check the arithmetic
    result.timings[2][HF_NO_CACHE].seconds[:] = [6.0, 6.0, 6.0]
    table = format_table(result)
    assert "2.000 ±1.500" in table and "3.00x" in table and "1.0" in table  # median, half range, speedup
    assert "model LlamaForCausalLM" in format_header(result) and "torch " in format_header(result)
    data = json.loads(write_json(result, tmp_path / "r.json").read_text())
    assert data["header"]["lengths"] == [2, 5] and data["tokens_match"] is True
    row = next(r for r in data["runs"] if r["num_new_tokens"] == 2 and r["backend"] == HF_CACHE)
    assert row["seconds"] == [1.0, 2.0, 4.0] and row["median_s"] == 2.0 and row["spread_s"] == 3.0
    fig = plot_sweep(result, predictions={HF_CACHE: [1.0, 2.0], HF_NO_CACHE: [3.0, 4.0]})
    ax_time, ax_speed = fig.axes
    assert "seconds" in ax_time.get_ylabel() and "tokens" in ax_time.get_xlabel()
    assert "speedup" in ax_speed.get_ylabel() and fig.get_suptitle()
    assert any(label.startswith("predicted") for label in ax_time.get_legend_handles_labels()[1])
    from matplotlib.figure import Figure

    given = Figure()
    assert plot_sweep(result, fig=given) is given and len(given.axes) == 2  # notebooks pass a pyplot figure
    assert ax_time.get_xscale() == "linear"  # a straight line there is linear growth (lesson 17's claim)
    assert ax_speed.get_xscale() == "log" and "log" in ax_speed.get_xlabel()


def _timed(tiny, lengths, cached, uncached):
    """A sweep over ``lengths`` whose median seconds are the given ones (one repeat each)."""
    model, tok = tiny
    result = run_sweep(model, tok, lengths, 1, progress=False, runners=fake_runners())
    for n, c, u in zip(lengths, cached, uncached, strict=True):
        result.timings[n][HF_CACHE].seconds[:] = [c]
        result.timings[n][HF_NO_CACHE].seconds[:] = [u]
    return result


def test_cost_per_extra_token_and_the_bend_verdict(tiny):
    # cached: 1 s per token throughout (straight); uncached: 1, 2, 4 s per extra token (bends)
    steps = cost_per_extra_token(_timed(tiny, [2, 4, 8], [2.0, 4.0, 8.0], [2.0, 4.0, 12.0]))
    assert list(steps.index) == ["2 → 4 tokens", "4 → 8 tokens"]
    assert list(steps[WITH]) == [1.0, 1.0] and list(steps[WITHOUT]) == [1.0, 2.0]
    verdict = bend_verdict(steps)
    assert "stayed about the same (a straight line)" in verdict and "changed 2.00x (bending upward)" in verdict
    assert "uncached line bent upward more" in verdict
    same = bend_verdict(cost_per_extra_token(_timed(tiny, [2, 4, 8], [2.0, 4.0, 8.0], [3.0, 6.0, 12.0])))
    assert "no clear difference" in same
    two = cost_per_extra_token(_timed(tiny, [2, 4], [2.0, 4.0], [3.0, 6.0]))
    assert len(two) == 1 and "cannot bend" in bend_verdict(two)


def test_direction_and_answer_checks(capsys, monkeypatch):
    assert [direction(r) for r in (2.0, 1.01, 0.3)] == ["larger", "about the same", "smaller"]
    from kvcourse.notebook import STRICT_ENV, ExpectationFailed

    monkeypatch.delenv(STRICT_ENV, raising=False)
    check_answers([1, 2, 3], [1, 2, 3], torch.float32)
    check_answers([1, 2, 3], [1, 5, 3], torch.bfloat16)
    out = capsys.readouterr().out
    assert "the same 3 tokens both ways" in out and "part ways at new token #1" in out
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(ExpectationFailed):
        check_answers([1, 2, 3], [1, 5, 3], torch.float32)  # float32 must agree: a checked claim


def test_timing_statistics():
    t = Timing(10, [3.0, 1.0, 2.0])
    assert (t.median, t.spread, t.tokens_per_second) == (2.0, 2.0, 5.0)


@pytest.mark.parametrize("prompt_len, n", [(1, 1), (8, 1), (8, 16), (5, 33)])
def test_tokens_processed_closed_form_matches_step_sum(prompt_len, n):
    config = make_config()
    for use_cache in (True, False):
        work = generation_work(config, prompt_len, n, use_cache)
        assert work.tokens_processed == tokens_processed(prompt_len, n, use_cache)
        assert work.num_passes == n
    # Uncached work is triangular: each extra token costs more than the last.
    if n > 1:
        assert tokens_processed(prompt_len, n, False) == sum(prompt_len + t for t in range(n))


def test_uncached_flops_grow_quadratically():
    config = make_config()
    ratio = lambda n: generation_work(config, 4, n, False).flops / generation_work(config, 4, n, True).flops
    assert ratio(8) < ratio(16) < ratio(32)
    first_pass = costs.forward_flops(config, 4, 4, num_logits=1)
    assert generation_work(config, 4, 1, True).flops == first_pass == generation_work(config, 4, 1, False).flops


def test_pass_cost_model_fits_a_line_and_validates():
    model = PassCostModel.fit([100, 300], [2.0, 4.0])
    assert model.seconds_per_pass == pytest.approx(1.0) and model.seconds_per_flop == pytest.approx(0.01)
    assert PassCostModel.fit([100, 300], [4.0, 2.0]).seconds_per_flop == 0.0  # noise cannot make it negative
    with pytest.raises(ValueError):
        PassCostModel(-1.0, 0.0)
    with pytest.raises(ValueError):
        PassCostModel.fit([100, 100], [1.0, 2.0])


def test_calibrate_and_predict_on_tiny_model(tiny):
    model, _ = tiny
    cost = calibrate(model, num_tokens=(1, 16), num_repeats=1)
    pred = predict_sweep(cost, make_config(), 8, [4, 8, 16])
    assert all(c <= u for c, u in zip(pred[HF_CACHE], pred[HF_NO_CACHE], strict=True))
    assert pred[HF_NO_CACHE][-1] / pred[HF_CACHE][-1] >= pred[HF_NO_CACHE][0] / pred[HF_CACHE][0]


@pytest.mark.slow
def test_real_model_hf_and_engine_agree(real_model):
    from kvcourse.timing_lab.runners import engine_cache_modes

    model, tok = real_model
    modes = engine_cache_modes()
    result = run_sweep(model, tok, [10], 1, num_warmup=0, engine_modes=modes, progress=False)
    assert result.tokens_match, [m.describe() for m in result.mismatches]
    assert len(result.reference_tokens[10]) == 10
    assert set(result.timings[10]) == {HF_CACHE, HF_NO_CACHE, *(f"engine-{m}" for m in modes)}
