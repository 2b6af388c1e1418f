"""Reducing scatters and mask-driven copies: scatter_reduce, index_reduce, masked_select,
masked_scatter, put.

The reducing scatters are graph.scatter nodes (entries combined in place, in entry order, by
add/mul/max/min), in the accumulation dtype (float32 for half types, int32 for bool).
masked_select has a data-dependent size: the count of true mask entries is realized,
everything else stays lazy.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.checks import check_index
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..math.elementwise import floor_div
from ..math.scan import highest, lowest
from ..registry import aten, broadcast_shape, dtype_name, register, wrap_dim
from .index import (
    OUT_OF_RANGE,
    _check_scatter,
    _scatter_node,
    _wrap_negative,
    add_at,
    inclusive_count,
    index_take,
    out_of_bounds,
    true_positions,
)

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _acc(dtype: dtypes.DType) -> dtypes.DType:
    # bool reduces as 0/1 integers; half types accumulate in float32 (cast back at the end).
    if dtype == dtypes.bool_:
        return dtypes.int32
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _identity(op: str, dtype: dtypes.DType):
    if op == "prod":
        return 1
    if op in ("amax", "amin"):
        # The dtype's own limits: int8's amin identity is 127 (int32's maximum, cast, was -1).
        return lowest(dtype) if op == "amax" else highest(dtype)
    return 0


_COMBINE = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def scatter_reduce_node(x: Node, dim: int, index: Node, src: Node, op: str, include_self: bool) -> Node:
    """x with the src entries scattered along ``dim`` combined by ``op`` (PyTorch's scatter_reduce),
    each a graph.scatter in the accumulation dtype: without ``include_self`` the elements an
    entry names first take the op's identity; a mean divides by the count of entries (plus one
    for x itself), an add of ones scattered alongside."""
    out_dtype = x.dtype
    acc = _acc(out_dtype)
    x, src = g.cast(x, acc), g.cast(g.shrink(src, tuple((0, n) for n in index.shape)), acc)
    index = _wrap_negative(index, x.shape[dim])
    base = x
    if not include_self:
        identity = g.const(_identity(op, acc), acc, src.shape)
        base = g.scatter(x, index, identity, dim, "set")
    combined = g.scatter(base, index, src, dim, _COMBINE[op])
    if op == "mean":
        ones = g.const(1, acc, src.shape)
        count = g.scatter(g.const(1 if include_self else 0, acc, x.shape), index, ones, dim, "add")
        count = g.binary("max", count, g.const(1, acc, x.shape))  # (untouched: x / 1)
        # Integer means round down, as ATen's div_(count, rounding_mode="floor").
        combined = g.binary("div", combined, count) if acc.is_float else floor_div(combined, count)
    return g.cast(combined, out_dtype)


def _check_index_vector(name: str, index) -> None:
    """The index checks of index_add_/index_reduce_ (ATen's index_func_meta_impl), made before
    their source's dtype is."""
    if index.dim() > 1:
        raise IndexError(f"{name}_(): Index is supposed to be a vector, but got dim: {index.dim()} with "
                         f"type: {dtype_name(index.dtype)} and size: {list(index.shape)}")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{name}_(): Expected dtype int32/int64 for index but got: "
                           f"{dtype_name(index.dtype)}")


def _check_index_source(name: str, x, source) -> None:
    """index_add_/index_reduce_: ``source`` has the dtype of ``x``."""
    if source.dtype != x.dtype:
        raise RuntimeError(f"{name}_(): self ({dtype_name(x.dtype)}) and source ({dtype_name(source.dtype)}) "
                           "must have the same scalar type")


@register(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    # ATen's order (scatter_meta_impl): the dimension, the index's dtype, src's dtype, the reduction
    wrap_dim(dim, x.dim())
    _check_scatter("scatter", x, index, src)
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    idx = g.cast(read(index), dtypes.int64)
    s = read(src)
    if not node.shape:
        node, idx, s = g.reshape(node, (1,)), g.reshape(idx, (1,)), g.reshape(s, (1,))
    elif not idx.shape:
        idx, s = (g.reshape(idx, (1,) * len(node.shape)),
                  g.reshape(s, (1,) * len(node.shape)) if not s.shape else s)
    dim = dim % max(x.dim(), 1)
    check_index(idx, 0, node.shape[dim], x._storage.device, RuntimeError, out_of_bounds(dim, node.shape[dim]))
    out = scatter_reduce_node(node, dim, idx, s, reduce, include_self)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
                           f"{reduce}.")
    _check_index_vector("index_reduce", index)
    _check_index_source("index_reduce", x, source)
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    src = read(source)
    if not node.shape:
        node = g.reshape(node, (1,))
    if not src.shape:
        src = g.reshape(src, (1,))
    dim = dim % max(x.dim(), 1)
    # index_reduce is scatter_reduce with the 1-D index broadcast over source's other axes.
    nd = len(src.shape)
    idx = g.reshape(g.cast(read(index), dtypes.int64), (1,) * dim + (index.numel(),) + (1,) * (nd - dim - 1))
    check_index(idx, 0, node.shape[dim], x._storage.device, IndexError, OUT_OF_RANGE)
    idx = g.expand(idx, src.shape)
    out = scatter_reduce_node(node, dim, idx, src, reduce, include_self)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


