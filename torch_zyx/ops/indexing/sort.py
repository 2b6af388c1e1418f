"""Sorting lowerings: sort (argsort, msort decompose to it), topk, kthvalue, median, nanmedian,
mode.

Sorting is done by comparison counting, with no sequential loop in the kernel IR: each element's
rank is rank[i] = #(x[j] sorts before x[i]) + #(x[j] ties with x[i] and j < i), a reduce over
an (n x n) pair tensor (ops/math/scan.py ``pairs``); then output slot p takes the element whose rank
is p (a one-hot max-reduce over i). O(n^2) work, but fused, exact and stable (ties keep their
input order, as ATen's stable sort does). NaN sorts as the largest value, as in ATen.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ..math.reduce import check_dim, finish
from ..math.scan import highest, lowest, pairs
from ..registry import aten, register


def _comparable(node: Node) -> Node:
    # Ordered comparisons on bool are not defined in the renderers; int8 keeps False < True.
    return g.cast(node, dtypes.int8) if node.dtype.kind == "b" else node


def _before(a: Node, b: Node) -> Node:
    """a sorts strictly before b in ascending order (NaN is the largest value)."""
    lt = g.binary("lt", a, b)
    if a.dtype.is_float:
        lt = g.binary("or", lt, g.binary("and", g.unary("not", g.unary("isnan", a)), g.unary("isnan", b)))
    return lt


def _ties(a: Node, b: Node) -> Node:
    eq = g.binary("eq", a, b)
    if a.dtype.is_float:
        eq = g.binary("or", eq, g.binary("and", g.unary("isnan", a), g.unary("isnan", b)))
    return eq


def ranks(node: Node, dim: int, descending: bool = False) -> Node:
    """Stable sorted position (int64, same shape) of every element along ``dim``."""
    x_i, x_j, i_pos, j_pos = pairs(_comparable(node), dim)
    first = _before(x_i, x_j) if descending else _before(x_j, x_i)
    first = g.binary("or", first, g.binary("and", _ties(x_j, x_i), g.binary("lt", j_pos, i_pos)))
    counts = g.reduce("sum", g.cast(first, dtypes.int64), (len(node.shape),))
    return g.reshape(counts, node.shape)


def _spread(node: Node, dim: int, k: int) -> Node:
    """node (shape S, n along ``dim``) as S[dim -> k] + (n,): element i on the last axis."""
    nd = len(node.shape)
    perm = list(range(nd))
    moved = g.permute(g.reshape(node, node.shape + (1,)), tuple(perm[:dim] + [nd] + perm[dim + 1:] + [dim]))
    shape = tuple(k if a == dim else s for a, s in enumerate(node.shape)) + (node.shape[dim],)
    return g.expand(moved, shape)


def select_rank(node: Node, rank: Node, dim: int, target: Node) -> tuple[Node, Node]:
    """(value, index) of the element whose rank equals ``target`` along ``dim``.

    ``target`` has the shape of ``node`` with ``dim`` -> k (the slots wanted); the results
    have that shape too.
    """
    k = target.shape[dim]
    x = _spread(node, dim, k)
    r = _spread(rank, dim, k)
    n = node.shape[dim]
    nd = len(node.shape)
    i_pos = g.expand(g.reshape(g.iota((n,)), (1,) * nd + (n,)), x.shape)
    hit = g.binary("eq", r, g.expand(g.reshape(target, target.shape + (1,)), x.shape))
    value = g.reduce("max", g.where(hit, x, g.const(lowest(x.dtype), x.dtype, x.shape)), (nd,))
    index = g.reduce("max", g.where(hit, i_pos, g.const(-1, dtypes.int64, x.shape)), (nd,))
    return g.reshape(value, target.shape), g.reshape(index, target.shape)


def _slots(shape: tuple[int, ...], dim: int, k: int) -> Node:
    out = tuple(k if a == dim else s for a, s in enumerate(shape))
    return g.expand(g.reshape(g.iota((k,)), tuple(k if a == dim else 1 for a in range(len(shape)))), out)


def _trivial(x, node: Node):
    # 0-d or empty: values as they are, indices zero.
    dev = x._storage.device
    return wrap(node, dev), wrap(g.const(0, dtypes.int64, node.shape), dev)


@register(aten.sort.default, aten.sort.stable)
def sort(x, dim=-1, descending=False, stable=None):
    dim = check_dim(x, dim)
    node = read(x)
    if not node.shape or node.numel == 0:
        return _trivial(x, node)
    rank = ranks(node, dim, descending)
    value, index = select_rank(node, rank, dim, _slots(node.shape, dim, node.shape[dim]))
    dev = x._storage.device
    return wrap(value, dev), wrap(index, dev)


@register(aten.topk.default)
def topk(x, k, dim=-1, largest=True, sorted=True):
    dim = check_dim(x, dim)
    node = read(x)
    n = node.shape[dim] if node.shape else 1
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    if not node.shape:
        return _trivial(x, node)
    if node.numel == 0 or k == 0:
        shape = tuple(k if a == dim else s for a, s in enumerate(node.shape))
        dev = x._storage.device
        return wrap(g.const(0, node.dtype, shape), dev), wrap(g.const(0, dtypes.int64, shape), dev)
    rank = ranks(node, dim, descending=largest)
    value, index = select_rank(node, rank, dim, _slots(node.shape, dim, k))
    dev = x._storage.device
    return wrap(value, dev), wrap(index, dev)


def _one_slot(x, node: Node, dim: int, target: Node, keepdim: bool):
    rank = ranks(node, dim)
    value, index = select_rank(node, rank, dim, target)
    dev = x._storage.device
    return wrap(finish(value, (dim,), keepdim), dev), wrap(finish(index, (dim,), keepdim), dev)


def _reduced_shape(node: Node, dim: int) -> tuple[int, ...]:
    return tuple(1 if a == dim else s for a, s in enumerate(node.shape))


@register(aten.kthvalue.default)
def kthvalue(x, k, dim=-1, keepdim=False):
    dim = check_dim(x, dim)
    node = read(x)
    if node.shape and node.shape[dim] == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {dim} to have non-zero size.")
    n = node.shape[dim] if node.shape else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    if not node.shape:
        return _trivial(x, node)
    target = g.const(k - 1, dtypes.int64, _reduced_shape(node, dim))
    return _one_slot(x, node, dim, target, keepdim)


def _nan_count(node: Node, dim: int) -> Node:
    if not node.dtype.is_float:
        return g.const(0, dtypes.int64, _reduced_shape(node, dim))
    return g.reduce("sum", g.cast(g.unary("isnan", node), dtypes.int64), (dim,))


def _median_target(node: Node, dim: int, ignore_nan: bool) -> Node:
    """Rank of the (lower) median along ``dim``; NaN ranks last, so counting them picks it."""
    n = node.shape[dim]
    shape = _reduced_shape(node, dim)
    nans = _nan_count(node, dim)
    valid = g.binary("sub", g.const(n, dtypes.int64, shape), nans)
    if ignore_nan:
        # Median of the non-NaN values; an all-NaN row gives rank 0, a NaN.
        half = g.binary("idiv", g.binary("sub", valid, g.const(1, dtypes.int64, shape)),
                        g.const(2, dtypes.int64, shape))
        return g.binary("max", half, g.const(0, dtypes.int64, shape))
    # Any NaN makes the median NaN: the first NaN (rank = number of non-NaN values).
    has_nan = g.binary("lt", g.const(0, dtypes.int64, shape), nans)
    return g.where(has_nan, valid, g.const((n - 1) // 2, dtypes.int64, shape))


def _median_dim(x, dim, keepdim, ignore_nan: bool):
    name = "nanmedian" if ignore_nan else "median"
    dim = check_dim(x, dim)
    node = read(x)
    if node.shape and node.shape[dim] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
    if not node.shape:
        return _trivial(x, node)
    return _one_slot(x, node, dim, _median_target(node, dim, ignore_nan), keepdim)


def _median_all(x, ignore_nan: bool):
    node = read(x)
    dev = x._storage.device
    if node.numel == 0:
        return wrap(g.const(float("nan") if node.dtype.is_float else 0, node.dtype, ()), dev)
    flat = g.reshape(node, (node.numel,))
    value, _ = select_rank(flat, ranks(flat, 0), 0, _median_target(flat, 0, ignore_nan))
    return wrap(g.reshape(value, ()), dev)


@register(aten.median.dim)
def median_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=False)


@register(aten.nanmedian.dim)
def nanmedian_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=True)


@register(aten.median.default)
def median_all(x):
    return _median_all(x, ignore_nan=False)


@register(aten.nanmedian.default)
def nanmedian_all(x):
    return _median_all(x, ignore_nan=True)


@register(aten.mode.default)
def mode(x, dim=-1, keepdim=False):
    dim = check_dim(x, dim)
    node = read(x)
    if node.shape and node.shape[dim] == 0:
        raise IndexError(f"mode(): Expected reduction dim {dim} to have non-zero size.")
    if not node.shape:
        return _trivial(x, node)
    # ATen sorts and keeps the first longest run: the smallest of the most frequent values, and
    # the last position where it occurs.
    c = _comparable(node)
    x_i, x_j, _i_pos, _j_pos = pairs(c, dim)
    freq = g.reshape(g.reduce("sum", g.cast(_ties(x_j, x_i), dtypes.int64), (len(c.shape),)), c.shape)
    best = g.expand(g.reduce("max", freq, (dim,)), c.shape)
    candidates = g.where(g.binary("eq", freq, best), c, g.const(highest(c.dtype), c.dtype, c.shape))
    value = g.reduce("min", candidates, (dim,))
    n = c.shape[dim]
    along = tuple(n if a == dim else 1 for a in range(len(c.shape)))
    positions = g.expand(g.reshape(g.iota((n,)), along), c.shape)
    at = _ties(c, g.expand(value, c.shape))
    index = g.reduce("max", g.where(at, positions, g.const(-1, dtypes.int64, c.shape)), (dim,))
    dev = x._storage.device
    value = g.cast(value, node.dtype)
    return wrap(finish(value, (dim,), keepdim), dev), wrap(finish(index, (dim,), keepdim), dev)
