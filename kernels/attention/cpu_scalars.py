"""Two scalar helpers the CPU paged kernel (cpu_paged.py) calls on every key and value it reads.

``widen`` turns a pool's value into float32. A float32 pool's value passes as it is. A bfloat16 pool
reaches numba as its raw 16 bits (numpy has no bfloat16 type), and bfloat16 is the top half of a
float32 (the same sign, the same 8 exponent bits, the first 7 mantissa bits), so the float32 is those
bits shifted up by 16 with zeros below: exact, no rounding.

``exp_neg`` is e**x for x <= 0, the only exponentials an online softmax takes (each score minus the
running maximum). The maths library's ``exp`` is a call numba cannot turn into vector instructions,
one score at a time; this is a few multiplications and adds it can: e**x = 2**(x log2 e), split into
a whole power of two n (placed straight into a float32's exponent bits) and a fraction f in
[-0.5, 0.5], whose 2**f a degree-6 polynomial gives (the coefficients of Cephes' exp2f, fitted on that
interval). Measured against float64's exp: within 1.4e-7 of the value for x in [-1, 0], as close as
numpy's float32 exp (1.9e-7); 5e-7 for x down to -10 and 4e-6 down to -87, where the rounding of
x log2 e grows with |x|, on weights that small beside the maximum's e**0 = 1 (e**-10 = 4.5e-5). Below
x = -87.3 it returns about 2**-126 (1e-38) instead of something smaller: beside 1 that is zero.

Each is plain Python (run, read and tested as such) and compiled by numba when the kernel is: ``widen``
through the version numba picks by the pool's type (``compiled_widen``). numba's cache on disk
follows the kernel's own file: after editing this one, touch cpu_paged.py so the kernel compiles anew.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

LOG2E = np.float32(1.4426950408889634)
LOWEST_X = np.float32(-126.0 / 1.4426950408889634)  # e**x = 2**-126, float32's smallest normal: below, about 0
# 2**f ~ sum of c_k f**k for f in [-0.5, 0.5], highest degree first (Cephes' exp2f; near (ln 2)**k / k!)
POWERS_OF_TWO = tuple(
    np.float32(c) for c in (1.5353362e-4, 1.3398874e-3, 9.6184374e-3, 5.5503325e-2, 2.4022648e-1, 6.9314720e-1, 1.0)
)


def widen(x: np.float32 | np.int16) -> np.float32:
    """A pool's value as float32: a float32 as it is, a bfloat16's 16 bits (read as int16) shifted up by 16."""
    if isinstance(x, np.floating):
        return np.float32(x)
    return np.uint32(np.uint32(np.uint16(x)) << np.uint32(16)).view(np.float32)


def compiled_widen() -> Callable:
    """numba's ``widen``, chosen by the pool's type (registered as widen's overload when the kernel compiles)."""
    import numba

    def as_it_is(x: object) -> object:  # numba matches these parameters to by_type's, annotation included
        return x

    def from_bits(x: object) -> object:  # x is an int16 here
        return np.uint32(np.uint32(np.uint16(x)) << 16).view(np.float32)  # type: ignore[arg-type]

    def by_type(x: object) -> Callable:
        return as_it_is if isinstance(x, numba.types.Float) else from_bits

    return by_type


def exp_neg(x: np.float32) -> np.float32:
    """e**x for x <= 0 in float32, by a power of two and a polynomial (see the module's docstring)."""
    y = max(np.float32(x), LOWEST_X) * LOG2E
    n = np.float32(np.floor(y + np.float32(0.5)))
    f = y - n
    c6, c5, c4, c3, c2, c1, c0 = POWERS_OF_TWO
    p = ((((((c6 * f + c5) * f + c4) * f + c3) * f + c2) * f + c1) * f) + c0
    return p * np.uint32(np.uint32(np.int32(n) + np.int32(127)) << np.uint32(23)).view(np.float32)