def _flat_bool_mask(x, mask, name: str):
    """x and the bool mask broadcast together: (mask node, x node, element count)."""
    if mask.dtype != torch.bool:
        raise RuntimeError(f"{name}: expected BoolTensor for mask")
    shape = broadcast_shape(tuple(x.shape), tuple(mask.shape))
    m = g.reshape(read(mask), (1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    node = read(x)
    node = g.expand(g.reshape(node, (1,) * (len(shape) - x.dim()) + node.shape), shape)
    return g.expand(m, shape), node, math.prod(shape)


@register(aten.masked_select.default)
def masked_select(x, mask):
    m, node, total = _flat_bool_mask(x, mask, "masked_select")
    count, positions = true_positions(g.reshape(m, (total,)), x._storage.device)
    if count == 0:
        return wrap(g.const(0, node.dtype, (0,)), x._storage.device)
    return wrap(index_take(g.reshape(node, (total,)), 0, positions), x._storage.device)


@register(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    if source.dtype != x.dtype:  # (ATen's message has no space after "got")
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{dtype_name(x.dtype)} and {dtype_name(source.dtype)}")
    if mask.dtype != torch.bool:  # (ATen's own message here, not the shared helper's)
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{dtype_name(mask.dtype)}")
    # Out of place, self and mask broadcast together (the in-place form keeps self's shape:
    # dispatch rejects a different result shape).
    m, node, total = _flat_bool_mask(x, mask, "masked_scatter_")
    if total == 0 or source.numel() == 0:
        return wrap(node, x._storage.device)
    flag = g.reshape(m, (total,))
    # The k-th true mask position takes source.flatten()[k]: k = (true entries up to it) - 1.
    k = g.binary("sub", inclusive_count(flag), g.const(1, dtypes.int64, (total,)))
    k = g.binary("min", g.binary("max", k, g.const(0, dtypes.int64, (total,))),
                 g.const(source.numel() - 1, dtypes.int64, (total,)))
    taken = index_take(g.reshape(read(source), (source.numel(),)), 0, k)
    out = g.where(flag, taken, g.reshape(node, (total,)))
    return wrap(g.reshape(out, node.shape), x._storage.device)


@register(aten.put.default)
def put(x, index, source, accumulate=False):
    if index.dtype != torch.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {dtype_name(index.dtype)}")
    if source.dtype != x.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {dtype_name(x.dtype)} and source.dtype = "
                           f"{dtype_name(source.dtype)}")
    if index.numel() != source.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of elements, but got "
                           f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    if x.numel() == 0:
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    total = x.numel()
    flat = g.reshape(node, (total,))
    idx = g.reshape(g.cast(read(index), dtypes.int64), (index.numel(),))
    check_index(idx, -total, total, x._storage.device, IndexError,
                f"out of range: tried to access index {{index}} on a tensor of {total} elements.")
    src = g.reshape(g.cast(read(source), node.dtype), (source.numel(),))
    out = _scatter_node(flat, 0, idx, src, accumulate)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)



@register(aten.masked_scatter_backward.default)
def masked_scatter_backward(grad, mask, sizes):
    """Gradient of masked_scatter's source: grad at the k-th true mask position goes to entry k
    of the (flattened) source, zeros past the mask's count. Built as an add-scatter keyed by
    each position's rank, so the count never has to be known on the host."""
    m, gnode, total = _flat_bool_mask(grad, mask, "masked_scatter_backward")
    numel = math.prod(sizes)
    gnode = g.reshape(gnode, (total,))
    zero = g.const(0, gnode.dtype, (numel,))
    if total == 0 or numel == 0:
        return wrap(g.reshape(zero, tuple(sizes)), grad._storage.device)
    flag = g.reshape(m, (total,))
    rank = g.binary("sub", inclusive_count(flag), g.const(1, dtypes.int64, (total,)))
    # Positions past the source's length cannot occur for valid inputs; clamp keeps them in range.
    idx = g.where(flag, g.binary("min", g.binary("max", rank, g.const(0, dtypes.int64, (total,))),
                                 g.const(numel - 1, dtypes.int64, (total,))),
                  g.const(0, dtypes.int64, (total,)))
    src = g.where(flag, gnode, g.const(0, gnode.dtype, (total,)))
    out = _scatter_node(zero, 0, idx, src, True)
    return wrap(g.reshape(out, tuple(sizes)), grad._storage.device)


def _vector(index) -> Node:
    """The index tensor of index_add/index_copy as a flat int64 node."""
    return g.reshape(g.cast(read(index), dtypes.int64), (index.numel(),))


def _index_dim_source(x, dim, index, source, name: str):
    """Shape checks shared by index_add/index_copy (their index and dtype checks come first);
    returns (x node, dim, index broadcast to source's shape, source node), all at least 1-D."""
    xs = tuple(x.shape) or (1,)
    ss = tuple(source.shape) or (1,)
    d = dim % len(xs)
    mismatch = len(xs) != len(ss) or any(a != b for i, (a, b) in enumerate(zip(xs, ss)) if i != d)
    if mismatch and x.dim() and source.dim():
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified "
                           f"dimension. Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}")
    if ss[d] != index.numel():
        raise RuntimeError(f"{name}_(): Number of indices ({index.numel()}) should be equal to "
                           f"source.size(dim) ({ss[d]})")
    node = g.reshape(read(x), xs)
    src = g.reshape(g.cast(read(source), zdtype(x.dtype)), xs[:d] + (ss[d],) + xs[d + 1:])
    idx = g.reshape(g.cast(read(index), dtypes.int64), (1,) * d + (index.numel(),) + (1,) * (len(xs) - d - 1))
    return node, d, g.expand(idx, src.shape), src


