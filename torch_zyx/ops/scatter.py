"""Reducing scatters and mask-driven copies: scatter_reduce, index_reduce, masked_select,
masked_scatter, put.

All are one-hot constructions like ``index.py``'s: a wide tensor ``x.shape + (m,)`` marks
which of the m source entries land on each output element, and a reduce over that last axis
combines them (sum/prod/max/min/count). masked_select has a data-dependent size: the count of
true mask entries is realized, everything else stays lazy.
"""

from __future__ import annotations

import math

import torch

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import read, wrap, zdtype
from .elementwise import floor_div
from .index import _onehot_take, _scatter_node, inclusive_count, scatter_hits, true_positions
from .registry import aten, broadcast_shape, register

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
        if dtype.is_float:
            return float("-inf") if op == "amax" else float("inf")
        info = torch.iinfo(torch.int64 if dtype.itemsize == 8 else torch.int32)
        return info.min if op == "amax" else info.max
    return 0


def scatter_reduce_node(x: Node, dim: int, index: Node, src: Node, op: str, include_self: bool) -> Node:
    """x with the src entries scattered along ``dim`` combined by ``op`` (PyTorch's scatter_reduce)."""
    out_dtype = x.dtype
    acc = _acc(out_dtype)
    x, src = g.cast(x, acc), g.cast(src, acc)
    nd = len(x.shape)
    hit, src_w = scatter_hits(x, dim, index, src)
    wide = hit.shape
    rop = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}[op]
    picked = g.reduce(rop, g.where(hit, src_w, g.const(_identity(op, acc), acc, wide)), (nd,))
    picked = g.reshape(picked, x.shape)
    any_hit = g.reshape(g.reduce("max", hit, (nd,)), x.shape)
    if op == "mean":
        count = g.reshape(g.reduce("sum", g.cast(hit, acc), (nd,)), x.shape)
        if include_self:
            picked = g.binary("add", picked, x)
            count = g.binary("add", count, g.const(1, acc, x.shape))
        count = g.binary("max", count, g.const(1, acc, x.shape))
        # Integer means round down, as ATen's div_(count, rounding_mode="floor").
        combined = g.binary("div", picked, count) if acc.is_float else floor_div(picked, count)
    elif not include_self:
        combined = picked
    else:
        combined = g.binary({"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[op], x, picked)
    return g.cast(g.where(any_hit, combined, x), out_dtype)


def _check_reduce(reduce: str, name: str, allowed=_REDUCES) -> None:
    if reduce not in allowed:
        raise RuntimeError(f"{name}(): Expected reduce argument to be one of {', '.join(allowed)}, "
                           f"but got {reduce}.")


@register(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    _check_reduce(reduce, "reduce")
    if index.dtype not in (torch.int64, torch.int32) and index.numel():
        raise RuntimeError("scatter_reduce(): Expected dtype int32/int64 for index")
    if src.dtype != x.dtype:
        raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype but got "
                           f"{x.dtype} and {src.dtype}")
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    idx = g.cast(read(index), dtypes.int64)
    s = read(src)
    if not node.shape:
        node, idx, s = g.reshape(node, (1,)), g.reshape(idx, (1,)), g.reshape(s, (1,))
    elif not idx.shape:
        idx, s = g.reshape(idx, (1,) * len(node.shape)), g.reshape(s, (1,) * len(node.shape)) if not s.shape else s
    dim = dim % max(x.dim(), 1)
    out = scatter_reduce_node(node, dim, idx, s, reduce, include_self)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, include_self=True):
    _check_reduce(reduce, "index_reduce", ("prod", "mean", "amax", "amin"))
    if index.dim() > 1:
        raise IndexError("index_reduce_(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("index_reduce_(): Expected dtype int32/int64 for index")
    if source.dtype != x.dtype:
        raise RuntimeError("index_reduce_(): self and source must have the same scalar type")
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
    return wrap(_onehot_take(g.reshape(node, (total,)), 0, positions), x._storage.device)


@register(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    if source.dtype != x.dtype:
        raise RuntimeError(f"masked_scatter_: expected self and source to have same dtypes but got "
                           f"{x.dtype} and {source.dtype}")
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
    taken = _onehot_take(g.reshape(read(source), (source.numel(),)), 0, k)
    out = g.where(flag, taken, g.reshape(node, (total,)))
    return wrap(g.reshape(out, node.shape), x._storage.device)


@register(aten.put.default)
def put(x, index, source, accumulate=False):
    if index.dtype != torch.int64:
        raise RuntimeError("put_(): Expected a long tensor for index, but got " + str(index.dtype))
    if source.dtype != x.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {x.dtype} and source.dtype = {source.dtype}")
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
                                 g.const(numel - 1, dtypes.int64, (total,))), g.const(0, dtypes.int64, (total,)))
    src = g.where(flag, gnode, g.const(0, gnode.dtype, (total,)))
    out = _scatter_node(zero, 0, idx, src, True)
    return wrap(g.reshape(out, tuple(sizes)), grad._storage.device)


def _index_dim_source(x, dim, index, source, name: str):
    """Checks shared by index_add/index_copy; returns (x node, dim, index broadcast to source's
    shape, source node), all at least 1-D."""
    if index.dim() > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    xs = tuple(x.shape) or (1,)
    ss = tuple(source.shape) or (1,)
    d = dim % len(xs)
    mismatch = len(xs) != len(ss) or any(a != b for i, (a, b) in enumerate(zip(xs, ss)) if i != d)
    if mismatch and x.dim() and source.dim():
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified "
                           f"dimension. Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}")
    if ss[d] != index.numel():
        raise RuntimeError(f"{name}_(): Number of indices ({index.numel()}) should be equal to source.size(dim) "
                           f"({ss[d]})")
    node = g.reshape(read(x), xs)
    src = g.reshape(g.cast(read(source), zdtype(x.dtype)), xs[:d] + (ss[d],) + xs[d + 1:])
    idx = g.reshape(g.cast(read(index), dtypes.int64), (1,) * d + (index.numel(),) + (1,) * (len(xs) - d - 1))
    return node, d, g.expand(idx, src.shape), src


@register(aten.index_add.default)
def index_add(x, dim, index, source, alpha=1):
    if source.dtype != x.dtype:
        raise RuntimeError("index_add_(): self and source must have the same scalar type")
    if index.numel() == 0:
        return wrap(read(x), x._storage.device)
    node, d, idx, src = _index_dim_source(x, dim, index, source, "index_add")
    if alpha != 1:
        src = g.binary("mul", src, g.const(alpha, src.dtype, src.shape))
    out = scatter_reduce_node(node, d, idx, src, "sum", True)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.index_copy.default)
def index_copy(x, dim, index, source):
    if source.dtype != x.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{x.dtype} and (source) {source.dtype}")
    if index.numel() == 0:
        return wrap(read(x), x._storage.device)
    node, d, idx, src = _index_dim_source(x, dim, index, source, "index_copy")
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
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply. Got {reduce}")
    if index.dtype not in (torch.int64, torch.int32) and index.numel():
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    node = read(x)
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    idx = g.cast(read(index), dtypes.int64)
    s = g.cast(read(src), node.dtype) if isinstance(src, torch.Tensor) else g.const(src, node.dtype, idx.shape)
    if not node.shape:
        node, idx, s = g.reshape(node, (1,)), g.reshape(idx, (1,)), g.reshape(s, (1,))
    dim = dim % max(x.dim(), 1)
    out = scatter_reduce_node(node, dim, idx, s, "sum" if reduce == "add" else "prod", True)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)
