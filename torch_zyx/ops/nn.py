"""Neural-network lowerings: softmax/log_softmax (+ backward), layer norm (+ backward),
mse loss. Each stays within a few kernels: reductions store, elementwise work fuses around them.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import read, wrap, zdtype
from .registry import aten, register


def _acc_dtype(dtype: dtypes.DType) -> dtypes.DType:
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _bcast(node: Node, shape) -> Node:
    return g.expand(node, tuple(shape))


def softmax_node(x: Node, dim: int, log: bool) -> Node:
    if not x.shape:
        return g.const(0.0 if log else 1.0, x.dtype, ()) if True else x
    m = g.reduce("max", x, (dim,))
    finite = g.binary("lt", g.unary("abs", m), g.const(float("inf"), m.dtype, m.shape))
    m = g.where(finite, m, g.const(0.0, m.dtype, m.shape))
    shifted = g.binary("sub", x, _bcast(m, x.shape))
    e = g.unary("exp", shifted)
    s = g.reduce("sum", e, (dim,))
    if log:
        return g.binary("sub", shifted, _bcast(g.unary("log", s), x.shape))
    return g.binary("mul", e, _bcast(g.unary("recip", s), x.shape))


def _softmax(x, dim, half_to_float, log):
    node = read(x)
    out_dtype = dtypes.float32 if half_to_float else node.dtype
    node = g.cast(node, _acc_dtype(node.dtype))
    dim = dim % max(x.dim(), 1)
    if node.numel == 0:
        return wrap(g.cast(node, out_dtype), x._storage.device)
    return wrap(g.cast(softmax_node(node, dim, log), out_dtype), x._storage.device)


@register(aten._softmax.default)
def softmax(x, dim, half_to_float=False):
    return _softmax(x, dim, half_to_float, log=False)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float=False):
    return _softmax(x, dim, half_to_float, log=True)


@register(aten._softmax_backward_data.default)
def softmax_backward(grad, out, dim, input_dtype):
    gn, on = read(grad), read(out)
    dim = dim % max(grad.dim(), 1)
    if not gn.shape:
        return wrap(g.binary("mul", gn, g.const(0, gn.dtype, ())), grad._storage.device)
    prod = g.binary("mul", gn, on)
    s = g.reduce("sum", prod, (dim,))
    res = g.binary("sub", prod, g.binary("mul", on, _bcast(s, on.shape)))
    return wrap(g.cast(res, zdtype(input_dtype)), grad._storage.device)


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(grad, out, dim, input_dtype):
    gn, on = read(grad), read(out)
    dim = dim % max(grad.dim(), 1)
    if not gn.shape:
        return wrap(g.binary("mul", gn, g.const(0, gn.dtype, ())), grad._storage.device)
    s = g.reduce("sum", gn, (dim,))
    res = g.binary("sub", gn, g.binary("mul", g.unary("exp", on), _bcast(s, on.shape)))
    return wrap(g.cast(res, zdtype(input_dtype)), grad._storage.device)


@register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    node = read(x)
    dtype = node.dtype
    node = g.cast(node, _acc_dtype(dtype))
    axis = x.dim() - len(normalized_shape)
    dims = tuple(range(axis, x.dim()))
    count = math.prod(normalized_shape)
    stat_shape = tuple(node.shape[:axis]) + (1,) * len(dims)
    if node.numel == 0:
        nan = g.const(float("nan"), dtype, stat_shape)
        return (wrap(g.cast(node, dtype), x._storage.device), wrap(nan, x._storage.device),
                wrap(nan, x._storage.device))
    # One pass over x (mean and variance reduce together, one kernel): sums of x shifted by
    # the block's first element, which keeps E[d^2] - E[d]^2 free of cancellation when the
    # mean is large compared to the spread.
    first = g.shrink(node, tuple((0, s) if i < axis else (0, 1) for i, s in enumerate(node.shape)))
    shifted = g.binary("sub", node, _bcast(first, node.shape))
    inv_count = g.const(1.0 / count, node.dtype, stat_shape)
    shifted_mean = g.binary("mul", g.reduce("sum", shifted, dims), inv_count)
    square_mean = g.binary("mul", g.reduce("sum", g.binary("mul", shifted, shifted), dims), inv_count)
    mean = g.binary("add", first, shifted_mean)
    var = g.binary("max", g.binary("sub", square_mean, g.binary("mul", shifted_mean, shifted_mean)),
                   g.const(0.0, node.dtype, stat_shape))
    diff = g.binary("sub", node, _bcast(mean, node.shape))
    rstd = g.unary("recip", g.unary("sqrt", g.binary("add", var, g.const(eps, node.dtype, stat_shape))))
    out = g.binary("mul", diff, _bcast(rstd, node.shape))
    lead = (1,) * axis
    if weight is not None:
        w = g.expand(g.reshape(g.cast(read(weight), node.dtype), lead + tuple(normalized_shape)), node.shape)
        out = g.binary("mul", out, w)
    if bias is not None:
        b = g.expand(g.reshape(g.cast(read(bias), node.dtype), lead + tuple(normalized_shape)), node.shape)
        out = g.binary("add", out, b)
    dev = x._storage.device
    stat_dtype = dtype  # ATen saves mean/rstd in the input's dtype (half inputs too)
    return wrap(g.cast(out, dtype), dev), wrap(g.cast(mean, stat_dtype), dev), wrap(g.cast(rstd, stat_dtype), dev)


@register(aten.mse_loss.default)
def mse_loss(x, target, reduction=1):
    a, b = read(x), g.cast(read(target), zdtype(x.dtype))
    shape = tuple(__import__("torch").broadcast_shapes(a.shape, b.shape))
    a, b = g.expand(g.reshape(a, (1,) * (len(shape) - len(a.shape)) + a.shape), shape), \
        g.expand(g.reshape(b, (1,) * (len(shape) - len(b.shape)) + b.shape), shape)
    d = g.binary("sub", a, b)
    sq = g.binary("mul", d, d)
    if reduction == 0:
        return wrap(sq, x._storage.device)
    if not shape:
        return wrap(sq, x._storage.device)
    total = g.reshape(g.reduce("sum", sq, tuple(range(len(shape)))), ())
    if reduction == 1:
        total = g.binary("div", total, g.const(float(math.prod(shape)), total.dtype, ()))
    return wrap(total, x._storage.device)
