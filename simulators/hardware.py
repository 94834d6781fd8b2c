"""The cards the simulators put a model on (lessons 08, 14, 15): one table, and whether the model fits.

Every card is listed once, with its memory as sold (the vendors' data sheets: a card sold as "80 GB"
holds 80 GiB, 85.9 GB, as nvidia-smi's MiB show; lesson 00's glossary) and, for the three
SXM boards that lesson 14 compares, the memory bandwidth and dense 16-bit compute of its data
sheet. Lessons 08 and 15 name the cards by their memory (``GPU_PRESETS``); lesson 14 names the
boards by their form factor (``HARDWARE``), as the data sheets of those figures do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ipywidgets as widgets

from kvcourse.kernels import MemoryBudget, ModelConfig, costs, num_blocks_for_budget
from kvcourse.kernels.memory.budget import block_bytes
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_choice, check_float, model_shape
from kvcourse.simulators.controls import Preset, dropdown_control, float_control
from kvcourse.simulators.labels import GB, GIB, bytes_per_value_choices, format_bytes


@dataclass(frozen=True)
class Card:
    """A card's memory and, where lesson 14 needs them, its memory bandwidth and dense 16-bit throughput."""

    memory_gib: float  # as sold: "80GB" on the box is 80 GiB
    bandwidth_gbs: float | None = None
    tflops: float | None = None


# Bandwidth and compute are NVIDIA's SXM figures: the dense BF16 Tensor Core throughput, since the
# sheets print twice these TFLOP/s "with sparsity" and decode does not use structured sparsity.
CARDS: dict[str, Card] = {
    "T4": Card(16.0),
    "L4": Card(24.0),
    "RTX 4090": Card(24.0),
    "A100 40GB": Card(40.0),
    "A100 80GB": Card(80.0, 2039.0, 312.0),
    "H100 80GB": Card(80.0, 3350.0, 989.0),
    "H200": Card(141.0, 4800.0, 989.0),
    "MI300X": Card(192.0),
}
SXM_BOARDS = {"A100 80GB SXM": "A100 80GB", "H100 SXM": "H100 80GB", "H200 SXM": "H200"}  # lesson 14's names

GPU_PRESETS: dict[str, float] = {name: card.memory_gib for name, card in CARDS.items()}  # lessons 08, 15
HARDWARE: dict[str, Card] = {board: CARDS[name] for board, name in SXM_BOARDS.items()}  # lesson 14
MAX_CARD_GIB = 10_000.0
BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(2, 4, 1)  # one width for the weights and the cache

# A card fills in its memory (lessons 08, 15), or its bandwidth and compute (lesson 14).
MEMORY_PRESET = Preset("gpu", {name: {"card_gib": gb} for name, gb in GPU_PRESETS.items()})
ROOFLINE_PRESET = Preset(
    "hardware",
    {board: {"bandwidth_gbs": card.bandwidth_gbs, "tflops": card.tflops} for board, card in HARDWARE.items()},
)


class CardPool:
    """The KV pool a card leaves after the weights, in whole blocks as the engine cuts it (lessons 08, 15).

    Subclasses give ``step()``: what one more click brings (one more user, twice the users).
    """

    def __init__(self, config: Any) -> None:
        self.config = config  # a CardConfig subclass with block_size and num_users
        self.budget = config.budget
        self.num_users = config.num_users

    def reset(self) -> None:
        self.num_users = self.config.num_users

    @property
    def block_bytes(self) -> int:
        """One block's K and V, as the engine sizes its pool."""
        c = self.config
        return block_bytes(c.shape, c.block_size, c.bytes_per_value)

    @property
    def num_blocks(self) -> int:
        c = self.config
        return num_blocks_for_budget(c.shape, self.budget, c.block_size, c.bytes_per_value)

    @property
    def pool_tokens(self) -> int:
        """Tokens of K and V the whole pool holds, all users together."""
        return self.num_blocks * self.config.block_size

    @property
    def max_context(self) -> int:
        """The longest sequence the model reads (its max_position_embeddings)."""
        return self.config.shape.max_position_embeddings


class CardView(SimulatorView):
    """A card's bar beside a curve (lessons 08, 15), its controls opened by ``card_controls``: a GPU
    fills in its memory, a typed size makes it custom."""

    def __init__(self, controls: dict[str, widgets.ValueWidget], step_label: str) -> None:
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.4), step_label=step_label)

    @staticmethod
    def card_controls(
        gpu: str | None, card_gib: float | None, default: str, width: str
    ) -> dict[str, widgets.ValueWidget]:
        """Lessons 08 and 15's first two controls: the GPU dropdown and the card memory it fills in.

        No GPU named: custom if a size is given, else ``default``; ValueError for an unknown GPU.
        """
        gpu, filled = MEMORY_PRESET.start(gpu, {"card_gib": card_gib}, default, "GPU")
        options = MEMORY_PRESET.options(lambda name: f"{name} ({GPU_PRESETS[name]:g} GiB)", "custom: type the size")
        return {
            "gpu": dropdown_control("GPU preset", options, gpu, width),
            "card_gib": float_control("Card memory (GiB)", filled["card_gib"]),
        }

    @staticmethod
    def config_fields(values: dict[str, Any]) -> dict[str, Any]:
        """The control values a CardConfig takes: all but the GPU's name (its memory is in card_gib)."""
        return {name: value for name, value in values.items() if name != "gpu"}

    def on_change(self, name: str) -> None:
        MEMORY_PRESET.sync(self.controls, name)


