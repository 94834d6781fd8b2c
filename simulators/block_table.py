"""Lesson 10's simulator: block tables, with logical blocks on one side and physical blocks on the other.

Each sequence sees its tokens in order, cut into logical blocks of ``block_size`` tokens; its
block table says which physical block of the shared pool holds each of them. Blocks come from
the engine's own ``BlockPool``, front first: a sequence's prompt blocks when it is admitted
(sequences in order), then one more whenever its last block is full and its next token needs a
slot. ``shuffle`` calls ``BlockPool.shuffle_free_blocks(seed)``, so a seed here gives the engine's
tables there;
tests/simulators/test_sim_block_table.py drives ``KVCacheManager`` and ``LLMEngine`` beside this model.

``draw_tables`` draws any set of tables (the simulator's or a real engine's, via
``engine_tables``); it lives in block_table_drawing.py with ``plot_tables`` and ``engine_tables``, all
three importable from here too. ``source_side_by_side`` shows two pieces of source next to each other.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from kvcourse.feedback import info
from kvcourse.kernels import BlockPool
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.block_table_drawing import WIDTH_RATIOS, draw_tables
from kvcourse.simulators.block_table_drawing import engine_tables as engine_tables
from kvcourse.simulators.block_table_drawing import plot_tables as plot_tables
from kvcourse.simulators.checks import InvalidInput, check_int
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.labels import plural

MAX_BLOCK_SIZE = 256
MAX_BLOCKS = 512
MAX_SEQS = 8  # one colour each
MAX_PROMPT = 100_000
MAX_START_STEPS = 100_000


def num_adjacent(table: list[int]) -> int:
    """Neighbours in the table that are also neighbours in memory (block i + 1 right after block i)."""
    return sum(1 for a, b in zip(table, table[1:], strict=False) if b == a + 1)


def parse_prompt_lens(text: str, num_seqs: int) -> tuple[int, ...]:
    """'37' (the same for every sequence) or '37, 41, 35' (one per sequence) -> a tuple of lengths."""
    parts = [p for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        lens = [int(p.strip()) for p in parts]
    except ValueError:
        raise InvalidInput(f"Prompt lengths must be whole numbers separated by commas, got {text!r}.") from None
    if len(lens) == 1:
        lens = lens * num_seqs
    if len(lens) != num_seqs:
        raise InvalidInput(
            f"Prompt lengths: give one number for all {num_seqs} sequences, or one per sequence "
            f"({num_seqs}); got {len(lens)}."
        )
    for n in lens:
        check_int("Prompt lengths (tokens)", n, 1, MAX_PROMPT)
    return tuple(lens)


@dataclass(frozen=True)
class BlockTableConfig:
    """Block size, pool size, the sequences' prompt lengths and the free list's order (lesson 10)."""

    block_size: int = 16
    num_blocks: int = 32
    prompt_lens: tuple[int, ...] = (37, 37, 36)
    shuffle: bool = True
    seed: int = 0
    follow: int = 0  # the sequence whose table the status line spells out
    start_steps: int = 0  # tokens added to every sequence before the first picture (e.g. to match an engine run)

    def __post_init__(self) -> None:
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        check_int("Physical blocks", self.num_blocks, 1, MAX_BLOCKS)
        check_int("Sequences", len(self.prompt_lens), 1, MAX_SEQS)
        for n in self.prompt_lens:
            check_int("Prompt lengths (tokens)", n, 1, MAX_PROMPT)
        check_int("Shuffle seed", self.seed, 0, 2**31 - 1)
        check_int("Follow sequence", self.follow, 0, len(self.prompt_lens) - 1)
        check_int("Start after (steps)", self.start_steps, 0, MAX_START_STEPS)
        needed = sum(ceil_div(n, self.block_size) for n in self.prompt_lens)
        if needed > self.num_blocks:
            raise InvalidInput(
                f"the prompts alone need {needed} blocks of {self.block_size} tokens, but the pool "
                f"has {self.num_blocks} physical blocks. Add physical blocks, use bigger blocks, "
                "or shorten the prompts."
            )
        later = sum(ceil_div(n + self.start_steps, self.block_size) for n in self.prompt_lens)
        if later > self.num_blocks:
            raise InvalidInput(
                f"Start after (steps): after {self.start_steps} steps the sequences would need "
                f"{later} blocks, but the pool has {self.num_blocks}. Start earlier or add "
                "physical blocks."
            )


class BlockTables:
    """Sequences growing one token per step, each with its block table into one shared pool (lesson 10)."""

    def __init__(self, config: BlockTableConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        c = self.config
        self.pool = BlockPool(c.num_blocks)  # the engine's own free list
        if c.shuffle:
            self.pool.shuffle_free_blocks(c.seed)
        self.tables: list[list[int]] = [[] for _ in c.prompt_lens]
        self.lengths = [0] * len(c.prompt_lens)
        self.num_steps_done = 0
        for i, n in enumerate(c.prompt_lens):  # admission: every prompt block at once, in order
            self._grow(i, n)
        for _ in range(c.start_steps):  # the config checked that they fit
            self.step()

    def _grow(self, seq: int, num_tokens: int) -> None:
        self.lengths[seq] = num_tokens
        while len(self.tables[seq]) < ceil_div(num_tokens, self.config.block_size):
            self.tables[seq].append(self.pool.allocate(seq))

    @property
    def free(self) -> list[int]:
        """The free list, the next block to hand out first."""
        return self.pool.free_block_ids

    # -- stepping ------------------------------------------------------------------------------------
    @property
    def blocks_needed_next(self) -> list[int]:
        """The sequences whose next token starts a new block (their last block is full)."""
        return [i for i, n in enumerate(self.lengths) if n % self.config.block_size == 0]

    @property
    def full_message(self) -> str | None:
        """Why the next step cannot run (no free block for a sequence that needs one), or None."""
        needy = self.blocks_needed_next
        num_free = self.pool.num_free_blocks
        if len(needy) <= num_free:
            return None
        first = needy[num_free]
        return (
            f"sequence {first} needs a new block for its token at position {self.lengths[first]:,}, but all "
            f"{self.config.num_blocks} physical blocks are in use. A server would now make a sequence wait "
            "and give its blocks to the others (the engine preempts the newest). Press Reset, or add "
            "physical blocks."
        )

    def step(self) -> None:
        """Every sequence holds one more token; a full last block means a new block from the free list."""
        if self.full_message:
            raise InvalidInput(f"The pool is full: {self.full_message}")
        for i, n in enumerate(self.lengths):
            self._grow(i, n + 1)
        self.num_steps_done += 1

    # -- derived numbers -----------------------------------------------------------------------------
    @property
    def num_used(self) -> int:
        return self.pool.num_used_blocks

    @property
    def num_free(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_empty_slots(self) -> int:
        """Slots held but not yet written: the unfilled tail of each sequence's last block."""
        return sum(len(t) * self.config.block_size - n for t, n in zip(self.tables, self.lengths, strict=True))

    def slot(self, seq: int, position: int) -> int:
        """The pool slot holding token ``position`` of ``seq``: physical block x block_size + offset."""
        if not 0 <= position < self.lengths[seq]:
            raise InvalidInput(f"sequence {seq} holds positions 0 to {self.lengths[seq] - 1}, not {position}.")
        bs = self.config.block_size
        return self.tables[seq][position // bs] * bs + position % bs

    def owner(self) -> dict[int, tuple[int, int]]:
        """Physical block -> (sequence, logical block) for every block in use."""
        return {b: (i, j) for i, table in enumerate(self.tables) for j, b in enumerate(table)}


# -- showing source ----------------------------------------------------------------------------------


def source_side_by_side(left: tuple[str, str], right: tuple[str, str]) -> Any:
    """Two (title, source) pairs in two columns, for reading one idea in two languages."""
    from IPython.display import HTML

    def column(title: str, source: str) -> str:
        code = html.escape(textwrap.dedent(source).strip("\n"))
        return (
            f"<div style='flex:1;min-width:0'><b>{html.escape(title)}</b>"
            f"<pre style='font-size:11px;white-space:pre;overflow-x:auto'>{code}</pre></div>"
        )

    return HTML(f"<div style='display:flex;gap:16px'>{column(*left)}{column(*right)}</div>")


# -- the view ----------------------------------------------------------------------------------------


class BlockTableView(SimulatorView):
    """Step tokens into sequences and watch blocks leave the free list and the tables fill (lesson 10)."""

    def __init__(
        self,
        block_size: int = 16,
        num_blocks: int = 32,
        prompt_lens: tuple[int, ...] | list[int] = (37, 37, 36),
        shuffle: bool = True,
        seed: int = 0,
        follow: int = 0,
        start_steps: int = 0,
    ) -> None:
        self._panels_ready = False  # the base class's first render would draw on panels about to be replaced
        lens = ", ".join(str(n) for n in prompt_lens)
        controls = {
            "block_size": int_control("Block size (tokens)", block_size),
            "num_blocks": int_control("Physical blocks", num_blocks),
            "num_seqs": int_control("Sequences", len(prompt_lens), width="150px"),
            "prompt_lens": widgets.Text(
                value=lens,
                description="Prompt lengths (tokens, one or one per sequence)",
                style={"description_width": "initial"},
                layout=widgets.Layout(width="560px"),
            ),
            "shuffle": widgets.Checkbox(
                value=shuffle, description="Shuffle the free list", indent=False, layout=widgets.Layout(width="180px")
            ),
            "seed": int_control("Shuffle seed", seed, width="160px"),
            "follow": int_control("Follow sequence", follow, width="170px"),
            "start_steps": int_control("Start after (steps)", start_steps, width="190px"),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.6), step_label="Add a token to each")
        # The base class made two equal panels; the logical column needs far less room than the pool.
        self.figure.clear()
        grid = self.figure.add_gridspec(1, 2, width_ratios=WIDTH_RATIOS)
        self.axes = [self.figure.add_subplot(grid[0, 0]), self.figure.add_subplot(grid[0, 1])]
        self.figure.set_layout_engine("constrained")
        self.step_button.layout.width = "200px"  # room for its whole label
        self._panels_ready = True
        self.update()

    def update(self) -> None:
        if self._panels_ready:
            super().update()

    def on_change(self, name: str) -> None:
        # More or fewer sequences: trim the prompt lengths, or repeat the last one.
        if name == "num_seqs":
            lens = [
                p.strip() for p in str(self.controls["prompt_lens"].value).replace(";", ",").split(",") if p.strip()
            ]
            num_seqs = self.values["num_seqs"]
            if lens and isinstance(num_seqs, int) and 1 <= num_seqs <= MAX_SEQS and len(lens) > 1:
                lens = (lens + [lens[-1]] * num_seqs)[:num_seqs]
                self.controls["prompt_lens"].value = ", ".join(lens)

    def step(self) -> None:
        """Add a token to each sequence; a full pool is reported in the message line, the figure stays."""
        if self.model is not None and self.error is None and self.model.full_message:
            self.message.value = info(
                f"<b>The pool is full:</b> {html.escape(self.model.full_message)}", escape=False
            )  # nothing typed was wrong: information
            return
        super().step()

    def build(self, values: dict[str, Any]) -> BlockTables:
        num_seqs = check_int("Sequences", values["num_seqs"], 1, MAX_SEQS)
        return BlockTables(
            BlockTableConfig(
                values["block_size"],
                values["num_blocks"],
                parse_prompt_lens(values["prompt_lens"], num_seqs),
                bool(values["shuffle"]),
                values["seed"],
                values["follow"],
                values["start_steps"],
            )
        )

    def draw(self, model: BlockTables) -> str:
        c = model.config
        left, right = self.axes
        draw_tables(
            left,
            right,
            model.tables,
            model.lengths,
            c.num_blocks,
            c.block_size,
            c.follow,
            model.free[0] if model.free else None,
        )
        pairs = sum(max(len(t) - 1, 0) for t in model.tables)
        adjacent = sum(num_adjacent(t) for t in model.tables)
        left.set_title("each sequence: its blocks in order", fontsize=10)
        right.set_title(
            f"the pool: {model.num_used} of {c.num_blocks} blocks in use; {adjacent} of {pairs} "
            "neighbours in a table are neighbours in memory",
            fontsize=10,
        )
        return self._summary(model)

    @staticmethod
    def _summary(m: BlockTables) -> str:
        c, f = m.config, m.config.follow
        table, n = m.tables[f], m.lengths[f]
        shown = ", ".join(str(b) for b in table[:24]) + (", ..." if len(table) > 24 else "")
        last = n - 1
        where = (
            f"its newest token, position {last:,}, is in logical block {last // c.block_size} at offset "
            f"{last % c.block_size} → physical block {table[last // c.block_size]}, slot "
            f"{m.slot(f, last):,} of the pool."
        )
        nxt = f"Next free block: {m.free[0]}." if m.free else "No block is free: the next new block cannot be had."
        needy = m.blocks_needed_next
        ahead = (
            f" The next step needs {len(needy)} new block{'s' if len(needy) != 1 else ''} "
            f"(sequence{'s' if len(needy) != 1 else ''} {', '.join(map(str, needy))})."
            if needy
            else " The next step fits in the blocks already held."
        )
        return (
            f"Step {m.num_steps_done}: {plural(m.num_used, 'block')} in use, {m.num_free} free; "
            f"{plural(m.num_empty_slots, 'slot')} held but not yet written. Sequence {f}: "
            f"{plural(n, 'token')} in {plural(len(table), 'block')}, table [{shown}]; {where} {nxt}{ahead}"
        )
