"""Beam search on shared blocks: beams fork from their parents and copy only on write (lesson 12).

Every step each beam proposes its next tokens; the ``beam_width`` best (beam, token) pairs by
cumulative log-probability survive. A survivor is a fork of its parent: it holds the parent's
blocks by reference count, and only the partly filled last block is copied when two
survivors of one parent write their different next tokens into it. Beams that lose drop their
holds, so blocks only they used return to the pool. This is plain beam search: fixed length,
no length penalty, no early stop on end-of-sequence.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcourse.kernels.checks import ceil_div, check_positive_int
from kvcourse.kernels.engine.batch import ScheduledBatch, finish_pass
from kvcourse.kernels.engine.model_runner import ModelRunner
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.block_manager import BlockManager
from kvcourse.kernels.memory.events import EventLog
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.kernels.model.transformer import Transformer


@dataclass(frozen=True)
class BeamSearchResult:
    """The beams found (best first) and the blocks sharing saved (lesson 12)."""

    beams: list[list[int]]  # completion token ids
    scores: list[float]  # cumulative log-probabilities
    peak_blocks_shared: int  # the most blocks in use at once
    peak_blocks_unshared: int  # what the same beams would hold as private copies, at that moment
    events: EventLog

    @property
    def tokens(self) -> list[int]:
        return self.beams[0]

    @property
    def blocks_saved(self) -> float:
        """Fraction of blocks that sharing saved at the peak."""
        return 1 - self.peak_blocks_shared / self.peak_blocks_unshared


def _forward(
    runner: ModelRunner, manager: BlockManager, seqs: list[Sequence], copies: list[BlockCopy] | None = None
) -> torch.Tensor:
    """Compute every sequence's uncomputed tokens; logits (len(seqs), vocab) of each last token."""
    batch = ScheduledBatch.of(seqs, [s.num_uncomputed_tokens for s in seqs], copies or ())
    logits = runner.run(batch)
    finish_pass(batch, seqs, manager)  # the engine's own end of a pass (Scheduler.update starts with it)
    return logits


@torch.inference_mode()
def beam_search(
    model: Transformer,
    prompt_ids: list[int],
    beam_width: int,
    max_new_tokens: int,
    block_size: int = 16,
    num_blocks: int | None = None,
    block_manager: Callable[[int, int], BlockManager] | None = None,
) -> BeamSearchResult:
    """Beam search over a paged pool where beams share blocks (lesson 12); ``block_manager`` is the lab's
    seam (lesson 18): a class called as ``block_manager(num_blocks, block_size)`` in place of KVCacheManager."""
    check_positive_int("beam_width", beam_width)
    check_positive_int("max_new_tokens", max_new_tokens)
    if not prompt_ids:
        raise ValueError("the prompt is empty: give at least one token id")
    total = len(prompt_ids) + max_new_tokens
    if num_blocks is None:  # enough for every beam to hold a private copy
        num_blocks = beam_width * (ceil_div(total, block_size) + 1)
    manager: BlockManager = (block_manager or KVCacheManager)(num_blocks, block_size)
    runner = ModelRunner.for_model(model, num_blocks, block_size)
    seq_ids = itertools.count()
    root = Sequence(next(seq_ids), list(prompt_ids), len(prompt_ids), block_size)
    manager.allocate(root)
    beams, scores = [root], torch.zeros(1, device=model.device)
    logits = _forward(runner, manager, beams)
    peak_shared = peak_unshared = 0
    for step in range(max_new_tokens):
        if step > 0:
            copies = [copy for beam in beams for copy in manager.append_slots(beam)]
            if manager.num_used_blocks > peak_shared:
                peak_shared = manager.num_used_blocks
                peak_unshared = sum(len(b.block_table) for b in beams)
            logits = _forward(runner, manager, beams, copies)
        candidates = scores[:, None] + torch.log_softmax(logits.float(), dim=-1)  # (beams, vocab)
        best = torch.topk(candidates.flatten(), beam_width)
        vocab = candidates.shape[1]
        survivors = []
        for score, flat in zip(best.values.tolist(), best.indices.tolist(), strict=True):
            parent = beams[flat // vocab]
            child = Sequence(next(seq_ids), [*parent.token_ids, flat % vocab], parent.num_prompt_tokens, block_size)
            manager.fork(parent, child)
            child.cumulative_logprob = score
            survivors.append(child)
        for parent in beams:
            manager.free(parent)
        beams = survivors
        scores = torch.tensor([b.cumulative_logprob for b in beams], device=model.device)
    result = BeamSearchResult(
        [b.completion_token_ids for b in beams],
        scores.tolist(),
        peak_shared,
        max(peak_unshared, 1),
        getattr(manager, "events", EventLog()),
    )
    for beam in beams:
        manager.free(beam)
    if manager.num_free_blocks != manager.num_blocks:
        raise RuntimeError(f"beam search leaked {manager.num_used_blocks} blocks")
    return result
