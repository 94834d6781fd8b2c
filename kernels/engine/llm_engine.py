"""LLMEngine: continuous batching over a paged KV pool, on the real model (lessons 08-15).

``add_request`` queues a prompt (or refuses it at once, with the reason, if it could never be
served); ``step`` reads as three calls: the scheduler picks the batch, the model runner runs it,
the scheduler updates the sequences (after the engine has sampled their tokens); ``generate``
drives steps until every request is finished or refused. The engine itself only orchestrates
and keeps the request-level view.

Beyond lessons 08-15, ``EngineConfig`` turns on: a window per layer (windows.py, issue 45), the radix prefix
index (memory/radix_manager.py), n-gram speculative decoding (speculation.py) and a disk tier under the prefix
cache (memory/disk_tier.py), issue 46. Which of them combine, and how the rest are refused:
tests/kernels/test_engine_combinations.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.batch import ScheduledBatch
from kvcourse.kernels.engine.config import DEFAULT_NUM_BLOCKS, EngineConfig
from kvcourse.kernels.engine.latency import RequestTimes
from kvcourse.kernels.engine.model_runner import ModelRunner
from kvcourse.kernels.engine.policy import SchedulingPolicy
from kvcourse.kernels.engine.request import Request, RequestOutput, RequestStatus
from kvcourse.kernels.engine.sampling import DEFAULT_MAX_NEW_TOKENS, SamplingParams, make_generator, params_for_sample
from kvcourse.kernels.engine.scheduler import Scheduler
from kvcourse.kernels.engine.sequence import FinishReason, Sequence, SequenceStatus
from kvcourse.kernels.engine.speculation import Speculator
from kvcourse.kernels.engine.threads import thread_policy
from kvcourse.kernels.engine.windows import windowed_parts, windows_refusal
from kvcourse.kernels.memory.block_manager import BlockManager
from kvcourse.kernels.memory.budget import num_blocks_for_budget
from kvcourse.kernels.memory.disk_tier import attach_pool, kv_cache_manager
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.eviction import EvictionPolicy
from kvcourse.kernels.memory.kv_cache_groups import KVCacheGroupsManager
from kvcourse.kernels.model.transformer import Transformer


class LLMEngine:
    """A small vLLM: paged KV pool, prefix caching, sharing, continuous batching (lessons 08-15)."""

    def __init__(
        self,
        model: Transformer,
        config: EngineConfig | None = None,
        *,
        block_manager: Callable[[int, int], BlockManager] | None = None,
        eviction: EvictionPolicy | None = None,
        scheduling_policy: SchedulingPolicy | None = None,
    ) -> None:
        """The engine on ``model``. The three keywords are the labs' seams (lessons 18-20): ``block_manager``
        a class called as ``block_manager(num_blocks, block_size)`` in place of the KVCacheManager (a ``BlockManager``),
        ``eviction`` the prefix cache's eviction policy, ``scheduling_policy`` admission and preemption."""
        if block_manager is not None and eviction is not None:
            raise ValueError(
                "eviction is a policy of the engine's own KV-cache manager: give block_manager or eviction, not both"
            )
        self.config = config if config is not None else EngineConfig()
        if self.config.fast_paths is not None:  # on a twin sharing the weights: the caller's model stays as given
            model = model.accelerated(self.config.fast_paths)
        self.model = model
        self.max_model_len = self.config.max_model_len or model.config.max_position_embeddings
        self.events = EventLog(self.config.max_events)
        self.kv_cache_manager: BlockManager
        self.model_runner: ModelRunner
        if self.config.layer_windows is not None:  # a block table per group of layers with one window (windows.py)
            self.kv_cache_manager, self.model_runner = windowed_parts(
                model, self.config, self.events, block_manager, eviction
            )
            self.num_blocks = self.kv_cache_manager.num_blocks
        else:
            self.num_blocks = self._num_blocks()
            self.kv_cache_manager = kv_cache_manager(self.num_blocks, self.config, self.events, block_manager, eviction)
            self.model_runner = ModelRunner.for_model(
                model, self.num_blocks, self.config.block_size, self.config.use_triton
            )
        self.eos_token_ids = (
            frozenset({self.config.eos_token_id})
            if self.config.eos_token_id is not None
            else frozenset(model.config.eos_token_ids)
        )
        self.speculator = Speculator(self.config.speculation, self.kv_cache_manager)  # drafts' counts per request
        self.scheduler = Scheduler(
            self.kv_cache_manager,
            self.config.max_num_seqs,
            self.config.max_num_batched_tokens,
            self.max_model_len,
            self.eos_token_ids,
            scheduling_policy,
            self.events,
            self.speculator,
        )
        self.pool = self.model_runner.pool
        attach_pool(self.kv_cache_manager, self.pool)  # a disk tier saves from and restores into it (disk_tier.py)
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self.num_steps = 0
        self.clock: Callable[[], float] = time.perf_counter  # what latencies are stamped with (latency.py)

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
        """Why a request could never be served, or None if it can (lesson 08). ``params.max_new_tokens`` is set."""
        if not ids:
            return "the prompt is empty"
        vocab = self.model.config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            return f"token ids must lie in [0, {vocab})"
        if params.n > self.config.max_num_seqs:
            return f"n = {params.n} samples exceed max_num_seqs = {self.config.max_num_seqs} running sequences"
        longest = len(ids) + (params.max_new_tokens or 0)  # add_request has replaced a None by the default
        if longest > self.max_model_len:
            return (
                f"prompt ({len(ids)}) + max_new_tokens ({params.max_new_tokens}) = {longest} tokens "
                f"exceeds the model's context of {self.max_model_len}"
            )
        if isinstance(self.kv_cache_manager, KVCacheGroupsManager):
            return windows_refusal(self.kv_cache_manager, longest, params.n)
        bs = self.config.block_size
        needed = ceil_div(longest, bs)
        if needed > self.num_blocks:
            return (
                f"a sequence of {longest} tokens needs {needed} blocks of {bs}, but the whole KV pool "
                f"holds {self.num_blocks}: it could never fit, even alone"
            )
        return None

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams | None = None) -> int:
        """Queue a prompt; the returned id names it in step outputs. Unservable prompts are refused."""
        params = params if params is not None else SamplingParams()
        if params.max_new_tokens is None:
            params = replace(params, max_new_tokens=DEFAULT_MAX_NEW_TOKENS)
        ids = [int(t) for t in prompt_token_ids]
        req = Request(next(self._ids), ids, params, times=RequestTimes(self.num_steps, self.clock()))
        self.requests[req.request_id] = req
        req.refusal = self._refusal(ids, params)
        if req.refusal is not None:
            req.status = RequestStatus.REFUSED
            self.events.record(EventKind.REFUSE, detail=f"request {req.request_id}: {req.refusal}")
        elif params.max_new_tokens == 0:  # nothing to generate: done without touching the model
            req.status = RequestStatus.FINISHED
        else:
            # One random stream per sample, seeded seed + i: sample i repeats alone (lesson 12).
            generators = [make_generator(params_for_sample(params, i), self.model.device) for i in range(params.n)]
            seq = Sequence(
                self.scheduler.next_seq_id(),
                list(ids),
                len(ids),
                self.config.block_size,
                params,
                req.request_id,
                generators[0],
                fork_generators=generators[1:],
                arrival=self.num_steps,
            )
            req.seqs.append(seq)
            self.scheduler.add(seq)
        return req.request_id

    def abort_request(self, request_id: int) -> None:
        """Stop serving a request now; its sequences finish with reason "abort" and free their blocks."""
        if request_id not in self.requests:
            known = f"ids 0 to {len(self.requests) - 1}" if self.requests else "none yet"
            raise KeyError(f"no request {request_id!r} to abort: this engine's requests are {known}")
        req = self.requests[request_id]
        if req.is_done:
            return
        for seq in req.seqs:
            if seq.status is not SequenceStatus.FINISHED:
                self.scheduler.finish(seq, FinishReason.ABORT)
        req.status = RequestStatus.FINISHED
        req.times.finish(self.num_steps, self.clock())

    # ---- one step ----------------------------------------------------------------------------

    @property
    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> list[RequestOutput]:
        """Schedule, run one flat forward pass, sample, update: the outputs of the requests that moved.

        The thread policy (``EngineConfig.num_threads``) holds during the step; torch's own
        setting is restored after it.
        """
        with thread_policy(self.config.num_threads):
            return self._step()

    def _step(self) -> list[RequestOutput]:
        self.events.step = self.num_steps
        batch = self.scheduler.schedule()
        self.num_steps += 1
        refused = self._refused(batch)
        if batch.is_empty:
            return refused
        seqs = self.scheduler.live(batch)  # the live sequences behind the record, for their requests and sampling
        self._mark_started(seqs)
        logits = self.model_runner.run(batch)  # (rows asked for, vocab): the runner reads the record only
        grown = self.scheduler.update(batch, self.speculator.sample(batch, [seqs[i] for i in batch.sampled], logits))
        return refused + self._update_requests(grown)

    def _refused(self, batch: ScheduledBatch) -> list[RequestOutput]:
        """Requests the scheduler turned away making this step (its policy's refusals, or a request that could
        not start in an idle engine): every sequence of each stops, with the reason."""
        outputs = []
        for refusal in batch.refused:
            req = self._request(refusal.request_id, refusal.seq_id)
            for other in req.seqs:
                if other.status is not SequenceStatus.FINISHED:
                    self.scheduler.finish(other, FinishReason.ABORT)
            req.refusal, req.status = refusal.reason, RequestStatus.REFUSED
            outputs.append(req.output())
        return outputs

    def _request(self, request_id: int | None, seq_id: int) -> Request:
        """The request a sequence serves: every sequence the engine makes belongs to one."""
        if request_id is None or request_id not in self.requests:
            raise KeyError(f"sequence {seq_id} belongs to no request of this engine ({request_id!r})")
        return self.requests[request_id]

    def _mark_started(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            req = self._request(seq.request_id, seq.seq_id)
            if req.status is RequestStatus.WAITING:
                req.status = RequestStatus.RUNNING
                req.num_cached_tokens = seq.num_cached_tokens

    def _update_requests(self, grown: list[Sequence]) -> list[RequestOutput]:
        touched: dict[int, Request] = {}
        for seq in grown:
            req = self._request(seq.request_id, seq.seq_id)
            touched.setdefault(req.request_id, req)
            if seq not in req.seqs:
                req.seqs.append(seq)  # a sample forked this step
            if req.first_token_step is None:
                req.first_token_step = self.num_steps
        now = self.clock()  # the step's tokens exist from here: each request's stamps (latency.py)
        for req in touched.values():
            req.times.add_tokens(len(req.seqs[0].completion_token_ids) - len(req.times.token_s), self.num_steps, now)
            if req.all_finished:
                req.status = RequestStatus.FINISHED
                req.times.finish(self.num_steps, now)
        return [req.output() for req in touched.values()]

    # ---- whole batches -----------------------------------------------------------------------

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Serve every prompt to the end; results in prompt order, each finished or refused."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(
                f"{len(prompts)} prompts but {len(params_list)} SamplingParams: give one per prompt, "
                "or a single SamplingParams for all"
            )
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, params_list, strict=True)]
        with thread_policy(self.config.num_threads):  # once for the loop: each step then finds it set
            while self.has_unfinished_requests:
                self.step()
        return [self.requests[i].output() for i in ids]
