"""The self-learner widgets, driven in plain pytest: set values, click, read feedback, check progress."""

from __future__ import annotations

import html
import json

import pytest

from kvcourse.cli import main
from kvcourse.quizzes import check_answer, quick_check
from kvcourse.quizzes.checking import expected_number
from kvcourse.quizzes.progress import Progress, progress_dir


@pytest.fixture(autouse=True)
def progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCOURSE_PROGRESS", str(tmp_path / "progress"))
    return tmp_path / "progress" / "progress.json"


def _item(view, qid):
    return next(item for item in view.items if item.question.id == qid)


def _saved(path) -> dict:
    return json.loads(path.read_text())["lessons"]


def test_nothing_is_shown_before_an_attempt():
    view = quick_check("07")
    for item in view.items:
        assert item.feedback.value == ""
        assert item.reveal_button.layout.display == "none"
    choice = _item(view, "main_cost")
    assert choice.input.value is None  # no option preselected
    assert all(why not in view.items[0].box.children[0].value for why in choice.question.explanations.values())


def test_choice_wrong_then_reveal_then_right(progress_in_tmp):
    view = quick_check(7)
    item = _item(view, "main_cost")
    item.check_button.click()  # no option chosen yet
    assert "Choose an option first" in item.feedback.value and _saved(progress_in_tmp) == {}
    item.input.value = "a"
    item.check_button.click()
    assert "Not (a)" in item.feedback.value
    assert _saved(progress_in_tmp)["07"]["main_cost"] == {
        **_saved(progress_in_tmp)["07"]["main_cost"],
        "passed": False,
        "attempts": 1,
    }
    assert item.reveal_button.layout.display is None  # offered only now
    item.reveal_button.click()
    assert "The answer is (b)" in item.feedback.value
    assert _saved(progress_in_tmp)["07"]["main_cost"]["revealed"] is True
    item.input.value = "b"
    item.check_button.click()
    assert "Right" in item.feedback.value
    assert html.escape(item.question.explanations["d"]) in item.feedback.value  # why the others are wrong
    assert _saved(progress_in_tmp)["07"]["main_cost"]["passed"] is True


def test_numeric_with_units_and_malformed(progress_in_tmp):
    view = quick_check("06")
    item = _item(view, "per_layer_token")
    item.input.value = "abc"
    item.check_button.click()
    assert "Could not read" in item.feedback.value
    item.input.value = "8 KiB"
    item.check_button.click()
    assert "Not quite" in item.feedback.value and "16,384" not in item.feedback.value
    item.input.value = "16 KiB"
    item.check_button.click()
    assert "Right" in item.feedback.value and "16,384" in item.feedback.value
    assert _saved(progress_in_tmp)["06"]["per_layer_token"]["passed"] is True


def test_parameterised_uses_the_learners_saved_seed(progress_in_tmp):
    view = quick_check("07")
    item = _item(view, "cache_bytes_param")
    seed = Progress().seed
    assert json.loads(progress_in_tmp.read_text())["seed"] == seed
    item.input.value = str(int(expected_number(item.question, seed)))
    item.check_button.click()
    assert "Right" in item.feedback.value
    # the same learner sees the same numbers next time
    assert _item(quick_check("07"), "cache_bytes_param").prompt.value == item.prompt.value


def test_code_and_free_response(progress_in_tmp):
    view = quick_check("05")
    code = _item(view, "cached_work")
    assert "def tokens_processed_with_cache" in code.input.value  # the starter
    code.input.value = "def tokens_processed_with_cache(p, n):\n    return p + n\n"
    code.check_button.click()
    assert "returned" in code.feedback.value
    code.input.value = "def tokens_processed_with_cache(p, n):\n    return p / 0\n"
    code.check_button.click()
    assert "ZeroDivisionError" in code.feedback.value
    code.input.value = "def tokens_processed_with_cache(p, n):\n    return p + n - 1\n"
    code.check_button.click()
    assert "pass" in code.feedback.value
    free = _item(view, "why_cacheable")
    assert free.check_button.description == "Submit"
    free.check_button.click()
    assert "Write your own answer first" in free.feedback.value
    assert html.escape(free.question.model_answer[:40]) not in free.feedback.value
    free.input.value = "Because earlier tokens never see later ones, their keys and values stay the same."
    free.check_button.click()
    # After submitting, the model answer is shown for self-assessment; no verdict, no Show answer.
    assert "Model answer:" in free.feedback.value and "judge for yourself" in free.feedback.value
    assert html.escape(free.question.model_answer[:40]) in free.feedback.value
    assert free.reveal_button.layout.display == "none"
    assert Progress().passed("05") == {"cached_work"}  # a free response is answered, never passed
    assert Progress().answered("05") == {"why_cacheable"}
    assert _saved(progress_in_tmp)["05"]["why_cacheable"]["answered"] is True
    assert "Answered before" in _item(quick_check("05"), "why_cacheable").feedback.value


def test_check_answer_and_progress_command(progress_in_tmp, capsys):
    assert check_answer("07", "users_to_outweigh_13b", "8 users").passed
    assert not check_answer("07", "main_cost", "c").passed
    free = check_answer("07", "outgrow_weights", "The cache grows with every token and every user; weights do not.")
    assert free.self_assessed and not free.passed
    assert progress_dir() == progress_in_tmp.parent
    assert main(["progress"]) == 0
    out = capsys.readouterr().out
    line07 = next(line for line in out.splitlines() if line.startswith("07 "))
    assert "1/5 #...." in line07 and "1/1 answered" in line07  # passed and self-assessed, apart
    line00 = next(line for line in out.splitlines() if line.startswith("00 "))
    assert "0/3" in line00 and "answered" not in line00  # lesson 00 has no free response


def test_a_free_response_saved_as_passed_by_an_older_version_counts_as_answered(progress_in_tmp):
    from kvcourse.quizzes.progress import format_progress

    Progress().record("05", "why_cacheable", True)  # what free responses used to record
    line05 = next(line for line in format_progress().splitlines() if line.startswith("05 "))
    assert "0/3" in line05 and "1/1 answered" in line05


def test_damaged_progress_file_is_set_aside(progress_in_tmp):
    progress_in_tmp.parent.mkdir(parents=True)
    progress_in_tmp.write_text("{not json")
    progress = Progress()
    assert progress.lesson("07") == {}
    progress.record("07", "main_cost", True)
    assert [p.read_text() for p in progress_in_tmp.parent.glob("progress.damaged-*.json")] == ["{not json"]
    assert Progress().passed("07") == {"main_cost"}


def test_questions_have_human_titles_and_one_look_for_feedback():
    from kvcourse import feedback

    view = quick_check("14")
    total = len(view.items)
    for number, item in enumerate(view.items, start=1):
        title = item.prompt.value.split("<br>")[0]
        assert title.startswith(f"<b>Question {number} of {total}</b>")
        assert f'<span style="display:none">{item.question.id}</span>' in title  # the id, out of sight
    assert "kv-quiz" in view._dom_classes and ".widget-radio-box label" in view.children[0].value
    item = _item(view, "why_batch")
    item.input.value = next(k for k in item.question.option_keys if k != item.question.correct)
    item.check_button.click()
    assert feedback.ERROR_COLOUR in item.feedback.value
    item.input.value = item.question.correct
    item.check_button.click()
    assert feedback.SUCCESS_COLOUR in item.feedback.value
    numeric = next(i for i in view.items if i.question.kind.value == "numeric")
    numeric.input.value = "lots"
    numeric.check_button.click()
    assert feedback.ERROR_COLOUR in numeric.feedback.value and "Could not read" in numeric.feedback.value
