"""Regression: every lesson that replays the shared trace states the same paging figures (lessons 09, 11, 14, 16).

Lesson 16 once printed 28.7 requests at once (2.7x as many) from a hand-written paging replay while
lesson 11 printed 27.2 (2.6x) from the engine's, and lesson 11's quick check said "about 2.6". Now
``PagingReplay`` is the one paging replay (LLMEngine's own scheduler, with dummy tokens). Each
figure here is computed the way its lesson computes it, by running the lesson's own cells, and
the figures are compared, so they cannot drift apart again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import tomllib
from dataclasses import replace

import pytest
from factories import make_tiny_model

from kvcourse.kernels import (
    EngineConfig,
    LLMEngine,
    PagingReplay,
    TraceServer,
    reservation_start_steps,
    serve_interleaved,
    simulate_paging,
    simulate_reservation,
    trace_prompts,
    workload,
)
from kvcourse.kernels.measure import stream
from kvcourse.simulators.paging import PagingConfig, PagingSim
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

LESSONS = REPO_ROOT / "lessons"


def cells(lesson: str) -> dict[str, str]:
    notebook = next(LESSONS.glob(f"{lesson}_*.ipynb"))
    return {c["id"]: "".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]}


def run_cells(lesson: str, *sources: str, **names) -> tuple[dict, str]:
    """Run the lesson's cells (by id, or code given as is) in one namespace: the namespace and what they printed."""
    by_id = cells(lesson)

    def expect(condition, sentence):
        assert condition, sentence

    namespace = dict(
        workload=workload,
        replace=replace,
        dataclasses=dataclasses,
        predict=lambda *a, **k: None,
        reveal=lambda *a, **k: None,
        expect=expect,
        **names,
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for source in sources:
            exec(by_id.get(source, source), namespace)  # noqa: S102  (the lesson's own code)
    return namespace, printed.getvalue()


@pytest.fixture(scope="module")
def shared_trace_figures() -> dict[str, tuple]:
    """(reservation report, paging report) as lessons 09, 11 and 16 compute them; 09 replays reservation only."""
    lesson_09, _ = run_cells("09", "09-06", "09-09", "09-10", simulate_reservation=simulate_reservation)
    assert "block_size = 16" in cells("11")["11-03"]
    lesson_11, printed_11 = run_cells(
        "11", "11-11", "11-12", block_size=16, PagingSim=PagingSim, PagingConfig=PagingConfig
    )
    lesson_16, printed_16 = run_cells(
        "16", "16-26", simulate_paging=simulate_paging, simulate_reservation=simulate_reservation
    )
    return {
        "09": (lesson_09["report"], None, ""),
        "11": (lesson_11["reservation"], lesson_11["paging"], printed_11),
        "16": (lesson_16["reserved"], lesson_16["paged"], printed_16),
    }


def test_lessons_09_11_and_16_replay_the_same_trace_to_the_same_figures(shared_trace_figures):
    reservation_09, _, _ = shared_trace_figures["09"]
    reservation_11, paging_11, printed_11 = shared_trace_figures["11"]
    reservation_16, paging_16, printed_16 = shared_trace_figures["16"]
    assert reservation_09.as_dict() == reservation_11.as_dict() == reservation_16.as_dict()
    assert paging_11.as_dict() == paging_16.as_dict()
    assert paging_11.history == paging_16.history
    # what a learner reads: the same numbers, formatted alike
    at_once, ratio = f"{paging_11.mean_running:.1f}", f"{paging_11.mean_running / reservation_11.mean_running:.1f}x"
    assert f"{at_once} requests running at once" in printed_11
    assert f"{at_once} at once ({ratio} as many)" in printed_16
    assert f"{paging_11.utilisation:.1%}" in printed_11 and f"{paging_16.utilisation:.1%}" in printed_16


def test_the_shared_trace_s_paging_figures_are_the_engine_s_schedule(shared_trace_figures):
    _, paging, _ = shared_trace_figures["11"]
    trace = workload.request_trace(workload.LESSON_TRACE)
    again = PagingReplay(trace, workload.LESSON_POOL_SLOTS // 16, 16).run()
    assert again.history == paging.history and again.num_preemptions == paging.num_preemptions
    assert (paging.num_steps, paging.num_preemptions, f"{paging.mean_running:.1f}") == (2388, 220, "27.2")


def test_lesson_11_s_quick_check_states_the_replay_s_ratio(shared_trace_figures):
    reservation, paging, _ = shared_trace_figures["11"]
    bank = tomllib.loads((REPO_ROOT / "quizzes" / "bank" / "11.toml").read_text())
    prompt = next(q["prompt"] for q in bank["question"] if q["id"] == "paging_price")
    stated = re.search(r"about (\d+\.\d) times as many conversations at once", prompt)
    assert stated and stated.group(1) == f"{paging.mean_running / reservation.mean_running:.1f}"


def test_lesson_14_s_replay_exercise_prints_what_its_engine_served(monkeypatch):
    """Lesson 14 serves its scaled trace on the engine and, in exercise 1, replays it: the same batches."""
    lesson = cells("14")
    setup = lesson["14-12"].split("\n")[:2]  # scale, block_size and pool_blocks, as the lesson sets them
    assert setup[0].startswith("scale, block_size =") and setup[1].startswith("pool_blocks =")
    # The stream's size comes from the helper the lesson imports, which takes its short path in a headless run.
    sizing = [line for src in lesson.values() for line in src.split("\n") if "import" in line and "stream_size" in line]
    assert len(sizing) == 1, sizing
    monkeypatch.setenv("KVCOURSE_HEADLESS", "1")
    model = make_tiny_model(max_position_embeddings=256)

    def tokenizer(text):
        return {"input_ids": list(range(3, 90))}

    snippets: list[str] = []  # the exercise's solution code, as solution() receives it
    names = dict(
        tokenizer=tokenizer,
        model=model,
        LLMEngine=LLMEngine,
        EngineConfig=EngineConfig,
        TraceServer=TraceServer,
        serve_interleaved=serve_interleaved,
        trace_prompts=trace_prompts,
        reservation_start_steps=reservation_start_steps,
        stream=stream,
        solution=lambda *a, code="", **k: snippets.append(code),
    )
    namespace, printed = run_cells("14", *sizing, "\n".join(setup), "14-14", "14-15", "14-27", **names)
    assert len(snippets) == 1 and "PagingReplay(t, pool_blocks, block_size)" in snippets[0]
    _, exercise = run_cells(
        "14", snippets[0], **{k: namespace[k] for k in ("trace", "trace_config", "pool_blocks", "block_size")}
    )
    paged, reserved = namespace["paged"], namespace["reserved"]
    served = next(line for line in exercise.splitlines() if line.startswith("limit as served"))
    assert served == f"limit as served: reservation {reserved.mean_batch:.1f}, paging {paged.mean_batch:.1f} per step"
    assert "what the engine counted: paging made" in printed
    replay = PagingReplay(namespace["trace"], namespace["pool_blocks"], namespace["block_size"]).run()
    assert replay.running_per_step == paged.batch_per_step and replay.mean_running == paged.mean_batch
