"""The in-place CPU paged decode kernel (cpu_paged.py) equals the gather reference, and the engine chooses it
only where it runs: every block size, ragged contexts, GQA / MQA / MHA head groupings, a shuffled pool;
in float32 and bfloat16 (read through its bits); tokens identical through the engine; a float16 pool, numba missing
and the fast paths off all take the reference."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

from kvcourse.kernels.attention import cpu_paged
from kvcourse.kernels.attention.paged import paged_decode_attention
from kvcourse.kernels.attention.paged_backend import decode_kernel
from kvcourse.kernels.model import cpu_fast
from kvcourse.kernels.model.cpu_fast import FastPathFallback

needs_kernel = pytest.mark.skipif(
    not cpu_paged.in_place_runs(torch.float32)[0], reason=cpu_paged.in_place_runs(torch.float32)[1]
)


def shuffled_pool(context_lens, block_size, num_kv_heads, head_dim, seed):
    """A pool whose blocks are handed out in a random order, padded tables, and the blocks never used left random."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(need) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.zeros(len(context_lens), max(need), dtype=torch.long)
    for row, n in enumerate(need):
        tables[row, :n] = torch.tensor([order.pop() for _ in range(n)])
    k = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    v = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    return k, v, tables, torch.tensor(context_lens)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size", [1, 2, 8, 16, 32, 64])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(9, 3), (8, 1), (4, 4)], ids=["gqa", "mqa", "mha"])
def test_in_place_kernel_equals_the_gather_reference(block_size, num_heads, num_kv_heads, dtype):
    context_lens = [1, block_size, block_size + 1, 3 * block_size - 1, 97, 130]  # one token, full, ragged, long
    k, v, tables, lens = shuffled_pool(context_lens, block_size, num_kv_heads, 64, seed=block_size)
    q = torch.randn(len(context_lens), num_heads, 64, generator=torch.Generator().manual_seed(1))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    got = cpu_paged.cpu_paged_decode(q, k, v, tables, lens, 64**-0.5)
    assert got.dtype == dtype
    # the reference on the same values in float32, as the kernel computes; bf16 then rounds its output once
    want = paged_decode_attention(q.float(), k.float(), v.float(), tables, lens, 64**-0.5)
    rtol = 0 if dtype == torch.float32 else 2**-8  # at most one bfloat16 rounding step apart
    torch.testing.assert_close(got.float(), want, rtol=rtol, atol=1e-5)


@needs_kernel
def test_the_kernel_reads_only_the_blocks_its_table_names():
    k, v, tables, lens = shuffled_pool([20, 7], 8, 3, 16, seed=3)
    q = torch.randn(2, 9, 16)
    before = cpu_paged.cpu_paged_decode(q, k, v, tables, lens, 0.25)
    used = set(tables[0, :3].tolist()) | {int(tables[1, 0])}
    for block in set(range(k.shape[0])) - used:  # every block no table reaches (padding included) set to NaN
        k[block], v[block] = float("nan"), float("nan")
    torch.testing.assert_close(cpu_paged.cpu_paged_decode(q, k, v, tables, lens, 0.25), before, rtol=0, atol=0)


def test_the_engine_takes_the_reference_where_the_kernel_cannot_run(monkeypatch):
    cpu = torch.device("cpu")
    ok, why = cpu_paged.in_place_decode(torch.float16)
    assert not ok and "float16" in why and decode_kernel(cpu, torch.float16) == "gather"
    assert decode_kernel(cpu, torch.float32, in_place=False) == "gather"  # the model's fast paths are off
    assert decode_kernel(cpu, torch.float32, use_triton=True) == "triton"
    monkeypatch.setattr(cpu_paged, "numba_installed", lambda: False)
    cpu_paged.in_place_decode.cache_clear()
    cpu_paged.in_place_runs.cache_clear()
    try:
        ok, why = cpu_paged.in_place_decode(torch.float32)
        assert not ok and "numba is not installed" in why
        cpu_fast._say_once.cache_clear()
        with pytest.warns(FastPathFallback, match="numba is not installed"):  # said once, as a fast path's fallback
            assert decode_kernel(cpu, torch.float32) == "gather"
    finally:
        monkeypatch.undo()
        cpu_paged.in_place_decode.cache_clear()
        cpu_paged.in_place_runs.cache_clear()


