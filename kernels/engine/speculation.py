"""Speculative decoding with n-gram drafts: draft, verify in one pass, roll the cache back (issue 46).

Batch-1 decoding reads every weight to make one token, so a forward pass over a few tokens costs about as much
as over one. Speculation spends that: for a greedy request ``schedule`` appends up to k drafts (prompt lookup,
ngram_drafts.py) to the sequence's tokens, so the step computes the last accepted token and the k drafts
together, as a prefill chunk, with k + 1 logits rows (``ScheduledSeq.num_draft_tokens``). After the pass:

- the model's greedy choice at each row is what plain decoding would pick there, given the drafts before it.
  The longest prefix of drafts equal to those choices is accepted, and the choice after it is the "bonus"
  token: a step yields 1 to k + 1 tokens, exactly the tokens plain greedy decoding yields (in float32);
- the cache is rolled back past the first rejected draft, as vLLM does: the drafts leave the sequence, the
  computed tokens count only the accepted ones (their K/V, computed this pass, stay), later steps overwrite the
  rejected slots, and a block the rollback empties goes back to the pool (``KVCacheManager.rollback``);
- nothing rejected is hashed into the prefix cache: ``finish_pass`` counts the drafts as uncomputed, and each
  accepted token is counted, and full blocks cached, in the order plain decoding would have done it.

Who speculates: running greedy sequences (temperature 0) with n = 1, one decoding token each. Sampling requests
(temperature > 0) do not speculate (checking drafts against a sample needs rejection sampling, not built here),
nor do requests with n > 1 samples: both are served as without speculation. Drafts never cost another sequence
its blocks: if they do not fit, the step runs without them. With ``layer_windows`` speculation is refused.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcourse.kernels.engine.batch import ScheduledBatch, ScheduledSeq
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig, propose_ngram_drafts
from kvcourse.kernels.engine.sampling import greedy, sample
from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus
from kvcourse.kernels.memory.block_manager import BlockManager, RollsBack


@dataclass
class DraftCounts:
    """One request's speculation: drafts proposed, drafts accepted, verifying steps, blocks rolled back."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    blocks_freed: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted (0.0 before any draft)."""
        return self.accepted / self.drafted if self.drafted else 0.0


def sample_rows(seqs: list[Sequence], logits: torch.Tensor) -> list[list[int]]:
    """One token per sampled sequence (``seqs``, in logits row order); a sequence about to split into n
    samples draws n, one from each sample's own generator (lesson 12)."""
    # Greedy rows need no generator: one argmax over the whole (B, vocab) block, not B small ones.
    greedy_tokens = greedy(logits).tolist() if any(s.params.greedy for s in seqs) else []
    tokens = []
    for i, (seq, row) in enumerate(zip(seqs, logits, strict=True)):
        generators = [seq.generator, *seq.fork_generators] if seq.num_pending_forks else [seq.generator]
        if seq.params.greedy:
            tokens.append([greedy_tokens[i]] * len(generators))
        else:
            tokens.append([int(sample(row, seq.params, g)) for g in generators])
    return tokens


def drop_drafts(seq: Sequence) -> None:
    """Take a sequence's unverified drafts off its tokens."""
    del seq.token_ids[seq.num_tokens - seq.num_draft_tokens :]
    seq.num_draft_tokens = 0


class Speculator:
    """Drafts for ``Scheduler.schedule``, verification for the engine's sampling, acceptance and rollback for
    ``Scheduler.update``; counts per request (``counts``). ``config`` None: no drafts, plain sampling."""

    def __init__(self, config: SpeculativeConfig | None, manager: BlockManager) -> None:
        if config is not None and not isinstance(manager, RollsBack):
            raise ValueError(f"speculation rolls the cache back: {type(manager).__name__} has no rollback(seq)")
        self.config = config
        self.manager = manager
        self._rollback = manager.rollback if isinstance(manager, RollsBack) else None
        self.counts: dict[int, DraftCounts] = {}  # by request id

    def draft(self, seq: Sequence, budget: int, max_model_len: int) -> None:
        """Append drafts to a decoding greedy sequence, as many as its length limit, the step's token budget
        and the free blocks allow (none if it does not speculate)."""
        cfg, params = self.config, seq.params
        if cfg is None or not params.greedy or params.n > 1 or seq.num_uncomputed_tokens != 1:
            return
        room = (params.max_new_tokens or max_model_len) - seq.num_completion_tokens - 1  # the bonus token's too
        k = min(cfg.num_tokens, budget - 1, max_model_len - seq.num_tokens, room)
        drafts = propose_ngram_drafts(seq.token_ids, k, cfg.max_ngram, cfg.min_ngram)
        if not drafts:
            return
        seq.token_ids += drafts
        seq.num_draft_tokens = len(drafts)
        if not self.manager.can_append(seq):
            drop_drafts(seq)

    def sample(self, batch: ScheduledBatch, seqs: list[Sequence], logits: torch.Tensor) -> list[list[int]]:
        """The tokens of each sampled sequence (``seqs``, in ``batch.sampled`` order): one row sampled as
        ``sample_rows`` does, or, for a sequence that drafted, the accepted drafts and the bonus token."""
        parts = [batch.seqs[i] for i in batch.sampled]
        ends = list(itertools.accumulate(p.num_logits for p in parts))
        if len(ends) == logits.shape[0]:  # no drafts this step: one row per sequence
            return sample_rows(seqs, logits)
        tokens = sample_rows(seqs, logits[torch.tensor([e - 1 for e in ends], device=logits.device)])
        for i, (seq, part) in enumerate(zip(seqs, parts, strict=True)):
            if part.num_draft_tokens:
                tokens[i] = self._verify(seq, part, logits[ends[i] - part.num_logits : ends[i]])
        return tokens

    def _verify(self, seq: Sequence, part: ScheduledSeq, rows: torch.Tensor) -> list[int]:
        """The greedy choice after the last token and after each draft; the drafts equal to the choices before
        them are accepted, and the first choice that no draft matched (or the one after all k) is the bonus."""
        choices = greedy(rows).tolist()
        drafts = part.new_token_ids[-part.num_draft_tokens :]
        accepted = next((j for j, (d, c) in enumerate(zip(drafts, choices, strict=False)) if d != c), len(drafts))
        counts = self.counts_of(seq)
        counts.drafted += len(drafts)
        counts.accepted += accepted
        counts.steps += 1
        return choices[: accepted + 1]

    def accept(self, seq: Sequence, tokens: list[int], append: Callable[[Sequence, int], None]) -> None:
        """After ``finish_pass`` (which counted only the last token computed): drafts off, then each token in
        turn as plain decoding takes it (the one before it counted computed, full blocks cached, the token
        appended, stops checked), then the blocks past the computed tokens back to the pool."""
        drop_drafts(seq)
        for j, token in enumerate(tokens):
            if j:  # the previous token was an accepted draft: its K/V from this pass stands
                seq.num_computed_tokens += 1
                self.manager.cache_full_blocks(seq)
            append(seq, token)
            if seq.status is SequenceStatus.FINISHED:  # a stop token or the length limit: the rest is dropped
                return
        if self._rollback is not None:  # always, with drafts: __init__ refuses a manager without it
            self.counts_of(seq).blocks_freed += self._rollback(seq)

    def counts_of(self, seq: Sequence) -> DraftCounts:
        """The counts of the sequence's request (-1 for a sequence of no request)."""
        return self.counts.setdefault(seq.request_id if seq.request_id is not None else -1, DraftCounts())
