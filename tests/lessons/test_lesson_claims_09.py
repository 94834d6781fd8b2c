"""The numbers lesson 09 prints, recomputed here by another route.

The lesson's own cells (read from the notebook by id and run with the course's public names) give
the figures a learner sees; each test recomputes them independently (from the simulator's memory
strips, from hand formulas, from direct replays) and compares. The real-model claim (two answers,
one limit, different lengths) is checked in float32 on SmolLM2; the cache claim behind it on the
tiny model.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from factories import make_tiny_model

from kvcourse.kernels import ReservationReplay, generate, simulate_reservation, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.simulators.fragmentation import (
    CODES,
    LITERATURE_RANGE,
    Fragmentation,
    FragmentationConfig,
    oracle_trace,
    share_inside_regions,
    sweep,
)
from kvcourse.simulators.fragmentation_tables import (
    ORCA,
    REAL,
    lever_shares,
    literature_table,
    row,
    sweep_settings,
    sweep_table,
)
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

NOTEBOOK = REPO_ROOT / "lessons" / "09_fragmentation.ipynb"


def run_cells(*cell_ids: str, **names) -> tuple[dict, dict]:
    """Run the lesson's cells with these ids in one namespace; returns it and what reveal() was given."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    revealed: dict = {}

    def expect(condition, sentence):
        assert condition, sentence

    namespace = dict(
        dataclasses=dataclasses,
        np=np,
        workload=workload,
        simulate_reservation=simulate_reservation,
        ReservationReplay=ReservationReplay,
        LITERATURE_RANGE=LITERATURE_RANGE,
        oracle_trace=oracle_trace,
        share_inside_regions=share_inside_regions,
        sweep=sweep,
        sweep_settings=lambda: sweep_settings(short=True),  # the test harness's short sweep
        REAL=REAL,
        lever_shares=lever_shares,
        literature_table=literature_table,
        row=row,
        sweep_table=sweep_table,
        predict=lambda *a, **k: None,
        reveal=lambda key, value: revealed.__setitem__(key, value),
        expect=expect,
        **names,
    )
    for cell_id in cell_ids:
        exec(cells[cell_id], namespace)  # noqa: S102  (the lesson's own code)
    return namespace, revealed


TRACE_CELLS = ("09-06", "09-09", "09-10")


@pytest.fixture(scope="module")
def lesson():
    return run_cells(*TRACE_CELLS, "09-14", "09-17", "09-19", "09-20", "09-21", "09-22b")


def test_the_lesson_trace_is_deterministic_and_as_printed(lesson):
    ns, _ = lesson
    assert (
        ns["trace"] == workload.request_trace(workload.TraceConfig()) == workload.request_trace(workload.LESSON_TRACE)
    )
    summary = ns["summary"]
    assert (summary["num_requests"], summary["last_arrival_step"]) == (200, 736)
    assert (round(summary["mean_prompt"]), round(summary["mean_answer"])) == (143, 325)
    assert f"{summary['share_ending_early']:.1%}" == "94.5%"


def test_the_baseline_utilisation_is_what_the_memory_strips_add_up_to(lesson):
    ns, revealed = lesson
    sim = Fragmentation(FragmentationConfig(steps_per_click=1))  # the lesson trace and pool
    used = busy = 0
    while True:
        counts = np.bincount(sim.strip(), minlength=len(CATEGORIES))
        used += int(counts[CODES["used"]])
        busy += int(counts.sum() - counts[CODES["idle"]])
        if sim.done:
            break
        sim.step()
    assert revealed["09.utilisation"] == pytest.approx(100 * used / busy, rel=1e-12)
    assert f"{used / busy:.1%}" == "31.1%"  # the figure the lesson prints
    low, high = LITERATURE_RANGE
    assert low <= used / busy <= high
    assert ns["report"].mean_running == pytest.approx(10.5, abs=0.05)


def test_the_first_refusal_is_the_first_step_the_simulator_shows_one(lesson):
    ns, _ = lesson
    sim = Fragmentation(FragmentationConfig(steps_per_click=1))
    while sim.blocked is None:
        sim.step()
    first = ns["first"]
    assert sim.blocked == first and (first.step, first.request, first.needed, first.free, first.largest_gap) == (
        214,
        16,
        1237,
        1967,
        1053,
    )
    assert ns["holes"] == [h.num_slots for h in sim.holes] == [128, 1053, 99, 687]
    assert len(ns["report"].turned_away) == 142


def test_the_oracle_keeps_the_room_for_tokens_still_to_come(lesson):
    ns, _ = lesson
    oracle, report = ns["oracle"], ns["report"]
    assert oracle.total("internal") == 0 and oracle.share("reserved_future") > 0.3
    assert f"{oracle.utilisation:.1%}" == "54.1%" and oracle.mean_running > report.mean_running


