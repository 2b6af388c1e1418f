"""Reduction lowerings: sum/mean/prod/amax/amin, max/min with indices, arg*, var/std,
logsumexp, any/all (scans are in ops/math/scan.py, sorting in ops/indexing/sort.py). All become keepdim
REDUCE nodes (squeezed after if asked), so the elementwise work before and after them fuses
into the same kernel.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..registry import aten, dtype_name, register, wrap_dim


def check_dim(x, dim: int) -> int:
    """``dim`` normalized for ``x`` (a 0-d tensor accepts 0 and -1), IndexError like ATen."""
    return wrap_dim(dim, x.dim())


def norm_dims(x, dim) -> tuple[int, ...]:
    nd = x.dim()
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(nd))
    if nd > 64:
        raise RuntimeError("only tensors with up to 64 dims are supported")
    if isinstance(dim, int):
        dim = [dim]
    if nd == 0:
        for d in dim:
            if d not in (0, -1):
                raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got {d})")
        return ()
    out = []
    for d in dim:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                             f"but got {d})")
        if d % nd in out:
            raise RuntimeError(f"dim {d % nd} appears multiple times in the list of dims")
        out.append(d % nd)
    return tuple(sorted(out))


def finish(node: Node, dims, keepdim: bool) -> Node:
    if keepdim:
        return node
    return g.reshape(node, tuple(s for i, s in enumerate(node.shape) if i not in dims))


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    # (every integer dtype but int64 sums in int64; uint64 too, as CPU torch: it wraps alike)
    if x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32,
                   torch.uint64):
        return torch.int64
    return x.dtype


def reduce_node(op: str, node: Node, dims) -> Node:
    if not node.shape:
        return node
    if node.numel == 0:
        return None
    return g.reduce(op, node, dims)


def _accumulate_dtype(dtype: dtypes.DType) -> dtypes.DType:
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, dtype=None):
    dims = norm_dims(x, dim)
    out_dtype = zdtype(_sum_dtype(x, dtype))
    node = g.cast(read(x), _accumulate_dtype(out_dtype))
    if node.numel == 0:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        return wrap(finish(g.const(0, out_dtype, shape), dims, keepdim), x._storage.device)
    out = g.cast(g.reduce("sum", node, dims) if node.shape else node, out_dtype)
    return wrap(finish(out, dims, keepdim), x._storage.device)


_NORM_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@register(aten.linalg_vector_norm.default)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The 2-norm of a float tensor (clip_grad_norm_ asks one per gradient) as one reduce: the
    square root of the sum of squares, in the accumulation dtype, as PyTorch's decomposition
    computes it (~85 us of recording for its dispatched ops). Other orders, a ``dtype``, empty
    tensors and reductions over dims of size 1 only (the decomposition's ``abs``, exact where
    squares would underflow) take the decomposition."""
    if ord != 2 or ord.__class__ is bool or dtype is not None or x.dtype not in _NORM_DTYPES:
        raise NotImplementedError
    dims = norm_dims(x, dim)
    shape = tuple(x.shape)
    if x.numel() == 0 or all(shape[d] == 1 for d in dims):
        raise NotImplementedError
    result = zdtype(x.dtype)
    node = g.cast(read(x), _accumulate_dtype(result))
    total = g.reduce("sum", g.binary("mul", node, node), dims)
    return wrap(finish(g.cast(g.unary("sqrt", total), result), dims, keepdim), x._storage.device)


@register(aten.prod.default, aten.prod.dim_int)
def prod(x, dim=None, keepdim=False, dtype=None):
    dims = norm_dims(x, dim)
    out_dtype = zdtype(_sum_dtype(x, dtype))
    node = g.cast(read(x), _accumulate_dtype(out_dtype))
    if node.numel == 0:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        return wrap(finish(g.const(1, out_dtype, shape), dims, keepdim), x._storage.device)
    out = g.cast(g.reduce("prod", node, dims) if node.shape else node, out_dtype)
    return wrap(finish(out, dims, keepdim), x._storage.device)


@register(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, dtype=None):
    out_dtype = dtype or x.dtype
    if not (out_dtype.is_floating_point or out_dtype.is_complex):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. "
                           f"Got: {dtype_name(out_dtype)}")
    dims = norm_dims(x, dim)
    node = g.cast(read(x), _accumulate_dtype(zdtype(out_dtype)))
    count = math.prod(node.shape[d] for d in dims) if node.shape else 1
    if node.shape and node.numel:
        node = g.reduce("sum", node, dims)
    elif node.shape:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        node = g.const(float("nan"), node.dtype, shape)
    out = g.binary("div", node, g.const(float(count), node.dtype, node.shape))
    return wrap(finish(g.cast(out, zdtype(out_dtype)), dims, keepdim), x._storage.device)


