"""The ``prims.*`` ops on complex values: what PyTorch's references and decompositions leave
for complex tensors (a decomposition of pad, cumsum, var, pow, ... ends in prims).

Lowerings of the complex table (ops/complex/base.py), the complex twins of ops/prims.py: each
prim takes the complex lowering of its aten twin (looked up in ``COMPLEX`` when called), after
the prim's own checks on meta tensors (ops/prims.py ``expected``) and with its result's dtype
and shape required of the twin's. A prim whose twin has no complex lowering declines: calling
the aten op through the dispatcher instead could decompose back into the same prim.
"""

from __future__ import annotations

import torch

from ..core.movement import _view_lowering
from ..prims import _BINARY, _SCALAR_OVERLOADS, _UNARY, _matching, expected, prims
from ..registry import LOWERINGS, aten
from .base import COMPLEX, register_complex
from .creation import _view_keeping_bits


def _twin(op):
    fn = COMPLEX.get(op)
    if fn is None:
        raise NotImplementedError(f"zyx: no complex lowering for {op}")
    return fn


def _elementwise(prim, op):
    def lowering(*args, **kwargs):
        want = expected(prim, args, kwargs)
        if len(args) == 2 and not isinstance(args[1], torch.Tensor) and op in _SCALAR_OVERLOADS:
            return _matching(_twin(_SCALAR_OVERLOADS[op])(*args), want)
        return _matching(_twin(op)(*args, **kwargs), want)

    return lowering


for _name, _op in {**_UNARY, **_BINARY}.items():
    _prim = getattr(prims, _name).default
    register_complex(_prim)(_elementwise(_prim, _op))
register_complex(prims.div.default)(_elementwise(prims.div.default, aten.div.Tensor))
register_complex(prims.where.default)(_elementwise(prims.where.default, aten.where.self))
register_complex(prims.fill.default)(_elementwise(prims.fill.default, aten.fill.Scalar))

# Views: movement's meta path, as ops/prims.py, keeping the conjugate and negative bits.
for _prim in (prims.broadcast_in_dim.default, prims.collapse_view.default, prims.split_dim.default,
              prims.squeeze.default, prims.transpose.default, prims.view_of.default,
              prims.as_strided.default):
    register_complex(_prim)(_view_keeping_bits(_view_lowering(_prim)))


@register_complex(prims.view_of_dtype.default)
def view_of_dtype(a, dtype):
    return _twin(aten.view.dtype)(a, dtype)


@register_complex(prims.convert_element_type.default)
def convert_element_type(a, dtype):
    return _twin(aten._to_copy.default)(a, dtype=dtype)


def _contiguous(a):
    return _twin(aten.clone.default)(a, memory_format=torch.contiguous_format)


def _reshaping(prim):
    def lowering(a, *args):
        want = expected(prim, (a, *args), {})
        return _twin(aten.view.default)(_contiguous(a), tuple(want.shape))

    return lowering


for _prim in (prims.reshape.default, prims.collapse.default):
    register_complex(_prim)(_reshaping(_prim))


@register_complex(prims.rev.default)
def rev(a, dims):
    return _matching(_twin(aten.flip.default)(a, dims), expected(prims.rev.default, (a, dims), {}))


@register_complex(prims.cat.default)
def cat(tensors, dim):
    want = expected(prims.cat.default, (tensors, dim), {})
    return _matching(_twin(aten.cat.default)(tensors, dim), want)


@register_complex(prims.clone.default)
def clone(a, *, memory_format=None):
    return _twin(aten.clone.default)(a, memory_format=memory_format or torch.preserve_format)


@register_complex(prims.copy_to.default)
def copy_to(a, b):
    """``b``'s elements written into ``a`` (a ``b`` of another shape read in row-major order)."""
    expected(prims.copy_to.default, (a, b), {})
    if b.shape != a.shape:
        b = _twin(aten.view.default)(_contiguous(b), tuple(a.shape))
    return _twin(aten.copy_.default)(a, b)


@register_complex(prims.copy_strided.default)
def copy_strided(a, stride):
    want = expected(prims.copy_strided.default, (a, stride), {})
    out = torch.empty_strided(want.shape, want.stride(), dtype=a.dtype, device=a.device)
    return _twin(aten.copy_.default)(out, a)


@register_complex(prims.resize.default)
def resize(a, shape):
    return _twin(aten.resize_.default)(a, shape)


@register_complex(aten.as_strided_scatter.default, prims.as_strided_scatter.default)
def as_strided_scatter(a, src, size, stride, storage_offset=None):
    """A copy of ``a`` with ``src`` written through the strided view (size, stride, offset)."""
    if not a.is_complex():
        raise NotImplementedError
    out = _contiguous(a)
    view = _twin(aten.as_strided.default)(out, size, stride, storage_offset)
    _twin(aten.copy_.default)(view, src)
    return out


@register_complex(prims.item.default)
def item(a):
    return _twin(aten._local_scalar_dense.default)(a)


# Reductions over an explicit list of dims, no keepdim, the output dtype the result's.


def _sum(a, dims, want):
    return _twin(aten.sum.dim_IntList)(a, list(dims), False, dtype=want.dtype)


def _prod(a, dims, want):
    out = a
    for d in sorted((d % max(a.dim(), 1) for d in dims), reverse=True):
        out = _twin(aten.prod.dim_int)(out, d, False, dtype=want.dtype)
    return out


def _reduction(prim, reduce):
    def lowering(inp, dims, *, output_dtype=None):
        want = expected(prim, (inp, dims), {"output_dtype": output_dtype})
        if dims is None:
            dims = range(inp.dim())
        if not dims or inp.dim() == 0:
            return convert_element_type(inp, want.dtype)
        return _matching(reduce(inp, dims, want), want)

    return lowering


register_complex(prims.sum.default)(_reduction(prims.sum.default, _sum))
register_complex(prims.prod.default)(_reduction(prims.prod.default, _prod))


@register_complex(prims.var.default)
def var(inp, dims, correction=1, *, output_dtype=None):
    """The complex var.correction over ``dims``; over no dims it declines, as ops/prims.py."""
    want = expected(prims.var.default, (inp, dims, correction), {"output_dtype": output_dtype})
    if dims is None:
        dims = list(range(inp.dim()))
    if not dims or inp.dim() == 0:
        raise NotImplementedError("zyx: prims.var over no dims")
    out = _twin(aten.var.correction)(inp, list(dims), correction=correction, keepdim=False)
    if out.dtype != want.dtype:
        out = LOWERINGS[prims.convert_element_type.default](out, want.dtype)
    return _matching(out, want)
