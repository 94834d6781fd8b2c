"""The CPU kernel's two scalar helpers (kernels/attention/cpu_scalars.py), in Python and as numba compiles them:
``widen`` is exact for every bfloat16 there is, ``exp_neg`` is as close to e**x as its docstring says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvcourse.kernels.attention import cpu_paged, cpu_scalars

needs_numba = pytest.mark.skipif(not cpu_paged.numba_installed(), reason="numba is not installed")


def _compiled_loops():
    import numba

    cpu_paged._compiled()  # registers widen's numba version, as the kernel does
    exp_neg = numba.njit(cpu_scalars.exp_neg, fastmath=cpu_paged.FASTMATH)

    @numba.njit
    def widen_all(bits):
        out = np.empty(bits.size, np.float32)
        for i in range(bits.size):
            out[i] = cpu_scalars.widen(bits[i])
        return out

    @numba.njit(fastmath=cpu_paged.FASTMATH)
    def exp_all(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = exp_neg(x[i])
        return out

    return widen_all, exp_all


def test_widen_in_python_is_torchs_bfloat16_to_float32():
    for value in (1.5, -2.25, 0.0, -0.0, 3.0e38, 1.0e-38, float("inf")):
        bits = torch.tensor([value], dtype=torch.bfloat16).view(torch.int16).numpy()[0]
        assert cpu_scalars.widen(bits) == torch.tensor([value], dtype=torch.bfloat16).float().item()
    assert cpu_scalars.widen(np.float32(2.5)) == np.float32(2.5)


@needs_numba
def test_compiled_widen_is_exact_for_every_bfloat16():
    widen_all, _ = _compiled_loops()
    bits = np.arange(-(2**15), 2**15, dtype=np.int64).astype(np.int16)
    want = torch.from_numpy(bits.copy()).view(torch.bfloat16).float().numpy()
    got = widen_all(bits)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{(~same).sum()} of 65,536 bit patterns differ"


@pytest.mark.parametrize("low,rel", [(-1.0, 2e-7), (-10.0, 1e-6), (-87.0, 5e-6)])
def test_exp_neg_in_python_and_compiled_is_close_to_exp(low, rel):
    x = np.linspace(low, 0.0, 20_001, dtype=np.float32)
    truth = np.exp(x.astype(np.float64))
    python = np.array([cpu_scalars.exp_neg(v) for v in x[::50]], np.float64)
    assert np.max(np.abs(python - truth[::50]) / truth[::50]) < rel
    if cpu_paged.numba_installed():
        _, exp_all = _compiled_loops()
        compiled = exp_all(x).astype(np.float64)
        assert np.max(np.abs(compiled - truth) / truth) < rel


def test_exp_neg_far_below_zero_is_the_smallest_normal_float():
    smallest = np.float32(2.0**-126)
    for x in (-88.0, -1.0e4, -3.0e38):
        assert abs(cpu_scalars.exp_neg(np.float32(x)) / smallest - 1) < 1e-5
    assert cpu_scalars.exp_neg(np.float32(0.0)) == np.float32(1.0)
