"""Scan lowerings: cumsum, cumprod, cummax/cummin (with indices), logcumsumexp.

There is no scan primitive: out[i] = reduce_{j <= i} x[j] is a reduce over a new trailing axis
of an (n x n) masked pair tensor, which fuses with the surrounding elementwise ops, is exact for
integers and needs no sequential loop in the kernel IR. That is O(n^2) work, so a long scan is
blocked: each block of ``SCAN_BLOCK`` elements is scanned so, the blocks' totals are scanned the
same way (blocked again where there are many) and each block's elements combined with the total
of the blocks before it: O(n * SCAN_BLOCK) work (a cumsum over a 50,257-token vocabulary was 2.5
billion operations a row). ``pairs`` builds the pair view shared with the sort lowerings
(ops/indexing/sort.py).
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.pending import unsupported
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..registry import aten, dtype_name, register
from .reduce import _accumulate_dtype, _sum_dtype, check_dim


def pairs(node: Node, dim: int) -> tuple[Node, Node, Node, Node]:
    """(x_i, x_j, i, j) over ``node.shape + (n,)``: axis ``dim`` indexes i, the new last axis j.

    x_i[..., i, ..., j] = x[..., i, ...] and x_j[..., i, ..., j] = x[..., j, ...]; i and j are
    the int64 positions. Reducing over the last axis gives one value per element.
    """
    shape = node.shape
    n = shape[dim]
    nd = len(shape)
    wide = shape + (n,)
    x_i = g.expand(g.reshape(node, shape + (1,)), wide)
    perm = list(range(nd))
    x_j = g.permute(g.reshape(node, shape + (1,)), tuple(perm[:dim] + [nd] + perm[dim + 1:] + [dim]))
    x_j = g.expand(x_j, wide)
    i_pos = g.expand(g.reshape(g.iota((n,)), tuple(n if k == dim else 1 for k in range(nd)) + (1,)), wide)
    j_pos = g.expand(g.reshape(g.iota((n,)), (1,) * nd + (n,)), wide)
    return x_i, x_j, i_pos, j_pos


def lowest(dtype: dtypes.DType):
    """The identity of max (NaN aside): -inf, the integer minimum, or False."""
    if dtype.is_float:
        return float("-inf")
    if dtype.kind == "b":
        return False
    return 0 if dtype.kind == "u" else -(1 << (dtype.itemsize * 8 - 1))


def highest(dtype: dtypes.DType):
    if dtype.is_float:
        return float("inf")
    if dtype.kind == "b":
        return True
    bits = dtype.itemsize * 8 - (dtype.kind != "u")
    return (1 << bits) - 1


# Scans longer than this are blocked into scans of this many elements (see the module docstring).
SCAN_BLOCK = 16
# The element op that combines two partial results of each reduce.
_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


def masked_scan(op: str, node: Node, dim: int, fill) -> Node:
    """out[..., i, ...] = reduce_op over j <= i of x[..., j, ...] (``fill``: op's identity)."""
    n = node.shape[dim]
    if n > SCAN_BLOCK:
        return _blocked_scan(op, node, dim, fill)
    _x_i, x_j, i_pos, j_pos = pairs(node, dim)
    wide = x_j.shape
    masked = g.where(g.binary("le", j_pos, i_pos), x_j, g.const(fill, node.dtype, wide))
    return g.reshape(g.reduce(op, masked, (len(node.shape),)), node.shape)


def _blocked_scan(op: str, node: Node, dim: int, fill) -> Node:
    """``masked_scan`` of a long axis: scans of blocks, offset by the scan of their totals."""
    nd, n = len(node.shape), node.shape[dim]
    blocks = -(-n // SCAN_BLOCK)
    order = tuple(k for k in range(nd) if k != dim) + (dim,)
    last = g.permute(node, order) if dim != nd - 1 else node
    outer = last.shape[:-1]
    padded = _pad_last(last, blocks * SCAN_BLOCK - n, fill)
    inner = masked_scan(op, g.reshape(padded, outer + (blocks, SCAN_BLOCK)), nd, fill)
    totals = g.reshape(g.shrink(inner, tuple((0, s) for s in outer) + ((0, blocks), (SCAN_BLOCK - 1, SCAN_BLOCK))),
                       outer + (blocks,))
    # Each block's offset: the scan of the totals of the blocks before it (fill for the first).
    scanned = masked_scan(op, totals, nd - 1, fill)
    before = _pad_last(g.shrink(scanned, tuple((0, s) for s in outer) + ((0, blocks - 1),)), -1, fill)
    offsets = g.expand(g.reshape(before, outer + (blocks, 1)), outer + (blocks, SCAN_BLOCK))
    out = g.reshape(g.binary(_COMBINE[op], offsets, inner), outer + (blocks * SCAN_BLOCK,))
    out = g.shrink(out, tuple((0, s) for s in outer) + ((0, n),))
    if dim == nd - 1:
        return out
    inverse = tuple(order.index(k) for k in range(nd))
    return g.permute(out, inverse)


def _pad_last(x: Node, count: int, fill) -> Node:
    """``x`` with ``count`` elements of value ``fill`` after its last axis (-count: before it)."""
    if count == 0:
        return x
    widths = ((0, 0),) * (len(x.shape) - 1) + ((0, count) if count > 0 else (-count, 0),)
    inside = g.pad(g.const(True, dtypes.bool_, x.shape), widths)
    padded = g.pad(x, widths)
    return g.where(inside, padded, g.const(fill, x.dtype, padded.shape))


def _scan(x, dim, dtype, op: str, fill):
    check_dim(x, dim)
    out_dtype = zdtype(_sum_dtype(x, dtype))
    node = g.cast(read(x), _accumulate_dtype(out_dtype))
    if not node.shape or node.numel == 0:
        return wrap(g.cast(node, out_dtype), x._storage.device)
    out = masked_scan(op, node, dim % x.dim(), fill)
    return wrap(g.cast(out, out_dtype), x._storage.device)


@register(aten.cumsum.default)
def cumsum(x, dim, dtype=None):
    return _scan(x, dim, dtype, "sum", 0)


@register(aten.cumprod.default)
def cumprod(x, dim, dtype=None):
    return _scan(x, dim, dtype, "prod", 1)


def _cum_extreme(x, dim, op: str):
    dim = check_dim(x, dim)
    node = read(x)
    dev = x._storage.device
    if not node.shape or node.numel == 0:
        return wrap(node, dev), wrap(g.const(0, dtypes.int64, node.shape), dev)
    fill = lowest(node.dtype) if op == "max" else highest(node.dtype)
    values = masked_scan(op, node, dim, fill)
    # ATen's loop moves the index on every x[j] >= running max (<= for min) and on every NaN:
    # the index is the last j <= i holding the running extreme (the last NaN once one is seen).
    _x_i, x_j, i_pos, j_pos = pairs(node, dim)
    ext = g.expand(g.reshape(values, node.shape + (1,)), x_j.shape)
    hit = g.binary("eq", x_j, ext)
    if node.dtype.is_float:
        hit = g.binary("or", hit, g.binary("and", g.unary("isnan", x_j), g.unary("isnan", ext)))
    hit = g.binary("and", hit, g.binary("le", j_pos, i_pos))
    index = g.reduce("max", g.where(hit, j_pos, g.const(-1, dtypes.int64, x_j.shape)), (len(node.shape),))
    return wrap(values, dev), wrap(g.reshape(index, node.shape), dev)


@register(aten.cummax.default)
def cummax(x, dim):
    return _cum_extreme(x, dim, "max")


@register(aten.cummin.default)
def cummin(x, dim):
    return _cum_extreme(x, dim, "min")


@register(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    dim = check_dim(x, dim)
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(f"logcumsumexp(): Expected floating point or complex input, got {x.dtype}")
    node = read(x)
    out_dtype = node.dtype
    node = g.cast(node, _accumulate_dtype(node.dtype))
    if not node.shape or node.numel == 0:
        return wrap(g.cast(node, out_dtype), x._storage.device)
    # Shift by the running maximum (0 where it is infinite, so inf - inf never makes NaN).
    m = masked_scan("max", node, dim, float("-inf"))
    shift = g.where(g.finite(m), m, g.const(0.0, m.dtype, m.shape))
    _x_i, x_j, i_pos, j_pos = pairs(node, dim)
    s = g.expand(g.reshape(shift, node.shape + (1,)), x_j.shape)
    e = g.unary("exp", g.binary("sub", x_j, s))
    e = g.where(g.binary("le", j_pos, i_pos), e, g.const(0.0, e.dtype, e.shape))
    total = g.reshape(g.reduce("sum", e, (len(node.shape),)), node.shape)
    out = g.binary("add", g.unary("log", total), shift)
    return wrap(g.cast(out, out_dtype), x._storage.device)



@register(aten.bincount.default)
def bincount(x, weights=None, minlength=0):
    """Counts (or weight sums) per value: a one-hot (n x bins) compare reduced over n. The number
    of bins, max(x) + 1, is data: it is read back in one sync together with min(x) (negative
    values are an error, as in ATen)."""
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise unsupported(f"\"bincount_cpu\" not implemented for '{dtype_name(x.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if x.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    node = g.cast(read(x), dtypes.int64)
    dev = x._storage.device
    n = node.shape[0]
    if weights is None:
        out_dtype = dtypes.int64
    else:
        out_dtype = zdtype(weights.dtype if weights.dtype in (torch.float32, torch.float64)
                           else torch.float64)
    bins = minlength
    if n:
        extremes = g.pad(g.reshape(g.reduce("max", node, (0,)), (1,)), ((0, 1),))
        low = g.reshape(g.reduce("min", node, (0,)), (1,))
        extremes = g.binary("add", extremes, g.pad(low, ((1, 0),)))
        top, bottom = wrap(extremes, dev).tolist()
        if bottom < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        bins = max(bins, top + 1)
    if n == 0 or bins == 0:
        return wrap(g.const(0, out_dtype, (bins,)), dev)
    values = g.expand(g.reshape(node, (n, 1)), (n, bins))
    slots = g.expand(g.reshape(g.iota((bins,)), (1, bins)), (n, bins))
    hit = g.binary("eq", values, slots)
    if weights is None:
        contrib = g.cast(hit, dtypes.int64)
    else:
        w = g.expand(g.reshape(g.cast(read(weights), out_dtype), (n, 1)), (n, bins))
        contrib = g.where(hit, w, g.const(0, out_dtype, (n, bins)))
    return wrap(g.reshape(g.reduce("sum", contrib, (0,)), (bins,)), dev)