@needs_kernel
def test_where_the_gather_measures_faster_it_runs_and_the_doctor_says_so(monkeypatch):
    """A machine where the kernel loses: the gather runs, with no warning (a choice, not a missing part)."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(cpu_paged, "_time_against_gather", lambda dtype, batch: {"gather": 1.0, "in place": 1.2})
    monkeypatch.delenv("KVCOURSE_FAST_PATHS", raising=False)
    cpu_paged.in_place_decode.cache_clear()
    try:
        ok, why = cpu_paged.in_place_decode(torch.float32)
        assert not ok and why.startswith(cpu_paged.SLOWER_HERE) and "in place 0.83x" in why
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert decode_kernel(cpu, torch.float32) == "gather"
        path = cpu_paged.paged_decode_path(torch.float32)
        assert not path.on and cpu_paged.SLOWER_HERE in str(path)
        monkeypatch.setattr(cpu_paged, "_time_against_gather", lambda dtype, batch: {"gather": 1.5, "in place": 1.0})
        cpu_paged.in_place_decode.cache_clear()
        assert decode_kernel(cpu, torch.float32) == "in place"
        assert cpu_paged.in_place_decode(torch.float32)[0] == 1
        assert "1.50x faster than the gather" in cpu_paged.in_place_decode(torch.float32)[1]
    finally:
        monkeypatch.undo()
        cpu_paged.in_place_decode.cache_clear()


@needs_kernel
def test_the_kernel_uses_the_steps_threads_and_gives_the_same_answer_on_each(monkeypatch):
    """The programs run in parallel on torch's thread count: 1 or 2 threads, bit for bit the same output."""
    from kvcourse.kernels.engine.threads import thread_policy

    gen = torch.Generator().manual_seed(3)
    k, v = (torch.randn(40, 8, 2, 16, generator=gen) for _ in range(2))
    q = torch.randn(5, 6, 16, generator=gen)
    tables = torch.randperm(40, generator=gen)[:35].view(5, 7)
    lens = torch.tensor([56, 1, 30, 9, 44])
    outs = []
    for threads in (1, 2):
        with thread_policy(threads):
            outs.append(cpu_paged.cpu_paged_decode(q, k, v, tables, lens, 0.25))
    assert torch.equal(outs[0], outs[1]), "each program is one sequence: no sum crosses threads"
    torch.testing.assert_close(outs[0], paged_decode_attention(q, k, v, tables, lens, 0.25), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_engine_tokens_are_the_same_on_the_in_place_kernel_and_on_the_gather(tiny_hf, fast_paths_on, monkeypatch):
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, Transformer

    """As if the kernel were faster from 2 decoding sequences up: 3 sequences decode on it, the fourth (admitted
    when they finish) decodes alone on the gather, and every token is the textbook model's."""
    from kvcourse.kernels.attention import paged_backend

    def as_measured(dtype: torch.dtype, batch: int) -> dict[str, float]:
        return {"gather": 2.0, "in place": 1.0} if batch >= 2 else {"gather": 1.0, "in place": 2.0}

    monkeypatch.setattr(cpu_paged, "_time_against_gather", as_measured)
    cpu_paged.in_place_decode.cache_clear()
    smallest, why = cpu_paged.in_place_decode(torch.float32)
    assert smallest == 2 and "batches of 2 or more take it, smaller batches gather (at 1: the kernel 0.50x" in why
    batches: dict[str, list[int]] = {"in place": [], "gather": []}

    def spy(name: str, kernel: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return lambda q, *args: batches[name].append(q.shape[0]) or kernel(q, *args)

    monkeypatch.setattr(cpu_paged, "cpu_paged_decode", spy("in place", cpu_paged.cpu_paged_decode))
    monkeypatch.setattr(paged_backend, "paged_decode_attention", spy("gather", paged_backend.paged_decode_attention))
    prompts = [[5, 9, 2, 7, 1, 3, 8][:n] for n in (3, 7, 5, 4)]
    params = SamplingParams(max_new_tokens=12, stop_on_eos=False)
    tokens = {}
    for fast in ("auto", "off"):
        model = Transformer.from_hf(tiny_hf).accelerate(fast)
        engine = LLMEngine(model, EngineConfig(max_num_seqs=3, num_blocks=24, block_size=4))
        assert engine.model_runner.decode_kernel == ("in place" if fast == "auto" else "gather")
        assert engine.model_runner.in_place_from == (2 if fast == "auto" else 1)
        tokens[fast] = [out.tokens for out in engine.generate(prompts, params)]
        if fast == "auto":
            assert set(batches["in place"]) == {3} and 1 in batches["gather"], batches
    cpu_paged.in_place_decode.cache_clear()
    assert tokens["auto"] == tokens["off"]


@needs_kernel
def test_in_bfloat16_the_engine_on_the_kernel_tracks_float32_as_far_as_the_gather(tiny_hf):
    """A bfloat16 pool read through its bits: the kernel computes in float32 and rounds once, the gather's SDPA
    computes in bfloat16, so on the tiny random model a near tie may break differently. Against the float32
    model's tokens, each sequence on the kernel agrees for at least 3 tokens and at least as long as the gather."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, Transformer

    prompts = [[5, 9, 2, 7, 1, 3, 8][:n] for n in (3, 7, 5)]

    def served(dtype: torch.dtype, kernel: str) -> list[list[int]]:
        engine = LLMEngine(Transformer.from_hf(tiny_hf).to(dtype), EngineConfig(max_num_seqs=3, num_blocks=24))
        engine.model_runner.decode_kernel = kernel  # the textbook model: only the decode kernel differs
        engine.model_runner.in_place_from = 1  # forced for every batch, however small
        return [out.tokens for out in engine.generate(prompts, SamplingParams(max_new_tokens=12, stop_on_eos=False))]

    def agreed(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))

    fp32 = served(torch.float32, "gather")
    kernel, gather = served(torch.bfloat16, "in place"), served(torch.bfloat16, "gather")
    for want, mine, theirs in zip(fp32, kernel, gather, strict=True):
        assert agreed(want, mine) >= max(3, agreed(want, theirs)), (want, mine, theirs)


LAYER_SCRIPT = """
import torch
from kvcourse.kernels.attention import cpu_paged
from kvcourse.kernels.attention.paged import paged_decode_attention
from kvcourse.kernels.engine.threads import thread_policy
import numba
gen = torch.Generator().manual_seed(4)
k, v = (torch.randn(30, 16, 3, 64, generator=gen) for _ in range(2))
q = torch.randn(4, 9, 64, generator=gen)
tables = torch.randperm(30, generator=gen)[:28].view(4, 7)
lens = torch.tensor([100, 17, 64, 111])
with thread_policy(2):
    got = cpu_paged.cpu_paged_decode(q, k, v, tables, lens, 0.125)
torch.testing.assert_close(got, paged_decode_attention(q, k, v, tables, lens, 0.125), rtol=1e-5, atol=1e-5)
print(numba.threading_layer())
print(cpu_paged.in_place_decode(torch.float32)[1])
"""


@needs_kernel
@pytest.mark.parametrize("layer", ["omp", "workqueue"])
def test_each_threading_layer_runs_the_kernel_and_is_named(layer):
    """The kernel's programs on numba's OpenMP threads (preferred) or its workqueue (where OpenMP does not load),
    forced in a fresh process (numba loads one layer per process): equal to the gather; the doctor's reason
    names the layer whenever the kernel is chosen."""
    import os
    import subprocess
    import sys

    if layer == "omp":
        try:
            import numba.np.ufunc.omppool  # noqa: F401
        except ImportError as err:
            pytest.skip(f"numba's OpenMP layer does not load here: {err}")
    env = {**os.environ, "NUMBA_THREADING_LAYER": layer}
    run = subprocess.run([sys.executable, "-c", LAYER_SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    loaded, why = run.stdout.splitlines()[-2:]
    assert loaded == layer
    assert why.startswith(cpu_paged.SLOWER_HERE) or f"on its {layer} threads" in why


@pytest.mark.skipif(not cpu_paged.numba_installed(), reason="numba is not installed")
def test_where_numba_is_installed_the_kernel_compiles_in_both_dtypes_with_its_prefetch():
    """A kernel that stopped compiling would only skip the tests above (the engine would quietly gather), so this
    one fails instead; and the next block's prefetch (cpu_prefetch.py) is in the machine code, not compiled away."""
    import platform

    for dtype in cpu_paged.DTYPES:
        ok, why = cpu_paged.in_place_runs(dtype)
        assert ok, why
    import numba

    serial = numba.njit(cpu_paged.numba_kernel(), fastmath=cpu_paged.FASTMATH)  # one program at a time, not cached
    k, v, tables, lens = shuffled_pool([20, 7], 4, 2, 8, seed=0)
    out = torch.empty(2, 6, 8)
    serial(torch.randn(2, 6, 8).numpy(), k.numpy(), v.numpy(), tables.numpy(), lens.numpy(), out.numpy(), 0.3)
    code = serial.inspect_asm(serial.signatures[0])
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert "prefetcht1" in code  # locality 2: into L2, as cpu_prefetch.KEEP_IN_L2 asks
