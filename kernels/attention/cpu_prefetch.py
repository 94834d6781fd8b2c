"""A hint the CPU paged kernel (cpu_paged.py) gives while it computes: "the next block's lines, please".

A CPU's own prefetcher sees a stream of addresses and fetches ahead of it, but only within a 4 KiB
page: where the next address lies on another page, it waits for a miss to learn where the stream
went. A paged KV cache is exactly that case. One block of SmolLM2's keys (16 tokens x 3 KV heads x 64
values) is 12 KiB in float32, three pages, and the next block of the same sequence lies anywhere in
the pool. Without help, every block starts with a wait on memory (about 100 ns a line), and at 32
sequences of a few hundred tokens that wait was most of the kernel's time (AMD Zen 4, one thread: a
layer took 2.2 ms with the keys and values in memory and 0.9 ms with them in the caches).

The block table already says where the next block lies, so the kernel asks for it while it still
computes on the current one: ``prefetch_row(pool, block, t, offset)`` is the x86 ``prefetch``
instruction (LLVM's ``llvm.prefetch``; ARM has its own) for the cache line at byte ``offset`` of row
``pool[block, t]``. It is a hint: it changes no value, never faults (an address outside the pool is
ignored), and costs an instruction. GPUs do the same thing another way: the Triton kernel beside this one
lets Triton's compiler issue the next tile's loads early (software pipelining) while the current
tile computes.

In Python, ``prefetch_row`` does nothing, so the kernel still runs, reads and tests as plain Python;
``compiled_prefetch_row`` is the version numba compiles into the kernel.
"""

from __future__ import annotations

from collections.abc import Callable

LINE_BYTES = 64  # a cache line on x86 and on most ARM cores: the unit a prefetch brings in
READ, KEEP_IN_L2 = 0, 2  # llvm.prefetch's arguments: a read, and locality 2 (L2 and below; L1 is for what runs now)


def prefetch_row(rows: object, block: int, t: int, offset: int) -> None:
    """Ask for the cache line at byte ``offset`` of ``rows[block, t]``: compiled, a prefetch; in Python, nothing."""
    return None


def compiled_prefetch_row() -> Callable:
    """numba's ``prefetch_row`` (registered as its overload when the kernel compiles): one prefetch instruction."""
    import numba
    from llvmlite import ir
    from numba.core import cgutils

    @numba.extending.intrinsic
    def line_hint(typingctx, rows, block, t, offset):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            rows_type = signature.args[0]
            array = context.make_array(rows_type)(context, builder, args[0])
            index = [
                context.cast(builder, a, ty, numba.types.intp)
                for a, ty in zip(args[1:3], signature.args[1:3], strict=True)
            ]
            index += [context.get_constant(numba.types.intp, 0)] * (rows_type.ndim - 2)
            row = cgutils.get_item_pointer(context, builder, rows_type, array, index)  # &rows[block, t, 0, ...]
            byte = ir.IntType(8).as_pointer()
            at = builder.gep(
                builder.bitcast(row, byte), [context.cast(builder, args[3], signature.args[3], numba.types.intp)]
            )
            i32 = ir.IntType(32)
            hint = builder.module.declare_intrinsic(
                "llvm.prefetch", [at.type], ir.FunctionType(ir.VoidType(), [at.type, i32, i32, i32])
            )
            builder.call(hint, [at, i32(READ), i32(KEEP_IN_L2), i32(1)])  # the last 1: a data line, not code
            return context.get_dummy_value()

        return numba.types.void(rows, block, t, offset), codegen

    def by_type(rows: object, block: object, t: object, offset: object) -> Callable:
        def hint(rows: object, block: object, t: object, offset: object) -> None:  # by_type's parameters, as numba asks
            line_hint(rows, block, t, offset)

        return hint

    return by_type
