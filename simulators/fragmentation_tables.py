"""Lesson 09's tables: its replays beside the vLLM paper's, and the knob sweep, as tidy DataFrames.

``literature_table`` sets the lesson's two replays (the answer limit reserved, and exact lengths) beside
the vLLM paper's Orca (Max) and Orca (Oracle), in the paper's four categories.

``sweep_table`` replays the lesson trace once per value of each setting (``sweep`` in
``kvcourse.simulators.fragmentation``) and returns one row per replay, with the columns a learner needs
to see *why* a knob moves the share of real tokens: the waste inside the reservations, the holes
between them, the answers the limit cut off, and how long an answer is on the average slot-step
(a request holds its region for as many steps as its answer has tokens, so long answers weigh most).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pandas as pd

from kvcourse.kernel_env import running_headless
from kvcourse.kernels import workload
from kvcourse.kernels.baselines.replay import MemoryReport
from kvcourse.simulators.fragmentation import share_inside_regions, sweep

__all__ = ["ORCA", "REAL", "lever_shares", "literature_table", "row", "sweep_settings", "sweep_table"]

REAL = "real tokens (%)"  # the share of the slot-steps under demand that held a real token

# The vLLM paper (Kwon et al., 2023), Fig. 2: the KV-cache memory of its Orca reimplementation, in %.
# "Max" reserves the answer limit for every request; "Oracle" exactly the length each answer reaches.
PAPER_CATEGORIES = ("token states", "reservation", "internal fragmentation", "external fragmentation & others")
ORCA = {"Max": (20.4, 13.3, 57.3, 8.9), "Oracle": (38.2, 25.2, 0.0, 36.6)}
_OURS = (("used",), ("reserved_future",), ("internal",), ("external", "stranded"))  # the same four, here


def literature_table(limit_reserved: MemoryReport, exact_lengths: MemoryReport) -> pd.DataFrame:
    """The paper's Orca (Max) and Orca (Oracle) beside this replay's two, in % of the memory under demand.

    A last row gives reservation / token states: how much room waits for tokens still to come per token held.
    """
    columns = {
        "Orca (Max), paper": ORCA["Max"],
        "limit reserved, this replay": _shares(limit_reserved),
        "Orca (Oracle), paper": ORCA["Oracle"],
        "exact lengths, this replay": _shares(exact_lengths),
    }
    table = pd.DataFrame(columns, index=list(PAPER_CATEGORIES))
    table.loc["reservation / token states"] = table.loc["reservation"] / table.loc["token states"]
    return table.round(2)


def _shares(report: MemoryReport) -> tuple[float, ...]:
    return tuple(100 * sum(report.share(c) for c in group) for group in _OURS)


# The values each knob of lesson 09's sweep takes; each list holds the lesson trace's own value (answer limit
# 1,024, pool 16,384 slots, sigma 1.0) and the lesson's three levers (512, 32,768 and 0.5).
_SWEEP = {
    "answer_limit": (128, 256, 512, 1024, 2048, 4096),
    "pool_slots": (4096, 8192, 16384, 32768, 65536, 131072),
    "sigma": (0.25, 0.5, 1.0, 1.5, 2.0),
}
_SHORT_SWEEP = {"answer_limit": (512, 1024, 2048), "pool_slots": (16384, 32768, 65536), "sigma": (0.5, 1.0)}


def sweep_settings(*, short: bool | None = None) -> dict[str, list[float]]:
    """The values each knob takes in lesson 09's sweep: all of them for a learner, fewer under the test harness
    (``short`` None asks whether this run is headless)."""
    chosen = _SHORT_SWEEP if (running_headless() if short is None else short) else _SWEEP
    return {setting: list(values) for setting, values in chosen.items()}


def _trace_config(setting: str, value: float, base: workload.TraceConfig) -> workload.TraceConfig:
    return base if setting == "pool_slots" else dataclasses.replace(base, **{setting: value})


def _base_value(setting: str, base: workload.TraceConfig, pool_slots: int) -> float:
    return pool_slots if setting == "pool_slots" else getattr(base, setting)


def sweep_table(
    settings: Mapping[str, Sequence[float]],
    *,
    base: workload.TraceConfig = workload.LESSON_TRACE,
    pool_slots: int = workload.LESSON_POOL_SLOTS,
) -> pd.DataFrame:
    """One row per (setting, value): the replay's shares in %, with the trace facts that explain them."""
    rows = []
    for setting, values in settings.items():
        for value, report in zip(values, sweep(setting, values, trace_config=base, pool_slots=pool_slots), strict=True):
            trace = workload.request_trace(_trace_config(setting, value, base))
            answers = [r.num_output_tokens for r in trace]
            rows.append(
                {
                    "setting": setting,
                    "value": value,
                    "x lesson": value / _base_value(setting, base, pool_slots),
                    REAL: 100 * report.utilisation,
                    "inside regions (%)": 100 * share_inside_regions(report),
                    "internal (%)": 100 * report.share("internal"),
                    "external (%)": 100 * report.share("external"),
                    "answers cut off (%)": 100 * sum(not r.ends_early for r in trace) / len(trace),
                    "mean answer (tokens)": sum(answers) / len(answers),
                    "answer per slot-step (tokens)": sum(n * n for n in answers) / sum(answers),
                    "running at once": report.mean_running,
                }
            )
    return pd.DataFrame(rows)


def row(table: pd.DataFrame, setting: str, value: float) -> pd.Series:
    """The table's row for one setting at one value."""
    found = table[(table["setting"] == setting) & (table["value"] == value)]
    if found.empty:
        raise KeyError(f"the sweep has no {setting} = {value}")
    return found.iloc[0]


def lever_shares(table: pd.DataFrame, levers: Mapping[str, tuple[str, float]]) -> dict[str, float]:
    """For each named change (setting, value), the share of real tokens it gave, in %."""
    return {name: float(row(table, setting, value)[REAL]) for name, (setting, value) in levers.items()}
