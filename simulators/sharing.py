"""Lesson 12's simulator, its view: fork a prompt into n samples, step them, watch the shared blocks split.

The config and the model are sharing_model.py. With ``block_manager`` (lab A, lesson 18) the view runs the
learner's block manager, the engine's own beside it (``LearnerSharing``, simulators/learner_policy.py). The
model sits below the learner's twin and the view above both, so the three never import one another in a loop.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from matplotlib import colormaps
from matplotlib.collections import PatchCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle

from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.labels import plural
from kvcourse.simulators.learner_policy import LearnerSharing
from kvcourse.simulators.sharing_model import CopyOnWrite as CopyOnWrite
from kvcourse.simulators.sharing_model import Sharing, SharingConfig

MAX_DRAWN_COLUMNS = 48  # logical blocks drawn per table; earlier ones are summarised in the title
MAX_DRAWN_ROWS = 16  # samples drawn; the summary line counts all of them
MAX_DRAWN_POOL = 512  # physical blocks drawn; the summary line counts all of them
POOL_COLUMNS = 16
FREE, PRIVATE, COPIED = "0.9", "C1", "C3"


@lru_cache(maxsize=256)
def _block_colour(count: int, num_samples: int) -> tuple[float, float, float, float]:
    """Free grey, private orange, shared blue (darker for more holders)."""
    if count == 0:
        return to_rgba(FREE)
    if count == 1:
        return to_rgba(PRIVATE)
    return tuple(colormaps["Blues"](0.45 + 0.5 * min(count, num_samples) / max(num_samples, 2)))


def _text_colour(count: int) -> str:
    return "white" if count > 1 else "black"


class SharingView(SimulatorView):
    """Fork a prompt into n samples, step them, and watch the shared blocks split (lesson 12)."""

    def __init__(
        self,
        prompt_len: int = 94,
        block_size: int = 16,
        num_samples: int = 4,
        tokens_per_step: int = 1,
        num_blocks: int = 48,
        *,
        block_manager: Any = None,
    ) -> None:
        self.block_manager = block_manager  # lab A: the learner's manager class, run beside the engine's own
        controls = {
            "prompt_len": int_control("Prompt length (tokens)", prompt_len),
            "block_size": int_control("Block size (tokens)", block_size),
            "num_samples": int_control("Samples n", num_samples, width="150px"),
            "tokens_per_step": int_control("Tokens per step", tokens_per_step, width="170px"),
            "num_blocks": int_control("Pool size (blocks)", num_blocks),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.4), step_label="Fork")

    def build(self, values: dict[str, Any]) -> Sharing:
        config = SharingConfig(
            values["prompt_len"],
            values["block_size"],
            values["num_samples"],
            values["tokens_per_step"],
            values["num_blocks"],
        )
        if self.block_manager is None:
            return Sharing(config)
        return LearnerSharing(config, self.block_manager)

    def draw(self, model: Sharing) -> str:
        tables_ax, pool_ax = self.axes
        copied = {c.target for c in model.last_copies}
        self._draw_tables(tables_ax, model, copied)
        self._draw_pool(pool_ax, model, copied)
        if self.step_button is not None:
            self.step_button.description = "Write tokens" if model.forked else "Fork"
        summary = self._summary(model)
        return summary if self.block_manager is None else f"{summary} {model.comparison()}"

    @staticmethod
    def _draw_tables(ax: Any, m: Sharing, copied: set[int]) -> None:
        c = m.config
        num_cols = max(len(t) for t in m.tables)
        skip = max(0, num_cols - MAX_DRAWN_COLUMNS)
        last_fill = m.num_tokens - (num_cols - 1) * c.block_size  # tokens in the last logical block
        patches, colours, edges = [], [], []
        height = min(c.num_samples, MAX_DRAWN_ROWS)  # rows kept for every sample: no jump at the fork
        labelled = (num_cols - skip) * height <= 160
        for row, table in enumerate(m.tables[:height]):
            y = height - 1 - row
            for col in range(skip, len(table)):
                block, x = table[col], col - skip
                colour = _block_colour(m.ref_counts[block], c.num_samples)
                if col == num_cols - 1 and last_fill < c.block_size:  # the last block, part full: pale rest
                    patches.append(Rectangle((x, y + 0.1), 0.92, 0.8))
                    colours.append((*colour[:3], 0.3))
                    edges.append("none")
                fill = last_fill / c.block_size if col == num_cols - 1 else 1.0
                patches.append(Rectangle((x, y + 0.1), 0.92 * fill, 0.8))
                colours.append(colour)
                edges.append(COPIED if block in copied else "none")
                if labelled:
                    ax.text(
                        x + 0.46,
                        y + 0.5,
                        f"{block}\n×{m.ref_counts[block]}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=_text_colour(m.ref_counts[block]),
                    )
        ax.add_collection(PatchCollection(patches, facecolors=colours, edgecolors=edges, linewidths=2))
        ax.set_xlim(-0.1, num_cols - skip + 0.1)
        ax.set_ylim(-0.1, height + 0.1)
        rows = range(min(len(m.tables), height))
        ax.set_yticks([height - 0.5 - r for r in rows], [str(r) for r in rows])
        more = f" (first {height} of {len(m.tables)})" if len(m.tables) > height else ""
        ax.set_ylabel(f"sample{more}" if m.forked else "the prompt's sequence")
        drawn = f"blocks {skip}–{num_cols - 1}" if skip else "blocks"
        ax.set_xlabel(f"logical {drawn} of {c.block_size} tokens" + ("; physical id ×count" if labelled else ""))
        ax.set_xticks([])
        if not m.forked:
            ax.set_title(f"one sequence holds the {c.prompt_len}-token prompt")
        elif m.num_written == 0:
            ax.set_title(f"forked: {m.num_samples} tables point at the same {c.prompt_blocks} blocks")
        else:
            ax.set_title(f"{c.full_prompt_blocks} full prompt blocks stay shared; the rest are private")

    @staticmethod
    def _draw_pool(ax: Any, m: Sharing, copied: set[int]) -> None:
        c = m.config
        drawn = min(c.num_blocks, MAX_DRAWN_POOL)
        rows = ceil_div(drawn, POOL_COLUMNS)
        patches, colours, edges = [], [], []
        for block in range(drawn):
            x, y = block % POOL_COLUMNS, rows - 1 - block // POOL_COLUMNS
            patches.append(Rectangle((x, y + 0.08), 0.9, 0.84))
            colours.append(_block_colour(m.ref_counts[block], c.num_samples))
            edges.append(COPIED if block in copied else "none")
            count = m.ref_counts[block]
            if drawn <= 64:
                ax.text(
                    x + 0.45,
                    y + 0.5,
                    f"{block}\n×{count}" if count else str(block),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=_text_colour(count),
                )
            elif drawn <= 128 and count:
                ax.text(x + 0.45, y + 0.5, f"×{count}", ha="center", va="center", fontsize=7, color=_text_colour(count))
        ax.add_collection(PatchCollection(patches, facecolors=colours, edgecolors=edges, linewidths=2))
        ax.set_xlim(-0.1, POOL_COLUMNS)
        ax.set_ylim(-0.1, rows + 0.1)
        ax.set_xticks([])
        ax.set_yticks([])
        more = f", first {drawn} drawn" if drawn < c.num_blocks else ""
        label = "; label: id ×count" if drawn <= 64 else ("; label ×count" if drawn <= 128 else "")
        engine = getattr(m, "engine", None)  # lab A: the engine's own manager, beside the learner's
        whose = "your manager's pool" if engine else "the pool"
        ax.set_xlabel(f"{whose}: {c.num_blocks:,} physical blocks{more}{label}")
        beside = f" (engine's own: {engine.num_used_blocks})" if engine else ""
        ax.set_title(f"{m.num_used_blocks} blocks in use{beside}; {m.num_blocks_unshared} without sharing")
        ax.legend(
            handles=[
                Patch(color=_block_colour(c.num_samples, c.num_samples), label="shared (count ≥ 2)"),
                Patch(color=PRIVATE, label="private (count 1)"),
                Patch(color=FREE, label="free"),
                Patch(facecolor="white", edgecolor=COPIED, lw=2, label="copied this step"),
            ],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize=8,
        )

    @staticmethod
    def _summary(m: Sharing) -> str:
        c = m.config
        rest = c.prompt_len - c.full_prompt_blocks * c.block_size
        if not m.forked:
            split = (
                f"{c.full_prompt_blocks:,} full, the last with {rest} of {c.block_size} tokens"
                if rest
                else f"all {c.prompt_blocks:,} full"
            )
            return (
                f"One sequence holds the {c.prompt_len:,}-token prompt in {c.prompt_blocks:,} blocks ({split}) "
                f"of a {c.num_blocks:,}-block pool. Press <b>Fork</b> to split it into {c.num_samples} samples; "
                f"then each <b>Write tokens</b> adds {plural(c.tokens_per_step, 'token')} to every sample."
            )
        counts = (
            f"{m.num_used_blocks:,} of {c.num_blocks:,} blocks in use; as {m.num_samples} private copies "
            f"it would be {m.num_blocks_unshared:,}: sharing saves {m.blocks_saved:,}."
        )
        if m.num_written == 0:
            return (
                f"Forked: {m.num_samples} block tables point at the same {c.prompt_blocks:,} blocks, each with "
                f"reference count {c.num_samples}. {counts} Press <b>Write tokens</b>: each sample writes "
                f"{plural(c.tokens_per_step, 'token')}."
            )
        copies = ", ".join(f"{x.source}→{x.target}" for x in m.last_copies[:8]) + (
            ", …" if len(m.last_copies) > 8 else ""
        )
        step = (
            f"This step: {len(m.last_copies)} copied on write ({copies}), "
            if m.last_copies
            else "This step: no copies, "
        )
        return (
            f"Each sample holds {m.num_tokens:,} tokens ({c.prompt_len:,} prompt + {m.num_written:,} written). "
            f"{counts} {step}{plural(m.last_new_blocks, 'new block')}."
        )
