"""Lesson 13's simulator, its view: edit the requests' prompts, see which blocks hit and the pool's LRU order.

The config and the model are prefix_cache_model.py. With ``eviction`` (lab B, lesson 19) the view serves the
requests with the learner's eviction policy, the engine's own order beside it (``LearnerPrefixCache``,
simulators/learner_policy.py). The model sits below the learner's twin and the view above both, so the three
never import one another in a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
from matplotlib.patches import Patch, Rectangle

from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.labels import LABEL_PT, label_fits, named, plural, points_per_unit
from kvcourse.simulators.learner_policy import LearnerPrefixCache
from kvcourse.simulators.prefix_cache_model import MAX_REQUESTS, PrefixCache, PrefixCacheConfig, words_to_ids
from kvcourse.simulators.prefix_cache_model import PoolBlock as PoolBlock
from kvcourse.simulators.prefix_cache_model import full_block_hashes as full_block_hashes

MAX_LABELLED_BLOCKS = 40  # more blocks per request than this: no hash labels (they would overlap)
MAX_DRAWN_POOL = 1024  # more pool blocks than this: the pool panel shows a summary instead of cells
HIT_COLOUR, MISS_COLOUR, WAITING_COLOUR = "#2e7d32", "#ef6c00", "0.88"
REQUEST_COLOURS = ("C0", "C4", "C9", "C6", "C8", "C5", "C2", "C7")

# The simulator's own example, in words (one word = one token): two requests share an opening,
# a third puts one word in front of it, a fourth changes its last word.
EXAMPLE_PROMPTS = (
    "you are a helpful librarian . answer in one short sentence . question : when do you open ?",
    "you are a helpful librarian . answer in one short sentence . question : can i print ?",
    "hello you are a helpful librarian . answer in one short sentence . question : when do you open ?",
    "you are a helpful librarian . answer in one short sentence ! question : when do you open ?",
)


@dataclass
class _Tokenizer:
    """Text -> token ids: a real tokenizer's encode, or one word per token."""

    encode: Callable[[str], list[int]] | None = None

    def __call__(self, texts: list[str]) -> list[list[int]]:
        if self.encode is None:
            return words_to_ids(texts)
        prompts = []
        for number, text in enumerate(texts, start=1):
            try:
                prompts.append([int(t) for t in self.encode(text)])
            except Exception as err:  # a tokenizer's own error becomes a message, not a traceback
                raise InvalidInput(f"Request {number}: the tokenizer could not read this text ({err}).") from err
        return prompts