@register(aten.index_add.default)
def index_add(x, dim, index, source, alpha=1):
    _check_index_vector("index_add", index)
    _check_index_source("index_add", x, source)
    if index.numel() == 0:
        return wrap(read(x), x._storage.device)
    node, d, idx, src = _index_dim_source(x, dim, index, source, "index_add")
    check_index(_vector(index), 0, node.shape[d], x._storage.device, IndexError, OUT_OF_RANGE)
    if alpha != 1:
        src = g.binary("mul", src, g.const(alpha, src.dtype, src.shape))
    # (ATen's CPU kernel adds the half values of a 1-D tensor one by one in half precision,
    # those of others in float)
    out = add_at(node, d, idx, src, widen_halves=x.dim() > 1)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.index_copy.default)
def index_copy(x, dim, index, source):
    # (ATen's index_copy meta function: its own messages, and only int64 indices)
    if index.dim() > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()})")
    if index.dtype != torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{dtype_name(index.dtype)}")
    if source.dtype != x.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{dtype_name(x.dtype)} and (source) {dtype_name(source.dtype)}")
    if index.numel() == 0:
        return wrap(read(x), x._storage.device)
    node, d, idx, src = _index_dim_source(x, dim, index, source, "index_copy")
    check_index(_vector(index), 0, node.shape[d], x._storage.device, IndexError,
                "index_copy_(): " + out_of_bounds(d, node.shape[d]))
    out = _scatter_node(node, d, idx, src, False)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.repeat_interleave.Tensor)
def repeat_interleave(repeats, output_size=None):
    """[i repeated repeats[i] times]: out[k] = number of i whose running total ends at or
    before k. The total is the output's size: ``output_size`` or one realized sum."""
    if repeats.dim() > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("repeats has to be Long or Int tensor")
    device = repeats._storage.device
    n = repeats.numel()
    r = g.reshape(g.cast(read(repeats), dtypes.int64), (n,))
    total = output_size
    if total is None:
        total = int(wrap(g.reshape(g.reduce("sum", r, (0,)), ()), device).item()) if n else 0
    if total == 0 or n == 0:
        return wrap(g.const(0, dtypes.int64, (total,)), device)
    rows = g.expand(g.reshape(g.iota((n,)), (n, 1)), (n, n))
    cols = g.expand(g.reshape(g.iota((n,)), (1, n)), (n, n))
    ends = g.reduce("sum", g.where(g.binary("le", cols, rows), g.expand(g.reshape(r, (1, n)), (n, n)),
                                   g.const(0, dtypes.int64, (n, n))), (1,))
    wide = (total, n)
    k = g.expand(g.reshape(g.iota((total,)), (total, 1)), wide)
    done = g.binary("le", g.expand(g.reshape(ends, (1, n)), wide), k)
    return wrap(g.reshape(g.reduce("sum", g.cast(done, dtypes.int64), (1,)), (total,)), device)


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_with_reduce(x, dim, index, src, reduce):
    """The older ``scatter(..., reduce="add"|"multiply")``: scatter_reduce including self."""
    _check_scatter("scatter", x, index, src)  # (before the reduction's name, as ATen's meta function)
    if reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    idx = g.cast(read(index), dtypes.int64)
    s = (g.cast(read(src), node.dtype) if isinstance(src, torch.Tensor)
         else g.const(src, node.dtype, idx.shape))
    if not node.shape:
        node, idx, s = g.reshape(node, (1,)), g.reshape(idx, (1,)), g.reshape(s, (1,))
    dim = dim % max(x.dim(), 1)
    check_index(idx, 0, node.shape[dim], x._storage.device, RuntimeError, out_of_bounds(dim, node.shape[dim]))
    out = scatter_reduce_node(node, dim, idx, s, "sum" if reduce == "add" else "prod", True)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


