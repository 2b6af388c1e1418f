"""The lazy graph: immutable, hash-consed nodes that record what to compute.

Stage 2 of the flow (dispatch → **lazy graph** → kernelizer → loop IR → renderer → device).
Lowerings in ``torch_zyx.ops`` build nodes with the constructors below; the kernelizer reads
them. A node is identified by (op, arg, sources, dtype, shape): building the same node twice
returns the same object, so common subexpressions are shared for free.

Primitive set (DESIGN.md "Lazy graph"):
  BUFFER   a realized buffer, flat shape (n,)           arg: Buffer handle
  CONST    a scalar broadcast to ``shape``              arg: Python value
  RANDOM   counter-based uniform [0, 1) float32          arg: (seed, counter offset)
  IOTA     int64 flat position of each element
  UNARY / BINARY / WHERE / CAST                          arg: op name / dtype
  REDUCE   keepdim reduce                                arg: (op, axes)
  RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP            movement, arg: their parameters
  STRIDED  (shape, strides, offset) view of a flat node
  SETVIEW  flat ``base`` with the strided region ``arg`` replaced by ``value``
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from .. import dtypes
from ..dtypes import DType

MOVEMENT = frozenset({"RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "STRIDED"})
ELEMENTWISE = frozenset({"UNARY", "BINARY", "WHERE", "CAST"})
UNARY_OPS = frozenset({
    "neg", "exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tan", "recip", "floor", "ceil",
    "round", "trunc", "abs", "not", "erf", "tanh", "expm1", "log1p", "atan", "asin", "acos",
    "sinh", "cosh", "asinh", "acosh", "atanh", "isnan", "lgamma", "erfc",
})
# Comparison ops produce bool.
COMPARE_OPS = frozenset({"lt", "le", "eq", "ne"})
BINARY_OPS = frozenset({
    "add", "sub", "mul", "div", "idiv", "mod", "max", "min", "and", "or", "xor", "shl", "shr",
    "pow", "atan2", "copysign",
}) | COMPARE_OPS
REDUCE_OPS = frozenset({"sum", "max", "min", "prod"})

# key → weak reference to the node: a plain dict (lookups are the hot path of recording); the
# reference's callback removes the entry when the node dies.
_interned: dict[tuple, weakref.KeyedRef] = {}


def _forget(ref: weakref.KeyedRef) -> None:
    if _interned.get(ref.key) is ref:
        del _interned[ref.key]


class PendingCounter:
    """Counts nodes built since the last realization (the 'pending graph size' trigger)."""

    count = 0


class Node:
    """One immutable graph node. Build through the module functions, never directly."""

    __slots__ = ("__weakref__", "_key", "arg", "dtype", "op", "shape", "srcs")

    op: str
    arg: Any
    srcs: tuple[Node, ...]
    dtype: DType
    shape: tuple[int, ...]

    def __new__(cls, op: str, arg: Any, srcs: tuple[Node, ...], dtype: DType, shape: tuple[int, ...]):
        key = (op, _hashable(arg) if arg.__class__ in _UNHASHABLE_AS_IS else arg, tuple(map(id, srcs)), dtype,
               shape)
        ref = _interned.get(key)
        if ref is not None:
            existing = ref()
            if existing is not None:
                return existing
        node = object.__new__(cls)
        node.op, node.arg, node.srcs, node.dtype, node.shape = op, arg, srcs, dtype, shape
        node._key = key
        _interned[key] = weakref.KeyedRef(node, _forget, key)
        PendingCounter.count += 1
        return node

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        arg = "" if self.arg is None else f" {self.arg!r}"
        return f"<{self.op}{arg} {self.dtype} {self.shape}>"


_UNHASHABLE_AS_IS = (float, tuple)


def _hashable(arg: Any) -> Any:
    # Buffers hash by identity; Python floats hash by value but 0.0 == -0.0 and nan != nan,
    # so constants are keyed by their repr and type to keep -0.0 and nan distinct and stable.
    if isinstance(arg, float):
        return ("f", repr(arg))
    if isinstance(arg, tuple):
        return tuple(_hashable(a) for a in arg)
    return arg


# ---------------------------------------------------------------------------- constructors


def buffer(handle: Any, dtype: DType, numel: int) -> Node:
    return Node("BUFFER", handle, (), dtype, (numel,))


def const(value: Any, dtype: DType, shape: tuple[int, ...] = ()) -> Node:
    return Node("CONST", dtypes.python_value(dtype, value), (), dtype, tuple(shape))


def random(seed: int, offset: int, shape: tuple[int, ...]) -> Node:
    return Node("RANDOM", (seed, offset), (), dtypes.float32, tuple(shape))


def iota(shape: tuple[int, ...]) -> Node:
    """Each element's flat (row-major) position as int64: the base of arange, eye, one-hot."""
    return Node("IOTA", None, (), dtypes.int64, tuple(shape))


def unary(op: str, x: Node) -> Node:
    assert op in UNARY_OPS, op
    if op == "isnan":
        return Node("UNARY", op, (x,), dtypes.bool_, x.shape)
    return Node("UNARY", op, (x,), x.dtype, x.shape)


