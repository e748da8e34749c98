"""A software prefetch for numba kernels that gather rows at random (`prefetch(a, i, j)`).

Layer-wise aggregation reads one source row per edge, at random, from tables of hundreds of
MB: each read waits on memory (~80-100 ns) and the CPU cannot guess the next row's address.
Asking for the row a few edges ahead while summing the current one overlaps those waits
(measured by `bench.layerwise_kernel`). `prefetch(a, i, j)` hints the cache line holding
`a[i, j]` of a C-contiguous 2-D array (LLVM's `llvm.prefetch`: read, high locality, data); it
never faults, so an address past the end is harmless, but callers keep to valid rows anyway.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ, _KEEP, _DATA = 0, 3, 1  # llvm.prefetch(address, rw, locality, cache type)


@intrinsic
def prefetch(typingctx, array, row, col):  # pragma: no cover - compiled
    """Hint the cache line of `array[row, col]` (a 2-D array; integer indices)."""
    if not (isinstance(array, types.Array) and array.ndim == 2):
        return None
    sig = types.void(array, row, col)

    def codegen(context, builder, signature, args):
        aryty, rowty, colty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        index = [
            context.cast(builder, args[1], rowty, types.intp),
            context.cast(builder, args[2], colty, types.intp),
        ]
        address = cgutils.get_item_pointer(context, builder, aryty, ary, index, wraparound=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        flags = [ir.Constant(i32, v) for v in (_READ, _KEEP, _DATA)]
        builder.call(fn, [builder.bitcast(address, byte_ptr), *flags])
        return context.get_dummy_value()

    return sig, codegen
