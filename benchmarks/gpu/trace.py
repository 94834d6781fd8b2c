"""Check 5: a recorded GPU trace of LLMEngine over a fixed seeded workload (lesson 14).

Per step: wall seconds (the GPU synchronised before each clock read, so a step's kernels are in
its own time), the sequences in the step's batch, the tokens scheduled, and the KV bytes the
pool holds after it (used blocks x bytes per block, every layer's K and V).
"""

from __future__ import annotations

import time

import torch

from benchmarks.workloads import Workload

BLOCK_SIZE = 16
NUM_BLOCKS = 2048  # 32k token slots: the full workload's requests all fit at once, so nothing is preempted


class BatchTap:
    """Keeps the batch the scheduler made last, so the step that ran it can be described afterwards.

    It wraps one scheduler's ``schedule`` (an instance attribute: no class is changed).
    """

    def __init__(self, scheduler) -> None:
        self._schedule = scheduler.schedule
        self.last = None
        scheduler.schedule = self

    def __call__(self):
        self.last = self._schedule()
        return self.last


def record_trace(device: torch.device, num_requests: int, seed: int = 0) -> dict:
    """Serve ``Workload.make(num_requests, seed=seed)`` on CUDA in bf16; one row per engine step."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
    from kvcourse.kernels.engine.generate import as_transformer
    from kvcourse.models import load_model

    hf_model, _ = load_model(dtype=torch.bfloat16, device=device)
    engine = LLMEngine(as_transformer(hf_model), EngineConfig(block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS))
    bytes_per_block = engine.pool.nbytes // engine.pool.num_blocks
    workload = Workload.make(num_requests, seed=seed)
    for prompt, answer_len in zip(workload.prompts, workload.answer_lens, strict=True):
        engine.add_request(prompt, SamplingParams(max_new_tokens=answer_len, stop_on_eos=False))
    tap = BatchTap(engine.scheduler)
    steps = []
    while engine.has_unfinished_requests:
        torch.cuda.synchronize()
        start = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        used = engine.kv_cache_manager.num_used_blocks
        steps.append(
            {
                "step": len(steps),
                "seconds": seconds,
                "num_seqs": len(tap.last.seqs),
                "num_scheduled_tokens": tap.last.num_tokens,
                "num_used_blocks": used,
                "kv_bytes_held": used * bytes_per_block,
            }
        )
    total = sum(s["seconds"] for s in steps)
    print(
        f"  {len(steps)} steps, {workload.num_answer_tokens} answer tokens in {total:.2f} s; batch up to "
        f"{max(s['num_seqs'] for s in steps)}, KV held up to {max(s['kv_bytes_held'] for s in steps) / 1e6:.0f} MB",
        flush=True,
    )
    return {
        "device": torch.cuda.get_device_name(device),
        "dtype": "bfloat16",
        "workload": workload.describe(),
        "seed": seed,
        "block_size": BLOCK_SIZE,
        "num_blocks": NUM_BLOCKS,
        "bytes_per_block": bytes_per_block,
        "seconds": total,
        "steps": steps,
    }
