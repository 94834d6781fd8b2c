"""Lesson 21's simulator, its view: a stream of requests under a token budget, its TTFT and ITL, and goodput.

The config and the model (the engine's scheduler serving the stream with dummy tokens, each request stamped as
the engine stamps it, in step-times) are serving_budget_model.py; ``ServingBudgetConfig``, ``ServingBudget``,
``StepCost`` and ``fit_step_cost`` are importable from here too. The left panel draws the share of requests
whose first token came within a time (short and long prompts apart), with the TTFT target; the right one the
share of the gaps between tokens within a time, with the ITL target. The line under the controls gives goodput:
the requests that met both targets, as a share and per 100 step-times. Step halves the budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.labels import plain_ticks, plural
from kvcourse.simulators.serving_budget_model import MIN_BUDGET as MIN_BUDGET
from kvcourse.simulators.serving_budget_model import ServingBudget, ServingBudgetConfig
from kvcourse.simulators.serving_budget_model import StepCost as StepCost
from kvcourse.simulators.serving_budget_model import budget_sweep as budget_sweep
from kvcourse.simulators.serving_budget_model import fit_step_cost as fit_step_cost

SHORT, LONG = "C0", "C3"


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.3g}"


def _cdf(ax: Any, values: list[float], colour: str, label: str) -> None:
    """The share of ``values`` at or below each value, as steps."""
    if not values:
        return
    ordered = np.sort(values)
    shares = np.arange(1, len(ordered) + 1) / len(ordered)
    ax.step(
        np.concatenate([[ordered[0]], ordered]),
        np.concatenate([[0.0], shares]),
        where="post",
        color=colour,
        lw=2,
        label=label,
    )


class ServingBudgetView(SimulatorView):
    """TTFT and ITL of a request stream served under a token budget, and goodput against two targets (lesson 21)."""

    stepped = {"token_budget": "token_budget"}  # Step halves this box: it shows the new value

    def __init__(
        self,
        *,
        arrival_rate: float = 0.05,
        long_percent: int = 10,
        long_prompt_tokens: int = 2000,
        token_budget: int = 256,
        ttft_target: float = 150.0,
        itl_target: float = 20.0,
        tokens_per_step_time: float = 32.0,
        short_prompt_tokens: int = 24,
        answer_tokens: int = 32,
        num_requests: int = 40,
        seed: int = 0,
    ) -> None:
        self.fixed = {
            "short_prompt_tokens": short_prompt_tokens,
            "answer_tokens": answer_tokens,
            "num_requests": num_requests,
            "seed": seed,
        }
        controls = {
            "arrival_rate": float_control("Arrival rate (requests per step-time)", arrival_rate),
            "long_percent": int_control("Long prompts (%)", long_percent),
            "long_prompt_tokens": int_control("Long prompt (tokens)", long_prompt_tokens),
            "token_budget": int_control("Token budget (tokens per step)", token_budget),
            "ttft_target": float_control("TTFT target (step-times)", ttft_target),
            "itl_target": float_control("ITL target (step-times)", itl_target),
            "tokens_per_step_time": float_control("Tokens per step-time", tokens_per_step_time),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.8), step_label="Halve the budget")

    def build(self, values: dict[str, Any]) -> ServingBudget:
        model = ServingBudget(ServingBudgetConfig(**values, **self.fixed))
        _ = model.served  # replay now: an input the replay refuses is a message, not a broken figure
        return model

    def draw(self, model: ServingBudget) -> str:
        ttft_ax, itl_ax = self.axes
        c = model.config
        _cdf(ttft_ax, model.ttfts(False), SHORT, f"short prompts ({c.short_prompt_tokens:,} tokens)")
        _cdf(ttft_ax, model.ttfts(True), LONG, f"long prompts ({c.long_prompt_tokens:,} tokens)")
        met_ttft = sum(lat.ttft_s <= c.ttft_target for lat in model.latencies)
        self._finish(ttft_ax, c.ttft_target, "TTFT target", "time to first token (step-times, log scale)")
        ttft_ax.set_title(f"{met_ttft} of {c.num_requests} first tokens within the target")
        _cdf(itl_ax, model.gaps(False), SHORT, "gaps of short-prompt requests")
        _cdf(itl_ax, model.gaps(True), LONG, "gaps of long-prompt requests")
        met_itl = sum(max(lat.itl_s, default=0.0) <= c.itl_target for lat in model.latencies)
        self._finish(itl_ax, c.itl_target, "ITL target", "gap between two tokens (step-times, log scale)")
        itl_ax.set_title(f"{met_itl} of {c.num_requests} requests never wait longer than the target")
        return self._summary(model)

    @staticmethod
    def _finish(ax: Any, target: float, name: str, xlabel: str) -> None:
        ax.axvline(target, color="k", ls="--", lw=1.5, label=f"{name}: {_figure(target)}")
        ax.set_xscale("log")
        plain_ticks(ax.xaxis)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("share at or below (cumulative)")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)

    @staticmethod
    def _summary(model: ServingBudget) -> str:
        c, s = model.config, model.summary
        stream = (
            f"{c.num_requests} requests, {plural(c.num_long, 'long prompt')}, served in {model.num_steps:,} engine "
            f"steps at a budget of {model.token_budget:,} tokens per step (a step of n tokens lasts 1 + n / "
            f"{_figure(c.tokens_per_step_time)} step-times). "
        )
        spread = (
            f"TTFT p50 {_figure(s.ttft_s[50])}, p99 {_figure(s.ttft_s[99])}; ITL p50 {_figure(s.itl_s[50])}, "
            f"p99 {_figure(s.itl_s[99])} step-times. "
        )
        goodput = (
            f"Targets: first token within {_figure(c.ttft_target)}, no gap over {_figure(c.itl_target)} step-times. "
            f"<b>Goodput: {model.num_good} of {c.num_requests} requests met both targets ({model.goodput_share:.0%}), "
            f"{_figure(100 * model.goodput_per_step_time)} per 100 step-times</b>."
        )
        return stream + spread + goodput
