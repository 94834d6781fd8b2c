"""Lesson 28's parameterised quick checks: the blocks a rollback frees, and the tokens a verifying pass yields.

``blocks_freed``: a sequence with ``computed`` tokens cached in blocks of ``block_size`` verifies ``k`` drafts
(k + 1 slots: the waiting token and the drafts) and accepts ``accepted`` of them; the rollback keeps ceil((computed
+ 1 + accepted) / block size) blocks of the ceil((computed + k + 1) / block size) the pass held
(simulators/speculation_model.py, tested against the engine's tables). ``tokens_per_pass``: each of ``k`` drafts
accepted with probability ``rate_pct`` % until the first rejection, plus the bonus token: (1 - r^(k+1)) / (1 - r).
formulas.py registers both and adds ``facts_speculation``'s names (the planted slips) to a prompt's names.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.speculation_model import SpeculationConfig, SpeculationStep, expected_tokens_per_pass


def _step(values: dict[str, Any]) -> SpeculationStep:
    return SpeculationStep(SpeculationConfig(values["computed"], values["block_size"], values["k"], values["accepted"]))


def blocks_freed(values: dict[str, Any]) -> float:
    """Blocks the rollback gives back after the drawn step."""
    return float(_step(values).blocks_freed)


def tokens_per_pass(values: dict[str, Any]) -> float:
    """Expected tokens out of one verifying pass at the drawn acceptance rate and k."""
    return expected_tokens_per_pass(values["rate_pct"] / 100, values["k"])


def facts_speculation(values: dict[str, Any]) -> dict[str, Any]:
    """Lesson 28's names: the table's sizes (for the explanation) and the planted slips' answers."""
    out: dict[str, Any] = {}
    if {"computed", "block_size", "k", "accepted"} <= values.keys():
        step, b = _step(values), values["block_size"]
        out |= {"blocks_during": step.blocks_during, "blocks_after": step.blocks_after,
                "computed_after": step.computed_after}  # fmt: skip
        # slips: the pass writes k slots (the waiting token forgotten); the kept tokens forget the waiting one
        out["slip_k_slots"] = ceil_div(values["computed"] + values["k"], b) - step.blocks_after
        out["slip_kept"] = step.blocks_during - ceil_div(values["computed"] + values["accepted"], b)
    if {"rate_pct", "k"} <= values.keys():
        rate = values["rate_pct"] / 100
        out["rate"] = rate
        out["slip_independent"] = 1 + values["k"] * rate  # every draft judged alone, no stop at a rejection
        out["slip_no_bonus"] = expected_tokens_per_pass(rate, values["k"]) - 1
    return out
