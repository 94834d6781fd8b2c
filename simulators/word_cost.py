"""Lesson 01's simulator: an answer as a queue of forward passes, each reading every weight."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from matplotlib.ticker import MaxNLocator

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.labels import format_bytes, format_count, plural

MAX_WORDS = 1_000_000


@dataclass(frozen=True)
class WordCostConfig:
    """An answer of ``num_words`` words from a model with the given per-pass costs (lesson 01)."""

    num_words: int
    tokens_per_word: float
    flops_per_pass: float
    weight_bytes_per_pass: float
    bandwidth_gb_per_s: float

    def __post_init__(self) -> None:
        check_int("Answer length (words)", self.num_words, 1, MAX_WORDS)
        check_float("Tokens per word", self.tokens_per_word, 0.1, 10.0)
        check_float("FLOPs per pass", self.flops_per_pass, 1.0, 1e18)
        check_float("Weight bytes per pass", self.weight_bytes_per_pass, 1.0, 1e15)
        check_float("Memory bandwidth (GB/s)", self.bandwidth_gb_per_s, 0.1, 1e6)

    @property
    def num_passes(self) -> int:
        """One forward pass per generated token; a started token is a whole pass."""
        return math.ceil(self.num_words * self.tokens_per_word - 1e-9)


class WordCost:
    """The queue of passes for one answer; ``step()`` runs the next pass (lesson 01)."""

    def __init__(self, config: WordCostConfig) -> None:
        self.config = config
        self.num_passes_done = 0

    @property
    def done(self) -> bool:
        return self.num_passes_done >= self.config.num_passes

    def step(self) -> None:
        """Run one more pass; passes cannot overlap because each needs the previous token."""
        if self.done:
            raise InvalidInput("the answer is complete; press Reset or change the inputs to start again.")
        self.num_passes_done += 1

    def reset(self) -> None:
        self.num_passes_done = 0

    @property
    def flops_so_far(self) -> float:
        return self.num_passes_done * self.config.flops_per_pass

    @property
    def bytes_so_far(self) -> float:
        return self.num_passes_done * self.config.weight_bytes_per_pass

    @property
    def total_flops(self) -> float:
        return self.config.num_passes * self.config.flops_per_pass

    @property
    def total_weight_bytes(self) -> float:
        """Every pass streams all the weights from memory once."""
        return self.config.num_passes * self.config.weight_bytes_per_pass

    @property
    def seconds_per_pass(self) -> float:
        """Lower bound for one pass: the time to read the weights at full bandwidth."""
        return self.config.weight_bytes_per_pass / (self.config.bandwidth_gb_per_s * 1e9)

    @property
    def min_total_seconds(self) -> float:
        """Passes run one after another, so their times add up."""
        return self.config.num_passes * self.seconds_per_pass


class WordCostView(SimulatorView):
    """Grow the answer and watch passes, FLOPs and bytes read add up (lesson 01)."""

    def __init__(
        self,
        flops_per_pass: float,
        weight_bytes_per_pass: float,
        *,
        num_words: int = 200,
        tokens_per_word: float = 1.3,
        bandwidth_gb_per_s: float = 100.0,
    ) -> None:
        self.flops_per_pass = flops_per_pass
        self.weight_bytes_per_pass = weight_bytes_per_pass
        controls = {
            "num_words": int_control("Answer length (words)", num_words),
            "tokens_per_word": float_control("Tokens per word", tokens_per_word),
            "bandwidth": float_control("Memory bandwidth (GB/s)", bandwidth_gb_per_s, width="260px"),
        }
        super().__init__(controls, step_label="Next pass", num_axes=1, figsize=(10, 3.4))

    def build(self, values: dict[str, Any]) -> WordCost:
        config = WordCostConfig(
            num_words=values["num_words"],
            tokens_per_word=values["tokens_per_word"],
            flops_per_pass=self.flops_per_pass,
            weight_bytes_per_pass=self.weight_bytes_per_pass,
            bandwidth_gb_per_s=values["bandwidth"],
        )
        return WordCost(config)

    def draw(self, model: WordCost) -> str:
        (ax,) = self.axes
        num_passes = model.config.num_passes
        gb = model.config.weight_bytes_per_pass / 1e9
        ax.plot([0, num_passes], [0, num_passes * gb], ls="--", color="0.6", label="whole answer (planned)")
        done = model.num_passes_done
        ax.plot([0, done], [0, done * gb], color="C3", lw=3, label=f"passes run so far: {done}")
        ax.set_xlim(0, max(num_passes, 1))
        ax.set_ylim(0, max(num_passes * gb, 1e-9) * 1.05)
        ax.set_xlabel("forward passes run, one per token, strictly in order")
        ax.set_ylabel("weights read from memory (GB)")
        ax.set_title(
            f"{plural(model.config.num_words, 'word')} ≈ {plural(num_passes, 'token')} = "
            f"{plural(num_passes, 'pass', 'passes')} in a queue"
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # passes are whole
        ax.legend(loc="upper left")
        return (
            f"{plural(num_passes, 'pass', 'passes')}; total {format_count(model.total_flops)}FLOP and "
            f"{format_bytes(model.total_weight_bytes)} of weights read; at least "
            f"{model.min_total_seconds:.2f} s at {model.config.bandwidth_gb_per_s:g} GB/s. "
            f"So far: {plural(done, 'pass', 'passes')}, {format_bytes(model.bytes_so_far)}."
        )
