"""Lowering of scatter kernels: a ``SCATTER`` store (the kernelizer's ``("scatter", (axis,
combine), index, target shape)`` view) as loops that combine (add, mul, max, min) or write
each entry where its index points.

Part of stage 4 (lowering; the ``Lowerer`` mixes this in). The kernel walks the entries along
the scattered axis in order, and inside each step the positions off that axis in parallel: the
runtime splits those (the outer RANGE over 'start'/'end') across threads or work items, a
block of neighbouring positions per outer iteration (a cache line of them: two threads never
write one line). Every target element is then updated by one thread only, one entry after the
other in axis order: no atomics, and the same additions in the same order, with the same
rounding, as CPU torch's loops (half values too: each addition rounds to the element's dtype),
or of several writes the last one kept, as there.
"""

from __future__ import annotations

import math

from . import symbolic as sym
from .index import Index

# Bytes of neighbouring targets one outer iteration updates (a cache line).
_BLOCK_BYTES = 64


class ScatterLowering:
    def lower_scatter(self, store) -> tuple[int, int]:
        """Emit the loops of a scatter store; returns (outer iterations, work estimate)."""
        _kind, (axis, combine), index, target_shape = store.view
        src = store.value
        shape = src.shape
        dtype = src.dtype
        others = [a for a in range(len(shape)) if a != axis]
        other_shape = tuple(shape[a] for a in others)
        columns = math.prod(other_shape)
        block = _block(columns, dtype.itemsize)
        slot = self.kernel.slots.index(("tmp", store.target))
        buf = self.add("BUF", dtype, (), slot)
        step = self.new_var(shape[axis])
        # (no vectorizing along the entries: two of them may update one element)
        along = self.open_range(step, 0, shape[axis], vectorize=False)
        outer = sym.Var("gidx", 0, max(columns // block - 1, 0))
        rng = self.open_range(outer, "start", "end")
        inner_rng = None
        column: sym.Expr = outer
        if block > 1:
            inner = self.new_var(block)
            inner_rng = self.open_range(inner, 0, block)
            column = sym.add(sym.mul(outer, block), inner)
        dims: list = [None] * len(shape)
        for a, d in zip(others, Index(other_shape, linear=column).dims):
            dims[a] = d
        dims[axis] = step
        lane = Index(shape, tuple(dims))
        (position,) = self.emit(index, [lane])
        (value,) = self.emit(src, [lane])
        dims[axis] = self.data_position(position, target_shape[axis])
        at = self.index(Index(target_shape, tuple(dims)).linear)
        if combine != "set":  # add, mul, max, min: the binary op of that name
            old = self.add("LOAD", dtype, (buf, at), pure=False)
            value = self.add("ALU", dtype, (old, value), combine, pure=False)
        self.add("STORE", None, (buf, at, value), pure=False)
        if inner_rng is not None:
            self.close_range(inner_rng)
        self.close_range(rng)
        self.close_range(along)
        return columns // block, math.prod(shape)


def _block(columns: int, itemsize: int) -> int:
    """Neighbouring positions per outer iteration: a power of two dividing ``columns``, at most
    a cache line of elements."""
    block = max(1, _BLOCK_BYTES // itemsize)
    while columns % block:
        block //= 2
    return block
