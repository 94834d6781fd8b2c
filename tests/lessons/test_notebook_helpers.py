"""The lesson helpers: predict never blocks headless, reveal pairs guess and measurement, expect
fails only under the harness, solution stays collapsed, plots keep the course's rules."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import pytest  # noqa: E402
from IPython.core.error import StdinNotImplementedError  # noqa: E402

from kvcourse import notebook, plots  # noqa: E402
from kvcourse.notebook import ExpectationFailed, expect, parse_guess, predict, reveal, solution  # noqa: E402


@pytest.fixture(autouse=True)
def _own_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCOURSE_PROGRESS", str(tmp_path))
    monkeypatch.delenv("KVCOURSE_HEADLESS", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("KVCOURSE_STRICT", raising=False)


def _never(prompt: str) -> str:
    raise AssertionError(f"asked for input in a headless run: {prompt}")


def _answers(*texts: str):
    queue = list(texts)
    return lambda prompt: queue.pop(0)


@pytest.mark.parametrize("switch", ["KVCOURSE_HEADLESS", "NBGRADER_EXECUTION"])
def test_predict_headless_never_asks(monkeypatch, capsys, switch):
    monkeypatch.setenv(switch, "1")
    predict("t.size", "How big?", unit="MB", read=_never)
    assert "t.size" not in notebook.saved_predictions()
    assert "no guess asked" in capsys.readouterr().out
    reveal("t.size", 4.0)  # the unit is remembered although no guess was asked
    assert capsys.readouterr().out == "Measured: 4 MB. (You made no guess for this one.)\n"


def test_predict_without_an_input_box_goes_on(capsys):
    def no_stdin(prompt):
        raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")

    predict("t.size", "How big?", unit="MB", read=no_stdin)
    assert "t.size" not in notebook.saved_predictions()
    assert "no input box" in capsys.readouterr().out


def test_guess_is_saved_and_revealed_beside_the_measurement(tmp_path, capsys):
    predict("t.size", "How big is it?", unit="MB", read=_answers("2 MB"))
    assert "Locked in: 2 MB" in capsys.readouterr().out
    reveal("t.size", 4.6)
    line = capsys.readouterr().out
    assert "Your guess: 2 MB" in line and "Measured: 4.6 MB" in line and "2.3x your guess" in line
    saved = json.loads((tmp_path / "predictions.json").read_text())
    assert saved["t.size"]["guess"] == 2.0 and saved["t.size"]["measured"] == 4.6


def test_guess_in_another_unit_is_converted():
    assert parse_guess("3 GB", "MB") == pytest.approx(3000.0)
    assert parse_guess("100", "GB") == 100.0 and parse_guess("2,350", "kB") == 2350.0  # bare: the unit asked
    assert parse_guess("500 ms", "s") == pytest.approx(0.5)
    assert parse_guess("4k", "tokens") == 4000.0
    assert parse_guess("0.3 GFLOP", "GFLOP") == pytest.approx(0.3)
    assert parse_guess("12x", "x") == 12.0


def test_a_bad_guess_is_asked_again_then_skipped(capsys):
    predict("t.count", "How many?", unit="tokens", read=_answers("lots", "3 GB", ""))
    out = capsys.readouterr().out
    assert out.count("Could not read that answer") == 2 and "No guess this time" in out
    assert "t.count" not in notebook.saved_predictions()


def test_a_negative_guess_is_refused_and_asked_again(capsys):
    prompts: list[str] = []
    answers = iter(["-5 sequences", "300"])

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    predict("t.seqs", "How many sequences?", unit="sequences", read=read)
    out = capsys.readouterr().out
    assert "Could not use that answer: -5 sequences is below zero" in out and "Locked in: 300 sequences" in out
    assert notebook.saved_predictions()["t.seqs"]["guess"] == 300.0
    assert prompts[0] == "Type a number of sequences and press Enter (Enter alone skips): "
    assert parse_guess("-5", "x", allow_negative=True) == -5.0


def test_approximate_markers_are_read():
    for text in ("about 250", "~250", "~ 250", "roughly 250", "About 250 MB", "≈250", "approximately 250"):
        assert parse_guess(text, "MB") == 250.0, text
    assert parse_guess("around 3 GB", "MB") == pytest.approx(3000.0)


def test_the_prompt_says_what_to_type(capsys):
    seen: list[str] = []
    for unit in ("x", "%", "MB", "tokens", ""):
        predict(f"t.{unit}", "?", unit=unit, read=lambda prompt: seen.append(prompt) or "")
    assert all(prompt.startswith("Type ") and "press Enter" in prompt for prompt in seen), seen
    assert "in x" not in seen[0] and "4x" in seen[0]
    assert "in MB" in seen[2] and "GB" in seen[2]
    predict("t.letter", "?", kind="choice", options=["a", "b"], read=lambda prompt: seen.append(prompt) or "")
    assert seen[-1].startswith("Type one letter (a, b)")


def test_reveal_against_a_zero_guess_says_more_or_less(capsys):
    predict("t.zero", "?", unit="tokens", read=_answers("0"))
    reveal("t.zero", 12)
    out = capsys.readouterr().out
    assert "12 tokens more than your guess" in out and "Off by" not in out


def test_choice_reveal_speaks_plainly(capsys):
    predict("t.pick", "?", kind="choice", options=["up", "down"], read=_answers("a"))
    reveal("t.pick", "down")
    out = capsys.readouterr().out
    assert "not this time" not in out and "Not quite: the measurement differs from your guess" in out


def test_choice_prediction_and_reveal(capsys):
    options = ["it doubles", "it stays the same", "it quadruples"]
    predict("t.choice", "Double the length?", kind="choice", options=options, read=_answers("z", "(c)"))
    assert notebook.saved_predictions()["t.choice"]["guess"] == "it quadruples"
    reveal("t.choice", "it quadruples")
    assert "Right: that is what you predicted" in capsys.readouterr().out
    with pytest.raises(ValueError, match="options"):
        predict("t.bad", "?", kind="choice")
    with pytest.raises(ValueError, match="kind"):
        predict("t.bad", "?", kind="slider")


def test_reveal_without_a_guess_still_shows_the_measurement(capsys):
    reveal("t.none", 2580.5, unit="kB")
    assert capsys.readouterr().out == "Measured: 2,580 kB. (You made no guess for this one.)\n"


def test_reveal_says_when_a_guess_is_close_or_too_large(capsys):
    predict("t.close", "?", unit="s", read=_answers("1.0"))
    reveal("t.close", 1.02)
    assert "well predicted" in capsys.readouterr().out
    reveal("t.close", 1.0)
    assert "exactly your guess" in capsys.readouterr().out
    predict("t.big", "?", unit="x", read=_answers("10"))
    reveal("t.big", 2.0)
    assert "5x smaller than your guess" in capsys.readouterr().out


def test_expect_prints_a_verdict_and_raises_only_under_the_harness(monkeypatch, capsys):
    expect(1 + 1 == 2, "arithmetic works")
    assert capsys.readouterr().out.startswith("✔ arithmetic works")
    expect(False, "the cache changed the answer")  # a learner sees words, no traceback
    assert "Expected: the cache changed the answer" in capsys.readouterr().out
    monkeypatch.setenv("KVCOURSE_STRICT", "1")
    with pytest.raises(ExpectationFailed, match="the cache changed the answer"):
        expect(False, "the cache changed the answer")


def test_solution_is_a_collapsed_toggle_with_escaped_text():
    box = solution("Use `x < y` here.\n\nThen print it.", code="print(1 < 2)")
    assert isinstance(box, widgets.Accordion) and box.selected_index is None
    assert box.get_title(0) == "Show a solution"
    content = box.children[0].value
    assert "<code>x &lt; y</code>" in content and "print(1 &lt; 2)" in content and content.count("<p>") == 2


def test_plots_label_everything():
    ax = plots.lines(
        [1, 2, 4],
        {"no cache": [1, 4, 16], "cache": [1, 2, 4]},
        title="the gap widens",
        xlabel="tokens",
        ylabel="work (tokens)",
        logx=True,
        logy=True,
    )
    assert ax.get_title() == "the gap widens" and ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["no cache", "cache"]
    left, right = plots.panels(2)
    plots.bars(["a", "b"], {"x": [1, 2], "y": [3, 4]}, title="t", ylabel="bytes", ax=left, stacked=True)
    plots.mark(left, 2.5, "limit", horizontal=True)
    assert "limit" in [t.get_text() for t in left.get_legend().get_texts()]
    with pytest.raises(ValueError, match="one or two panels"):
        plots.panels(3)
