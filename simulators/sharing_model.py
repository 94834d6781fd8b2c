"""Lesson 12's simulator, config and model: one sequence forked into n samples that share blocks till written.

The model steps the engine's own ``KVCacheManager``: one block table per sequence and a reference count
per physical block, blocks handed out front first by its ``BlockPool``. The first Step forks the
prompt's sequence into ``num_samples`` sequences (``KVCacheManager.fork``: every block's count goes up
by n - 1); each later Step writes ``tokens_per_step`` tokens into every sample, in order
(``KVCacheManager.append_slots``): a write into a block held by more than one table first copies it
(copy on write), and a sample whose tokens outgrow its last block gets a new one. Full blocks are never
written again, so only the prompt's partly filled last block is ever copied. A step that needs more
blocks than are free is refused with a message. tests/simulators/test_sim_sharing.py checks every table
and count against the engine's manager and a real ``LLMEngine`` run. Lab A (lesson 18) runs the same
steps on the learner's block manager (``LearnerSharing`` in learner_policy.py builds on this module);
the view is sharing.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcourse.kernels import KVCacheManager, Sequence
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import InvalidInput, check_int
from kvcourse.simulators.labels import plural

MAX_PROMPT = 100_000
MAX_BLOCK_SIZE = 1024
MAX_SAMPLES = 64
MAX_TOKENS_PER_STEP = 4096
MAX_POOL = 100_000


@dataclass(frozen=True)
class SharingConfig:
    """A prompt, its block size, how many samples fork from it, how fast they write, and the pool (lesson 12)."""

    prompt_len: int = 94
    block_size: int = 16
    num_samples: int = 4
    tokens_per_step: int = 1
    num_blocks: int = 48

    def __post_init__(self) -> None:
        check_int("Prompt length (tokens)", self.prompt_len, 1, MAX_PROMPT)
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        check_int("Samples n", self.num_samples, 1, MAX_SAMPLES)
        check_int("Tokens per step", self.tokens_per_step, 1, MAX_TOKENS_PER_STEP)
        check_int("Pool size (blocks)", self.num_blocks, 1, MAX_POOL)
        if self.prompt_blocks > self.num_blocks:
            raise InvalidInput(
                f"the {self.prompt_len:,}-token prompt needs {self.prompt_blocks:,} blocks of "
                f"{self.block_size}, but the pool holds {self.num_blocks:,}: it could never start. "
                "Make the pool bigger or the prompt shorter."
            )

    @property
    def prompt_blocks(self) -> int:
        return ceil_div(self.prompt_len, self.block_size)

    @property
    def full_prompt_blocks(self) -> int:
        """Prompt blocks that are full: the ones that stay shared for good."""
        return self.prompt_len // self.block_size


@dataclass(frozen=True)
class CopyOnWrite:
    """Sample ``sample`` copied shared block ``source`` into its own block ``target`` before writing."""

    sample: int
    source: int
    target: int


class Sharing:
    """Block tables and reference counts while one prompt forks into n samples (lesson 12).

    The sequences and their blocks live in a real ``KVCacheManager``: the fork, the copies on
    write and the new blocks are the engine's own; this class only steps it and checks that a
    whole step fits before taking it.
    """

    def __init__(self, config: SharingConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        c = self.config
        self.manager = self.new_manager()
        prompt = Sequence(0, [0] * c.prompt_len, c.prompt_len, c.block_size)
        self.manager.allocate(prompt)
        prompt.num_computed_tokens = c.prompt_len  # the prefill wrote the prompt's K/V
        self.seqs = [prompt]
        self.forked = False
        self.num_steps_done = 0
        self.num_copies = 0
        self.last_copies: list[CopyOnWrite] = []
        self.last_new_blocks = 0

    def new_manager(self) -> Any:
        """The block manager the sequences live in: the engine's own (lab A's simulator gives the learner's)."""
        return KVCacheManager(self.config.num_blocks, self.config.block_size)

    @property
    def tables(self) -> list[list[int]]:
        return [s.block_table for s in self.seqs]

    @property
    def ref_counts(self) -> list[int]:
        return self.manager.block_pool.ref_counts

    @property
    def num_tokens(self) -> int:
        """Tokens in the pool per sequence; every sample has as many."""
        return self.seqs[0].num_tokens

    # -- stepping ---------------------------------------------------------------------------------
    def step(self) -> None:
        """The first step forks the prompt into n samples; every later one writes tokens_per_step into each."""
        if self.forked:
            self._write(self.config.tokens_per_step)
        else:
            self._fork()
        self.num_steps_done += 1

    def _fork(self) -> None:
        parent = self.seqs[0]
        for i in range(1, self.config.num_samples):
            child = Sequence(i, list(parent.token_ids), parent.num_prompt_tokens, self.config.block_size)
            self.manager.fork(parent, child)
            self.seqs.append(child)
        self.forked = True
        self.last_copies, self.last_new_blocks = [], 0

    def blocks_needed(self, num_new_tokens: int) -> int:
        """Free blocks that writing ``num_new_tokens`` more tokens into every sample takes: copies + new."""
        counts = dict(enumerate(self.ref_counts))
        needed = 0
        first = self.num_tokens // self.config.block_size
        target = ceil_div(self.num_tokens + num_new_tokens, self.config.block_size)
        for table in self.tables:
            for block in table[first:]:
                if counts[block] > 1:  # this sample copies; the block keeps one holder fewer
                    counts[block] -= 1
                    needed += 1
            needed += target - len(table)
        return needed

    def _write(self, num_new_tokens: int) -> None:
        needed, free = self.blocks_needed(num_new_tokens), self.num_free_blocks
        if needed > free:
            raise InvalidInput(
                f"the pool is full: writing {plural(num_new_tokens, 'more token')} into each of the {len(self.seqs)} "
                f"samples needs {needed} free blocks, and only {free} of {self.config.num_blocks} are free. "
                "A serving engine would now make a sample wait or preempt it (lesson 08). "
                "Press Reset, or make the pool bigger."
            )
        copies, new = [], 0
        for sample, seq in enumerate(self.seqs):
            held = len(seq.block_table)
            seq.token_ids.extend([0] * num_new_tokens)
            copies += [CopyOnWrite(sample, c.src, c.dst) for c in self.manager.append_slots(seq)]
            seq.num_computed_tokens = seq.num_tokens
            new += len(seq.block_table) - held
        self.num_copies += len(copies)
        self.last_copies, self.last_new_blocks = copies, new

    # -- what the learner reads ---------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return len(self.tables)

    @property
    def num_written(self) -> int:
        """Tokens each sample has written after the prompt."""
        return self.num_tokens - self.config.prompt_len

    @property
    def num_used_blocks(self) -> int:
        return self.manager.num_used_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.manager.num_free_blocks

    @property
    def num_blocks_unshared(self) -> int:
        """Blocks the same sequences would hold with a private copy each: the sum of their tables."""
        return sum(len(t) for t in self.tables)

    @property
    def blocks_saved(self) -> int:
        return self.num_blocks_unshared - self.num_used_blocks

    @property
    def shared_blocks(self) -> list[int]:
        """Physical blocks held by more than one block table."""
        return [b for b, count in enumerate(self.ref_counts) if count > 1]
