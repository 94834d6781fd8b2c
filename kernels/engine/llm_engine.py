"""LLMEngine: continuous batching over a paged KV pool, on the real model (lessons 08-15).

``add_request`` queues a prompt (or refuses it at once, with the reason, if it could never
fit); ``step`` runs one forward pass over every scheduled sequence's new tokens, flattened
into one batch, and samples where a sequence's prompt is done; ``generate`` drives steps until
every request is finished or refused. All the bookkeeping (blocks, sharing, prefix cache,
preemption) lives in the block manager and scheduler; this file only moves tensors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum

import torch

from kvcourse.kernels.attention.paged_backend import PagedAttentionBackend, PagedMetadata
from kvcourse.kernels.engine.sampling import SamplingParams, make_generator, sample
from kvcourse.kernels.engine.scheduler import Scheduler
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.budget import MemoryBudget, num_blocks_for_budget
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.kv_cache_manager import BlockManager
from kvcourse.kernels.memory.kv_pool import KVPool

DEFAULT_NUM_BLOCKS = 512


@dataclass(frozen=True)
class EngineConfig:
    """Pool and batching limits; the pool is ``num_blocks`` or sized from ``memory_budget`` (lesson 08)."""

    block_size: int = 16
    num_blocks: int | None = None
    memory_budget: MemoryBudget | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048  # the token budget of one step
    max_model_len: int | None = None  # defaults to the model's max_position_embeddings
    enable_prefix_caching: bool = False
    use_triton: bool | None = None  # None: on CUDA yes, on the CPU the PyTorch path
    eos_token_id: int | None = None  # sequences stop here when their params say stop_on_eos

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_blocks is not None and self.memory_budget is not None:
            raise ValueError("give num_blocks or memory_budget, not both")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks < 1):
            raise ValueError(f"num_blocks must be a positive integer, got {self.num_blocks!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, int) or self.max_model_len < 1):
            raise ValueError(f"max_model_len must be a positive integer, got {self.max_model_len!r}")


class RequestStatus(Enum):
    """A request ends FINISHED or REFUSED, never lost (lesson 08)."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REFUSED = "refused"


@dataclass
class Request:
    """A prompt, its sampling parameters, and the sequences (one per sample) that serve it."""

    request_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    refusal: str | None = None
    finish_reasons: dict[int, str] = field(default_factory=dict)  # seq id -> "stop" or "length"
    generator: torch.Generator | None = None
    first_token_step: int | None = None
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission

    @property
    def num_samples(self) -> int:
        return self.params.n


@dataclass(frozen=True)
class RequestOutput:
    """A request after a step: its completions so far and whether it is done."""

    request_id: int
    samples: list[list[int]]
    finished: bool
    refusal: str | None = None
    finish_reasons: tuple[str, ...] = ()
    num_cached_tokens: int = 0

    @property
    def tokens(self) -> list[int]:
        """The first (for n == 1 the only) completion."""
        return self.samples[0] if self.samples else []