# ------------------------------------------------------------------------------- segment_reduce


def _segment_bounds(lengths, offsets, lead: tuple[int, ...]) -> tuple[Node, Node]:
    """(start, end) of each segment, int64 (*lead, S): from lengths (exclusive running sum) or
    from offsets (consecutive pairs)."""
    if offsets is not None:
        off = g.cast(read(offsets), dtypes.int64)
        s = off.shape[-1] - 1
        bounds = tuple((0, n) for n in off.shape[:-1])
        return g.shrink(off, bounds + ((0, s),)), g.shrink(off, bounds + ((1, s + 1),))
    length = g.cast(read(lengths), dtypes.int64)
    s = length.shape[-1]
    nl = len(length.shape) - 1
    wide = length.shape[:-1] + (s, s)
    rows = g.expand(g.reshape(g.iota((s,)), (1,) * nl + (s, 1)), wide)
    cols = g.expand(g.reshape(g.iota((s,)), (1,) * nl + (1, s)), wide)
    src = g.expand(g.reshape(length, length.shape[:-1] + (1, s)), wide)
    before = g.where(g.binary("lt", cols, rows), src, g.const(0, dtypes.int64, wide))
    start = g.reshape(g.reduce("sum", before, (nl + 1,)), length.shape)
    return start, g.binary("add", start, length)


def _segment_members(data: Node, axis: int, start: Node, end: Node) -> tuple[Node, Node, tuple[int, ...]]:
    """(member mask, data) both as (*lead, S, L, *rest): member[.., s, q, ..] = q in segment s."""
    lead, n, rest = data.shape[:axis], data.shape[axis], data.shape[axis + 1:]
    s = start.shape[-1]
    wide = lead + (s, n) + rest
    q = g.reshape(g.iota((n,)), (1,) * axis + (1, n) + (1,) * len(rest))
    st = g.reshape(start, lead + (s, 1) + (1,) * len(rest))
    en = g.reshape(end, lead + (s, 1) + (1,) * len(rest))
    member = g.binary("and", g.binary("le", g.expand(st, wide), g.expand(q, wide)),
                      g.binary("lt", g.expand(q, wide), g.expand(en, wide)))
    src = g.expand(g.reshape(data, lead + (1, n) + rest), wide)
    return member, src, wide


# Longest data axis for which half types are summed element after element (see segment_reduce).
_SEQUENTIAL_HALF_MAX = 64
_SEGMENT_DEFAULT = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


