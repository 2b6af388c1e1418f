"""Complex reductions and scans beyond sum/mean/prod (math.py): var/std (and with the mean),
cumsum, cumprod, logcumsumexp.

Lowerings of the complex table (ops/complex/base.py). The variance of complex values is real:
the mean squared magnitude of the deviations from the complex mean (CPU torch's definition), a
sum over the pair axis as well. A cumulative sum of pairs is the real cumulative sum of the real
view along the same axis; a cumulative product multiplies shifted copies (Hillis–Steele: log2 n
complex products of the whole axis), which fuses like any elementwise work; logcumsumexp scans
the same way with ATen's complex log-add-exp as its combination.
"""

from __future__ import annotations

import math

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ..core.movement import concat_nodes
from ..math.reduce import finish, norm_dims
from ..registry import aten, wrap_dim
from .base import as_pairs, exp, im, join, log, mul, pairs, part_of, re, register_complex, wrap_pairs
from .functions import log1p


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


def _any_nan(p: Node) -> Node:
    return g.binary("or", g.unary("isnan", re(p)), g.unary("isnan", im(p)))


def _spread(mask: Node, like: Node) -> Node:
    """A mask over elements broadcast over the pair axis of ``like``."""
    return g.broadcast_to(g.reshape(mask, (*mask.shape, 1)), like.shape)


def log_add_exp(x: Node, y: Node) -> Node:
    """log(exp x + exp y) for pairs as ATen's CPU ``_log_add_exp_helper`` (LogAddExp.h) gives it:
    a NaN part anywhere is NaN + NaN i; two equal infinite real parts give the smaller (-inf) or
    log(exp min + exp max) (+inf, no inf - inf); else max + log1p(exp(min - max)), min and max
    by real part (a tie takes y as the min)."""
    xr, yr = re(x), re(y)
    x_lower = _spread(_b("lt", xr, yr), x)
    low, high = g.where(x_lower, x, y), g.where(x_lower, y, x)
    low_r, high_r = re(low), re(high)
    value = _b("add", log1p(exp(_b("sub", low, high))), high)
    infinite = _b("eq", g.unary("abs", low_r), g.const(float("inf"), low_r.dtype, low_r.shape))
    inf_tie = _b("and", _b("eq", low_r, high_r), infinite)
    plus_inf = log(_b("add", exp(low), exp(high)))
    tied = g.where(_spread(_b("lt", low_r, g.const(0.0, low_r.dtype, low_r.shape)), x), low, plus_inf)
    value = g.where(_spread(inf_tie, x), tied, value)
    nan = _b("or", _any_nan(x), _any_nan(y))
    return g.where(_spread(nan, x), g.const(float("nan"), x.dtype, x.shape), value)


def _shifted(p: Node, d: int, s: int, fill: Node) -> Node:
    """``p`` moved ``s`` places along axis ``d`` (its last ``s`` dropped), ``fill`` (pairs of
    shape (), broadcast) in front."""
    n = p.shape[d]
    lead = tuple(s if i == d else size for i, size in enumerate(p.shape[:-1]))
    start = g.broadcast_to(fill, (*lead, 2))
    head = g.shrink(p, tuple((0, n - s) if i == d else (0, size) for i, size in enumerate(p.shape)))
    return concat_nodes([start, head], d)


def _sequential_branch(x: Node, c: Node, d: int, device) -> Node:
    """The imaginary parts of ``c`` (the scan's values, right modulo 2π) on the branch ATen's
    sequential scan reaches. Step k keeps the imaginary part of the operand of larger real part
    (x_k on a tie) and adds the angle of log1p(exp(min - max)), so the result is the imaginary
    part of the last x_j that won (the anchor) plus the angles added after it: a segmented
    cumulative sum. Each step's angle follows from its operands modulo 2π, which the tree gives."""
    start = join(g.const(float("-inf"), x.dtype), g.const(0.0, x.dtype))
    prev = _shifted(c, d, 1, start)
    xr, pr = re(x), re(prev)
    wins = g.unary("not", _b("lt", xr, pr))  # (x is ATen's max unless its real part is smaller)
    w2 = _spread(wins, x)
    low, high = g.where(w2, prev, x), g.where(w2, x, prev)
    angle = im(log1p(exp(_b("sub", low, high))))
    infinite = _b("eq", g.unary("abs", re(low)), g.const(float("inf"), xr.dtype, xr.shape))
    inf_tie = _b("and", _b("eq", re(low), re(high)), infinite)
    zero = g.const(0.0, xr.dtype, xr.shape)
    plus_tie = _b("and", inf_tie, _b("lt", zero, re(low)))  # (a fresh principal value: an anchor)
    anchor = _b("or", _b("and", wins, g.unary("not", inf_tie)), plus_tie)
    base = g.where(plus_tie, im(c), _b("add", im(x), angle))
    step = g.where(_b("or", anchor, inf_tie), zero, angle)  # (-inf tie: the running value kept)
    total = read(aten.cumsum.default(wrap(step, device), d))
    positions = g.cast(g.iota(xr.shape[d:d + 1]), dtypes.int64)
    positions = g.broadcast_to(g.reshape(positions, tuple(xr.shape[d] if i == d else 1
                                                          for i in range(len(xr.shape)))), xr.shape)
    marked = g.where(anchor, positions, g.const(-1, dtypes.int64, xr.shape))
    last = read(aten.cummax.default(wrap(marked, device), d)[0])
    before = _b("lt", last, g.const(0, dtypes.int64, xr.shape))  # (no anchor yet: from 0i)
    at = g.where(before, g.const(0, dtypes.int64, xr.shape), last)
    origin = g.gather(_b("sub", base, total), at, d)
    return g.where(before, total, _b("add", origin, total))


@register_complex(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    """Inclusive log-sum-exp scan in log2 n steps (Hillis–Steele, as ``cumulative_product``):
    at step s each element combines with the running value s before it, (-inf + 0i) before the
    start (log 0, the combination's identity: ATen's CPU scan starts from it too). The tree
    puts the imaginary parts on other branches than ATen's sequential scan; they are moved to
    its (``_sequential_branch``)."""
    p, d = _scan_operand(x, dim, None)
    device = x._storage.device
    n = p.shape[d]
    c, s = p, 1
    start = join(g.const(float("-inf"), p.dtype), g.const(0.0, p.dtype))
    while s < n:
        c = log_add_exp(c, _shifted(c, d, s, start))
        s *= 2
    if n > 1:
        imag = _sequential_branch(p, c, d, device)
        c = join(re(c), g.where(_any_nan(c), im(c), imag))
    return wrap_pairs(g.reshape(c, (*x.shape, 2)), device)