def binary(op: str, x: Node, y: Node) -> Node:
    assert op in BINARY_OPS, op
    assert x.shape == y.shape, (op, x.shape, y.shape)
    assert x.dtype == y.dtype, (op, x.dtype, y.dtype)
    dtype = dtypes.bool_ if op in COMPARE_OPS else x.dtype
    return Node("BINARY", op, (x, y), dtype, x.shape)


def where(cond: Node, x: Node, y: Node) -> Node:
    assert cond.shape == x.shape == y.shape and x.dtype == y.dtype and cond.dtype == dtypes.bool_
    return Node("WHERE", None, (cond, x, y), x.dtype, x.shape)


def cast(x: Node, dtype: DType) -> Node:
    if x.dtype == dtype:
        return x
    if x.op == "CONST":
        return const(x.arg, dtype, x.shape)
    return Node("CAST", dtype, (x,), dtype, x.shape)


def reduce(op: str, x: Node, axes: tuple[int, ...]) -> Node:
    assert op in REDUCE_OPS, op
    axes = tuple(sorted({a % len(x.shape) for a in axes})) if x.shape else ()
    if not axes:
        return x
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return Node("REDUCE", (op, axes), (x,), x.dtype, shape)


def reshape(x: Node, shape: tuple[int, ...]) -> Node:
    shape = tuple(shape)
    assert math.prod(shape) == x.numel, (x.shape, shape)
    if shape == x.shape:
        return x
    if x.op == "RESHAPE":
        return reshape(x.srcs[0], shape)
    if x.op == "CONST":
        return const(x.arg, x.dtype, shape)
    return Node("RESHAPE", shape, (x,), x.dtype, shape)


def permute(x: Node, axes: tuple[int, ...]) -> Node:
    axes = tuple(axes)
    if axes == tuple(range(len(axes))):
        return x
    if x.op == "CONST":
        return const(x.arg, x.dtype, tuple(x.shape[a] for a in axes))
    if x.op == "PERMUTE":
        inner = x.arg
        return permute(x.srcs[0], tuple(inner[a] for a in axes))
    return Node("PERMUTE", axes, (x,), x.dtype, tuple(x.shape[a] for a in axes))


def expand(x: Node, shape: tuple[int, ...]) -> Node:
    shape = tuple(shape)
    if shape == x.shape:
        return x
    assert len(shape) == len(x.shape) and all(s == o or o == 1 for s, o in zip(shape, x.shape)), (
        x.shape, shape)
    if x.op == "CONST":
        return const(x.arg, x.dtype, shape)
    return Node("EXPAND", shape, (x,), x.dtype, shape)


def pad(x: Node, padding: tuple[tuple[int, int], ...]) -> Node:
    """Zero padding (``before``, ``after``) per axis; negative parts shrink."""
    padding = tuple((int(b), int(a)) for b, a in padding)
    if any(b < 0 or a < 0 for b, a in padding):
        x = shrink(x, tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(padding, x.shape)))
        padding = tuple((max(0, b), max(0, a)) for b, a in padding)
    if all(b == 0 and a == 0 for b, a in padding):
        return x
    shape = tuple(s + b + a for s, (b, a) in zip(x.shape, padding))
    return Node("PAD", padding, (x,), x.dtype, shape)


def shrink(x: Node, bounds: tuple[tuple[int, int], ...]) -> Node:
    bounds = tuple((int(b), int(e)) for b, e in bounds)
    if all(b == 0 and e == s for (b, e), s in zip(bounds, x.shape)):
        return x
    shape = tuple(e - b for b, e in bounds)
    if x.op == "CONST":
        return const(x.arg, x.dtype, shape)
    return Node("SHRINK", bounds, (x,), x.dtype, shape)


def flip(x: Node, axes: tuple[int, ...]) -> Node:
    axes = tuple(sorted(a for a in set(axes) if x.shape[a] > 1))
    if not axes:
        return x
    if x.op == "CONST":
        return x
    return Node("FLIP", axes, (x,), x.dtype, x.shape)


def strided(x: Node, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Node:
    """A (shape, strides, offset) view of the flat node ``x``."""
    assert len(x.shape) == 1
    shape, strides = tuple(shape), tuple(strides)
    if shape == x.shape and offset == 0 and (strides == (1,) or shape[0] <= 1):
        return x
    if x.op == "CONST":
        return const(x.arg, x.dtype, shape)
    if x.op == "RESHAPE" and offset == 0 and shape == x.srcs[0].shape and strides == contiguous_strides(shape):
        return x.srcs[0]
    if offset == 0 and strides == contiguous_strides(shape) and math.prod(shape) == x.numel:
        return reshape(x, shape)
    return Node("STRIDED", (shape, strides, offset), (x,), x.dtype, shape)


def setview(base: Node, value: Node, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Node:
    assert len(base.shape) == 1 and value.shape == tuple(shape) and value.dtype == base.dtype
    return Node("SETVIEW", (tuple(shape), tuple(strides), offset), (base, value), base.dtype, base.shape)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def toposort(roots: list[Node]) -> list[Node]:
    """Nodes reachable from ``roots``, sources before users (iterative: graphs can be deep)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for src in reversed(node.srcs):
            if id(src) not in seen:
                stack.append((src, False))
    return order
