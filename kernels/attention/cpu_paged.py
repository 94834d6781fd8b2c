"""Paged decode attention on the CPU, reading the pool in place (lesson 10): the CPU twin of triton_paged.py.

The gather reference (``paged_decode_attention``) copies every sequence's blocks into one padded
tensor and hands it to SDPA: the same bytes are read, written and read again, whatever the block
size. This kernel reads each block where it lies. It walks the table as the Triton kernel beside it
does: a program loads the query heads, walks the sequence's block table one block at a time, and keeps a
running max, a running sum and an fp32 accumulator per head (online softmax), so neither the padded copy
nor the score row is ever made. The loops are the Triton kernel's, written out: where Triton says
``tl.sum(q[:, None, :] * k[None, :, :], axis=2)`` over a tile, this says ``for t ... for h ... for d``;
the tile is one block. Three things differ, because a CPU has a few cores and no thousands of threads:
- one program per sequence, not per (sequence, KV head): a program takes every head of a block, so it
  reads the block front to back, each token's keys for all its KV heads side by side in memory;
- its exponentials are ``exp_neg`` (cpu_scalars.py), a polynomial numba turns into vector instructions,
  where the maths library's ``exp`` is one call per score. The two together took 15 % less time in float32,
  20-30 % less in bfloat16, than a program per (sequence, KV head) with the library's exp (one thread, AMD
  Zen 4, 32 sequences of 128-512 tokens);
- it asks for the next block's lines as it computes one (``prefetch_row``, cpu_prefetch.py): a layer of those 32
  sequences, K/V in memory as in a step, took 1.4-1.5 ms instead of 2.2 in float32, 1.7 instead of 2.2 in bf16.
The programs are independent, so they run in parallel (numba's ``prange``) on the cores torch's step has.
A bfloat16 pool is read through its bits (``widen``) and computed in float32, the output rounded once.

Why numba: its kernels are Python a learner can read beside the Triton one, compiled to machine code for
whatever CPU runs them (AVX2 or AVX-512) on first use (about 4 s) and cached on disk (0.2 s to load after).
A C++/OpenMP op built with ``torch.utils.cpp_extension`` was not built to compare: it would need a compiler
on every learner's machine (most Windows and many macOS set-ups have none with OpenMP) and a minute of
building against torch's headers on first import, and a learner would read C++ beside a Python Triton kernel.
``python -m benchmarks.bench_batch_throughput`` times it beside the gather per dtype (every layer, batch 32).

Optional by construction: without numba, for a pool it does not read (float16), or with the fast paths
off (``KVCOURSE_FAST_PATHS=0``, ``accelerate("off")``), the engine uses the gather reference, and
``in_place_decode()`` says why once. Where it is on, it was first run on a small case and compared with
the reference (``kernels/attention/paged.py``), then timed against the gather on a realistic batch in
the pool's dtype: where it is not faster here, the gather runs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
import types
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch

from kvcourse.kernels.attention.cpu_prefetch import LINE_BYTES, compiled_prefetch_row, prefetch_row
from kvcourse.kernels.attention.cpu_scalars import compiled_widen, exp_neg, widen
from kvcourse.kernels.model import timing
from kvcourse.kernels.model.cpu_fast import FastPath

NEG_BIG = np.float32(-3.0e38)  # the running max before any key: finite, so fast-math may assume no infinities
DTYPES = (torch.float32, torch.bfloat16)  # the pools it reads; it computes in float32 either way
FASTMATH = {"reassoc", "contract", "nsz", "arcp"}  # sums in any order (vector lanes), no infinities assumed away
SLOWER_HERE = "not faster than the gather on this machine"  # a measured choice, not a missing part: no warning


# Annotations for the checker only: numba compiles the code object, typed by the arrays it is given.
def _kernel(
    q: npt.NDArray[np.float32],
    k_cache: npt.NDArray[np.float32] | npt.NDArray[np.int16],  # pragma: no cover - compiled by numba
    v_cache: npt.NDArray[np.float32] | npt.NDArray[np.int16],
    block_tables: npt.NDArray[np.int64],
    context_lens: npt.NDArray[np.int64],
    out: npt.NDArray[np.float32],
    scale: np.float32,
) -> None:
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    row_bytes = num_kv_heads * head_dim * k_cache.itemsize  # one token's keys (or values), every KV head
    for seq in prange(batch):  # one program per sequence, spread over the step's cores
        context_len = context_lens[seq]
        num_blocks = (context_len + block_size - 1) // block_size
        running_max = np.full(num_heads, NEG_BIG, np.float32)
        running_sum = np.zeros(num_heads, np.float32)
        acc = np.zeros((num_heads, head_dim), np.float32)
        weights = np.empty((num_heads, block_size), np.float32)
        for logical_block in range(num_blocks):
            block = block_tables[seq, logical_block]
            tokens = min(block_size, context_len - logical_block * block_size)  # the last block may be part full
            for t in range(tokens):  # scores of this block's keys, for every query head (h reads KV head h // group)
                if (
                    logical_block + 1 < num_blocks
                ):  # ask now for the next block's row t: it arrives as this one computes
                    for offset in range(0, row_bytes, LINE_BYTES):
                        prefetch_row(k_cache, block_tables[seq, logical_block + 1], t, offset)
                        prefetch_row(v_cache, block_tables[seq, logical_block + 1], t, offset)
                for h in range(num_heads):
                    s = np.float32(0.0)
                    for d in range(head_dim):
                        s += q[seq, h, d] * widen(k_cache[block, t, h // group, d])
                    weights[h, t] = s * scale
            for h in range(num_heads):  # online softmax: rescale what came before to the new max
                new_max = running_max[h]
                for t in range(tokens):
                    new_max = max(new_max, weights[h, t])
                correction = exp_neg(running_max[h] - new_max)
                block_sum = np.float32(0.0)
                for t in range(tokens):
                    weights[h, t] = exp_neg(weights[h, t] - new_max)
                    block_sum += weights[h, t]
                running_sum[h] = running_sum[h] * correction + block_sum
                for d in range(head_dim):
                    acc[h, d] *= correction
                running_max[h] = new_max
            for t in range(tokens):  # the values, weighted: each token's row read once for every head
                for h in range(num_heads):
                    for d in range(head_dim):
                        acc[h, d] += weights[h, t] * widen(v_cache[block, t, h // group, d])
        for h in range(num_heads):
            for d in range(head_dim):
                out[seq, h, d] = acc[h, d] / running_sum[h]


def prange(n: int) -> range:
    """The programs' loop: a plain range in Python; compiled, numba's prange runs them on the step's cores."""
    return range(n)


def numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


_LAUNCH = threading.Lock()  # the workqueue layer takes one launch at a time: callers from several threads queue


@functools.cache
def _compiled() -> Callable[..., None]:
    """The kernel compiled by numba, its programs in parallel (on first use; cached on disk by numba after that).
    numba is imported here, not with the engine: it takes a moment, and only the CPU's decode steps need it.

    Parallel on numba's "workqueue" threads, which sleep between calls. Its OpenMP layer was measured faster
    on a quiet machine (``benchmarks/bench_batch_throughput``, float32, batch 32, AMD Zen 4, 2 threads: a
    step of 161 ms against 250, as its threads meet torch's spinning ones between products), but an
    OpenMP pool spins after each call: with a second busy process on 2 cores, lesson 08 took 282 s against
    32 s alone. A pool that sleeps is the one every machine can bear. ``in_place_decode`` times the kernel
    after a torch product, as a step runs it, against the gather. A NUMBA_THREADING_LAYER the user set wins.
    """
    import numba

    if not os.environ.get("NUMBA_THREADING_LAYER"):
        numba.config.THREADING_LAYER = "workqueue"
    return numba.njit(numba_kernel(), parallel=True, nogil=True, cache=True, fastmath=FASTMATH)


@functools.cache
def numba_kernel() -> types.FunctionType:
    """``_kernel`` as numba compiles it: its helpers' numba versions registered (once), ``prange`` numba's."""
    import numba

    numba.extending.overload(widen)(compiled_widen())
    numba.extending.overload(prefetch_row)(compiled_prefetch_row())
    fast_exp = numba.njit(exp_neg, inline="always", fastmath=FASTMATH)
    return types.FunctionType(_kernel.__code__, {**globals(), "prange": numba.prange, "exp_neg": fast_exp}, "_kernel")


