"""The Triton paged decode kernel matches the PyTorch reference, run in the interpreter on CPU (lesson 10).

TRITON_INTERPRET must be set before triton is first imported, and other test files may have
imported it already, so the comparison runs in a fresh subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent("""
    import torch
    from kvcourse.kernels.attention.paged import paged_decode_attention
    from kvcourse.kernels.attention.triton_paged import triton_paged_decode

    torch.manual_seed(0)
    cases = [  # (heads, kv_heads, head_dim, block_size, context lens, dtype)
        (9, 3, 16, 4, [1, 5, 17], torch.float32),   # group of 3: padded to 4 and masked
        (4, 4, 12, 8, [8, 3], torch.float32),        # head_dim 12: padded to 16; plain MHA
        (6, 1, 8, 16, [40], torch.bfloat16),         # MQA, bf16 pool: loaded and summed in fp32
    ]
    for heads, kv_heads, head_dim, block_size, lens, dtype in cases:
        num_blocks = 16
        k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim).to(dtype)
        v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim).to(dtype)
        perm = torch.randperm(num_blocks).tolist()
        width = max((n + block_size - 1) // block_size for n in lens)
        tables = torch.zeros(len(lens), width, dtype=torch.long)
        for i, n in enumerate(lens):
            for j in range((n + block_size - 1) // block_size):
                tables[i, j] = perm.pop()
        context = torch.tensor(lens)
        q = torch.randn(len(lens), heads, head_dim).to(dtype)
        scale = head_dim ** -0.5
        ref = paged_decode_attention(q.float(), k_cache.float(), v_cache.float(), tables, context, scale)
        out = triton_paged_decode(q, k_cache, v_cache, tables, context, scale, tile=16)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
    print("OK", len(cases))
""")


def test_triton_decode_kernel_matches_reference_in_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK 3" in proc.stdout


@pytest.mark.gpu
def test_triton_decode_kernel_on_cuda():
    """Every block size and dtype on SmolLM2's layout, at the GPU check's tolerances (benchmarks/gpu/kernel.py)."""
    from benchmarks.gpu.kernel import check_kernel
    from benchmarks.gpu.plan import CheckPlan

    rows = check_kernel(CheckPlan.quick(), "cuda")
    bad = [row for row in rows if not row["ok"]]
    assert not bad, bad
