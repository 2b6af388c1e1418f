"""Searching and counting lowerings: searchsorted, unique, unique_consecutive, histc.

zyx style: no binary search and no hash table. A search is a count of comparisons (the
insertion point of v in a sorted row is the number of entries before which v does not
belong: one compare over (values, row) and a sum). unique ranks every element among the
first occurrences of distinct values with the same kind of compare-and-count, so its values
come out sorted. Output sizes that depend on the data (how many distinct values) are
realized: one count crosses to the host (the same realization trigger as nonzero); every
other part of the result stays lazy.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, read, wrap
from ...record.transfer import zdtype
from ..registry import aten, register, result_dtype
from .index import inclusive_count

# ------------------------------------------------------------------------------- searchsorted


def _count_before(seq: Node, values: Node, right: bool) -> Node:
    """Insertion points of ``values`` (..., N) into the sorted last axis of ``seq`` (..., M):
    how many entries e satisfy !(e >= v) (left) or !(e > v) (right). NaN values land at the
    end and NaN entries (sorted last) count before every value, as ATen's binary search."""
    n, m = values.shape[-1], seq.shape[-1]
    lead = values.shape[:-1]
    wide = lead + (n, m)
    e = g.expand(g.reshape(seq, seq.shape[:-1] + (1, m)), wide)
    v = g.expand(g.reshape(values, lead + (n, 1)), wide)
    after = g.binary("lt", v, e) if right else g.binary("le", v, e)  # e > v  /  e >= v
    before = g.cast(g.unary("not", after), dtypes.int64)
    return g.reshape(g.reduce("sum", before, (len(wide) - 1,)), lead + (n,))


def _searchsorted(seq, values, out_int32, right, side, sorter):
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"side can only be 'left' or 'right' but got {side}")
    if side is not None and right and side == "left":
        raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                           "while right was True")
    right = right or side == "right"
    scalar = not isinstance(values, torch.Tensor)
    if seq.dim() == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but "
                           "got 0 dimension")
    if not scalar and seq.dim() != 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           "dimensions of boundaries tensor and input value tensor must match, but we got "
                           f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    if sorter is not None:
        if sorter.dtype != torch.int64:
            raise RuntimeError("torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                               f"{str(sorter.dtype).split('.')[-1].capitalize()}")
        if tuple(sorter.shape) != tuple(seq.shape):
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same size, but got "
                               f"boundary tensor {list(seq.shape)} and got sorter tensor "
                               f"{list(sorter.shape)}")
        seq = torch.gather(seq, -1, sorter)  # the row in sorted order (a lowered gather)
    compute, _ = result_dtype(seq, values)
    zc = zdtype(compute)
    s = g.cast(read(seq), zc)
    if scalar:
        v = g.const(values, zc, (1,) * max(seq.dim(), 1))
        out_shape = ()
    else:
        v = g.cast(read(values), zc) if isinstance(values, ZyxTensor) else g.const(values.item(), zc)
        out_shape = tuple(values.shape)
    if seq.dim() == 1:  # one row for all values
        v = g.reshape(v, (1, max(1, v.numel)) if v.numel else (1, 0))
        s = g.reshape(s, (1, s.shape[0]))
    elif not v.shape:
        v = g.reshape(v, (1,))
    counts = _count_before(s, v, right)
    out = g.cast(g.reshape(counts, out_shape), dtypes.int32 if out_int32 else dtypes.int64)
    return wrap(out, seq._storage.device)


@register(aten.searchsorted.Tensor)
def searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(seq, values, out_int32, right, side, sorter)