def cpu_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q (B, num_heads, D) over one layer's pool (num_blocks, block_size, kv_heads, D) -> (B, num_heads, D).

    Float32 or bfloat16 CPU tensors; the pool is read where it lies (a view of it, no copy), a bfloat16 one
    through its bits. It computes in float32 and rounds the output to the query's dtype once. Its programs run
    on as many threads as torch's step has (``torch.get_num_threads()``), never more.
    """
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or q.device.type != "cpu":
        raise ValueError(f"the in-place CPU kernel reads {DTYPES} on the CPU, got {q.dtype} on {q.device}")
    import numba

    out = torch.empty(q.shape, dtype=torch.float32)
    pools = (
        (k_cache, v_cache) if k_cache.dtype == torch.float32 else (k_cache.view(torch.int16), v_cache.view(torch.int16))
    )
    kernel = _compiled()
    with _LAUNCH:
        numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
        kernel(
            q.float().contiguous().numpy(),
            pools[0].numpy(),
            pools[1].numpy(),
            block_tables.numpy(),
            context_lens.numpy(),
            out.numpy(),
            np.float32(scale),
        )
    return out.to(q.dtype)


TIMED_BATCHES = (32, 24, 16, 12, 8, 4, 2, 1)  # decode batches timed, largest first, down to the first the gather wins


@functools.cache
def in_place_decode(dtype: torch.dtype) -> tuple[int, str]:
    """The smallest decode batch that takes the in-place kernel here for this dtype (0: none does), and why:
    where it runs (``in_place_runs``) and measured faster than the gather, at each batch size (once per process).
    A call costs a launch of numba's threads, which one or two sequences may not repay."""
    ok, why = in_place_runs(dtype)
    if not ok:
        return 0, why
    form, why = timing.pick(_time_against_gather(dtype, TIMED_BATCHES[0]), textbook="gather")
    why = why.replace("the textbook form", "the gather") + f" on {TIMED_BATCHES[0]} sequences of 128-512 tokens"
    if form == "gather":
        return 0, f"{SLOWER_HERE}, so decode gathers the blocks first: {why}"
    smallest, below = TIMED_BATCHES[0], "every batch size timed takes it"
    for batch in TIMED_BATCHES[1:]:
        seconds = _time_against_gather(dtype, batch)
        if timing.pick(seconds, textbook="gather")[0] == "gather":
            speed = seconds["gather"] / seconds["in place"]
            below = f"smaller batches gather (at {batch}: the kernel {speed:.2f}x the gather's speed, measured)"
            break
        smallest = batch
    import numba

    return smallest, (
        f"numba kernel walking the block table on its {numba.threading_layer()} threads, equal to the "
        f"gather reference, {why}; decode batches of {smallest} or more take it, {below}"
    )