def card_unit(total_bytes: float) -> tuple[float, str]:
    """The unit a card's bar is drawn in: GB, or MB for a card under 1 GB."""
    return (GB, "GB") if total_bytes >= GB else (1e6, "MB")


def draw_card_top(ax: Any, budget: MemoryBudget, label: str, headroom: float) -> None:
    """Finish a card's stacked bar: the card's top as a thick line, zoomed to the top when what the
    weights leave would be a sliver on them, the unit on the y axis, the legend (lessons 08, 15)."""
    unit, name = card_unit(budget.total_bytes)
    top, weights = budget.total_bytes / unit, budget.weight_bytes / unit
    ax.axhline(top, color="k", lw=2.5, label=f"{label}: {format_bytes(budget.total_bytes)}")
    bottom = max(0.0, top - 2.5 * (top - weights)) if budget.kv_bytes < 0.25 * budget.total_bytes else 0.0
    ax.set_ylim(bottom, top + headroom * (top - bottom))
    ax.set_xlim(-0.4, 2.0)
    ax.set_xticks([])
    ax.set_ylabel(f"card memory ({name})" + (", zoomed to the top" if bottom else ""))
    ax.legend(loc="center right", fontsize=8)


def hardware_dropdown(value: str, width: str | None = None) -> widgets.Dropdown:
    """Lesson 14's hardware dropdown: each SXM board with its three figures, then custom (``ROOFLINE_PRESET``)."""

    def label(board: str) -> str:
        h = HARDWARE[board]
        return f"{board} ({h.bandwidth_gbs:,.0f} GB/s, {h.tflops:g} TFLOP/s, {h.memory_gib:g} GiB)"

    return dropdown_control("Hardware", ROOFLINE_PRESET.options(label, "custom: type the figures"), value, width)


def kv_budget_on_card(hardware: Card, config: Any, bytes_per_value: int = 2) -> float:
    """GB a card leaves for KV caches once the weights are in (no reserve), never below zero (lesson 14)."""
    return max(0.0, (hardware.memory_gib * GIB - costs.weight_bytes(config, bytes_per_value)) / GB)


def check_card_fits(
    model: str, shape: ModelConfig, card_bytes: int, bytes_per_value: int, block_size: int, reserve_bytes: int = 0
) -> None:
    """InvalidInput unless the card holds the weights, the reserve and one block of K and V (lessons 08, 15)."""
    weights = costs.weight_bytes(shape, bytes_per_value)
    left = card_bytes - weights - reserve_bytes
    reserve = f" and the reserve ({format_bytes(reserve_bytes)})" if reserve_bytes else ""
    if left <= 0:
        raise InvalidInput(
            f"the weights of {model} ({format_bytes(weights)} at {bytes_per_value} bytes per value){reserve} "
            f"fill the {format_bytes(card_bytes)} card: nothing is left for a cache. Pick a bigger card, "
            "a smaller model or fewer bytes per value."
        )
    if left < costs.kv_bytes_per_token(shape, bytes_per_value) * block_size:
        raise InvalidInput(
            f"after the weights only {format_bytes(left)} is left: not one block of "
            f"{block_size} tokens fits. Pick a bigger card or a smaller model."
        )


@dataclass(frozen=True)
class CardConfig:
    """A preset model's weights on a card of ``card_gib`` (lessons 08, 15); subclasses add who shares it.

    A subclass's ``__post_init__`` calls this one first and ends with ``check_fits``.
    """

    card_gib: float
    model: str = "llama-3-8b"
    bytes_per_value: int = 2
    model_config: ModelConfig | None = field(default=None, kw_only=True)  # a shape of one's own; None: the preset's

    def __post_init__(self) -> None:
        check_float("Card memory (GiB)", self.card_gib, 1e-6, MAX_CARD_GIB)
        model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_choice("Bytes per value", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)

    def check_fits(self, block_size: int) -> None:
        """InvalidInput unless the weights and the reserve leave room for one block of block_size tokens."""
        check_card_fits(self.model, self.shape, self.total_bytes, self.bytes_per_value, block_size, self.reserve_bytes)

    @property
    def shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)

    @property
    def total_bytes(self) -> int:
        return round(self.card_gib * GIB)

    @property
    def reserve_bytes(self) -> int:
        """Bytes kept back from the caches: none, unless a subclass keeps a reserve."""
        return 0

    @property
    def budget(self) -> MemoryBudget:
        """The split the engine takes (``EngineConfig(memory_budget=...)``): weights, reserve, the KV pool."""
        return MemoryBudget.for_model(self.shape, self.total_bytes, self.bytes_per_value, self.reserve_bytes)