def test_the_sweep_and_the_prediction_it_answers(lesson):
    ns, revealed = lesson
    config, pool = workload.LESSON_TRACE, workload.LESSON_POOL_SLOTS
    table = ns["table"]
    assert len(table) == sum(len(v) for v in ns["settings"].values())
    for name, values in ns["settings"].items():
        for value in values:
            trace_config = config if name == "pool_slots" else dataclasses.replace(config, **{name: value})
            trace = workload.request_trace(trace_config)
            direct = simulate_reservation(trace, value if name == "pool_slots" else pool)
            r = row(table, name, value)
            assert r[REAL] == pytest.approx(100 * direct.utilisation, rel=1e-12), (name, value)
            assert r["inside regions (%)"] == pytest.approx(100 * share_inside_regions(direct), rel=1e-12)
            assert r["external (%)"] == pytest.approx(100 * direct.share("external"), rel=1e-12)
            answers = [t.num_output_tokens for t in trace]
            assert r["answer per slot-step (tokens)"] == pytest.approx(sum(n * n for n in answers) / sum(answers))
    assert revealed["09.lever"] == "halve the answer limit"
    by_option = ns["by_option"]
    assert by_option["halve the answer limit"] > by_option["double the pool"] > ns["report"].utilisation * 100
    assert by_option["make the lengths less spread out (sigma 0.5)"] < ns["report"].utilisation * 100
    limits = table[table["setting"] == "answer_limit"]
    assert [round(c, 1) for c in limits["answers cut off (%)"]] == [22.0, 5.5, 2.5]  # at 512, 1,024, 2,048


def test_less_spread_lowers_the_share_because_the_long_answers_weigh_least(lesson):
    ns, _ = lesson
    narrow, wide = ns["narrow"], ns["lesson_row"]
    assert f"{narrow[REAL]:.1f}" == "27.6" and f"{wide[REAL]:.1f}" == "31.1"
    assert narrow["answer per slot-step (tokens)"] < wide["answer per slot-step (tokens)"]
    assert narrow["inside regions (%)"] < wide["inside regions (%)"]
    assert narrow["mean answer (tokens)"] >= wide["mean answer (tokens)"]  # "the mean answer is no shorter"


def test_the_two_oracles_side_by_side(lesson):
    ns, _ = lesson
    lit, report, oracle = ns["lit"], ns["report"], ns["oracle"]
    for paper in ORCA.values():  # the paper's four categories add up to the whole memory
        assert sum(paper) == pytest.approx(100, abs=0.15)
    assert (ORCA["Max"][0] / 100, ORCA["Oracle"][0] / 100) == LITERATURE_RANGE
    assert lit.loc["token states", "exact lengths, this replay"] == pytest.approx(100 * oracle.utilisation, abs=0.01)
    assert lit.loc["internal fragmentation", "exact lengths, this replay"] == 0 == ORCA["Oracle"][2]
    others = 100 * (report.share("external") + report.share("stranded"))
    assert lit.loc["external fragmentation & others", "limit reserved, this replay"] == pytest.approx(others, abs=0.01)
    ratios = lit.loc["reservation / token states"]
    assert ratios.max() - ratios.min() < 0.05  # "nearly the same in all four columns"
    gap_external = ORCA["Oracle"][3] - lit.loc["external fragmentation & others", "exact lengths, this replay"]
    gap_reservation = ORCA["Oracle"][1] - lit.loc["reservation", "exact lengths, this replay"]
    assert gap_external > abs(gap_reservation)  # "external fragmentation and others makes most of the gap"


def test_the_share_inside_the_reservations_is_the_traces_own():
    trace = workload.request_trace(workload.LESSON_TRACE)
    used = sum(
        r.num_prompt_tokens * r.num_output_tokens + r.num_output_tokens * (r.num_output_tokens + 1) // 2 for r in trace
    )
    held = sum(r.max_len * r.num_output_tokens for r in trace)
    assert f"{used / held:.1%}" == "37.5%"
    for report in sweep("pool_slots", [16384, 65536]):
        assert share_inside_regions(report) == pytest.approx(used / held, rel=1e-12)


# -- the real engine -----------------------------------------------------------------------------
def test_the_contiguous_cache_reserves_the_whole_answer_and_fills_what_was_fed():
    model = make_tiny_model()
    prompt, limit = [3, 9, 4, 7, 5], 20
    free_run = generate(model, prompt, limit, eos_token_id=[])
    eos = free_run.tokens[5]  # make the sixth token end the answer
    stop_at = free_run.tokens.index(eos) + 1
    run = generate(model, prompt, limit, cache="contiguous", eos_token_id=eos)
    cache = run.backend
    assert run.stopped_on_eos and len(run.tokens) == stop_at < limit
    assert cache.capacity == len(prompt) + limit  # reserved up front for the longest answer allowed
    assert cache.num_computed_tokens == len(prompt) + len(run.tokens) - 1  # the last token is never fed
    per_slot = cache.reserved_bytes // cache.capacity
    assert cache.kv_cache_bytes == per_slot * cache.num_computed_tokens


@pytest.mark.slow
def test_lesson_09_two_answers_one_limit_on_smollm2_in_float32(real_model, smol_model):
    model, tokenizer = smol_model, real_model[1]
    ns, revealed = run_cells("09-03", "09-04", tokenizer=tokenizer, model=model, generate=generate)
    prompts, limit = ns["prompts"], ns["limit"]
    assert ns["lengths"] == [8, 21] and all(r.stopped_on_eos for r in ns["runs"])
    filled = sum(len(p) + n - 1 for p, n in zip(prompts, ns["lengths"], strict=True))
    reserved = sum(len(p) + limit for p in prompts)
    assert revealed["09.filled"] == pytest.approx(100 * filled / reserved)
    assert f"{filled / reserved:.1%}" == "17.1%"
