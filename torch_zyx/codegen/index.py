"""Where a lane of a kernel value is read: per-axis index expressions and/or the flat index.

Shared by the lowering modules (``lower``, ``lower_rows``, ``lower_loops``).
"""

from __future__ import annotations

from ..lazy import graph as g
from . import symbolic as sym
from .symbolic import Expr


class Index:
    """Where one lane of a node is read: per-axis index expressions and/or the flat index."""

    __slots__ = ("_dims", "_linear", "shape", "valid")

    def __init__(self, shape, dims=None, linear=None, valid: Expr = sym.TRUE):
        self.shape, self._dims, self._linear, self.valid = tuple(shape), dims, linear, valid

    @property
    def dims(self) -> tuple[Expr, ...]:
        if self._dims is None:
            strides = g.contiguous_strides(self.shape)
            self._dims = tuple(sym.mod(sym.div(self._linear, st), sz) if sz > 1 else sym.Num(0)
                               for st, sz in zip(strides, self.shape))
        return self._dims

    @property
    def linear(self) -> Expr:
        if self._linear is None:
            total: Expr = sym.Num(0)
            for d, st in zip(self.dims, g.contiguous_strides(self.shape)):
                total = sym.add(total, sym.mul(d, st))
            self._linear = total
        return self._linear

    def key(self) -> tuple:
        return (tuple(d.key for d in self.dims), self.valid.key)
