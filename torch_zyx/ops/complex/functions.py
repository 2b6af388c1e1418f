"""Complex elementwise functions beyond the basic ones of math.py: expm1, log1p, the inverse
trigonometric and hyperbolic functions, pow, constant padding and allclose.

Lowerings of the complex table (ops/complex/base.py). The formulas are c10's where c10 has its
own (``c10/util/complex_math.h``: expm1, log1p), and elsewhere the principal branches that
glibc's ``casin``/``cacos``/``catan``/``casinh``/``cacosh``/``catanh``/``cpow`` compute (c10 calls
those through ``std::``), written to avoid cancellation where the naive formula has it. Each is
real arithmetic on the pairs' parts, so every renderer runs it unchanged.
"""

from __future__ import annotations

import math

import torch

from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, read, wrap
from ..registry import aten
from .base import (
    as_pairs,
    broadcast_pairs,
    device_of,
    div,
    exp,
    im,
    join,
    log,
    magnitude,
    mul,
    pairs,
    part_of,
    promote,
    re,
    register_complex,
    sqrt,
    wrap_pairs,
)


def _b(op, x, y):
    return g.binary(op, x, y)


def _u(op, x):
    return g.unary(op, x)


def _c(value, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def _one(p: Node) -> Node:
    return g.broadcast_to(join(g.const(1.0, p.dtype), g.const(0.0, p.dtype)), p.shape)


def _times_i(p: Node) -> Node:
    """i p = -b + ai."""
    return join(_u("neg", im(p)), re(p))


def _times_minus_i(p: Node) -> Node:
    """-i p = b - ai."""
    return join(im(p), _u("neg", re(p)))


# ------------------------------------------------------------------ exp and log near 0


def expm1(p: Node) -> Node:
    """c10's expm1: (expm1(x) cos y - 2 sin²(y/2)) + i e^x sin y (no cancellation near 0)."""
    x, y = re(p), im(p)
    s = _u("sin", _b("mul", y, _c(0.5, y)))
    real = _b("sub", _b("mul", _u("expm1", x), _u("cos", y)), _b("mul", _c(2.0, s), _b("mul", s, s)))
    return join(real, _b("mul", _u("exp", x), _u("sin", y)))


def log1p(p: Node) -> Node:
    """c10's log1p: arg(1 + z) = atan2(y, x + 1); |1 + z| as 0.5 log1p(x (2 + x) + y²) for
    |z| < 0.5 (x itself where that underflows to 0), else log(hypot(x + 1, y))."""
    x, y = re(p), im(p)
    x1 = _b("add", x, _c(1.0, x))
    theta = _b("atan2", y, x1)
    r = _b("add", _b("mul", x, _b("add", _c(2.0, x), x)), _b("mul", y, y))
    near = _b("mul", _c(0.5, r), _u("log1p", r))
    near = g.where(_b("eq", r, _c(0.0, r)), x, near)
    far = _u("log", magnitude(join(x1, y)))
    return join(g.where(_b("lt", magnitude(p), _c(0.5, x)), near, far), theta)


# ------------------------------------------------------------------ inverse functions


def asinh(p: Node) -> Node:
    """asinh z = log1p(w + w² / (1 + sqrt(1 + w²))) for w = |x| + |y| i, signs copied back
    after (asinh is odd and commutes with conj, and as glibc's casinh this keeps signed zeros
    on the branch cuts: 1 + w² never meets the cut of sqrt); past |z| = 1e4 (1e8 in double),
    where w² would lose everything or overflow, log(2w) (off by O(1/w²))."""
    x, y = re(p), im(p)
    w = join(_u("abs", x), _u("abs", y))
    w2 = mul(w, w)
    one = _one(p)
    near = log1p(_b("add", w, div(w2, _b("add", one, sqrt(_b("add", one, w2))))))
    far = log(_b("mul", w, _c(2.0, w)))
    limit = 1e4 if p.dtype.itemsize == 4 else 1e8
    big = _b("lt", _c(limit, x), magnitude(w))
    big2 = g.broadcast_to(g.reshape(big, (*big.shape, 1)), p.shape)
    out = g.where(big2, far, near)
    return join(_b("copysign", re(out), x), _b("copysign", im(out), y))


def asin(p: Node) -> Node:
    """asin z = -i asinh(i z)."""
    return _times_minus_i(asinh(_times_i(p)))


def acos(p: Node) -> Node:
    """acos z = π/2 - asin z."""
    a = asin(p)
    return join(_b("sub", _c(math.pi / 2, re(a)), re(a)), _u("neg", im(a)))


def acosh(p: Node) -> Node:
    """Kahan's acosh z = 2 log(sqrt((z + 1) / 2) + sqrt((z - 1) / 2)): both roots lie in the
    same quadrant, so their sum does not cancel (real part >= 0 as glibc's cacosh). The
    imaginary part takes y's sign, -0 included (z + 1 would turn -0 into +0)."""
    y = im(p)
    q = join(re(p), _u("abs", y))  # (computed for |y|, its sign copied back: glibc's signed zeros)
    one, half = _one(p), _c(0.5, p)
    s = _b("add", sqrt(_b("mul", _b("add", q, one), half)), sqrt(_b("mul", _b("sub", q, one), half)))
    r = _b("mul", log(s), _c(2.0, p))
    return join(re(r), _b("copysign", im(r), y))


def atanh(p: Node) -> Node:
    """atanh z = (log1p(z) - log1p(-z)) / 2."""
    return _b("mul", _b("sub", log1p(p), log1p(_u("neg", p))), _c(0.5, p))


def atan(p: Node) -> Node:
    """atan z = -i atanh(i z)."""
    return _times_minus_i(atanh(_times_i(p)))


def _unary(fn):
    def lowering(x):
        if not x.is_complex():
            raise NotImplementedError
        return wrap_pairs(fn(pairs(x)), x._storage.device)

    return lowering


for _op, _fn in {aten.expm1.default: expm1, aten.log1p.default: log1p, aten.asin.default: asin,
                 aten.acos.default: acos, aten.atan.default: atan, aten.asinh.default: asinh,
                 aten.acosh.default: acosh, aten.atanh.default: atanh}.items():
    register_complex(_op)(_unary(_fn))


# ------------------------------------------------------------------ pow


def cpow(p: Node, q: Node) -> Node:
    """glibc's cpow: exp(q log p). Where the exponent's real part is -inf (0 to a power of
    positive real part) the result is 0, where it is +inf beside a NaN (0 to a negative power)
    inf + NaN i, as cexp gives them; the plain product would make both NaN."""
    w = mul(q, log(p))
    wr, wi = re(w), im(w)
    value = exp(w)
    inf = _c(float("inf"), wr)
    zero = g.broadcast_to(g.reshape(_b("eq", wr, _u("neg", inf)), (*wr.shape, 1)), p.shape)
    blown = _b("and", _b("eq", wr, inf), _u("isnan", wi))
    blown = g.broadcast_to(g.reshape(blown, (*wr.shape, 1)), p.shape)
    value = g.where(zero, _c(0.0, p), value)
    return g.where(blown, g.broadcast_to(join(g.const(float("inf"), p.dtype), g.const(float("nan"), p.dtype)),
                                         p.shape), value)


def _integer_power(p: Node, n: int) -> Node:
    """ATen's specializations of a complex tensor to a scalar power (pow_tensor_scalar_kernel)."""
    if n == 2:
        return mul(p, p)
    if n == 3:
        return mul(mul(p, p), p)
    if n == -2:
        return div(_one(p), mul(p, p))
    if n == -1:
        return div(_one(p), p)
    raise ValueError(n)


def _pow_dtypes(base, exponent):
    compute, result = promote(base, exponent)
    if not compute.is_complex:
        raise NotImplementedError
    return part_of(compute), part_of(result) if result.is_complex else None


@register_complex(aten.pow.Tensor_Tensor)
def pow_tensor(base, exponent):
    part, out = _pow_dtypes(base, exponent)
    if out is None:
        raise NotImplementedError
    p, q = broadcast_pairs(as_pairs(base, part), as_pairs(exponent, part))
    return wrap_pairs(g.cast(cpow(p, q), out), device_of(base, exponent))


@register_complex(aten.pow.Tensor_Scalar)
def pow_scalar(base, exponent):
    part, out = _pow_dtypes(base, exponent)
    if out is None:
        raise NotImplementedError
    p = as_pairs(base, part)
    e = complex(exponent)
    if e == 0:
        value = _one(p)
    elif e == 1:
        value = p
    elif e == 0.5:
        value = sqrt(p)
    elif e == -0.5:
        value = div(_one(p), sqrt(p))
    elif e in (2, 3, -1, -2):
        value = _integer_power(p, int(e.real))
    else:
        value = cpow(p, g.broadcast_to(as_pairs(exponent, part), p.shape))
    return wrap_pairs(g.cast(value, out), base._storage.device)


@register_complex(aten.pow.Scalar)
def pow_base(base, exponent):
    part, out = _pow_dtypes(base, exponent)
    if out is None:
        raise NotImplementedError
    q = as_pairs(exponent, part)
    if complex(base) == 1:  # (ATen: a base of 1 fills ones, NaN exponents included)
        return wrap_pairs(g.cast(_one(q), out), exponent._storage.device)
    value = cpow(g.broadcast_to(as_pairs(base, part), q.shape), q)
    return wrap_pairs(g.cast(value, out), exponent._storage.device)


# ------------------------------------------------------------------ padding, closeness


@register_complex(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    """Each part padded by the real lowering with its part of ``value``."""
    if not x.is_complex():
        raise NotImplementedError
    p, device = pairs(x), x._storage.device
    value = complex(value)
    parts = [read(aten.constant_pad_nd.default(wrap(part, device), pad, v))
             for part, v in ((re(p), value.real), (im(p), value.imag))]
    return wrap_pairs(join(*parts), device)


@register_complex(aten.allclose.default)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    if not isinstance(a, ZyxTensor) or not isinstance(b, ZyxTensor):
        raise NotImplementedError
    if a.dtype != b.dtype:  # (ATen's isclose check, message and all)
        torch.isclose(torch.empty(0, dtype=a.dtype), torch.empty(0, dtype=b.dtype))
    close = aten.isclose.default(a, b, rtol, atol, equal_nan)
    return bool(aten.all.default(close).item())
