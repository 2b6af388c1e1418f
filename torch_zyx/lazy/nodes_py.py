"""The lazy graph's node table in Python: the reference implementation of ``_native.c``.

Stage 2 of the flow (dispatch → **lazy graph** → kernelizer → ...). ``graph.py`` builds its
nodes through this module's surface, the same as the C module's: ``Node``, ``intern``,
``binary_node``, ``unary_node``, ``pending``, ``file_unfiled``, ``table_size``, ``signature``
(the schedule cache's key) and graph.py's hot constructors (``unary``, ``binary``, ``where``,
``cast``, ``reduce``, ``reshape``, ``expand``, ``shrink``, ``const_like``; after
``configure``). The C module is used when it is built (``pip install`` compiles it) and
``ZYX_NATIVE`` is not ``0``; this one otherwise, and by the tests that check the two agree.
"""

from __future__ import annotations

import array
import itertools
import math
import sys
import weakref
from typing import Any

from ..dtypes import DType


class _KeyedRef(weakref.ref):
    """A weak reference that remembers its table key (``weakref.KeyedRef`` without its
    Python-level ``__new__``/``__init__``, which cost more than the rest of interning)."""

    __slots__ = ("key",)


# key → weak reference to the node: a plain dict (lookups are the hot path of recording); the
# reference's callback removes the entry when the node dies. A key is
# (op, hashable arg, srcs, dtype, shape): sources are held by their node anyway, and nodes hash
# and compare by identity, so the sources tuple itself is the cheapest exact key.
_interned: dict[tuple, _KeyedRef] = {}

# Nodes built by ``binary_node`` since the last lookup, held strongly and not yet entered in
# ``_interned``: recording a chain of ops (each on the previous one's result: see ``_Newest``)
# looks nothing up, and a weak reference made per node cost ~0.5 us per recorded op on the
# 2-core box. Every lookup files them first (``_file``), so lookups see every live node; one
# that nothing else holds any more is dropped then, never needing a reference or a key. (Until
# that next lookup, a dead one keeps its sources alive: lookups come with nearly every other
# node built, and a realization makes several.)
_unfiled: list[Node] = []
_UNFILED_MAX = 4096


class _Newest:
    """The node ``binary_node`` built last, while it is unfiled (``_unfiled`` holds it anyway). No
    node can have that node as a source yet (it would have been built after it), so looking up a
    key with it among the sources cannot hit: recording a chain of ops (each on the previous
    one's result) skips that lookup. Reset when it is filed, so it never keeps a node alive."""

    __slots__ = ("node",)

    def __init__(self) -> None:
        self.node = None


_newest = _Newest()


def _forget(ref: _KeyedRef, table: dict = _interned) -> None:
    # (the table bound as a default: references can die after the module's globals at exit)
    key = ref.key
    ref.key = None  # (the reference may outlive its node: it then holds no key, nor the sources)
    if table.get(key) is ref:
        del table[key]


_getrefcount = sys.getrefcount


def _count_unheld() -> int:
    # The count ``_file`` sees for a node that only its variable holds, measured the same way
    # (popped from a list into a variable), not assumed.
    probe = [object()]
    node = probe.pop()
    return _getrefcount(node)


_UNHELD = _count_unheld()


def file_unfiled() -> None:
    """File the nodes recorded since the last lookup now (a realization calls it, so the nodes
    of values that died since are freed there rather than at the next op's lookup)."""
    if _unfiled:
        _file()


def _file() -> None:
    """Enter the nodes in ``_unfiled`` that something still holds in ``_interned``."""
    table = _interned
    count = len(_unfiled)
    nodes = _unfiled[:count]
    del _unfiled[:count]  # (not clear(): a node appended meanwhile, by another thread, stays)
    _newest.node = None
    pop = nodes.pop
    while nodes:
        # Newest first: a user is built after its sources, so a dead one is freed (here, when
        # ``node`` is rebound) before its sources are looked at, which then count one less.
        node = pop()
        if _getrefcount(node) > _UNHELD:
            key = (node.op, node._karg, node.srcs, node.dtype, node.shape)
            ref = _KeyedRef(node, _forget)
            ref.key = key
            table[key] = ref