def _minmax(op: str, x, dim, keepdim) -> Node:
    dims = norm_dims(x, dim)
    node = read(x)
    name = "amax" if op == "max" else "amin"
    if node.numel == 0:
        # ATen: a full reduction of an empty tensor is a RuntimeError, an empty reduced dim an
        # IndexError; reducing only non-empty dims of an empty tensor is fine (empty result).
        if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        for d in dims:
            if node.shape[d] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        return finish(g.const(0, node.dtype, tuple(1 if i in dims else s for i, s in enumerate(node.shape))),
                      dims, keepdim)
    if not node.shape:
        return node
    # max/min propagate NaN: the reduce uses maximum/minimum, which already do.
    return finish(g.reduce(op, node, dims), dims, keepdim)


@register(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return wrap(_minmax("max", x, dim, keepdim), x._storage.device)


@register(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return wrap(_minmax("min", x, dim, keepdim), x._storage.device)


@register(aten.max.default)
def max_all(x):
    if x.numel() == 0:
        raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    return wrap(_minmax("max", x, None, False), x._storage.device)


@register(aten.min.default)
def min_all(x):
    if x.numel() == 0:
        raise RuntimeError("min(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    return wrap(_minmax("min", x, None, False), x._storage.device)


def arg_index(node: Node, extreme: Node, dim: int) -> Node:
    """First index along ``dim`` where ``node`` equals ``extreme`` (NaN counts as the extreme)."""
    n = node.shape[dim]
    shape = node.shape
    positions = g.expand(g.reshape(g.iota((n,)), tuple(n if i == dim else 1 for i in range(len(shape)))),
                         shape)
    ext = g.expand(extreme, shape)
    hit = g.binary("eq", node, ext)
    if node.dtype.is_float:
        hit = g.binary("or", hit, g.unary("isnan", node))
    candidates = g.where(hit, positions, g.const(n, dtypes.int64, shape))
    return g.reduce("min", candidates, (dim,))


def _max_min_dim(op: str, x, dim: int, keepdim: bool):
    node = read(x)
    dim = check_dim(x, dim)
    if not node.shape:
        return wrap(node, x._storage.device), wrap(g.const(0, dtypes.int64, ()), x._storage.device)
    if node.shape[dim] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")
    extreme = g.reduce(op, node, (dim,))
    index = arg_index(node, extreme, dim)
    return (wrap(finish(extreme, (dim,), keepdim), x._storage.device),
            wrap(finish(index, (dim,), keepdim), x._storage.device))


@register(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    return _max_min_dim("max", x, dim, keepdim)


@register(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    return _max_min_dim("min", x, dim, keepdim)


def _arg(op: str, x, dim, keepdim):
    node = read(x)
    if dim is None:
        node = g.reshape(node, (node.numel,))
        d = 0
    else:
        d = wrap_dim(dim, x.dim())
        if not node.shape:
            return wrap(g.const(0, dtypes.int64, ()), x._storage.device)
    if node.numel == 0:
        raise IndexError(f"arg{op}(): Expected reduction dim {d} to have non-zero size.")
    extreme = g.reduce(op, node, (d,))
    index = arg_index(node, extreme, d)
    if dim is None:
        out = g.reshape(index, (1,) * x.dim()) if keepdim else g.reshape(index, ())
    else:
        out = finish(index, (d,), keepdim)
    return wrap(out, x._storage.device)


@register(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return _arg("max", x, dim, keepdim)


@register(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return _arg("min", x, dim, keepdim)


def _var(x, dim, correction, keepdim) -> tuple[Node, Node, tuple]:
    dims = norm_dims(x, dim)
    node = read(x)
    node = g.cast(node, _accumulate_dtype(node.dtype))
    count = math.prod(node.shape[d] for d in dims) if node.shape else 1
    if not node.shape:
        mean_ = node
        sq = g.binary("mul", g.binary("sub", node, node), g.binary("sub", node, node))
    else:
        total = g.reduce("sum", node, dims)
        mean_ = g.binary("div", total, g.const(float(count), node.dtype, total.shape))
        diff = g.binary("sub", node, g.expand(mean_, node.shape))
        sq = g.reduce("sum", g.binary("mul", diff, diff), dims)
    correction = 1 if correction is None else correction
    denom = max(count - correction, 0)
    var = g.binary("div", sq, g.const(float(denom), sq.dtype, sq.shape))
    return var, mean_, dims


@register(aten.var.correction)
def var(x, dim=None, correction=None, keepdim=False):
    v, _m, dims = _var(x, dim, correction, keepdim)
    return wrap(finish(g.cast(v, zdtype(x.dtype)), dims, keepdim), x._storage.device)


@register(aten.std.correction)
def std(x, dim=None, correction=None, keepdim=False):
    v, _m, dims = _var(x, dim, correction, keepdim)
    return wrap(finish(g.cast(g.unary("sqrt", v), zdtype(x.dtype)), dims, keepdim), x._storage.device)


@register(aten.var_mean.correction)
def var_mean(x, dim=None, correction=None, keepdim=False):
    v, m, dims = _var(x, dim, correction, keepdim)
    dev = x._storage.device
    return (wrap(finish(g.cast(v, zdtype(x.dtype)), dims, keepdim), dev),
            wrap(finish(g.cast(m, zdtype(x.dtype)), dims, keepdim), dev))


@register(aten.std_mean.correction)
def std_mean(x, dim=None, correction=None, keepdim=False):
    v, m, dims = _var(x, dim, correction, keepdim)
    dev = x._storage.device
    return (wrap(finish(g.cast(g.unary("sqrt", v), zdtype(x.dtype)), dims, keepdim), dev),
            wrap(finish(g.cast(m, zdtype(x.dtype)), dims, keepdim), dev))


@register(aten.logsumexp.default)
def logsumexp(x, dim, keepdim=False):
    dims = norm_dims(x, dim)
    node = read(x)
    if not node.dtype.is_float:
        node = g.cast(node, dtypes.float32)
    if not node.shape:
        return wrap(node, x._storage.device)
    m = g.reduce("max", node, dims)
    # Infinite maxima would give inf - inf = nan: shift by 0 there instead.
    shift = g.where(g.finite(m), m, g.const(0.0, m.dtype, m.shape))
    e = g.unary("exp", g.binary("sub", node, g.expand(shift, node.shape)))
    out = g.binary("add", g.unary("log", g.reduce("sum", e, dims)), shift)
    return wrap(finish(out, dims, keepdim), x._storage.device)


def _any_all(op: str, x, dim, keepdim):
    # An empty list of dims reduces nothing here (CPU torch's all/any.dims), unlike sum's.
    dims = () if isinstance(dim, (list, tuple)) and not dim else norm_dims(x, dim)
    node = g.cast(read(x), dtypes.bool_)
    if not node.shape or not dims:
        out = node
    elif node.numel == 0:
        shape = tuple(1 if i in dims else s for i, s in enumerate(node.shape))
        out = g.const(op == "min", dtypes.bool_, shape)
    else:
        out = g.reduce(op, node, dims)
    result_dtype = dtypes.uint8 if x.dtype == torch.uint8 else dtypes.bool_
    return wrap(finish(g.cast(out, result_dtype), dims, keepdim), x._storage.device)


@register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(x, dim=None, keepdim=False):
    return _any_all("max", x, dim, keepdim)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def all_(x, dim=None, keepdim=False):
    return _any_all("min", x, dim, keepdim)


def _is_true(op: str):
    """``_is_all_true`` (op "min") or ``_is_any_true`` ("max"): a 0-d bool of a bool tensor, what
    ``torch.distributions``' argument checks call."""

    def lowering(x):
        if x.dtype != torch.bool:
            raise RuntimeError("self.scalar_type() == at::kBool INTERNAL ASSERT FAILED")
        return _any_all(op, x, None, False)
    return lowering


register(aten._is_all_true.default)(_is_true("min"))
register(aten._is_any_true.default)(_is_true("max"))


@register(aten.aminmax.default)
def aminmax(x, dim=None, keepdim=False):
    if x.numel() == 0:
        if dim is None:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation "
                               "has no identity")
        d = norm_dims(x, dim)
        if d and x.shape[d[0]] == 0:
            raise IndexError(f"aminmax(): Expected reduction dim {d[0]} to have non-zero size.")
    dev = x._storage.device
    if dim is None:
        lo, hi = _minmax("min", x, None, False), _minmax("max", x, None, False)
        if keepdim:
            lo, hi = g.reshape(lo, (1,) * x.dim()), g.reshape(hi, (1,) * x.dim())
        return wrap(lo, dev), wrap(hi, dev)
    return wrap(_minmax("min", x, dim, keepdim), dev), wrap(_minmax("max", x, dim, keepdim), dev)


def _truth(node: Node, device) -> bool:
    # The result is a Python bool: realizing it is the data dependence ATen has too.
    return bool(wrap(g.reshape(node, ()), device).item())


def _all_of(cond: Node) -> Node:
    if not cond.shape:
        return cond
    if cond.numel == 0:
        return g.const(True, dtypes.bool_, (1,) * len(cond.shape))
    return g.reduce("min", cond, tuple(range(len(cond.shape))))


@register(aten.equal.default)
def equal(x, y):
    if tuple(x.shape) != tuple(y.shape):
        return False
    if x.numel() == 0:
        return True
    dtype = torch.promote_types(x.dtype, y.dtype)
    a, b = g.cast(read(x), zdtype(dtype)), g.cast(read(y), zdtype(dtype))
    return _truth(_all_of(g.binary("eq", a, b)), x._storage.device)


@register(aten.allclose.default)
def allclose(x, y, rtol=1e-05, atol=1e-08, equal_nan=False):
    if x.dtype != y.dtype:
        raise RuntimeError(f"{x.dtype} did not match {y.dtype}")
    close = aten.isclose.default(x, y, rtol, atol, equal_nan)
    return _truth(_all_of(read(close)), x._storage.device)
