"""A self-learner's answers and progress file never end in a traceback (issue 15, item 5)."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from kvcourse.quizzes import check_answer
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import check
from kvcourse.quizzes.progress import Progress, format_progress


@pytest.fixture(autouse=True)
def progress_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCOURSE_PROGRESS", str(tmp_path / "progress"))
    path = tmp_path / "progress" / "progress.json"
    path.parent.mkdir()
    return path


def _backups(path):
    return sorted(path.parent.glob("progress.damaged-*.json"))


@pytest.mark.parametrize("qid", ["users_to_outweigh_13b", "cache_bytes_param"])
@pytest.mark.parametrize(
    "answer", [10**400, -(10**5000), "9" * 400, "1e400"], ids=["10**400", "-10**5000", "400 nines", "1e400"]
)
def test_a_huge_number_gets_a_message(qid, answer):
    verdict = check_answer("07", qid, answer)
    assert not verdict.passed and verdict.malformed and len(verdict.message) < 300


def test_a_huge_number_returned_by_code_is_wrong_not_a_crash():
    verdict = check(load_quiz("07").question("formula_code"), "def kv_cache_bytes(*a):\n    return 10**5000\n")
    assert not verdict.passed and "digits" in verdict.message and len(verdict.message) < 300


def test_a_huge_string_is_not_echoed_whole():
    megabyte = "x" * 1_000_000
    for qid in ("main_cost", "cache_bytes_param", "users_to_outweigh_13b", "formula_code"):
        verdict = check_answer("07", qid, megabyte)
        assert not verdict.passed and len(verdict.message) < 400, qid
    verdict = check_answer("07", "formula_code", "def kv_cache_bytes(*a):\n    raise ValueError('y' * 10**6)\n")
    assert "ValueError" in verdict.message and len(verdict.message) < 400


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '"text"',
        '{"version": 1, "lessons": []}',
        '{"lessons": {}}',
        '{"version": "1"}',
        "{not json",
        "\xff\xfe",
    ],
)
def test_a_file_of_the_wrong_shape_is_kept_aside_with_a_message(progress_file, content, capsys):
    progress_file.write_bytes(b"\xff\xfe" if content == "\xff\xfe" else content.encode())
    verdict = check_answer("07", "main_cost", "b")
    assert verdict.passed
    out = capsys.readouterr().out
    assert "kept as progress.damaged-" in out
    assert Progress().passed("07") == {"main_cost"}
    assert len(_backups(progress_file)) == 1


def test_fields_of_the_wrong_type_are_salvaged_and_never_count_as_passed(progress_file, capsys):
    progress_file.write_text(
        json.dumps(
            {
                "version": 1,
                "seed": 12,
                "lessons": {
                    "07": {
                        "main_cost": {"passed": "no", "attempts": "3"},
                        "formula_code": {"passed": True, "attempts": 2},
                        "per_token_gqa": "oops",
                    },
                    "05": ["a list"],
                },
            }
        )
    )
    progress = Progress()
    assert progress.passed("07") == {"formula_code"}  # "no" is not passed; the good record is kept
    assert progress.lesson("07")["main_cost"]["attempts"] == 0
    assert progress.notes and "wrong type" in progress.notes[0] and "more" in progress.notes[0]
    assert len(progress.seed) == 16
    assert len(_backups(progress_file)) == 1
    assert Progress().notes == []  # repaired: no second backup, no second message
    assert len(_backups(progress_file)) == 1


def test_a_second_damaged_file_never_overwrites_the_first_backup(progress_file):
    progress_file.write_text("{first")
    Progress()
    progress_file.write_text("{second")
    Progress()
    assert sorted(p.read_text() for p in _backups(progress_file)) == ["{first", "{second"]


def test_a_newer_versions_file_is_left_untouched(progress_file, capsys):
    original = json.dumps({"version": 2, "lessons": {"07": {"main_cost": {"state": "new"}}}}).encode()
    progress_file.write_bytes(original)
    assert check_answer("07", "main_cost", "b").passed
    assert "newer version" in capsys.readouterr().out
    assert progress_file.read_bytes() == original and not _backups(progress_file)
    assert "newer version" in format_progress()


def test_two_open_notebooks_merge_their_progress(progress_file):
    first, second = Progress(), Progress()  # two notebooks, opened before either answered
    first.record("07", "main_cost", True)
    second.record("05", "cached_work", True)
    second.record("07", "main_cost", False)
    saved = Progress()
    assert saved.passed("07") == {"main_cost"} and saved.passed("05") == {"cached_work"}
    assert saved.lesson("07")["main_cost"]["attempts"] == 2
    assert first.seed == second.seed == saved.seed  # one seed, whoever drew it first


def _record_many(path: str, n: int) -> None:
    from pathlib import Path

    for _ in range(n):
        Progress(Path(path)).record("07", "main_cost", False)


def test_concurrent_writers_lose_no_attempt_under_the_lock(progress_file):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record_many, args=(str(progress_file), 20)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert Progress().lesson("07")["main_cost"]["attempts"] == 60
