"""Pairwise distance lowerings: cdist and pdist (p-norms of row differences) and their backward.

The differences of every row pair are one broadcast subtract, (..., P, R, M); the norm is a
reduce over M, so each distance matrix is one fused kernel. pdist keeps the pairs i < j of a
cdist of the input with itself, in row-major order: pair (i, j) lands at
k = i*N - i*(i+1)/2 + j - i - 1, picked with a one-hot compare over the pairs.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..registry import aten, register


def _acc(node: Node) -> Node:
    return g.cast(node, dtypes.float32) if node.dtype in (dtypes.float16, dtypes.bfloat16) else node


def _diff(a: Node, b: Node) -> Node:
    """a (..., P, M), b (..., R, M) → a_i - b_j as (..., P, R, M)."""
    lead = a.shape[:-2]
    p, m = a.shape[-2:]
    r = b.shape[-2]
    wide = lead + (p, r, m)
    return g.binary("sub", g.expand(g.reshape(a, lead + (p, 1, m)), wide),
                    g.expand(g.reshape(b, lead + (1, r, m)), wide))


def _norm(diff: Node, p: float) -> Node:
    """p-norm over the last axis (kept as size 1)."""
    last = len(diff.shape) - 1
    shape = diff.shape
    a = g.unary("abs", diff)
    if p == 0:
        return g.reduce("sum", g.cast(g.binary("ne", diff, g.const(0, diff.dtype, shape)), diff.dtype),
                        (last,))
    if math.isinf(p):
        return g.reduce("max", a, (last,))
    if p == 1:
        return g.reduce("sum", a, (last,))
    if p == 2:
        return g.unary("sqrt", g.reduce("sum", g.binary("mul", diff, diff), (last,)))
    total = g.reduce("sum", g.binary("pow", a, g.const(float(p), diff.dtype, shape)), (last,))
    return g.binary("pow", total, g.const(1.0 / p, diff.dtype, total.shape))


def _norm_grad(diff: Node, dist: Node, p: float) -> Node:
    """d dist / d diff, elementwise (..., M), 0 where the distance is 0 (as ATen)."""
    shape = diff.shape
    zero = g.const(0, diff.dtype, shape)
    d = g.expand(dist, shape)
    sign = g.binary("sub", g.cast(g.binary("lt", zero, diff), diff.dtype),
                    g.cast(g.binary("lt", diff, zero), diff.dtype))
    if p == 0:
        return zero
    if p == 1:
        out = sign
    elif math.isinf(p):
        out = g.binary("mul", sign, g.cast(g.binary("eq", g.unary("abs", diff), d), diff.dtype))
    elif p == 2:
        out = g.binary("div", diff, d)
    else:
        a = g.unary("abs", diff)
        ratio = g.binary("div", a, d)
        out = g.binary("mul", sign, g.binary("pow", ratio, g.const(float(p) - 1, diff.dtype, shape)))
    return g.where(g.binary("eq", d, zero), zero, out)


def _check_p(p: float, name: str) -> None:
    if p < 0:
        raise RuntimeError(f"{name} only supports non-negative p values")


@register(aten._cdist_forward.default)
def cdist(x1, x2, p, compute_mode=None):
    _check_p(p, "cdist")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError("X1 and X2 must have the same number of columns. "
                           f"X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    a, b = _acc(read(x1)), _acc(read(x2))
    lead = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    a = g.broadcast_to(a, lead + a.shape[-2:])
    b = g.broadcast_to(b, lead + b.shape[-2:])
    pr, rr, m = a.shape[-2], b.shape[-2], a.shape[-1]
    if m == 0:
        out = g.const(0, a.dtype, lead + (pr, rr))
    else:
        out = g.reshape(_norm(_diff(a, b), p), lead + (pr, rr))
    return wrap(g.cast(out, zdtype(x1.dtype)), x1._storage.device)


@register(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, dist):
    a, b = _acc(read(x1)), _acc(read(x2))
    gy, d = _acc(read(grad)), _acc(read(dist))
    lead = gy.shape[:-2]
    a = g.broadcast_to(a, lead + a.shape[-2:])
    b = g.broadcast_to(b, lead + b.shape[-2:])
    diff = _diff(a, b)
    shape = diff.shape
    local = _norm_grad(diff, g.reshape(d, d.shape + (1,)), p)
    weighted = g.binary("mul", local, g.expand(g.reshape(gy, gy.shape + (1,)), shape))
    out = g.reshape(g.reduce("sum", weighted, (len(shape) - 2,)), shape[:-2] + shape[-1:])
    return wrap(g.cast(out, zdtype(x1.dtype)), x1._storage.device)


def _pair_slots(n: int) -> Node:
    """k of pair (i, j) for i < j, -1 elsewhere: (n, n) int64."""
    i = g.expand(g.reshape(g.iota((n,)), (n, 1)), (n, n))
    j = g.expand(g.reshape(g.iota((n,)), (1, n)), (n, n))

    def c(v):
        return g.const(v, dtypes.int64, (n, n))

    # k = i*n - i*(i+1)/2 + j - i - 1
    k = g.binary("add", g.binary("sub", g.binary("mul", i, c(n)),
                                  g.binary("idiv", g.binary("mul", i, g.binary("add", i, c(1))), c(2))),
                 g.binary("sub", g.binary("sub", j, i), c(1)))
    return g.where(g.binary("lt", i, j), k, c(-1))


@register(aten._pdist_forward.default)
def pdist(x, p=2):
    _check_p(p, "pdist")
    if x.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {x.dim()}D")
    a = _acc(read(x))
    n, m = a.shape
    pairs = n * (n - 1) // 2
    if pairs == 0:
        return wrap(g.const(0, zdtype(x.dtype), (0,)), x._storage.device)
    full = g.reshape(_norm(_diff(a, a), p), (n * n,)) if m else g.const(0, a.dtype, (n * n,))
    slots = g.reshape(_pair_slots(n), (n * n,))
    wide = (pairs, n * n)
    k = g.expand(g.reshape(g.iota((pairs,)), (pairs, 1)), wide)
    hit = g.binary("eq", g.expand(g.reshape(slots, (1, n * n)), wide), k)
    picked = g.where(hit, g.expand(g.reshape(full, (1, n * n)), wide), g.const(0, a.dtype, wide))
    out = g.reduce("sum", picked, (1,))
    return wrap(g.cast(g.reshape(out, (pairs,)), zdtype(x.dtype)), x._storage.device)


@register(aten._pdist_backward.default)
def pdist_backward(grad, x, p, dist):
    a = _acc(read(x))
    n, m = a.shape
    pairs = n * (n - 1) // 2
    gy, d = _acc(read(grad)), _acc(read(dist))
    # Spread the pair values back over the symmetric (n, n) matrix.
    slots = _pair_slots(n)
    slots = g.binary("max", slots, g.permute(slots, (1, 0)))  # (j, i) shares pair (i, j)'s slot
    wide = (n, n, pairs)
    hit = g.binary("eq", g.expand(g.reshape(slots, (n, n, 1)), wide),
                   g.expand(g.reshape(g.iota((pairs,)), (1, 1, pairs)), wide))

    def spread(v: Node) -> Node:
        src = g.expand(g.reshape(v, (1, 1, pairs)), wide)
        return g.reshape(g.reduce("sum", g.where(hit, src, g.const(0, v.dtype, wide)), (2,)), (n, n))

    gmat, dmat = spread(gy), spread(d)
    diff = _diff(a, a)
    local = _norm_grad(diff, g.reshape(dmat, (n, n, 1)), p)
    weighted = g.binary("mul", local, g.expand(g.reshape(gmat, (n, n, 1)), (n, n, m)))
    out = g.reshape(g.reduce("sum", weighted, (1,)), (n, m))
    return wrap(g.cast(out, zdtype(x.dtype)), x._storage.device)
