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
  BITCAST  the bits of each element read as another dtype of its size (a float's as an
           integer's, or back)                           arg: dtype
  REDUCE   keepdim reduce                                arg: (op, axes)
  RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP            movement, arg: their parameters
  STRIDED  (shape, strides, offset) view of a flat node
  SETVIEW  flat ``base`` with the strided region ``arg`` replaced by ``value``
  GATHER   ``table`` read at data-dependent positions along axis ``arg``   arg: the axis
  SCATTER  ``base`` with ``src`` combined or written at data-dependent positions
                                                         arg: (axis, "add"|"mul"|"max"|"min"|"set")
Composite nodes (lazy/composite.py: LAYER_NORM, SOFTMAX) stand for a graph of these; the
kernelizer's rewrite expands them before anything else reads the graph.
"""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes
from ..config import native_extension
from ..dtypes import DType

MOVEMENT = frozenset({"RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "STRIDED"})
ELEMENTWISE = frozenset({"UNARY", "BINARY", "WHERE", "CAST", "BITCAST"})
REDUCE = frozenset({"REDUCE"})  # (the ops of rewrites that only replace reduces)
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

def _node_table():
    """The node table: the C module when it is built and ``ZYX_NATIVE`` is not 0, else its
    Python reference implementation, ``nodes_py``. Both have the surface bound below."""
    native = native_extension("torch_zyx.lazy._native", "nodes_py")
    if native is not None:
        return native
    from . import nodes_py

    return nodes_py


nodes = _node_table()
NATIVE = nodes.__name__.endswith("._native")
Node = nodes.Node
_intern = nodes.intern
binary_node = nodes.binary_node
unary_node = nodes.unary_node
file_unfiled = nodes.file_unfiled
# Nodes built since the last realization (the 'pending graph size' trigger): ``.count``.
PendingCounter = nodes.pending
# The hot constructors (their docs in nodes_py.py): unary(op, x), binary(op, x, y) (one shape
# and dtype), where(cond, x, y), cast(x, dtype), reduce(op, x, axes) (keepdim), reshape(x,
# shape), expand(x, shape) (size-1 axes grow), shrink(x, bounds) ((begin, end) per axis).
unary = nodes.unary
binary = nodes.binary
where = nodes.where
cast = nodes.cast
_reduce = nodes.reduce
reshape = nodes.reshape
expand = nodes.expand
shrink = nodes.shrink
_const_like = nodes.const_like  # CONST x at another shape


# ---------------------------------------------------------------------------- constructors
# Recording builds a few nodes per aten op, so these avoid redundant work: arguments that are
# tuples of ints or strings are keyed as they are (``_intern``), strides of contiguous shapes
# are memoized, and CONST nodes are built at their final shape directly.


def reduce(op: str, x: Node, axes: tuple[int, ...]) -> Node:
    """``op`` over ``axes`` of ``x``, keeping them as size 1. A node keeps its reduced axes in a
    64-bit mask: more of them (a whole reduction of a tensor of over 64 dims, which ATen allows)
    are moved last and merged into one first."""
    try:
        return _reduce(op, x, axes)
    except ValueError:
        if len(axes) <= 64:
            raise
    reduced = sorted({a % len(x.shape) for a in axes})
    keep = [i for i in range(len(x.shape)) if i not in reduced]
    moved = permute(x, tuple(keep + reduced)) if keep else x
    merged = reshape(moved, tuple(x.shape[i] for i in keep) + (math.prod(x.shape[i] for i in reduced),))
    kept_dims = tuple(1 if i in reduced else s for i, s in enumerate(x.shape))
    return reshape(_reduce(op, merged, (len(keep),)), kept_dims)


def buffer(handle: Any, dtype: DType, numel: int) -> Node:
    return _intern("BUFFER", handle, handle, (), dtype, (numel,))


# Recently used constants (an op's scalar operand, at its own or at the other operand's shape)
# stay alive here, so recording ``x * 0.5`` again finds its constant without building and
# dropping one every time. Keyed by the raw Python value before conversion, (value, dtype,
# shape): Python numbers that compare equal (1, 1.0, True) convert to the same constant of a
# dtype, except 0.0 and -0.0, so a float zero's key also holds its sign. nan never equals
# itself and simply misses (then takes the full path).
_scalars: dict[tuple, Node] = {}


def const(value: Any, dtype: DType, shape: tuple[int, ...] = ()) -> Node:
    cls = value.__class__
    if cls is float or cls is int or cls is bool:
        memo = (value, dtype, shape)
        if not value and cls is float:
            memo = (value, dtype, shape, math.copysign(1, value))
        try:
            node = _scalars.get(memo)
        except TypeError:  # a shape given as a list
            node = memo = None
        if node is not None:
            return node
    else:
        memo = None
    value = dtypes.python_value(dtype, value)
    key_arg = ("f", repr(value)) if value.__class__ is float else value
    node = _intern("CONST", value, key_arg, (), dtype, tuple(shape))
    if memo is not None:
        if len(_scalars) >= 1024:
            _scalars.clear()
        _scalars[memo] = node
    return node


def finite(x: Node) -> Node:
    """True where floating ``x`` is neither inf nor NaN (a NaN compares false): where a running
    or reduced maximum may shift values (softmax, logsumexp), and the scaler's inf check."""
    return binary("lt", unary("abs", x), const(float("inf"), x.dtype, x.shape))


def random(seed: int, offset: int, shape: tuple[int, ...]) -> Node:
    return Node("RANDOM", (seed, offset), (), dtypes.float32, tuple(shape))


def iota(shape: tuple[int, ...]) -> Node:
    """Each element's flat (row-major) position as int64: the base of arange, eye, one-hot."""
    return _intern("IOTA", None, None, (), dtypes.int64, tuple(shape))


def flat(x: Node) -> Node:
    """``x`` reshaped to one axis (a storage's value)."""
    shape = x.shape
    if len(shape) == 1:
        return x
    numel = math.prod(shape)
    op = x.op
    if op == "RESHAPE":
        x = x.srcs[0]
        if len(x.shape) == 1:
            return x
    elif op == "CONST":
        return _const_like(x, (numel,))
    shape = (numel,)
    return _intern("RESHAPE", shape, shape, (x,), x.dtype, shape)


# The integer dtype of each element size: what a bitcast moves bits through (uint8 for bytes, so
# widening one zero-extends).
_BITS = {1: dtypes.uint8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def bitcast(x: Node, dtype: DType) -> Node:
    """The bytes of ``x`` read as ``dtype``, as ``Tensor.view(dtype)`` reads them: for an element
    size as large, the same shape; for a larger one, each run of ``ratio`` elements along the
    last axis is one element (the first its lowest bytes: little-endian, as every host zyx runs
    on); for a smaller one, each element is ``ratio`` along the last axis. The last axis must
    divide (the caller's check, as ATen's). Only BITCAST of equal sizes is a primitive; the rest
    is integer shifts, masks and casts, which every renderer has."""
    src = x.dtype
    if src is dtype:
        return x
    size, new = src.itemsize, dtype.itemsize
    if size == new:
        return _bitcast_same(x, dtype)
    bits = _bitcast_same(x, _BITS[size])
    wide = _join(bits, _BITS[new], new // size) if new > size else _split(bits, _BITS[new], size // new)
    return _bitcast_same(wide, dtype)


def _bitcast_same(x: Node, dtype: DType) -> Node:
    """``x``'s bits as ``dtype`` of the same element size."""
    if x.dtype is dtype:
        return x
    if not x.dtype.is_float and not dtype.is_float:
        # Between integers of one size a cast keeps the bits (it wraps); bool, stored as a byte
        # 0 or 1, casts to and from those bytes (a byte other than 0 or 1 reads as True).
        return cast(x, dtype)
    return _intern("BITCAST", dtype, dtype, (x,), dtype, x.shape)


def _join(x: Node, wide: DType, ratio: int) -> Node:
    """Integer ``x`` with each run of ``ratio`` elements along its last axis made one integer of
    dtype ``wide``: element j of a run shifted up by j of its sizes, or'ed together."""
    *outer, last = x.shape
    runs = reshape(x, (*outer, last // ratio, ratio))
    kept = tuple((0, s) for s in runs.shape[:-1])
    width = 8 * x.dtype.itemsize
    out = None
    for j in range(ratio):
        part = cast(reshape(shrink(runs, (*kept, (j, j + 1))), runs.shape[:-1]), wide)
        if x.dtype.kind == "i" and j < ratio - 1:
            # (a signed part widens with copies of its sign bit: masked off, except in the top
            # part, whose shift pushes them out)
            part = binary("and", part, const((1 << width) - 1, wide, part.shape))
        if j:
            part = binary("shl", part, const(width * j, wide, part.shape))
        out = part if out is None else binary("or", out, part)
    return out


def _split(x: Node, narrow: DType, ratio: int) -> Node:
    """Integer ``x`` with each element made ``ratio`` integers of dtype ``narrow`` along its last
    axis, lowest bits first: element j is the element shifted down by j of their sizes and cut."""
    *outer, last = x.shape
    shape = (*outer, last, ratio)
    spread = expand(reshape(x, (*outer, last, 1)), shape)
    # The position along the new axis of each element: its flat position modulo ``ratio`` (a
    # power of two: masked).
    part = binary("and", iota(shape), const(ratio - 1, dtypes.int64, shape))
    shift = cast(binary("mul", part, const(8 * narrow.itemsize, dtypes.int64, shape)), x.dtype)
    return reshape(cast(binary("shr", spread, shift), narrow), (*outer, last * ratio))


def permute(x: Node, axes: tuple[int, ...]) -> Node:
    axes = tuple(axes)
    if axes == tuple(range(len(axes))):
        return x
    shape = tuple(x.shape[a] for a in axes)
    if x.op == "CONST":
        return _const_like(x, shape)
    if x.op == "PERMUTE":
        inner = x.arg
        return permute(x.srcs[0], tuple(inner[a] for a in axes))
    return _intern("PERMUTE", axes, axes, (x,), x.dtype, shape)


def broadcast_to(x: Node, shape: tuple[int, ...]) -> Node:
    """``x`` broadcast (NumPy-style: leading axes added, size-1 axes expanded) to ``shape``."""
    if x.shape == shape:
        return x
    if x.op == "CONST":
        return _const_like(x, shape)
    if x.op == "STRIDED" and not x.shape:
        # One element of a storage (an optimizer's per-tensor scalar): one strided view with
        # zero strides rather than a view, a reshape and an expand.
        return strided(x.srcs[0], shape, (0,) * len(shape), x.arg[2])
    return expand(reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape), shape)


def pad(x: Node, padding: tuple[tuple[int, int], ...]) -> Node:
    """Zero padding (``before``, ``after``) per axis; negative parts shrink."""
    padding = tuple((int(b), int(a)) for b, a in padding)
    if any(b < 0 or a < 0 for b, a in padding):
        x = shrink(x, tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(padding, x.shape)))
        padding = tuple((max(0, b), max(0, a)) for b, a in padding)
    if all(b == 0 and a == 0 for b, a in padding):
        return x
    shape = tuple(s + b + a for s, (b, a) in zip(x.shape, padding))
    return _intern("PAD", padding, padding, (x,), x.dtype, shape)


def flip(x: Node, axes: tuple[int, ...]) -> Node:
    axes = tuple(sorted(a for a in set(axes) if x.shape[a] > 1))
    if not axes:
        return x
    if x.op == "CONST":
        return x
    return _intern("FLIP", axes, axes, (x,), x.dtype, x.shape)


def strided(x: Node, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Node:
    """A (shape, strides, offset) view of the flat node ``x``. ``shape`` may be a torch.Size
    (a tuple subclass: it hashes and compares as its tuple; converted only when stored)."""
    assert len(x.shape) == 1
    if strides.__class__ is not tuple:
        strides = tuple(strides)
    if offset == 0:
        if shape == x.shape and (strides == (1,) or shape[0] <= 1):
            return x
        if strides == contiguous_strides(shape):
            if x.op == "RESHAPE" and shape == x.srcs[0].shape:
                return x.srcs[0]
            if math.prod(shape) == x.shape[0]:
                return reshape(x, shape)
    shape = tuple(shape)
    if x.op == "CONST":
        return _const_like(x, shape)
    arg = (shape, tuple(strides), offset)
    return _intern("STRIDED", arg, arg, (x,), x.dtype, shape)


def gather(table: Node, index: Node, axis: int) -> Node:
    """``out[c] = table[c with c[axis] replaced by index[c]]`` for int64 ``index`` of ``table``'s
    rank and shape except along ``axis`` (torch.gather with the table cut to the index's
    shape). Entries must lie in [0, table.shape[axis]): callers wrap negative ones and check the
    bounds (record/checks.py); a kernel clamps them, so a bad entry never reads outside the table.
    Every indexed read (embedding, index_select, advanced indexing) is one: work proportional
    to the output, where a one-hot comparison against every table position costs that many
    times the table's extent along ``axis``."""
    assert index.dtype == dtypes.int64 and len(index.shape) == len(table.shape)
    assert all(a == b or d == axis for d, (a, b) in enumerate(zip(index.shape, table.shape)))
    assert table.shape[axis] > 0 or not math.prod(index.shape)
    return _intern("GATHER", axis, axis, (table, index), table.dtype, tuple(index.shape))


def scatter(base: Node, index: Node, src: Node, axis: int, combine: str) -> Node:
    """``base`` with ``src[c]`` combined into (``combine`` "add", "mul", "max", "min": the element
    becomes ``element op src[c]``) or written to ("set") position ``c`` with ``c[axis]`` replaced
    by ``index[c]``, for every position ``c`` of ``src`` (torch.scatter_reduce and torch.scatter:
    int64 ``index`` of ``src``'s shape, of ``base``'s rank, no longer than ``base`` along the
    other axes). The entries landing on one element are taken in ``c[axis]`` order, as CPU
    torch takes them: combined one after the other, or the last one written. Entries must lie
    in [0, base.shape[axis]) (callers check them; a kernel clamps them). Work follows ``src``: a
    one-hot construction would compare every entry with every position of ``base``."""
    assert combine in ("add", "mul", "max", "min", "set")
    assert index.dtype == dtypes.int64 and index.shape == src.shape and src.dtype == base.dtype
    assert len(src.shape) == len(base.shape)
    assert all(a <= b or d == axis for d, (a, b) in enumerate(zip(src.shape, base.shape)))
    assert base.shape[axis] > 0 or not math.prod(src.shape)
    arg = (axis, combine)
    return _intern("SCATTER", arg, arg, (base, index, src), base.dtype, base.shape)


def setview(base: Node, value: Node, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Node:
    assert len(base.shape) == 1 and value.shape == tuple(shape) and value.dtype == base.dtype
    arg = (tuple(shape), tuple(strides), offset)
    return _intern("SETVIEW", arg, arg, (base, value), base.dtype, base.shape)


# shape → its contiguous strides (bounded: cleared when it grows past _CONTIGUOUS_MAX shapes).
_contiguous: dict[tuple[int, ...], tuple[int, ...]] = {}
_CONTIGUOUS_MAX = 4096


def strided_extent(shape, strides) -> int:
    """How many elements a (shape, strides) view spans from its first one (0 when empty)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(shape, strides)) if all(shape) else 0


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    try:
        cached = _contiguous.get(shape)
    except TypeError:  # a list
        cached = None
    if cached is not None:
        return cached
    shape = tuple(shape)
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    if len(_contiguous) >= _CONTIGUOUS_MAX:
        _contiguous.clear()
    cached = _contiguous[shape] = tuple(reversed(strides))
    return cached


def rewrite_bottom_up(roots: list[Node], fn, ops: frozenset | None = None,
                      order: list[Node] | None = None) -> list[Node]:
    """``roots`` rebuilt with ``fn(node)`` applied to every node after its sources were rewritten
    (the one mechanism of the graph rewrites: ``fn`` gets the node on rewritten sources and
    returns it or its replacement). ``ops``: the only ops ``fn`` replaces (it is not called on
    others); ``order``: ``toposort(roots)`` where the caller has it. A rewrite that changes
    nothing returns ``roots`` itself, so that the caller may keep its order (a new graph's
    passes mostly change nothing: each walk was ~0.1 ms of a realization's miss path)."""
    if order is None:
        order = toposort(roots)
    if ops is not None and not any(node.op in ops for node in order):
        return roots
    new: dict[Node, Node] = {}  # (nodes hash by identity) the replaced nodes only
    for node in order:
        out = node
        if new and node.srcs:
            srcs = tuple(new.get(s, s) for s in node.srcs)
            if any(a is not b for a, b in zip(srcs, node.srcs)):
                out = Node(node.op, node.arg, srcs, node.dtype, node.shape)
        if ops is None or out.op in ops:
            out = fn(out)
        if out is not node:
            new[node] = out
    if not new:
        return roots
    return [new.get(r, r) for r in roots]


def toposort(roots: list[Node]) -> list[Node]:
    """Nodes reachable from ``roots``, sources before users (iterative: graphs can be deep)."""
    # Nodes hash by identity (no __eq__), so they key the set directly; the kernelizer and
    # lowering walk every new graph with it.
    order: list[Node] = []
    seen: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    pop, push, add, emit = stack.pop, stack.append, seen.add, order.append
    while stack:
        node, expanded = pop()
        if expanded:
            emit(node)
            continue
        if node in seen:
            continue
        add(node)
        push((node, True))
        for src in reversed(node.srcs):
            if src not in seen:
                push((src, False))
    return order


# (here: the constructors call back into ``const``, defined above)
nodes.configure(UNARY_OPS, BINARY_OPS, COMPARE_OPS, REDUCE_OPS, dtypes.bool_, const)