@register(aten.segment_reduce.default)
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                   initial=None):
    if reduce not in _SEGMENT_DEFAULT:
        raise RuntimeError(f"reduce argument must be either sum, prod, max, min or mean, got {reduce}")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined")
    axis = axis % max(data.dim(), 1)
    node = read(data)
    acc = _acc(node.dtype)
    x = g.cast(node, acc)
    start, end = _segment_bounds(lengths, offsets, tuple(data.shape[:axis]))
    member, src, wide = _segment_members(x, axis, start, end)
    red = axis + 1  # the data axis inside ``wide``
    init = _SEGMENT_DEFAULT[reduce] if initial is None else float(initial)
    op = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "max", "min": "min"}[reduce]
    neutral = {"sum": 0, "prod": 1, "max": float("-inf"), "min": float("inf")}[op]
    out_shape = wide[:red] + wide[red + 1:]
    init_node = g.const(init, acc, out_shape)
    if op in ("sum", "prod") and node.dtype != acc and wide[red] <= _SEQUENTIAL_HALF_MAX:
        # ATen accumulates half types in their own precision, element after element: a float32
        # sum differs from it after cancellation, so the running value is rounded the same way.
        out = init_node
        for q in range(wide[red]):
            at = tuple((q, q + 1) if i == red else (0, n) for i, n in enumerate(wide))
            m, v = g.reshape(g.shrink(member, at), out_shape), g.reshape(g.shrink(src, at), out_shape)
            step = g.cast(g.cast(g.binary("add" if op == "sum" else "mul", out, v), node.dtype), acc)
            out = g.where(m, step, out)
    else:
        picked = g.where(member, src, g.const(neutral, acc, wide))
        out = g.reshape(g.reduce(op, picked, (red,)), out_shape)
    if op in ("max", "min"):
        has_nan = g.reshape(g.reduce("max", g.binary("and", member, g.unary("isnan", src)), (red,)),
                            out_shape)
        out = g.binary(op, out, init_node)
        out = g.where(has_nan, g.const(float("nan"), acc, out_shape), out)
    elif node.dtype == acc or wide[red] > _SEQUENTIAL_HALF_MAX:
        out = g.binary("add" if op == "sum" else "mul", out, init_node)
    if reduce == "mean":
        length = g.binary("sub", end, start)
        length = g.expand(g.reshape(length, length.shape + (1,) * (len(out_shape) - len(length.shape))),
                          out_shape)
        empty = g.binary("eq", length, g.const(0, dtypes.int64, out_shape))
        mean = g.binary("div", out, g.cast(length, acc))
        fill = g.const(float("nan") if initial is None else init, acc, out_shape)
        out = g.where(empty, fill, mean)
    return wrap(g.cast(out, node.dtype), data._storage.device)


@register(aten._segment_reduce_backward.default)
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    axis = axis % max(data.dim(), 1)
    node = read(data)
    acc = _acc(node.dtype)
    x = g.cast(node, acc)
    gy, out = g.cast(read(grad), acc), g.cast(read(output), acc)
    start, end = _segment_bounds(lengths, offsets, tuple(data.shape[:axis]))
    member, src, wide = _segment_members(x, axis, start, end)
    red = axis + 1

    def per_segment(v: Node) -> Node:  # (*lead, S, *rest) → wide
        return g.expand(g.reshape(v, v.shape[:red] + (1,) + v.shape[red:]), wide)

    zero = g.const(0, acc, wide)
    gw = per_segment(gy)
    if reduce == "sum":
        share = gw
    elif reduce == "mean":
        length = g.cast(g.binary("sub", end, start), acc)
        length = g.reshape(length, length.shape + (1,) * (len(gy.shape) - len(length.shape)))
        share = g.binary("div", gw, per_segment(g.binary("max", g.expand(length, gy.shape),
                                                         g.const(1, acc, gy.shape))))
    elif reduce in ("max", "min"):
        # Ties share the gradient equally (ATen divides by the number of maximal elements).
        hit = g.binary("and", member, g.binary("or", g.binary("eq", src, per_segment(out)),
                                               g.binary("and", g.unary("isnan", src),
                                                        g.unary("isnan", per_segment(out)))))
        ties = g.reduce("sum", g.cast(hit, acc), (red,))
        ties = g.binary("max", ties, g.const(1, acc, ties.shape))
        share = g.where(hit, g.binary("div", gw, g.expand(ties, wide)), zero)
    else:  # prod: product of the other members (times initial), zeros handled without division
        is_zero = g.binary("and", member, g.binary("eq", src, zero))
        zeros = g.expand(g.reduce("sum", g.cast(is_zero, acc), (red,)), wide)
        nonzero = g.where(g.binary("and", member, g.unary("not", is_zero)), src, g.const(1, acc, wide))
        rest_prod = g.expand(g.reduce("prod", nonzero, (red,)), wide)
        if initial is not None:
            rest_prod = g.binary("mul", rest_prod, g.const(float(initial), acc, wide))
        one = g.const(1, acc, wide)
        others = g.where(is_zero, g.where(g.binary("eq", zeros, one), rest_prod, zero),
                         g.where(g.binary("lt", zero, zeros), zero, g.binary("div", rest_prod, src)))
        share = g.binary("mul", gw, others)
    contrib = g.where(member, share, zero)
    total = g.reduce("sum", contrib, (red - 1,))  # each data position is in at most one segment
    total = g.reshape(total, wide[:red - 1] + wide[red:])
    return wrap(g.cast(total, node.dtype), grad._storage.device)
