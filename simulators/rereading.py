"""Lesson 02's simulator: generation without a cache rereads the whole, growing input every step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from kvcourse.kernels import costs
from kvcourse.simulators.base import GenerationSteps, SimulatorView, draw_per_step
from kvcourse.simulators.checks import check_int
from kvcourse.simulators.controls import int_control

MAX_TOKENS = 100_000
MAX_DRAWN_TOKENS = 400  # beyond this the staircase picture would be too fine to see: say so instead


@dataclass(frozen=True)
class RereadingConfig:
    """A prompt of ``prompt_len`` tokens and an answer of ``num_new_tokens`` tokens (lesson 02)."""

    prompt_len: int
    num_new_tokens: int

    def __post_init__(self) -> None:
        check_int("Prompt length (tokens)", self.prompt_len, 1, MAX_TOKENS)
        check_int("New tokens", self.num_new_tokens, 1, MAX_TOKENS)


def tokens_processed_without_cache(prompt_len: int, num_new_tokens: int) -> list[int]:
    """Tokens pushed through the model at each step when nothing is kept between steps (lesson 02)."""
    # Step i (0-based) sees the prompt plus the i tokens already written.
    return [prompt_len + i for i in range(num_new_tokens)]


class Rereading(GenerationSteps):
    """Step through an uncached generation; each step rereads prompt + answer so far (lesson 02)."""

    config: RereadingConfig

    @property
    def tokens_per_step(self) -> list[int]:
        """Tokens processed at every step of the whole generation."""
        return tokens_processed_without_cache(self.config.prompt_len, self.config.num_new_tokens)

    @property
    def total_tokens_processed(self) -> int:
        """A triangle on top of a rectangle: n*P + n(n-1)/2."""
        return costs.tokens_processed(self.config.prompt_len, self.config.num_new_tokens, use_cache=False)

    @property
    def tokens_processed_so_far(self) -> int:
        p, k = self.config.prompt_len, self.num_steps_done
        return k * p + k * (k - 1) // 2

    @property
    def prompt_token_reads(self) -> int:
        """How many times the prompt went through the model: once per step."""
        return self.config.num_new_tokens

    @property
    def tokens_needed_once(self) -> int:
        """Distinct tokens in the final sequence (each needs processing at least once)."""
        return self.config.prompt_len + self.config.num_new_tokens - 1


class RereadingView(SimulatorView):
    """Step through the growing input of an uncached generation (lesson 02)."""

    def __init__(self, prompt_len: int = 12, num_new_tokens: int = 10) -> None:
        controls = {
            "prompt_len": int_control("Prompt length (tokens)", prompt_len),
            "num_new_tokens": int_control("New tokens", num_new_tokens),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.0), step_label="Next token")

    def build(self, values: dict[str, Any]) -> Rereading:
        model = Rereading(RereadingConfig(values["prompt_len"], values["num_new_tokens"]))
        model.step()  # show the first step straight away
        return model

    def draw(self, model: Rereading) -> str:
        grid_ax, bar_ax = self.axes
        p, n, k = model.config.prompt_len, model.config.num_new_tokens, model.num_steps_done
        width = p + n - 1
        if width <= MAX_DRAWN_TOKENS and n <= MAX_DRAWN_TOKENS:
            # Row = step, column = token position: 1 = prompt token read, 2 = generated token reread.
            grid = np.zeros((n, width))
            for step in range(k):
                grid[step, :p] = 1
                grid[step, p : p + step] = 2
            grid_ax.imshow(
                grid,
                cmap=_STAIRCASE_CMAP,
                vmin=0,
                vmax=2,
                aspect="auto",
                interpolation="nearest",
                extent=(-0.5, width - 0.5, n + 0.5, 0.5),
            )  # rows are steps 1..n, like the bars
            grid_ax.set_title("what each step feeds the model\n(blue: prompt, orange: answer so far)")
        else:
            grid_ax.text(
                0.5,
                0.5,
                f"{n} steps × {width} positions:\ntoo many cells to draw",
                ha="center",
                va="center",
                transform=grid_ax.transAxes,
            )
            grid_ax.set_title("what each step feeds the model")
        grid_ax.set_xlabel("token position")
        grid_ax.set_ylabel("generation step")
        draw_per_step(bar_ax, model.tokens_per_step, k, "C3")
        bar_ax.set_xlabel("generation step")
        bar_ax.set_ylabel("tokens processed in that step")
        bar_ax.set_title("work per step grows by one token")
        for ax in (grid_ax, bar_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        grid_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        return (
            f"Step {k} of {n}: this step processed {p + k - 1} tokens. So far {model.tokens_processed_so_far:,} "
            f"tokens processed; the whole answer needs {model.total_tokens_processed:,}, although the final "
            f"text has only {p + n:,} tokens."
        )


def _staircase_cmap():
    from matplotlib.colors import ListedColormap

    return ListedColormap(["#f4f4f4", "#1f77b4", "#ff7f0e"])


_STAIRCASE_CMAP = _staircase_cmap()