class _PendingCounter:
    """Counts nodes built since the last realization (the 'pending graph size' trigger). One
    instance, ``pending``: incrementing a class attribute instead cost ~0.13 us per node
    (writing to a class invalidates its attribute caches)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


pending = _PendingCounter()


class Node:
    """One immutable graph node. Build through the module functions, never directly."""

    # ``_karg``: ``arg`` as keyed (see ``_hashable``); the key itself is built only when needed.
    __slots__ = ("__weakref__", "_karg", "arg", "dtype", "op", "shape", "srcs")

    op: str
    arg: Any
    srcs: tuple[Node, ...]
    dtype: DType
    shape: tuple[int, ...]

    def __new__(cls, op: str, arg: Any, srcs: tuple[Node, ...], dtype: DType, shape: tuple[int, ...]):
        key_arg = _hashable(arg) if arg.__class__ in _UNHASHABLE_AS_IS else arg
        return intern(op, arg, key_arg, srcs, dtype, shape)

    @property
    def _key(self) -> tuple:
        """The node's key in ``_interned``: (op, hashable arg, srcs, dtype, shape)."""
        return (self.op, self._karg, self.srcs, self.dtype, self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        arg = "" if self.arg is None else f" {self.arg!r}"
        return f"<{self.op}{arg} {self.dtype} {self.shape}>"


def intern(op: str, arg: Any, key_arg: Any, srcs: tuple[Node, ...], dtype: DType,
           shape: tuple[int, ...]) -> Node:
    """The node (op, arg, srcs, dtype, shape), built once. ``key_arg`` is ``arg`` as keyed (see
    ``_hashable``); graph.py's hot constructors pass it directly when ``arg`` holds no floats."""
    key = (op, key_arg, srcs, dtype, shape)
    if _unfiled:
        _file()
    ref = _lookup(key)
    if ref is not None:
        existing = ref()
        if existing is not None:
            return existing
    return _build(key, op, arg, srcs, dtype, shape)


def _build(key: tuple, op: str, arg: Any, srcs: tuple[Node, ...], dtype: DType,
           shape: tuple[int, ...]) -> Node:
    """Make and intern the node ``key`` (looked up and not found by the caller)."""
    node = _new_node(Node)
    node.op = op
    node.arg = arg
    node.srcs = srcs
    node.dtype = dtype
    node.shape = shape
    node._karg = key[1]
    ref = _KeyedRef(node, _forget)
    ref.key = key
    _interned[key] = ref
    pending.count += 1
    return node


def binary_node(op: str, x: Node, y: Node, dtype: DType) -> Node:
    """``binary(op, x, y)`` for callers that checked what it asserts (``x`` and ``y`` of one
    shape and dtype, ``dtype`` the result's: bool for comparisons): the recording fast paths."""
    srcs = (x, y)
    shape = x.shape
    newest = _newest.node
    if newest is not x and newest is not y:  # (else no node has that source yet: see _Newest)
        if _unfiled:
            _file()
        ref = _lookup(("BINARY", op, srcs, dtype, shape))
        if ref is not None:
            node = ref()
            if node is not None:
                return node
    # _build, inline (one Python call less per recorded op), but unfiled (see _unfiled)
    node = _new_node(Node)
    node.op = "BINARY"
    node.arg = op
    node.srcs = srcs
    node.dtype = dtype
    node.shape = shape
    node._karg = op
    unfiled = _unfiled
    unfiled.append(node)
    if len(unfiled) > _UNFILED_MAX:
        _file()
    _newest.node = node
    pending.count += 1
    return node


def table_size() -> int:
    """Live interned nodes (those recorded since the last lookup filed first)."""
    file_unfiled()
    return len(_interned)


def unary_node(op: str, x: Node) -> Node:
    """``unary(op, x)`` for an ``op`` whose result has ``x``'s dtype (all but isnan)."""
    return intern("UNARY", op, op, (x,), x.dtype, x.shape)


# Bound once: interning is the hot path of recording (the table is never replaced).
_lookup = _interned.get
_new_node = object.__new__
_UNHASHABLE_AS_IS = (float, tuple)


def _hashable(arg: Any) -> Any:
    # Buffers hash by identity; Python floats hash by value but 0.0 == -0.0 and nan != nan,
    # so constants are keyed by their repr and type to keep -0.0 and nan distinct and stable.
    if isinstance(arg, float):
        return ("f", repr(arg))
    if isinstance(arg, tuple):
        return tuple(_hashable(a) for a in arg)
    return arg


# ------------------------------------------------------------------------------ constructors
# graph.py's hot constructors (bound there from the node table in use; _native.c has the same
# ones in C). ``configure`` gives them graph.py's op sets, the bool dtype and graph.const.


class _Configuration:
    __slots__ = ("binary_ops", "bool_dtype", "compare_ops", "const", "reduce_ops", "unary_ops")


_set = _Configuration()


def configure(unary_ops, binary_ops, compare_ops, reduce_ops, bool_dtype, const) -> None:
    _set.unary_ops, _set.binary_ops, _set.compare_ops = unary_ops, binary_ops, compare_ops
    _set.reduce_ops, _set.bool_dtype, _set.const = reduce_ops, bool_dtype, const


def const_like(x: Node, shape: tuple[int, ...]) -> Node:
    """CONST ``x`` at another shape (its value is already of its dtype)."""
    return intern("CONST", x.arg, x._karg, (), x.dtype, shape)


def unary(op: str, x: Node) -> Node:
    assert op in _set.unary_ops, op
    return intern("UNARY", op, op, (x,), _set.bool_dtype if op == "isnan" else x.dtype, x.shape)


def binary(op: str, x: Node, y: Node) -> Node:
    shape, dtype = x.shape, x.dtype
    assert op in _set.binary_ops and y.shape == shape and y.dtype is dtype, (op, x, y)
    return intern("BINARY", op, op, (x, y), _set.bool_dtype if op in _set.compare_ops else dtype, shape)


def where(cond: Node, x: Node, y: Node) -> Node:
    assert (cond.shape == x.shape == y.shape and x.dtype == y.dtype
            and cond.dtype == _set.bool_dtype), (cond, x, y)
    return intern("WHERE", None, None, (cond, x, y), x.dtype, x.shape)


def cast(x: Node, dtype: DType) -> Node:
    if x.dtype is dtype:
        return x
    if x.op == "CONST":
        return _set.const(x.arg, dtype, x.shape)
    return intern("CAST", dtype, dtype, (x,), dtype, x.shape)


def reduce(op: str, x: Node, axes: tuple[int, ...]) -> Node:
    assert op in _set.reduce_ops, op
    axes = tuple(sorted({a % len(x.shape) for a in axes})) if x.shape else ()
    if not axes:
        return x
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return intern("REDUCE", (op, axes), (op, axes), (x,), x.dtype, shape)


def reshape(x: Node, shape: tuple[int, ...]) -> Node:
    if shape.__class__ is not tuple:
        shape = tuple(shape)
    if shape == x.shape:
        return x
    assert math.prod(shape) == x.numel, (x.shape, shape)
    op = x.op
    if op == "RESHAPE":
        return reshape(x.srcs[0], shape)
    if op == "CONST":
        return const_like(x, shape)
    return intern("RESHAPE", shape, shape, (x,), x.dtype, shape)


def expand(x: Node, shape: tuple[int, ...]) -> Node:
    if shape.__class__ is not tuple:
        shape = tuple(shape)
    if shape == x.shape:
        return x
    assert len(shape) == len(x.shape), (x.shape, shape)
    for s, o in zip(shape, x.shape):
        assert s == o or o == 1, (x.shape, shape)
    if x.op == "CONST":
        return const_like(x, shape)
    return intern("EXPAND", shape, shape, (x,), x.dtype, shape)


def shrink(x: Node, bounds: tuple[tuple[int, int], ...]) -> Node:
    bounds = tuple((int(b), int(e)) for b, e in bounds)
    if all(b == 0 and e == s for (b, e), s in zip(bounds, x.shape)):
        return x
    shape = tuple(e - b for b, e in bounds)
    if x.op == "CONST":
        return const_like(x, shape)
    return intern("SHRINK", bounds, bounds, (x,), x.dtype, shape)


def is_scalar_param(node: Node, inline_floats: frozenset) -> bool:
    """Whether the ``CONST`` node ``node`` is a run-time scalar parameter: a finite float that
    is not one of ``inline_floats`` (the values kept in the code: kernelize.py's docstring)."""
    value = node.arg
    return (node.dtype.kind == "f" and value not in inline_floats
            and not math.isinf(value) and not math.isnan(value))


# How a leaf's arg is written in the signature's key (``_native.c`` has the same numbers).
ARG_KEYED, ARG_BUFFER, ARG_RANDOM, ARG_SCALAR = 0, 1, 2, 3
# Values' numbers in signature keys: each distinct value (op, keyed arg, dtype, shape) gets the
# next number, once. Emptied past _FIELD_NUMBERS_MAX entries; numbers are never given twice.
_field_numbers: dict[Any, int] = {}
_FIELD_NUMBERS_MAX = 1 << 16
# (``next`` of a count is atomic: two threads numbering two values never get one number)
_next_field_number = itertools.count(1)


def _field_number(value: Any) -> int:
    number = _field_numbers.get(value)
    if number is None:
        if len(_field_numbers) >= _FIELD_NUMBERS_MAX:
            _field_numbers.clear()
        number = _field_numbers[value] = next(_next_field_number)
    return number


def signature(roots: list[Node], inline_floats: frozenset) -> tuple:
    """``kernelize.GraphSignature``'s parts: (nodes, key, buffers, random_args, scalar_dtypes,
    scalar_values, scalar_slot).

    Nodes are numbered in breadth-first discovery order from the roots (``nodes``). The key is
    a byte string of 64-bit numbers: the number of roots and theirs, the number of nodes, then
    per node in that order its op, its arg as (how, number), its dtype, its shape, its number
    of sources and theirs. Values are written as their numbers (``_field_number``), so equal
    keys mean equal structures, and a key is hashed and compared as plain bytes. Leaves are
    abstracted to positions: a buffer to (ARG_BUFFER, its place in ``buffers``, each once), a
    random leaf to (ARG_RANDOM, its parameters' place in ``random_args``), and a scalar
    parameter (``is_scalar_param``) to (ARG_SCALAR, its dtype's group): ``scalar_values[k]``
    holds group k's values, of dtype ``scalar_dtypes[k]``, and ``scalar_slot`` maps the id of
    a CONST node to (group, index). Every other arg is (ARG_KEYED, its keyed value's number).
    Every realization pays for this walk (``_native.c`` does it in C)."""
    nodes: list[Node] = []
    pos: dict[Node, int] = {}  # nodes hash by identity
    for root in roots:
        if root not in pos:
            pos[root] = len(nodes)
            nodes.append(root)
    words = array.array("q", [len(roots)])
    words.extend(pos[root] for root in roots)
    count_at = len(words)
    words.append(0)
    number = _field_number
    buffers: list = []
    buffer_pos: dict[int, int] = {}
    random_args: list[int] = []
    scalar_dtypes: list = []
    scalar_values: list[list[float]] = []
    scalar_slot: dict[int, tuple[int, int]] = {}
    # Appending while iterating is well defined for lists: the loop also walks the nodes
    # discovered on the way, in discovery order.
    for node in nodes:
        srcs = node.srcs
        op = node.op
        how, arg = ARG_KEYED, None
        if not srcs:
            if op == "BUFFER":
                handle = node.arg
                arg = buffer_pos.get(id(handle))
                if arg is None:
                    arg = buffer_pos[id(handle)] = len(buffers)
                    buffers.append(handle)
                how = ARG_BUFFER
            elif op == "RANDOM":
                how, arg = ARG_RANDOM, len(random_args)
                random_args.extend(node.arg)
            elif op == "CONST" and is_scalar_param(node, inline_floats):
                dtype = node.dtype
                if dtype in scalar_dtypes:
                    group = scalar_dtypes.index(dtype)
                else:
                    group = len(scalar_dtypes)
                    scalar_dtypes.append(dtype)
                    scalar_values.append([])
                values = scalar_values[group]
                scalar_slot[id(node)] = (group, len(values))
                values.append(node.arg)
                how, arg = ARG_SCALAR, group
        if how == ARG_KEYED:
            arg = number(node._karg)
        words.extend((number(op), how, arg, number(node.dtype), number(node.shape), len(srcs)))
        for src in srcs:
            p = pos.get(src)
            if p is None:
                p = pos[src] = len(nodes)
                nodes.append(src)
            words.append(p)
    words[count_at] = len(nodes)
    return nodes, words.tobytes(), buffers, random_args, scalar_dtypes, scalar_values, scalar_slot
