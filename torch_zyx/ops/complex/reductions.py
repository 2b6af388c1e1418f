"""Complex reductions and scans beyond sum/mean/prod (math.py): var/std (and with the mean),
cumsum, cumprod.

Lowerings of the complex table (ops/complex/base.py). The variance of complex values is real:
the mean squared magnitude of the deviations from the complex mean (CPU torch's definition), a
sum over the pair axis as well. A cumulative sum of pairs is the real cumulative sum of the real
view along the same axis; a cumulative product multiplies shifted copies (Hillis–Steele: log2 n
complex products of the whole axis), which fuses like any elementwise work.
"""

from __future__ import annotations

import math

from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ..core.movement import concat_nodes
from ..math.reduce import finish, norm_dims
from ..registry import aten, wrap_dim
from .base import as_pairs, join, mul, pairs, part_of, register_complex, wrap_pairs


def _b(op, x, y):
    return g.binary(op, x, y)


def _var(x, dim, correction) -> tuple[Node, Node, tuple]:
    """(variance (real, reduced axes kept), mean (pairs, kept), dims) of complex ``x``."""
    if not x.is_complex():
        raise NotImplementedError
    dims = norm_dims(x, dim)
    p = pairs(x)
    count = math.prod(p.shape[d] for d in dims)
    if dims:
        total = g.reduce("sum", p, dims)
        mean = _b("div", total, g.const(float(count), p.dtype, total.shape))
    else:
        mean = p
    diff = _b("sub", p, g.expand(mean, p.shape))
    squares = g.reduce("sum", _b("mul", diff, diff), (*dims, len(p.shape) - 1))
    correction = 1 if correction is None else correction
    var = _b("div", squares, g.const(float(max(count - correction, 0)), squares.dtype, squares.shape))
    return g.reshape(var, squares.shape[:-1]), mean, dims


def _real(node: Node, dims, keepdim, x):
    return wrap(finish(node, dims, keepdim), x._storage.device)


def _complex(node: Node, dims, keepdim, x):
    return wrap_pairs(finish(node, dims, keepdim), x._storage.device)


@register_complex(aten.var.correction)
def var(x, dim=None, correction=None, keepdim=False):
    v, _m, dims = _var(x, dim, correction)
    return _real(v, dims, keepdim, x)


@register_complex(aten.std.correction)
def std(x, dim=None, correction=None, keepdim=False):
    v, _m, dims = _var(x, dim, correction)
    return _real(g.unary("sqrt", v), dims, keepdim, x)


@register_complex(aten.var_mean.correction)
def var_mean(x, dim=None, correction=None, keepdim=False):
    v, m, dims = _var(x, dim, correction)
    return _real(v, dims, keepdim, x), _complex(m, dims, keepdim, x)


@register_complex(aten.std_mean.correction)
def std_mean(x, dim=None, correction=None, keepdim=False):
    v, m, dims = _var(x, dim, correction)
    return _real(g.unary("sqrt", v), dims, keepdim, x), _complex(m, dims, keepdim, x)


# ------------------------------------------------------------------ scans


def _scan_operand(x, dim, dtype):
    """(pairs of ``x`` in the result's part dtype, shape (n or 1 for 0-d, ..., 2), the axis)."""
    out = dtype or x.dtype
    if not out.is_complex:
        raise NotImplementedError
    d = wrap_dim(dim, max(x.dim(), 1))
    p = as_pairs(x, part_of(out))
    if x.dim() == 0:
        p = g.reshape(p, (1, 2))
    return p, d


@register_complex(aten.cumsum.default)
def cumsum(x, dim, dtype=None):
    p, d = _scan_operand(x, dim, dtype)
    device = x._storage.device
    out = read(aten.cumsum.default(wrap(p, device), d))
    return wrap_pairs(g.reshape(out, (*x.shape, 2)), device)


def cumulative_product(p: Node, d: int) -> Node:
    """Inclusive complex products of pairs ``p`` along axis ``d``: at step s each element
    takes the product of itself and the element s before it (ones before the start)."""
    n = p.shape[d]
    s = 1
    while s < n:
        ones_shape = tuple(s if i == d else size for i, size in enumerate(p.shape))
        ones = join(g.const(1.0, p.dtype, ones_shape[:-1]), g.const(0.0, p.dtype, ones_shape[:-1]))
        head = g.shrink(p, tuple((0, n - s) if i == d else (0, size) for i, size in enumerate(p.shape)))
        p = mul(p, concat_nodes([ones, head], d))
        s *= 2
    return p


@register_complex(aten.cumprod.default)
def cumprod(x, dim, dtype=None):
    p, d = _scan_operand(x, dim, dtype)
    return wrap_pairs(g.reshape(cumulative_product(p, d), (*x.shape, 2)), x._storage.device)
