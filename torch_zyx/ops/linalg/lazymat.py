"""``Lz``: lazy graph nodes with arithmetic operators, and the matrix helpers (row/column
numbers, eye, triangles, diagonal, step numbers, argument checks) that the linear algebra
lowerings (dense.py, spectral.py) are written with, so their loops read as the formulas
they implement. Everything here only builds graph nodes.

Step numbers are data: a factorization's step ``j`` reads ``j`` from a (1, 1) int64 buffer
(``step``) and selects row/column ``j`` with a mask (``row_at``/``col_at``) instead of a slice
at a constant offset, so every step of the loop has the same kernels: one compilation serves
all n steps (a new kernel costs ~1 s on PoCL, a few hundred ms through LLVM).
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import from_cpu
from ..registry import broadcast, broadcast_shape
from .matmul import matmul_nodes


class Lz:
    """A lazy node with operators: ``+ - * / @``, comparisons by name (``lt``, ``eq``, ...),
    ``&``/``|``/``~`` on bool nodes. Python numbers become constants of the node's dtype and
    shapes broadcast NumPy-style, so ``(v / d).where(...)`` reads like the math."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> dtypes.DType:
        return self.node.dtype

    def _pair(self, other, reverse=False) -> tuple[Node, Node]:
        b = other.node if isinstance(other, Lz) else g.const(other, self.node.dtype, ())
        a = self.node
        if reverse:
            a, b = b, a
        return tuple(broadcast(a, b))

    def _bin(self, op: str, other, reverse=False) -> Lz:
        return Lz(g.binary(op, *self._pair(other, reverse)))

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        return self._bin("mul", o)

    def __rmul__(self, o):
        return self._bin("mul", o, True)

    def __truediv__(self, o):
        return self._bin("div", o)

    def __rtruediv__(self, o):
        return self._bin("div", o, True)

    def __neg__(self):
        return Lz(g.unary("neg", self.node))

    def __and__(self, o):
        return self._bin("and", o)

    def __or__(self, o):
        return self._bin("or", o)

    def __invert__(self):
        return Lz(g.unary("not", self.node))

    def lt(self, o):
        return self._bin("lt", o)

    def le(self, o):
        return self._bin("le", o)

    def gt(self, o):
        return self._bin("lt", o, True)

    def ge(self, o):
        return self._bin("le", o, True)

    def eq(self, o):
        return self._bin("eq", o)

    def ne(self, o):
        return self._bin("ne", o)

    def maximum(self, o):
        return self._bin("max", o)

    def minimum(self, o):
        return self._bin("min", o)

    def copysign(self, o):
        return self._bin("copysign", o)

    def unary(self, op: str) -> Lz:
        return Lz(g.unary(op, self.node))

    def sqrt(self):
        return self.unary("sqrt")

    def abs(self):
        return self.unary("abs")

    def log(self):
        return self.unary("log")

    def isnan(self):
        return self.unary("isnan")

    def cast(self, dtype: dtypes.DType) -> Lz:
        return Lz(g.cast(self.node, dtype))

    def reduce(self, op: str, axes) -> Lz:
        """Keepdim reduce (an empty axis gives the op's identity)."""
        axes = tuple(a % len(self.shape) for a in ((axes,) if isinstance(axes, int) else axes))
        if any(self.shape[a] == 0 for a in axes):
            identity = {"sum": 0, "prod": 1, "max": -float("inf"), "min": float("inf")}[op]
            shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
            return Lz(g.const(identity, self.dtype, shape))
        return Lz(g.reduce(op, self.node, axes))

    def sum(self, axes):
        return self.reduce("sum", axes)

    def max(self, axes):
        return self.reduce("max", axes)

    def min(self, axes):
        return self.reduce("min", axes)

    def __matmul__(self, o: Lz) -> Lz:
        a, b = self.node, o.node
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
        a = g.broadcast_to(a, batch + a.shape[-2:])
        b = g.broadcast_to(b, batch + b.shape[-2:])
        return Lz(matmul_nodes(a, b))

    @property
    def mT(self) -> Lz:
        nd = len(self.shape)
        return Lz(g.permute(self.node, tuple(range(nd - 2)) + (nd - 1, nd - 2)))

    def rows(self, start: int, stop: int) -> Lz:
        """Rows ``start:stop`` of the matrices (axis -2)."""
        return self._window(-2, start, stop)

    def cols(self, start: int, stop: int) -> Lz:
        """Columns ``start:stop`` (axis -1)."""
        return self._window(-1, start, stop)

    def _window(self, axis: int, start: int, stop: int) -> Lz:
        axis %= len(self.shape)
        bounds = tuple((start, stop) if i == axis else (0, s) for i, s in enumerate(self.shape))
        return Lz(g.shrink(self.node, bounds))

    def row_at(self, j: Lz) -> Lz:
        """Row ``j`` (a step number, ``step``) as a (..., 1, n) row: a masked sum, exact."""
        return where(index(self.shape[-2], 0).eq(j), self, 0).sum(-2)

    def col_at(self, j: Lz) -> Lz:
        """Column ``j`` (a step number) as a (..., m, 1) column."""
        return where(index(self.shape[-1], 1).eq(j), self, 0).sum(-1)

    def pad(self, axis: int, before: int, after: int) -> Lz:
        axis %= len(self.shape)
        return Lz(g.pad(self.node, tuple((before, after) if i == axis else (0, 0)
                                         for i in range(len(self.shape)))))

    def expand(self, shape) -> Lz:
        return Lz(g.broadcast_to(self.node, tuple(shape)))

    def reshape(self, shape) -> Lz:
        return Lz(g.reshape(self.node, tuple(shape)))