@register(aten.searchsorted.Scalar)
def searchsorted_scalar(seq, value, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(seq, value, out_int32, right, side, sorter)


@register(aten.bucketize.Tensor)
def bucketize(values, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, values, out_int32, right, None, None)


# ------------------------------------------------------------------------------- unique


def _comparable(node: Node) -> Node:
    return g.cast(node, dtypes.int64) if node.dtype == dtypes.bool_ else node


def _count(flag: Node, device) -> int:
    """How many entries of 1-D bool ``flag`` are true: a data-dependent output size, realized."""
    if flag.shape[0] == 0:
        return 0
    total = g.reshape(g.reduce("sum", g.cast(flag, dtypes.int64), (0,)), ())
    return int(wrap(total, device).item())


def _rows(x, dim) -> tuple[Node, tuple[int, ...]]:
    """``x`` as (n, r) rows: the slices along ``dim`` (all elements as rows of one when dim is
    None), with the shape the picked rows are put back into (dim first)."""
    node = read(x)
    if dim is None:
        return g.reshape(node, (x.numel(), 1)), ()
    nd = x.dim()
    order = (dim,) + tuple(i for i in range(nd) if i != dim)
    moved = g.permute(node, order)
    rest = moved.shape[1:]
    return g.reshape(moved, (moved.shape[0], int(torch.Size(rest).numel()))), rest


def _row_pairs(rows: Node) -> tuple[Node, Node]:
    """(equal, less): (n, n) bools, [i, j] = row j equals / sorts before row i (lexicographic:
    decided at the first column where they differ)."""
    n, r = rows.shape
    cmp = _comparable(rows)
    wide = (n, n, r)
    ri = g.expand(g.reshape(cmp, (n, 1, r)), wide)
    rj = g.expand(g.reshape(cmp, (1, n, r)), wide)
    differ = g.binary("ne", rj, ri)
    equal = g.unary("not", g.reshape(g.reduce("max", differ, (2,)), (n, n)))
    if r == 1:
        return equal, g.reshape(g.binary("lt", rj, ri), (n, n))
    col = g.expand(g.reshape(g.iota((r,)), (1, 1, r)), wide)
    first = g.reduce("min", g.where(differ, col, g.const(r, dtypes.int64, wide)), (2,))
    at_first = g.binary("eq", col, g.expand(first, wide))
    less = g.reduce("max", g.binary("and", at_first, g.binary("lt", rj, ri)), (2,))
    return equal, g.reshape(less, (n, n))


def _pick_rows(flag: Node, slot: Node, rows: Node, count: int) -> Node:
    """out[k] = the row at the (single) position i with flag[i] and slot[i] == k: (count, r)."""
    n, r = rows.shape
    wide = (count, n, r)
    k = g.expand(g.reshape(g.iota((count,)), (count, 1, 1)), wide)
    hit = g.binary("and", g.binary("eq", g.expand(g.reshape(slot, (1, n, 1)), wide), k),
                   g.expand(g.reshape(flag, (1, n, 1)), wide))
    src = g.expand(g.reshape(rows, (1, n, r)), wide)
    if rows.dtype == dtypes.bool_:
        return g.reshape(g.reduce("max", g.binary("and", hit, src), (1,)), (count, r))
    return g.reshape(g.reduce("sum", g.where(hit, src, g.const(0, rows.dtype, wide)), (1,)), (count, r))


def _histogram_of(slot: Node, count: int) -> Node:
    """counts[k] = how many entries of ``slot`` equal k: (count,) int64."""
    n = slot.shape[0]
    wide = (count, n)
    k = g.expand(g.reshape(g.iota((count,)), (count, 1)), wide)
    hit = g.binary("eq", g.expand(g.reshape(slot, (1, n)), wide), k)
    return g.reshape(g.reduce("sum", g.cast(hit, dtypes.int64), (1,)), (count,))


def _unique_result(x, dim, rows, rest, first, slot, count, return_inverse, return_counts):
    dev = x._storage.device
    n = rows.shape[0]
    none = g.const(0, dtypes.int64, (0,))
    if count:
        picked = _pick_rows(first, slot, rows, count)
    else:
        picked = g.const(0, rows.dtype, (0, rows.shape[1]))
    if dim is None:
        values = g.reshape(picked, (count,))
        inverse = g.reshape(slot, tuple(x.shape)) if return_inverse else none
    else:
        values = g.reshape(picked, (count,) + tuple(rest))
        nd = x.dim()
        back = list(range(1, nd))
        back.insert(dim, 0)
        values = g.permute(values, tuple(back))
        inverse = slot if return_inverse else none
    counts = _histogram_of(slot, count) if return_counts and count and n else none
    return wrap(values, dev), wrap(inverse, dev), wrap(counts, dev)


def _unique(x, dim, return_inverse, return_counts):
    """Distinct values (or slices along ``dim``) in ascending (lexicographic) order, as CPU
    torch returns them whether or not ``sorted`` is set; the slot of each input element and
    how often each value occurs."""
    rows, rest = _rows(x, dim)
    n = rows.shape[0]
    if n == 0 or rows.shape[1] == 0 and dim is not None:
        if n and dim is not None:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be "
                               "applied ")
        first = g.const(True, dtypes.bool_, (n,))
        slot = g.const(0, dtypes.int64, (n,))
        return _unique_result(x, dim, rows, rest, first, slot, 0 if n == 0 else 1, return_inverse,
                              return_counts)
    equal, less = _row_pairs(rows)
    wide = (n, n)
    cols = g.expand(g.reshape(g.iota((n,)), (1, n)), wide)
    rows_i = g.expand(g.reshape(g.iota((n,)), (n, 1)), wide)
    # first[i]: no earlier row j is equal to row i; slot[i]: distinct rows sorting before it.
    seen = g.binary("and", equal, g.binary("lt", cols, rows_i))
    first = g.reshape(g.unary("not", g.reduce("max", seen, (1,))), (n,))
    count = _count(first, x._storage.device)
    smaller = g.binary("and", less, g.expand(g.reshape(first, (1, n)), wide))
    slot = g.reshape(g.reduce("sum", g.cast(smaller, dtypes.int64), (1,)), (n,))
    return _unique_result(x, dim, rows, rest, first, slot, count, return_inverse, return_counts)