class PrefixCacheView(SimulatorView):
    """Edit the requests' prompts; see which blocks hit, the chained hashes, and the pool's LRU order (lesson 13)."""

    def __init__(
        self,
        prompts: Sequence[str] = EXAMPLE_PROMPTS,
        *,
        block_size: int = 4,
        num_blocks: int = 24,
        tokenize: Callable[[str], list[int]] | None = None,
        num_served: int | None = None,
        eviction: Any = None,
    ) -> None:
        self.eviction = eviction  # lab B: the learner's policy, served beside the engine's own order
        if not 1 <= len(prompts) <= MAX_REQUESTS:
            raise ValueError(f"give between 1 and {MAX_REQUESTS} prompts, got {len(prompts)}")
        self.tokenize = _Tokenizer(tokenize)
        self.unit = "token" if tokenize is not None else "word (one token each)"
        self.start_served = len(prompts) if num_served is None else num_served
        self.num_to_serve = self.start_served
        self._laid_out = False
        controls: dict[str, widgets.ValueWidget] = {
            f"prompt_{i}": widgets.Textarea(
                value=text,
                description=f"Request {i + 1}",
                rows=3,
                continuous_update=False,
                layout=widgets.Layout(width="48%", min_width="320px"),
            )
            for i, text in enumerate(prompts)
        }
        controls["block_size"] = int_control("Block size (tokens)", block_size)
        controls["num_blocks"] = int_control("Pool size (blocks)", num_blocks)
        super().__init__(controls, num_axes=2, figsize=(12, 4.6), step_label="Serve next request")
        self.step_button.layout.width = "190px"  # the whole label, not "Serve next req..."

    def build(self, values: dict[str, Any]) -> PrefixCache:
        texts = [values[name] for name in self.controls if name.startswith("prompt_")]
        config = PrefixCacheConfig(
            tuple(tuple(p) for p in self.tokenize(texts)), values["block_size"], values["num_blocks"]
        )
        if self.eviction is None:
            return PrefixCache(config, self.num_to_serve)
        return LearnerPrefixCache(config, self.num_to_serve, self.eviction)

    def advance(self, model: PrefixCache) -> None:
        model.step()
        self.num_to_serve = model.num_served

    def reset(self) -> None:
        self.num_to_serve = self.start_served
        super().reset()

    def draw(self, model: PrefixCache) -> str:
        req_ax, pool_ax = self.axes
        if not self._laid_out:  # a wide panel for the requests, a narrow one for the pool
            grid = self.figure.add_gridspec(1, 2, width_ratios=(2.6, 1))
            req_ax.set_subplotspec(grid[0])
            pool_ax.set_subplotspec(grid[1])
            self._laid_out = True
        self._draw_requests(req_ax, model)
        self._draw_pool(pool_ax, model)
        return self._summary(model) + ("" if self.eviction is None else f" {model.comparison()}")

    def _draw_requests(self, ax: Any, m: PrefixCache) -> None:
        c = m.config
        num_rows = len(c.prompts)
        widest = max(ceil_div(len(p), c.block_size) for p in c.prompts)
        labelled = widest <= MAX_LABELLED_BLOCKS
        ax.set_xlim(-0.3, widest + 0.2)
        ax.set_ylim(-0.7, num_rows - 0.2)
        x_pt, y_pt = points_per_unit(ax)
        for row, prompt in enumerate(c.prompts):
            y = num_rows - 1 - row
            result = m.results[row] if row < m.num_served else None
            num_blocks = ceil_div(len(prompt), c.block_size)
            if result is not None and result.refusal:  # nothing of it was stored: say so, draw no blocks
                ax.text(
                    0, y, "refused: the pool is too small for this prompt", va="center", fontsize=9, color="#b71c1c"
                )
                continue
            for i in range(num_blocks):
                width = 0.78 * min(1.0, (len(prompt) - i * c.block_size) / c.block_size)
                block = result.blocks[i] if result is not None and result.blocks else None
                colour = WAITING_COLOUR if block is None else (HIT_COLOUR if block.hit else MISS_COLOUR)
                partial = block is not None and block.block_hash is None
                ax.add_patch(
                    Rectangle(
                        (i, y - 0.3),
                        width,
                        0.6,
                        facecolor=colour,
                        edgecolor="white",
                        hatch="///" if partial else None,
                        alpha=0.55 if partial else 1.0,
                    )
                )
                label, across, up = block.short_hash if block is not None and labelled else "", width * x_pt, 0.6 * y_pt
                if label and (label_fits(label, across, up) or label_fits(label, up, across)):
                    ax.text(
                        i + width / 2,
                        y,
                        label,
                        ha="center",
                        va="center",
                        color="white",
                        fontsize=LABEL_PT,
                        family="monospace",
                        rotation=0 if label_fits(label, across, up) else 90,
                    )
                if block is not None and (row, i) in m.evicted_by:
                    ax.plot(i + width / 2, y + 0.42, marker="x", color="k", ms=5, mew=1.2)
            if num_blocks > 1:  # the chain: each block's name feeds the next block's hash
                ax.plot([0.5, num_blocks - 0.9], [y, y], color="0.35", lw=0.8, zorder=0)
                ax.plot(
                    [i + 0.89 for i in range(num_blocks - 1)],
                    [y] * (num_blocks - 1),
                    ">",
                    color="0.35",
                    ms=3 if widest > 14 else 5,
                    zorder=0,
                )
        ax.set_yticks(range(num_rows), [f"request {num_rows - y}" for y in range(num_rows)])
        for y, tick in enumerate(ax.get_yticklabels()):
            tick.set_color(REQUEST_COLOURS[(num_rows - 1 - y) % len(REQUEST_COLOURS)])
        ax.set_xlabel(
            f"block of the prompt ({c.block_size} {'tokens' if c.block_size > 1 else 'token'} each)"
            + ("" if labelled else "; hashes hidden above 40 blocks: raise the block size")
        )
        handles = [
            Patch(color=HIT_COLOUR, label="hit: reused from the cache"),
            Patch(color=MISS_COLOUR, label="miss: computed"),
            Patch(facecolor=MISS_COLOUR, alpha=0.55, hatch="///", label="partial block: never cached"),
            Patch(color=WAITING_COLOUR, label="not served yet"),
        ]
        if m.evicted_by:
            why = "least recently used" if self.eviction is None else "chosen by your policy"
            handles.append(ax.plot([], [], "x", color="k", label=f"evicted later ({why})")[0])
        ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=LABEL_PT, frameon=False
        )
        reused = (
            f"{m.num_cached_tokens:,} of {m.num_prompt_tokens:,} prompt tokens reused"
            if m.num_cached_tokens
            else "no block reused yet"
        )
        ax.set_title(
            f"{reused}\na block hits only if every block before it matched too (labels: each block's chained hash)",
            fontsize=9,
        )

    def _draw_pool(self, ax: Any, m: PrefixCache) -> None:
        blocks, order = m.pool_blocks(), "1 = evicted first" if self.eviction is None else "your policy chooses"
        ax.set_axis_off()
        num_cached = sum(b.origin is not None for b in blocks)
        if len(blocks) > MAX_DRAWN_POOL:
            ax.text(
                0.5,
                0.5,
                f"{len(blocks):,} blocks: too many to draw\n{num_cached:,} hold a cached prefix",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            return
        cols = max(4, min(16, round(len(blocks) ** 0.5)))
        rows = ceil_div(len(blocks), cols)
        ax.set_xlim(-0.1, cols)
        ax.set_ylim(-0.1, rows)
        ax.set_aspect("equal")
        cell_pt = 0.9 * min(points_per_unit(ax))  # equal aspect: the smaller scale is the drawn one
        for b in blocks:
            x, y = b.block_id % cols, rows - 1 - b.block_id // cols
            colour = "white" if b.origin is None else REQUEST_COLOURS[b.origin[0] % len(REQUEST_COLOURS)]
            ax.add_patch(Rectangle((x, y), 0.9, 0.9, facecolor=colour, edgecolor="0.6", lw=0.6))
            if b.eviction_rank is not None and label_fits(str(b.eviction_rank), cell_pt, cell_pt):
                ax.text(
                    x + 0.45, y + 0.45, str(b.eviction_rank), ha="center", va="center", color="white", fontsize=LABEL_PT
                )
        ax.set_title(
            f"the pool after request {m.num_served}:\n{num_cached} of {len(blocks)} blocks keep a prefix\n"
            f"(colour: whose; {order})",
            fontsize=9,
        )

    def _summary(self, m: PrefixCache) -> str:
        c = m.config
        if not m.results:
            return f"No request served yet: press <b>Serve next request</b>. One {self.unit}; blocks of {c.block_size}."
        r = m.results[-1]
        head = f"Request {r.number + 1} of {len(c.prompts)}: "
        each = ", ".join("refused" if x.refusal else f"{x.num_cached_tokens:,}" for x in m.results)
        so_far = (
            f"So far {m.num_cached_tokens:,} of {m.num_prompt_tokens:,} prompt tokens reused "
            f"({m.num_cached_tokens / max(1, m.num_prompt_tokens):.0%}); per request: {each}."
        )
        if r.refusal:
            return head + f"<b>refused</b>: {r.refusal}. " + so_far
        hits = sum(b.hit for b in r.blocks)
        text = (
            head + f"{r.num_tokens:,} tokens in {len(r.blocks)} blocks; <b>{hits} hit</b> "
            f"({r.num_cached_tokens:,} tokens reused), {r.num_computed_tokens:,} tokens computed. "
        )
        if r.evicted:
            owners = sorted({q + 1 for q, _ in r.evicted})
            how = "least recently used first" if self.eviction is None else "as your policy chose"
            text += f"It evicted {plural(len(r.evicted), 'cached block')} of {named('request', owners)}, {how}. "
        return text + so_far + ("" if m.done else " Press <b>Serve next request</b>.")