def where(cond: Lz, a, b) -> Lz:
    """``where`` with NumPy broadcasting; ``a``/``b`` may be Python numbers (both: int64)."""
    like = a if isinstance(a, Lz) else b
    dtype = like.dtype if isinstance(like, Lz) else dtypes.int64  # two Python ints: indices
    a = a.node if isinstance(a, Lz) else g.const(a, dtype, ())
    b = b.node if isinstance(b, Lz) else g.const(b, dtype, ())
    c, a, b = broadcast(cond.node, a, b)
    return Lz(g.where(c, a, b))


def mask(cond: Lz, dtype: dtypes.DType) -> Lz:
    """1 where ``cond`` holds, else 0, as ``dtype``."""
    return Lz(g.cast(cond.node, dtype))


def zeros(shape, dtype: dtypes.DType) -> Lz:
    return Lz(g.const(0, dtype, tuple(shape)))


def index(n: int, axis: int) -> Lz:
    """0..n-1 (int64) along ``axis`` of a 2-d (n, 1) or (1, n) node: row and column numbers."""
    return Lz(g.iota((n, 1) if axis == 0 else (1, n)))


# (device index, j) → the (1, 1) int64 buffer holding j; a few per device, kept for the process.
_steps: dict[tuple[int, int], Node] = {}


def step(device, j: int) -> Lz:
    """The step number ``j`` as data on ``device``: a (1, 1) int64 node that kernels load, so a
    loop body written with it has the same kernels at every step (see the module docstring)."""
    key = (device.index, j)
    node = _steps.get(key)
    if node is None:
        node = _steps[key] = from_cpu(torch.tensor([[j]], dtype=torch.int64), device)
    return Lz(node)


def stored(x: Lz) -> Lz:
    """``x`` as a value the kernelizer stores: a loop's carried state (the factor, pivots and
    flags built so far), so that the next step's kernels load it instead of recomputing every
    earlier step's update, reduces included (an AST that grows with the step: a new kernel per
    step, and at the end one huge kernel of nested reduces). Written as a max over an added
    size-1 axis (exact for every value: -0.0, NaN, bools) read through a transpose: a
    movement after a reduce stores the reduce. The graph has no store marker of its own."""
    flat = g.reshape(x.node, (math.prod(x.shape), 1))
    return Lz(g.reshape(g.permute(g.reduce("max", flat, (1,)), (1, 0)), x.shape))


def eye(n: int, m: int, dtype: dtypes.DType) -> Lz:
    return mask(index(n, 0).eq(index(m, 1)), dtype)


def tril(a: Lz, k: int = 0) -> Lz:
    m, n = a.shape[-2:]
    return where(index(n, 1).le(index(m, 0) + k), a, 0)


def triu(a: Lz, k: int = 0) -> Lz:
    m, n = a.shape[-2:]
    return where(index(n, 1).ge(index(m, 0) + k), a, 0)


def diagonal(a: Lz) -> Lz:
    """The diagonal as a (..., k, 1) column (k = min(m, n))."""
    m, n = a.shape[-2:]
    k = min(m, n)
    sq = a.rows(0, k).cols(0, k)
    return where(index(k, 0).eq(index(k, 1)), sq, 0).sum(-1)


# ---------------------------------------------------------------- arguments and results


def float_input(t, api: str) -> Lz:
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"{api}: Expected a floating point or complex tensor as input. Got "
                           f"{type_name(t.dtype)}")
    if t.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f"{api}: Low precision dtypes not supported. Got {type_name(t.dtype)}")
    return Lz(read(t))


def square(t, api: str) -> Lz:
    if t.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if t.shape[-1] != t.shape[-2]:
        raise RuntimeError(f"{api}: A must be batches of square matrices, but they are "
                           f"{t.shape[-2]} by {t.shape[-1]} matrices")
    return float_input(t, api)


def type_name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
            torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.uint16: "UInt16",
            torch.uint32: "UInt32", torch.uint64: "UInt64"}.get(dtype, str(dtype))


def out(x: Lz, like) -> torch.Tensor:
    return wrap(x.node, like._storage.device)


def empty(shape, dtype, like) -> torch.Tensor:
    return wrap(g.const(0, dtype, tuple(shape)), like._storage.device)
