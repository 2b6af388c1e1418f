"""Complex math: elementwise arithmetic, functions and comparisons, reductions and matmul.

Lowerings of the complex table (ops/complex/base.py): operands become pairs of the promoted
dtype's part (PyTorch's type promotion: a real operand is a complex one of imaginary part 0, as
CPU torch computes it), the formula is real arithmetic on the pairs' parts (base.py), and the
result is a complex tensor of pairs, or a real one (abs, angle, comparisons). A reduction sums
pairs over the reduced axes; a product multiplies them pairwise in a tree; a matmul is one real
matmul over the interleaved pairs (record/complex.py's layout) against a real matrix built from
the other operand (the 4-multiplication form in a single reduce).
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.pending import unsupported
from ...record.tensor import ZyxTensor, wrap
from ..core.movement import concat_nodes
from ..linalg.matmul import matmul_nodes
from ..math.reduce import finish, norm_dims
from ..registry import aten
from .base import (
    PROMOTE_BOOL,
    PROMOTE_DEFAULT,
    PROMOTE_INT_TO_FLOAT,
    as_pairs,
    broadcast_pairs,
    device_of,
    div,
    eq,
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
    real_node,
    register_complex,
    sqrt,
    wrap_pairs,
)


def _b(op, x, y):
    return g.binary(op, x, y)


def _c(value, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def _complex_compute(*args, kind=PROMOTE_DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation, result) dtypes of ``args``; declines when nothing complex is computed (a
    real view with the negative bit among real operands: its decomposition or the CPU)."""
    compute, result = promote(*args, kind=kind)
    if not compute.is_complex:
        raise NotImplementedError
    return compute, result


def _binary(fn, x, y, kind=PROMOTE_DEFAULT):
    compute, result = _complex_compute(x, y, kind=kind)
    part = part_of(compute)
    p, q = broadcast_pairs(as_pairs(x, part), as_pairs(y, part))
    out = fn(p, q)
    if result.is_complex:
        return wrap_pairs(g.cast(out, part_of(result)), device_of(x, y))
    return wrap(out, device_of(x, y))


def _add_like(op: str, x, y, alpha=1):
    if alpha == 1:
        return _binary(lambda p, q: _b(op, p, q), x, y)
    compute, result = _complex_compute(x, y, alpha)
    if not result.is_complex:
        raise NotImplementedError
    part = part_of(compute)
    p, q = broadcast_pairs(as_pairs(x, part), as_pairs(y, part))
    scale = as_pairs(alpha, part)
    q = mul(q, g.broadcast_to(scale, q.shape))
    return wrap_pairs(g.cast(_b(op, p, q), part_of(result)), device_of(x, y))


@register_complex(aten.add.Tensor, aten.add.Scalar)
def add(x, y, alpha=1):
    return _add_like("add", x, y, alpha)


@register_complex(aten.sub.Tensor, aten.sub.Scalar)
def sub(x, y, alpha=1):
    return _add_like("sub", x, y, alpha)


