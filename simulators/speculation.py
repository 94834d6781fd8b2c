"""Lesson 28's simulator, its view: a sequence's block table through one draft, verify and rollback step.

The model is speculation_model.py (``SpeculationConfig``, ``SpeculationStep``, importable from here too). One
panel: the table's blocks during the verifying pass, a row each, their slots coloured (cached, the waiting token,
accepted drafts, rejected drafts, empty), the blocks the rollback frees hatched; Step adds one computed token.
"""

from __future__ import annotations

from typing import Any

from matplotlib.patches import Patch, Rectangle

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.speculation_model import SpeculationConfig, SpeculationStep, expected_tokens_per_pass

__all__ = ["SpeculationConfig", "SpeculationStep", "SpeculationView", "expected_tokens_per_pass"]
COLOURS = {"cached": "#9ecae1", "last": "#3182bd", "accepted": "#31a354", "rejected": "#de2d26", "empty": "white"}


class SpeculationView(SimulatorView):
    """Computed tokens (Step adds one), block size, k, drafts accepted: the table before, during and after."""

    stepped = {"computed": "computed"}

    def __init__(self, computed: int = 30, block_size: int = 16, k: int = 4, accepted: int = 2) -> None:
        controls = {
            "computed": int_control("Tokens cached before the step", computed, width="280px"),
            "block_size": int_control("Block size (tokens)", block_size, width="220px"),
            "k": int_control("Drafts k (tokens)", k, width="200px"),
            "accepted": int_control("Drafts accepted (tokens)", accepted, width="240px"),
        }
        super().__init__(controls, num_axes=1, figsize=(8.5, 4.4), step_label="Add a token")

    def build(self, values: dict[str, Any]) -> SpeculationStep:
        return SpeculationStep(SpeculationConfig(**values))

    def advance(self, model: SpeculationStep) -> None:
        c = model.config
        model.config = SpeculationConfig(c.computed + 1, c.block_size, c.k, c.accepted)

    def draw(self, model: SpeculationStep) -> str:
        ax = self.axes[0]
        rows = model.slot_kinds()
        for b, row in enumerate(rows):
            freed = b >= model.blocks_after
            for s, kind in enumerate(row):
                ax.add_patch(Rectangle((s, -b - 1), 1, 1, facecolor=COLOURS[kind], edgecolor="grey",
                                       hatch="//" if freed else None))  # fmt: skip
        ax.set_xlim(0, model.config.block_size)
        ax.set_ylim(-len(rows), 0)
        ax.set_yticks([-b - 0.5 for b in range(len(rows))], [f"block {b}" for b in range(len(rows))])
        ax.set_xlabel("slot in the block")
        freed = f"{model.blocks_freed} block(s) freed" if model.blocks_freed else "no block freed"
        ax.set_title(f"{model.tokens_out} token(s) out of one pass; the rollback: {freed}")
        handles = [Patch(facecolor=c, edgecolor="grey", label=k) for k, c in COLOURS.items()]
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="freed by the rollback"))
        ax.legend(handles=handles, loc="lower right", fontsize=8)
        return self._summary(model)

    @staticmethod
    def _summary(m: SpeculationStep) -> str:
        c = m.config
        return (
            f"Before: <b>{c.computed:,}</b> tokens cached in <b>{m.blocks_before}</b> block(s) of {c.block_size}. "
            f"The pass writes <b>{m.slots_written}</b> slots (the waiting token and {c.k} drafts): "
            f"<b>{m.blocks_during}</b> block(s). {c.accepted} draft(s) accepted, plus the bonus token: "
            f"{m.tokens_out} token(s) out. After the rollback: <b>{m.computed_after:,}</b> tokens in "
            f"<b>{m.blocks_after}</b> block(s); <b>{m.blocks_freed}</b> freed, {m.slots_overwritten} rejected "
            f"slot(s) to be overwritten or freed."
        )