class LLMEngine:
    """A small vLLM: paged KV pool, prefix caching, sharing, continuous batching (lessons 08-15)."""

    def __init__(self, model: torch.nn.Module, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config if config is not None else EngineConfig()
        mc = model.config
        self.max_model_len = self.config.max_model_len or mc.max_position_embeddings
        self.num_blocks = self._num_blocks()
        self.events = EventLog()
        self.block_manager = BlockManager(self.num_blocks, self.config.block_size,
                                          self.config.enable_prefix_caching, self.events)
        self.scheduler = Scheduler(self.block_manager, self.config.max_num_seqs,
                                   self.config.max_num_batched_tokens)
        self.pool = KVPool.create(mc.num_layers, self.num_blocks, self.config.block_size, mc.num_kv_heads,
                                  mc.head_dim, dtype=model.dtype, device=model.device)
        self.requests: dict[int, Request] = {}
        self._request_of: dict[int, Request] = {}  # seq id -> request
        self._ids = itertools.count()
        self._seq_ids = itertools.count()
        self.num_steps = 0

    def _num_blocks(self) -> int:
        cfg = self.config
        if cfg.memory_budget is None:
            return cfg.num_blocks or DEFAULT_NUM_BLOCKS
        bytes_per_value = torch.finfo(self.model.dtype).bits // 8
        num = num_blocks_for_budget(self.model.config, cfg.memory_budget, cfg.block_size, bytes_per_value)
        if num < 1:
            raise ValueError(f"the memory budget leaves {cfg.memory_budget.kv_bytes:,} bytes: not one block")
        return num

    # ---- requests in -------------------------------------------------------------------------

    def _refusal(self, ids: list[int], params: SamplingParams) -> str | None:
        """Why a request could never be served, or None if it can (lesson 08)."""
        if not ids:
            return "the prompt is empty"
        vocab = self.model.config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            return f"token ids must lie in [0, {vocab})"
        longest = len(ids) + params.max_new_tokens
        if longest > self.max_model_len:
            return (f"prompt ({len(ids)}) + max_new_tokens ({params.max_new_tokens}) = {longest} tokens "
                    f"exceeds the model's context of {self.max_model_len}")
        bs = self.config.block_size
        needed = (longest + bs - 1) // bs
        if needed > self.num_blocks:
            return (f"a sequence of {longest} tokens needs {needed} blocks of {bs}, but the whole KV pool "
                    f"holds {self.num_blocks}: it could never fit, even alone")
        return None

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams | None = None) -> int:
        """Queue a prompt; the returned id names it in step outputs. Unservable prompts are refused."""
        params = params if params is not None else SamplingParams()
        ids = [int(t) for t in prompt_token_ids]
        req = Request(next(self._ids), ids, params)
        self.requests[req.request_id] = req
        req.refusal = self._refusal(ids, params)
        if req.refusal is not None:
            req.status = RequestStatus.REFUSED
            self.events.record(EventKind.REFUSE, detail=f"request {req.request_id}: {req.refusal}")
            return req.request_id
        if params.max_new_tokens == 0:  # nothing to generate: done without touching the model
            req.status = RequestStatus.FINISHED
            return req.request_id
        req.generator = make_generator(params, self.model.device)
        seq = Sequence(next(self._seq_ids), list(ids), len(ids), self.config.block_size)
        req.seqs.append(seq)
        self._request_of[seq.seq_id] = req
        self.scheduler.add(seq)
        return req.request_id

    # ---- one step ----------------------------------------------------------------------------

    @property
    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        """Schedule, run one flat forward pass, sample, retire finished sequences."""
        self.events.step = self.num_steps
        batch = self.scheduler.schedule()
        self.num_steps += 1
        if batch.is_empty:
            return self._refuse_stuck_head()
        self.pool.copy_blocks(batch.copies)
        device = self.model.device
        seqs, query_lens = batch.seqs, batch.query_lens
        meta = PagedMetadata.build([s.block_table for s in seqs], [s.num_computed_tokens for s in seqs],
                                   query_lens, self.config.block_size, device)
        input_ids = torch.tensor([t for s, n in zip(seqs, query_lens)
                                  for t in s.token_ids[s.num_computed_tokens:s.num_computed_tokens + n]],
                                 dtype=torch.long, device=device)
        # only sequences whose whole prompt is now computed produce a token this step
        ends = list(itertools.accumulate(query_lens))
        sampling = [i for i, (s, n) in enumerate(zip(seqs, query_lens)) if s.num_computed_tokens + n == s.num_tokens]
        logits_index = torch.tensor([ends[i] - 1 for i in sampling], dtype=torch.long, device=device)
        backend = PagedAttentionBackend(self.pool, meta, self.config.use_triton)
        logits = self.model(input_ids, meta.positions, backend, logits_index)  # (len(sampling), vocab)
        for seq, n in zip(seqs, query_lens):
            req = self._request_of[seq.seq_id]
            if req.status is RequestStatus.WAITING:
                req.status = RequestStatus.RUNNING
                req.num_cached_tokens = seq.num_cached_tokens
            seq.num_computed_tokens += n
            self.block_manager.cache_computed_blocks(seq)
        touched: dict[int, Request] = {}
        for row, i in enumerate(sampling):
            req = self._request_of[seqs[i].seq_id]
            touched[req.request_id] = req
            for seq in self._maybe_fork(req, seqs[i]):
                self._append_token(req, seq, logits[row])
        return [self._output(req) for req in touched.values()]

    def _refuse_stuck_head(self) -> list[RequestOutput]:
        """Nothing runs yet the queue's head cannot start: refuse it rather than wait forever.

        ``add_request`` refuses what could never fit, so this is a safety net, not a policy.
        """
        if self.scheduler.running or not self.scheduler.waiting:
            return []
        seq = self.scheduler.waiting.popleft()
        req = self._request_of[seq.seq_id]
        req.refusal = f"sequence {seq.seq_id} could not be given {seq.num_blocks} blocks in an idle pool"
        req.status = RequestStatus.REFUSED
        self.events.record(EventKind.REFUSE, seq.seq_id, detail=req.refusal)
        return [self._output(req)]

    def _maybe_fork(self, req: Request, seq: Sequence) -> list[Sequence]:
        """Parallel sampling: after the prompt, n - 1 children share the parent's blocks (lesson 12)."""
        if seq.num_completion_tokens > 0 or len(req.seqs) >= req.num_samples:
            return [seq]
        children = []
        for _ in range(req.num_samples - 1):
            child = Sequence(next(self._seq_ids), list(seq.token_ids), seq.num_prompt_tokens, seq.block_size)
            self.block_manager.fork(seq, child)
            self.scheduler.add_running(child)
            self._request_of[child.seq_id] = req
            req.seqs.append(child)
            children.append(child)
        return [seq, *children]

    def _append_token(self, req: Request, seq: Sequence, logits: torch.Tensor) -> None:
        token = int(sample(logits, req.params, req.generator))
        seq.token_ids.append(token)
        if req.first_token_step is None:
            req.first_token_step = self.num_steps
        eos = self.config.eos_token_id
        if req.params.stop_on_eos and eos is not None and token == eos:
            reason = "stop"
        elif seq.num_completion_tokens >= req.params.max_new_tokens or seq.num_tokens >= self.max_model_len:
            reason = "length"
        else:
            return
        req.finish_reasons[seq.seq_id] = reason
        self.scheduler.finish(seq)
        if len(req.finish_reasons) == req.num_samples:
            req.status = RequestStatus.FINISHED

    def _output(self, req: Request) -> RequestOutput:
        return RequestOutput(
            request_id=req.request_id,
            samples=[s.completion_token_ids for s in req.seqs] or [[] for _ in range(req.num_samples)],
            finished=req.status in (RequestStatus.FINISHED, RequestStatus.REFUSED),
            refusal=req.refusal,
            finish_reasons=tuple(req.finish_reasons.get(s.seq_id, "") for s in req.seqs),
            num_cached_tokens=req.num_cached_tokens,
        )

    # ---- whole batches -----------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """Serve every prompt to the end; results in prompt order, each finished or refused."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, params_list)]
        while self.has_unfinished_requests:
            self.step()
        return [self._output(self.requests[i]) for i in ids]