@register(aten._unique2.default)
def unique2(x, sorted=True, return_inverse=False, return_counts=False):
    return _unique(x, None, return_inverse, return_counts)


@register(aten._unique.default)
def unique(x, sorted=True, return_inverse=False):
    """The older form (index_fill's gradient for its value uses it): values and inverse only."""
    return _unique(x, None, return_inverse, False)[:2]


@register(aten.unique_dim.default)
def unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique(x, dim % max(x.dim(), 1), return_inverse, return_counts)


@register(aten.unique_consecutive.default)
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is not None:
        dim = dim % max(x.dim(), 1)
    rows, rest = _rows(x, dim)
    n = rows.shape[0]
    if n == 0:
        return _unique_result(x, dim, rows, rest, g.const(True, dtypes.bool_, (0,)),
                              g.const(0, dtypes.int64, (0,)), 0, return_inverse, return_counts)
    # A run starts where the row differs from its left neighbour.
    cmp = _comparable(rows)
    prev = g.pad(g.shrink(cmp, ((0, n - 1), (0, rows.shape[1]))), ((1, 0), (0, 0)))
    starts = g.reshape(g.reduce("max", g.binary("ne", cmp, prev), (1,)), (n,)) if rows.shape[1] else \
        g.const(False, dtypes.bool_, (n,))
    starts = g.binary("or", starts, g.binary("eq", g.iota((n,)), g.const(0, dtypes.int64, (n,))))
    count = _count(starts, x._storage.device)
    slot = g.binary("sub", inclusive_count(starts), g.const(1, dtypes.int64, (n,)))
    return _unique_result(x, dim, rows, rest, starts, slot, count, return_inverse, return_counts)


# ------------------------------------------------------------------------------- histograms


@register(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    """Counts of ``x`` in ``bins`` equal-width bins over [min, max] (the data's range when both
    are 0: two reductions, realized to decide the bin edges as ATen does)."""
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins} for dimension 0")
    dev = x._storage.device
    node = read(x)
    dtype = node.dtype
    flat = g.reshape(node, (x.numel(),))
    n = x.numel()
    lo, hi = float(min), float(max)
    if lo == hi and n:
        lo = float(wrap(g.reshape(g.reduce("min", flat, (0,)), ()), dev).item())
        hi = float(wrap(g.reshape(g.reduce("max", flat, (0,)), ()), dev).item())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError(f"torch.histc: max must be larger than min, but got min {lo} max {hi}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    shape = (n,)

    def rounded(v: Node) -> Node:
        # ATen computes in the input type: a half result is rounded after every operation.
        if dtype in (dtypes.float16, dtypes.bfloat16):
            return g.cast(g.cast(v, dtypes.float32), dtype)
        return v

    low, high = g.const(lo, dtype, shape), g.const(hi, dtype, shape)
    inside = g.binary("and", g.binary("le", low, flat), g.binary("le", flat, high))
    # ATen: bin = (x - min) * bins / (max - min), truncated; x == max goes in the last bin.
    pos = rounded(g.binary("mul", rounded(g.binary("sub", flat, low)), g.const(bins, dtype, shape)))
    pos = rounded(g.binary("div", pos, rounded(g.binary("sub", high, low))))
    slot = g.binary("min", g.cast(pos, dtypes.int64), g.const(bins - 1, dtypes.int64, shape))
    slot = g.where(inside, slot, g.const(-1, dtypes.int64, shape))
    counts = _histogram_of(slot, bins) if n else g.const(0, dtypes.int64, (bins,))
    return wrap(g.cast(counts, dtype), dev)