@register_complex(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(x, y, alpha=1):
    return _add_like("sub", y, x, alpha) if alpha == 1 else sub(y, x * alpha)


@register_complex(aten.mul.Tensor, aten.mul.Scalar)
def mul_(x, y):
    return _binary(mul, x, y)


@register_complex(aten.div.Tensor, aten.div.Scalar)
def div_(x, y):
    return _binary(div, x, y, kind=PROMOTE_INT_TO_FLOAT)


@register_complex(aten.eq.Tensor, aten.eq.Scalar)
def eq_(x, y):
    return _binary(eq, x, y, kind=PROMOTE_BOOL)


@register_complex(aten.ne.Tensor, aten.ne.Scalar)
def ne_(x, y):
    return _binary(lambda p, q: g.unary("not", eq(p, q)), x, y, kind=PROMOTE_BOOL)


@register_complex(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(cond, x, y):
    _, result = _complex_compute(x, y)
    part = part_of(result)
    p, q = broadcast_pairs(as_pairs(x, part), as_pairs(y, part))
    if not isinstance(cond, ZyxTensor):
        raise NotImplementedError
    c = g.reshape(real_node(cond), (*cond.shape, 1))
    p, q, c = broadcast_pairs(p, q, g.broadcast_to(c, (*c.shape[:-1], 2)))
    return wrap_pairs(g.where(g.cast(c, dtypes.bool_), p, q), device_of(cond, x, y))


# ------------------------------------------------------------------------------ unary


def _unary(fn, kind=PROMOTE_DEFAULT, real_result=False):
    def lowering(x):
        if not x.is_complex():
            raise NotImplementedError
        p = pairs(x)
        if p.dtype is dtypes.float16:
            # complex32 computes in complex64 and rounds once, as CPU torch's opmath (sgn
            # divides by the unrounded magnitude)
            node = fn(g.cast(p, dtypes.float32))
            node = g.cast(node, dtypes.float16) if node.dtype is dtypes.float32 else node
        else:
            node = fn(p)
        if real_result:
            return wrap(node, x._storage.device)
        return wrap_pairs(node, x._storage.device)

    return lowering


def _neg(p):
    return g.unary("neg", p)


def _reciprocal(p):
    one = g.broadcast_to(join(g.const(1.0, p.dtype), g.const(0.0, p.dtype)), p.shape)
    return div(one, p)


def _sgn(p):
    r = magnitude(p)
    r2 = g.broadcast_to(g.reshape(r, (*r.shape, 1)), p.shape)
    zero = _b("eq", r2, _c(0.0, r2))
    return g.where(zero, _c(0.0, p), _b("div", p, r2))


def _angle(p):
    return _b("atan2", im(p), re(p))


def _isnan(p):
    return _b("or", g.unary("isnan", re(p)), g.unary("isnan", im(p)))


def _isinf_part(x):
    return _b("eq", g.unary("abs", x), _c(float("inf"), x))


def _isinf(p):
    return _b("or", _isinf_part(re(p)), _isinf_part(im(p)))


def _isfinite(p):
    return g.unary("not", _b("or", _isnan(p), _isinf(p)))


def _u(op, x):
    return g.unary(op, x)


def _sin(p):
    a, b = re(p), im(p)  # sin a cosh b + i cos a sinh b
    return join(_b("mul", _u("sin", a), _u("cosh", b)), _b("mul", _u("cos", a), _u("sinh", b)))


def _cos(p):
    a, b = re(p), im(p)  # cos a cosh b - i sin a sinh b
    return join(_b("mul", _u("cos", a), _u("cosh", b)), _neg(_b("mul", _u("sin", a), _u("sinh", b))))


def _sinh(p):
    a, b = re(p), im(p)  # sinh a cos b + i cosh a sin b
    return join(_b("mul", _u("sinh", a), _u("cos", b)), _b("mul", _u("cosh", a), _u("sin", b)))


def _cosh(p):
    a, b = re(p), im(p)  # cosh a cos b + i sinh a sin b
    return join(_b("mul", _u("cosh", a), _u("cos", b)), _b("mul", _u("sinh", a), _u("sin", b)))


def _tanh(p):
    """(sinh 2a + i sin 2b) / (cosh 2a + cos 2b); past |a| = 20 that is ±1 + 0i in every float
    (and the quotient would be inf / inf)."""
    a, b = _b("mul", re(p), _c(2.0, re(p))), _b("mul", im(p), _c(2.0, im(p)))
    den = _b("add", _u("cosh", a), _u("cos", b))
    far = _b("lt", _c(40.0, a), _u("abs", a))
    real = g.where(far, _b("copysign", _c(1.0, a), a), _b("div", _u("sinh", a), den))
    imag = g.where(far, _b("mul", _c(0.0, b), _u("sin", b)), _b("div", _u("sin", b), den))
    return join(real, imag)


def _tan(p):
    """-i tanh(i z)."""
    t = _tanh(join(_neg(im(p)), re(p)))
    return join(im(t), _neg(re(t)))


def _scaled(fn, factor):
    def scaled(p):
        return _b("mul", fn(p), _c(factor, p))

    return scaled


def _exp2(p):
    return exp(_b("mul", p, _c(math.log(2.0), p)))


def _rsqrt(p):
    return _reciprocal(sqrt(p))


def _sigmoid(p):
    one = g.broadcast_to(join(g.const(1.0, p.dtype), g.const(0.0, p.dtype)), p.shape)
    return div(one, _b("add", one, exp(_neg(p))))


_UNARY = {
    aten.neg.default: _unary(_neg),
    aten.exp.default: _unary(exp),
    aten.log.default: _unary(log),
    aten.sqrt.default: _unary(sqrt),
    aten.reciprocal.default: _unary(_reciprocal),
    aten.sgn.default: _unary(_sgn),
    aten.abs.default: _unary(magnitude, real_result=True),
    aten.angle.default: _unary(_angle, real_result=True),
    aten.isnan.default: _unary(_isnan, real_result=True),
    aten.isinf.default: _unary(_isinf, real_result=True),
    aten.isfinite.default: _unary(_isfinite, real_result=True),
    aten.sin.default: _unary(_sin), aten.cos.default: _unary(_cos), aten.tan.default: _unary(_tan),
    aten.sinh.default: _unary(_sinh), aten.cosh.default: _unary(_cosh), aten.tanh.default: _unary(_tanh),
    aten.log2.default: _unary(_scaled(log, 1 / math.log(2.0))),
    aten.log10.default: _unary(_scaled(log, 1 / math.log(10.0))),
    aten.exp2.default: _unary(_exp2), aten.rsqrt.default: _unary(_rsqrt),
    aten.sigmoid.default: _unary(_sigmoid),
}
for _op, _fn in _UNARY.items():
    register_complex(_op)(_fn)


@register_complex(aten.real.default)
def real(x):
    return aten.select.int(aten.view_as_real.default(x), -1, 0) if x.is_complex() else x


@register_complex(aten.imag.default)
def imag(x):
    if not x.is_complex():
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return aten.select.int(aten.view_as_real.default(x), -1, 1)


def _all_any(op):
    """all/any of complex values: of their being nonzero (either part), by the real lowering."""
    def lowering(x, *args, **kwargs):
        if not x.is_complex():
            raise NotImplementedError
        p = pairs(x)
        zero = g.const(0, p.dtype, p.shape)
        nonzero = g.unary("not", eq(p, zero))
        return op(wrap(nonzero, x._storage.device), *args, **kwargs)

    return lowering


for _op in (aten.all.default, aten.all.dim, aten.all.dims, aten.any.default, aten.any.dim, aten.any.dims):
    register_complex(_op)(_all_any(_op))


# ------------------------------------------------------------------------------ reductions


def _reduce_dtype(x, dtype) -> torch.dtype:
    out = dtype or x.dtype
    if not out.is_complex:
        raise NotImplementedError
    return out


@register_complex(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, dtype=None):
    out = _reduce_dtype(x, dtype)
    dims = norm_dims(x, dim)
    node = as_pairs(x, part_of(out))
    if node.numel == 0:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        total = g.const(0, node.dtype, shape)
    else:
        total = g.reduce("sum", node, dims) if dims else node
    return wrap_pairs(finish(total, dims, keepdim), x._storage.device)


@register_complex(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, dtype=None):
    out = _reduce_dtype(x, dtype)
    dims = norm_dims(x, dim)
    node = as_pairs(x, part_of(out))
    count = math.prod(node.shape[d] for d in dims)
    if node.numel:
        total = g.reduce("sum", node, dims) if dims else node
    else:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        total = g.const(float("nan"), node.dtype, shape)
    return wrap_pairs(finish(_b("div", total, _c(float(count), total)), dims, keepdim), x._storage.device)


def _product(node: Node, dims) -> Node:
    """The complex product of pairs ``node`` over ``dims`` (kept as size 1): the reduced axes
    moved last and merged, then halves multiplied pairwise until one is left (odd lengths padded
    with 1)."""
    shape = node.shape[:-1]
    keep = [i for i in range(len(shape)) if i not in dims]
    moved = g.permute(node, (*keep, *dims, len(shape)))
    n = math.prod(shape[d] for d in dims)
    lead = tuple(shape[i] for i in keep)
    flat = g.reshape(moved, (*lead, n, 2))
    one = g.broadcast_to(join(g.const(1.0, node.dtype), g.const(0.0, node.dtype)), (*lead, 1, 2))
    while n > 1:
        if n % 2:
            flat = concat_nodes([flat, one], len(lead))
            n += 1
        halves = g.reshape(flat, (*lead, 2, n // 2, 2))
        begin = tuple((0, s) for s in lead)
        first = g.reshape(g.shrink(halves, (*begin, (0, 1), (0, n // 2), (0, 2))), (*lead, n // 2, 2))
        second = g.reshape(g.shrink(halves, (*begin, (1, 2), (0, n // 2), (0, 2))), (*lead, n // 2, 2))
        flat = mul(first, second)
        n //= 2
    if n == 0:
        flat = one
    kept = tuple(1 if i in dims else s for i, s in enumerate(shape))
    return g.reshape(flat, (*kept, 2))


@register_complex(aten.prod.default, aten.prod.dim_int)
def prod(x, dim=None, keepdim=False, dtype=None):
    out = _reduce_dtype(x, dtype)
    dims = norm_dims(x, dim)
    node = as_pairs(x, part_of(out))
    return wrap_pairs(finish(_product(node, dims) if dims else node, dims, keepdim), x._storage.device)


# ------------------------------------------------------------------------------ matmul


def _partner(q: Node) -> Node:
    """The real matrix ``B`` for pairs ``q`` (..., k, n, 2) such that the interleaved pairs of
    ``a`` (..., m, 2k) times ``B`` (..., 2k, 2n) are the pairs of the complex product: per k its
    rows [re, im] and [-im, re] of q, interleaved along n."""
    *batch, k, n, _ = q.shape
    c, d = re(q), im(q)
    top = g.reshape(join(c, d), (*batch, k, 1, n, 2))
    bottom = g.reshape(join(g.unary("neg", d), c), (*batch, k, 1, n, 2))
    return g.reshape(concat_nodes([top, bottom], len(batch) + 1), (*batch, 2 * k, 2 * n))


def complex_matmul(p: Node, q: Node) -> Node:
    """Pairs of ``p @ q`` for pairs ``p`` (..., m, k, 2) and ``q`` (..., k, n, 2)."""
    *batch, m, k, _ = p.shape
    n = q.shape[-2]
    out = matmul_nodes(g.reshape(p, (*batch, m, 2 * k)), _partner(q))
    return g.reshape(out, (*batch, m, n, 2))


def _matmul_operands(a, b, ranks: tuple[int, int], name: str):
    if a.dim() != ranks[0] or b.dim() != ranks[1]:
        raise NotImplementedError  # (the real lowering's checks and messages: through the CPU)
    if a.dtype != b.dtype or not a.is_complex():
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[-2]}x{a.shape[-1]} and "
                           f"{b.shape[-2]}x{b.shape[-1]})")
    return pairs(a), pairs(b)


@register_complex(aten.mm.default)
def mm(a, b):
    p, q = _matmul_operands(a, b, (2, 2), "mm")
    return wrap_pairs(complex_matmul(p, q), a._storage.device)


@register_complex(aten.bmm.default)
def bmm(a, b):
    p, q = _matmul_operands(a, b, (3, 3), "bmm")
    if a.shape[0] != b.shape[0]:
        raise NotImplementedError
    return wrap_pairs(complex_matmul(p, q), a._storage.device)


@register_complex(aten.mv.default)
def mv(a, v):
    if a.dim() != 2 or v.dim() != 1 or a.dtype != v.dtype or not a.is_complex() or a.shape[1] != v.shape[0]:
        raise NotImplementedError
    q = g.reshape(pairs(v), (v.shape[0], 1, 2))
    out = complex_matmul(pairs(a), q)
    return wrap_pairs(g.reshape(out, (a.shape[0], 2)), a._storage.device)


@register_complex(aten.dot.default)
def dot(a, b):
    if a.dim() != 1 or b.dim() != 1 or a.dtype != b.dtype or not a.is_complex() or a.shape != b.shape:
        raise NotImplementedError
    p = pairs(a)
    return wrap_pairs(g.reduce("sum", mul(p, pairs(b)), (0,)) if a.shape[0] else
                      g.const(0, p.dtype, (1, 2)), a._storage.device).view(())


@register_complex(aten.vdot.default)
def vdot(a, b):
    return dot(a.conj(), b)


@register_complex(aten.addmm.default)
def addmm(bias, a, b, beta=1, alpha=1):
    p, q = _matmul_operands(a, b, (2, 2), "addmm")
    part = p.dtype
    out = complex_matmul(p, q)
    if alpha != 1:
        out = mul(out, g.broadcast_to(as_pairs(alpha, part), out.shape))
    if beta != 0:
        c = g.broadcast_to(as_pairs(bias, part), out.shape)
        if beta != 1:
            c = mul(c, g.broadcast_to(as_pairs(beta, part), out.shape))
        out = _b("add", out, c)
    return wrap_pairs(out, a._storage.device)



# ------------------------------------------------------------------------------ refused ops
# Ops CPU torch refuses for every complex dtype, with its exception type and message, raised
# here when recorded (declining would send them to the CPU fallback only to raise there).

_REFUSED = {
    (aten.max.dim, aten.max.dim_max): (RuntimeError, "max(): does not support complex input"),
    (aten.min.dim, aten.min.dim_min): (RuntimeError, "min(): does not support complex input"),
    (aten.maximum.default,): (RuntimeError, "maximum not implemented for complex tensors."),
    (aten.minimum.default,): (RuntimeError, "minimum not implemented for complex tensors."),
    (aten.argmax.default,): (RuntimeError, "argmax(): does not support complex input"),
    (aten.argmin.default,): (RuntimeError, "argmin(): does not support complex input"),
    (aten.sort.default, aten.sort.stable): (RuntimeError, " Sort does not support complex dtypes on CPU"),
    (aten.topk.default,): (RuntimeError, " topk does not support complex dtypes on CPU"),
    (aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
     aten.relu.default): (NotImplementedError, "clamp is not supported for complex types"),
    (aten.floor.default,): (NotImplementedError, "floor is not supported for complex inputs"),
    (aten.ceil.default,): (NotImplementedError, "ceil is not supported for complex inputs"),
    (aten.trunc.default,): (NotImplementedError, "trunc is not supported for complex inputs"),
}


def _refused(kind, message):
    def lowering(x, *args, **kwargs):
        if not x.is_complex():
            raise NotImplementedError
        raise unsupported(message) if kind is NotImplementedError else kind(message)

    return lowering


for _ops, (_kind, _message) in _REFUSED.items():
    for _op in _ops:
        register_complex(_op)(_refused(_kind, _message))
