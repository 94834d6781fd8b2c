"""What the batch benchmarks share: an engine holding a full batch of prefilled requests, and its decode
attention timed alone, on the engine's own pool and block tables, with either CPU kernel (lesson 10)."""

from __future__ import annotations

import time

import torch

from benchmarks.workloads import Workload


def prefilled_engine(model, workload: Workload, batch: int, block_size: int = 16):
    """An engine running ``batch`` requests of the workload, every prompt computed, each with its first token."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams

    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.answer_lens, strict=True))
    num_blocks = batch * (-(-longest // block_size)) + 1
    engine = LLMEngine(model, EngineConfig(max_num_seqs=batch, num_blocks=num_blocks, block_size=block_size))
    for prompt, answer in zip(workload.prompts[:batch], workload.answer_lens[:batch], strict=True):
        engine.add_request(prompt, SamplingParams(max_new_tokens=answer, stop_on_eos=False))
    while engine.scheduler.waiting or any(s.num_completion_tokens == 0 for s in engine.scheduler.running):
        engine.step()
    return engine


def decode_steps(engine, batch: int, steps: int) -> float:
    """Seconds for ``steps`` engine steps, each of which must decode all ``batch`` sequences."""
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    seconds = time.perf_counter() - start
    if len(engine.scheduler.running) != batch or engine.scheduler.waiting:
        raise RuntimeError(f"the batch shrank below {batch} during the timed steps: raise the answer lengths")
    return seconds


def attention_seconds(engine, kernel: str) -> float:
    """Seconds of one decode step's paged attention, every layer, through ``kernel`` ("in place" or "gather").

    The engine's own attention backend (``PagedAttentionBackend.attend``) on the metadata of the last
    decode step again: each sequence's last computed token reading its whole cached context. The
    query is random (attention's cost does not depend on the values); the K/V written are the ones
    already at those slots, so the pool is left as it was.
    """
    from kvcourse.kernels.attention.paged_backend import PagedAttentionBackend, PagedMetadata

    seqs, pool, cfg = engine.scheduler.running, engine.pool, engine.model.config
    meta = PagedMetadata.build(
        [s.block_table for s in seqs], [s.num_computed_tokens - 1 for s in seqs], [1] * len(seqs), pool.block_size
    )
    backend = PagedAttentionBackend(pool, meta, kernel=kernel)
    q = torch.randn(len(seqs), cfg.num_heads, cfg.head_dim, dtype=pool.k.dtype)
    with torch.inference_mode():
        kv = [
            (pool.k[i].flatten(0, 1)[meta.slot_mapping], pool.v[i].flatten(0, 1)[meta.slot_mapping])
            for i in range(cfg.num_layers)
        ]  # (B, kv_heads, D) each: what the slots hold
        start = time.perf_counter()
        for layer, (k, v) in enumerate(kv):
            backend.attend(layer, q, k, v)
        return time.perf_counter() - start


def kv_bytes_read(engine) -> int:
    """Bytes of K and V one decode step must read: every block in the running sequences' tables, every layer."""
    pool = engine.pool
    blocks = {b for s in engine.scheduler.running for b in s.block_table}
    return 2 * pool.k.shape[0] * len(blocks) * pool.k[0, 0].numel() * pool.k.element_size()


def kv_read_seconds(engine) -> float:
    """Seconds to read that many bytes of the pool once, as one streaming sum per layer (torch's threads): the
    least any decode attention can take, since it must read each sequence's K/V once."""
    pool = engine.pool
    count = len({b for s in engine.scheduler.running for b in s.block_table})
    with torch.inference_mode():
        start = time.perf_counter()
        for layer in range(pool.k.shape[0]):
            pool.k[layer, :count].sum()
            pool.v[layer, :count].sum()
        return time.perf_counter() - start
