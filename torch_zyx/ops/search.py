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

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import ZyxTensor, read, wrap, zdtype
from .index import inclusive_count
from .registry import aten, register, result_dtype

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
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
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
                               f"boundary tensor {list(seq.shape)} and got sorter tensor {list(sorter.shape)}")
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


def _pick(flag: Node, slot: Node, values: Node, count: int) -> Node:
    """out[k] = the value at the (single) position i with flag[i] and slot[i] == k: (count,)."""
    n = flag.shape[0]
    wide = (count, n)
    k = g.expand(g.reshape(g.iota((count,)), (count, 1)), wide)
    hit = g.binary("and", g.binary("eq", g.expand(g.reshape(slot, (1, n)), wide), k),
                   g.expand(g.reshape(flag, (1, n)), wide))
    src = g.expand(g.reshape(values, (1, n)), wide)
    if values.dtype == dtypes.bool_:
        return g.reshape(g.reduce("max", g.binary("and", hit, src), (1,)), (count,))
    return g.reshape(g.reduce("sum", g.where(hit, src, g.const(0, values.dtype, wide)), (1,)), (count,))


def _histogram_of(slot: Node, count: int) -> Node:
    """counts[k] = how many entries of ``slot`` equal k: (count,) int64."""
    n = slot.shape[0]
    wide = (count, n)
    k = g.expand(g.reshape(g.iota((count,)), (count, 1)), wide)
    hit = g.binary("eq", g.expand(g.reshape(slot, (1, n)), wide), k)
    return g.reshape(g.reduce("sum", g.cast(hit, dtypes.int64), (1,)), (count,))


def _empty(dtype, shape, device) -> ZyxTensor:
    return wrap(g.const(0, dtype, shape), device)


@register(aten._unique2.default)
def unique2(x, sorted=True, return_inverse=False, return_counts=False):
    """Distinct values in ascending order (CPU torch sorts them whether or not ``sorted`` is
    set), the slot of each input element and how often each value occurs."""
    dev = x._storage.device
    n = x.numel()
    flat = g.reshape(read(x), (n,))
    cmp = _comparable(flat)
    wide = (n, n)
    # rows i, columns j: entry j vs entry i.
    xi = g.expand(g.reshape(cmp, (n, 1)), wide)
    xj = g.expand(g.reshape(cmp, (1, n)), wide)
    cols = g.expand(g.reshape(g.iota((n,)), (1, n)), wide)
    rows = g.expand(g.reshape(g.iota((n,)), (n, 1)), wide)
    # first[i]: no earlier j holds the same value.
    seen = g.binary("and", g.binary("eq", xj, xi), g.binary("lt", cols, rows))
    first = g.reshape(g.unary("not", g.reduce("max", seen, (1,))), (n,)) if n else g.const(True, dtypes.bool_,
                                                                                         (0,))
    count = _count(first, dev)
    # slot[i]: how many distinct values are smaller than x[i].
    smaller = g.binary("and", g.binary("lt", xj, xi), g.expand(g.reshape(first, (1, n)), wide))
    slot = g.reshape(g.reduce("sum", g.cast(smaller, dtypes.int64), (1,)), (n,)) if n else \
        g.const(0, dtypes.int64, (0,))
    values = _pick(first, slot, flat, count) if count else g.const(0, flat.dtype, (0,))
    inverse = g.reshape(slot, tuple(x.shape)) if return_inverse else g.const(0, dtypes.int64, (0,))
    counts = _histogram_of(slot, count) if return_counts and count else g.const(0, dtypes.int64, (0,))
    return wrap(values, dev), wrap(inverse, dev), wrap(counts, dev)


@register(aten.unique_consecutive.default)
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is not None and x.dim() > 1:
        raise NotImplementedError("zyx: unique_consecutive along a dimension")
    dev = x._storage.device
    n = x.numel()
    flat = g.reshape(read(x), (n,))
    if n == 0:
        empty = g.const(0, dtypes.int64, (0,))
        return wrap(flat, dev), wrap(g.reshape(empty, tuple(x.shape)), dev), wrap(empty, dev)
    # A run starts where the value differs from its left neighbour.
    cmp = _comparable(flat)
    prev = g.pad(g.shrink(cmp, ((0, n - 1),)), ((1, 0),))
    starts = g.binary("ne", cmp, prev)
    starts = g.binary("or", starts, g.binary("eq", g.iota((n,)), g.const(0, dtypes.int64, (n,))))
    count = _count(starts, dev)
    slot = g.binary("sub", inclusive_count(starts), g.const(1, dtypes.int64, (n,)))
    values = _pick(starts, slot, flat, count)
    inverse = g.reshape(slot, tuple(x.shape)) if return_inverse else g.const(0, dtypes.int64, (0,))
    counts = _histogram_of(slot, count) if return_counts else g.const(0, dtypes.int64, (0,))
    return wrap(values, dev), wrap(inverse, dev), wrap(counts, dev)


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