@functools.cache
def in_place_runs(dtype: torch.dtype) -> tuple[bool, str]:
    """Whether the in-place kernel runs here for this dtype, and why: compiled and tried once on a small case."""
    if not numba_installed():
        return False, "numba is not installed, so decode gathers each sequence's blocks into a copy first"
    if dtype not in DTYPES:
        name = str(dtype).removeprefix("torch.")
        return False, f"the in-place kernel reads no {name} pool, so decode gathers the blocks first"
    from kvcourse.kernels.attention.paged import paged_decode_attention

    gen = torch.Generator().manual_seed(0)
    pool_k, pool_v = (torch.randn(7, 4, 2, 8, generator=gen).to(dtype) for _ in range(2))  # 7 blocks of 4, 2 KV heads
    q = torch.randn(2, 6, 8, generator=gen).to(dtype)  # 2 sequences, 3 query heads per KV head, D 8
    tables = torch.tensor([[5, 1, 3], [0, 6, 0]])
    lens = torch.tensor([10, 5])
    try:
        got = cpu_paged_decode(q, pool_k, pool_v, tables, lens, 8**-0.5)
    except Exception as err:  # numba failing to compile on this machine: say so, use the reference
        return False, f"numba could not compile the kernel here ({type(err).__name__}: {str(err).splitlines()[0]})"
    want = paged_decode_attention(q.float(), pool_k.float(), pool_v.float(), tables, lens, 8**-0.5).to(dtype)
    if not torch.allclose(got, want, rtol=0, atol=1e-5 if dtype == torch.float32 else 1e-2):  # bf16: output rounding
        return False, "the compiled kernel disagreed with the gather reference on this CPU"
    return True, "compiled and equal to the gather reference on a small case"


TIMING_LAYERS = 4  # layers' pools the choice walks per call, so K/V come from memory as in a step, not from a cache


def _time_against_gather(dtype: torch.dtype, batch: int) -> dict[str, float]:
    """Seconds of decode attention over ``TIMING_LAYERS`` layers by each kernel, each layer after one of the MLP's
    matrix products (so the kernel meets torch's threads as a step has them): ``batch`` sequences of 128-512 tokens
    in blocks of 16 scattered over each layer's pool, SmolLM2's heads (9 query heads on 3 KV heads of 64),
    on the threads torch has now. Each layer has its own pool (16 MB of K/V): a step reads 30 of them, more
    than any cache holds, and so does this; timed on one small pool, the gather's copy stayed in the cache and
    the choice went either way from run to run."""
    from kvcourse.kernels.attention.paged import paged_decode_attention

    gen = torch.Generator().manual_seed(1)
    lens = torch.randint(128, 513, (batch,), generator=gen)
    num_blocks = [(int(n) + 15) // 16 for n in lens]
    order = torch.randperm(sum(num_blocks), generator=gen)  # blocks scattered over the pool, as a busy engine has them
    tables = torch.zeros(batch, max(num_blocks), dtype=torch.long)
    for seq, start in enumerate(np.cumsum([0, *num_blocks[:-1]])):
        tables[seq, : num_blocks[seq]] = order[start : start + num_blocks[seq]]
    pool = torch.randn(2, sum(num_blocks), 16, 3, 64, generator=gen).to(dtype)
    layers = [pool.clone() for _ in range(TIMING_LAYERS)]
    q = torch.randn(batch, 9, 64, generator=gen).to(dtype)
    x, w = torch.randn(batch, 576, generator=gen).to(dtype), torch.randn(1536, 576, generator=gen).to(dtype)

    def step(attend: Callable[..., torch.Tensor]) -> None:
        for k_v in layers:  # as in a decode step: torch's threads have just run a product
            torch.nn.functional.linear(x, w)
            attend(q, k_v[0], k_v[1], tables, lens, 0.125)

    calls = {
        "gather": functools.partial(step, paged_decode_attention),
        "in place": functools.partial(step, cpu_paged_decode),
    }
    with torch.inference_mode():
        return timing.time_calls(calls, rounds=3)


def paged_decode_path(dtype: torch.dtype, device: torch.device | str = "cpu") -> FastPath:
    """The in-place decode kernel as a line of ``kvcourse doctor``'s fast paths: on or off here, and why."""
    from kvcourse.kernels.model.cpu_fast import FAST_PATHS_ENV, fast_paths_mode

    name = "paged decode in place"
    if torch.device(device).type != "cpu":
        return FastPath(name, False, f"on {torch.device(device).type} the engine takes the Triton kernel")
    if fast_paths_mode() == "off":
        return FastPath(name, False, f"{FAST_PATHS_ENV}=0: decode gathers each sequence's blocks first")
    smallest, why = in_place_decode(dtype)
    return FastPath(name, smallest > 0, why)
