"""Lowerings of the ``prims.*`` ops that PyTorch's Python references (``torch._refs``) and the
decompositions built on them call.

A prim is a stricter aten op: no type promotion (tensor operands share one dtype), no implicit
broadcasting (``broadcast_in_dim`` names the kept dimensions), reductions over an explicit list of
dims with an ``output_dtype`` and no keepdim. Each prim here maps to zyx's lowering of the aten op
with the same semantics, looked up in ``registry.LOWERINGS`` when it is called (so it always takes
the current lowering of that op), in tables rather than branches. Every call first evaluates the
prim on meta tensors of its operands' geometry: that runs the prim's own checks with its own
messages (same shapes, same dtypes, dims in range, numel of copies) and gives the result's dtype,
shape and, for views, strides and offset, which the aten lowering's result must match; where it
does not (a prim whose aten twin promotes differently), the lowering declines, and dispatch goes on
as for any unlowered op.

Prims that need no lowering: the factories (``iota``, ``full``, ``scalar_tensor``,
``empty_strided``, ``empty_permuted``, ``normal``, ...) take no tensor operand, so they reach the
PrivateUse1 key, where their CompositeExplicitAutograd kernel calls the aten factory zyx
registers; ``minimum_value``/``maximum_value`` return Python numbers. Complex prims (``real``,
``imag``, ``conj``, ``fft_*``) never see a zyx tensor: zyx refuses complex dtypes when one is made.
Not lowered: ``xor_sum`` (PyTorch implements it only in Inductor), ``shift_right_logical`` of
signed integers (no aten twin), ``cbrt`` (no aten twin; declines to the CPU).
"""

from __future__ import annotations

import torch
import torch._prims  # (registers the prims defined in Python: broadcast_in_dim, ...)
from torch.utils._pytree import tree_map

from .core.movement import _meta_of, _view_lowering
from .registry import LOWERINGS, aten, register

prims = torch.ops.prims


def _meta(x):
    return _meta_of(x) if isinstance(x, torch.Tensor) and x.device.type == "zyx" else x


def expected(prim, args, kwargs) -> torch.Tensor:
    """The prim evaluated on meta tensors of its zyx operands' geometry: its checks and errors,
    and the result's dtype and shape (one result; the tuple for multi-output prims)."""
    return prim(*tree_map(_meta, args), **tree_map(_meta, kwargs))


def _matching(result, want):
    """``result`` when its dtype and shape are the prim's; else decline (its aten twin promotes
    or broadcasts where the prim does not, and only the prim's own kernel is right)."""
    if isinstance(result, (tuple, list)):
        return type(result)(_matching(r, w) for r, w in zip(result, want))
    if result.dtype != want.dtype or result.shape != want.shape:
        raise NotImplementedError(f"zyx: prim result {result.dtype}{list(result.shape)} differs from "
                                  f"the prim's {want.dtype}{list(want.shape)}")
    return result


def _lowering_of(op):
    """The current lowering of aten overload ``op`` (declining when zyx has none)."""
    fn = LOWERINGS.get(op)
    if fn is None:
        raise NotImplementedError(f"zyx: no lowering for {op}")
    return fn


# ------------------------------------------------------------------ elementwise
# prim → the aten overload with the same semantics for operands of one dtype and shape. Unary
# float math on integers never reaches a prim (the references promote first), and where it would,
# the meta check sees the aten twin's promoted dtype and declines.
_UNARY = {
    "abs": aten.abs.default, "acos": aten.acos.default, "acosh": aten.acosh.default,
    "asin": aten.asin.default, "asinh": aten.asinh.default, "atan": aten.atan.default,
    "atanh": aten.atanh.default, "bitwise_not": aten.bitwise_not.default, "ceil": aten.ceil.default,
    "cos": aten.cos.default, "cosh": aten.cosh.default, "erf": aten.erf.default,
    "erfc": aten.erfc.default, "exp": aten.exp.default, "exp2": aten.exp2.default,
    "expm1": aten.expm1.default, "floor": aten.floor.default, "isfinite": aten.isfinite.default,
    "lgamma": aten.lgamma.default, "log": aten.log.default, "log10": aten.log10.default,
    "log1p": aten.log1p.default, "log2": aten.log2.default, "neg": aten.neg.default,
    "reciprocal": aten.reciprocal.default, "round": aten.round.default, "rsqrt": aten.rsqrt.default,
    "sign": aten.sign.default, "sin": aten.sin.default, "sinh": aten.sinh.default,
    "sqrt": aten.sqrt.default, "tan": aten.tan.default, "tanh": aten.tanh.default,
    "trunc": aten.trunc.default,
}
# Binary prims take a tensor and a tensor or a number (refs pass wrapped scalars).
_BINARY = {
    "add": aten.add.Tensor, "atan2": aten.atan2.default, "bitwise_and": aten.bitwise_and.Tensor,
    "bitwise_or": aten.bitwise_or.Tensor, "bitwise_xor": aten.bitwise_xor.Tensor,
    "eq": aten.eq.Tensor, "fmax": aten.fmax.default, "fmin": aten.fmin.default,
    "fmod": aten.fmod.Tensor, "ge": aten.ge.Tensor, "gt": aten.gt.Tensor, "hypot": aten.hypot.default,
    "le": aten.le.Tensor, "lt": aten.lt.Tensor, "maximum": aten.maximum.default,
    "minimum": aten.minimum.default, "mul": aten.mul.Tensor, "ne": aten.ne.Tensor,
    "pow": aten.pow.Tensor_Tensor, "remainder": aten.remainder.Tensor,
    "shift_left": aten.bitwise_left_shift.Tensor,
    "shift_right_arithmetic": aten.bitwise_right_shift.Tensor, "sub": aten.sub.Tensor,
}
# The aten overload a number operand takes instead (the Tensor overloads' lowerings want tensors
# where ATen's schema does).
_SCALAR_OVERLOADS = {
    aten.add.Tensor: aten.add.Scalar, aten.sub.Tensor: aten.sub.Scalar, aten.mul.Tensor: aten.mul.Scalar,
    aten.pow.Tensor_Tensor: aten.pow.Tensor_Scalar, aten.eq.Tensor: aten.eq.Scalar,
    aten.ne.Tensor: aten.ne.Scalar, aten.ge.Tensor: aten.ge.Scalar, aten.gt.Tensor: aten.gt.Scalar,
    aten.le.Tensor: aten.le.Scalar, aten.lt.Tensor: aten.lt.Scalar, aten.fmod.Tensor: aten.fmod.Scalar,
    aten.remainder.Tensor: aten.remainder.Scalar, aten.bitwise_and.Tensor: aten.bitwise_and.Scalar,
    aten.bitwise_or.Tensor: aten.bitwise_or.Scalar, aten.bitwise_xor.Tensor: aten.bitwise_xor.Scalar,
    aten.bitwise_left_shift.Tensor: aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Tensor: aten.bitwise_right_shift.Tensor_Scalar,
}


def _elementwise(prim, op):
    def lowering(*args, **kwargs):
        want = expected(prim, args, kwargs)
        if len(args) == 2 and not isinstance(args[1], torch.Tensor) and op in _SCALAR_OVERLOADS:
            return _matching(_lowering_of(_SCALAR_OVERLOADS[op])(*args), want)
        return _matching(_lowering_of(op)(*args, **kwargs), want)

    lowering.__doc__ = f"prims.{prim._overloadpacket.__name__}: zyx's lowering of {op}."
    return lowering


for _name, _op in {**_UNARY, **_BINARY}.items():
    _prim = getattr(prims, _name).default
    register(_prim)(_elementwise(_prim, _op))


@register(prims.div.default)
def div(a, b):
    """prims.div truncates integer quotients (aten.div rounds none and returns floats)."""
    want = expected(prims.div.default, (a, b), {})
    if want.dtype.is_floating_point or want.dtype.is_complex:
        return _matching(_lowering_of(aten.div.Tensor)(a, b), want)
    return _matching(_lowering_of(aten.div.Tensor_mode)(a, b, rounding_mode="trunc"), want)


@register(prims.where.default)
def where(pred, a, b):
    """prims.where: aten's where on operands of one dtype and shape."""
    want = expected(prims.where.default, (pred, a, b), {})
    return _matching(_lowering_of(aten.where.self)(pred, a, b), want)


@register(prims.fill.default)
def fill(a, value):
    """A new tensor of ``a``'s shape and dtype filled with ``value``."""
    return _matching(_lowering_of(aten.fill.Scalar)(a, value), expected(prims.fill.default, (a, value), {}))


# ------------------------------------------------------------------ views
# The view prims' geometry (shape, strides, offset) is the prim's meta on the input's geometry:
# movement's meta path gives exactly the prim's strides (broadcast_in_dim's zero strides,
# split_dim's and collapse_view's), and the result is a view of the same storage.
# (prims.slice, named in torch._prims.__all__, is no prim in this PyTorch: refs slice with aten.)
for _prim in (prims.broadcast_in_dim.default, prims.collapse_view.default, prims.split_dim.default,
              prims.squeeze.default, prims.transpose.default, prims.view_of.default,
              prims.as_strided.default):
    register(_prim)(_view_lowering(_prim))


@register(prims.view_of_dtype.default)
def view_of_dtype(a, dtype):
    """``a``'s bytes as ``dtype``: aten's ``view.dtype``."""
    return _lowering_of(aten.view.dtype)(a, dtype)


# ------------------------------------------------------------------ copies and movement


def _contiguous(a):
    return _lowering_of(aten.clone.default)(a, memory_format=torch.contiguous_format)


def _reshaping(prim):
    # prims.reshape and prims.collapse make a new contiguous tensor, never a view of ``a``.
    def lowering(a, *args):
        want = expected(prim, (a, *args), {})
        return _lowering_of(aten.view.default)(_contiguous(a), tuple(want.shape))

    lowering.__doc__ = f"{prim}: a contiguous copy of ``a`` in the prim's shape (not a view)."
    return lowering


for _prim in (prims.reshape.default, prims.collapse.default):
    register(_prim)(_reshaping(_prim))


@register(prims.rev.default)
def rev(a, dims):
    """The elements reversed along ``dims``: aten's flip."""
    return _matching(_lowering_of(aten.flip.default)(a, dims), expected(prims.rev.default, (a, dims), {}))


@register(prims.cat.default)
def cat(tensors, dim):
    """aten's cat (the prim takes no promotion: its meta checks one dtype)."""
    want = expected(prims.cat.default, (tensors, dim), {})
    return _matching(_lowering_of(aten.cat.default)(tensors, dim), want)


@register(prims.clone.default)
def clone(a, *, memory_format=None):
    """aten's clone (``memory_format`` None is preserve_format, as in the prim's meta)."""
    return _lowering_of(aten.clone.default)(a, memory_format=memory_format or torch.preserve_format)


@register(prims.copy_to.default)
def copy_to(a, b):
    """``b``'s elements written into ``a`` (same numel; a ``b`` of another shape is read in
    row-major order, as the prim's aten kernel does through ``view_as``)."""
    expected(prims.copy_to.default, (a, b), {})
    if b.shape != a.shape:
        b = _lowering_of(aten.view.default)(_contiguous(b), tuple(a.shape))
    return _lowering_of(aten.copy_.default)(a, b)


@register(prims.copy_strided.default)
def copy_strided(a, stride):
    """A copy of ``a`` with the given strides (a fresh storage of that layout, written)."""
    want = expected(prims.copy_strided.default, (a, stride), {})
    out = torch.empty_strided(want.shape, want.stride(), dtype=a.dtype, device=a.device)
    return _lowering_of(aten.copy_.default)(out, a)


@register(prims.resize.default)
def resize(a, shape):
    """``a`` resized in place (aten's resize_, with its storage growth rules)."""
    return _lowering_of(aten.resize_.default)(a, shape)


@register(prims.as_strided_scatter.default)
def as_strided_scatter(a, src, size, stride, storage_offset):
    """aten's as_strided_scatter (same arguments, no promotion)."""
    return _lowering_of(aten.as_strided_scatter.default)(a, src, size, stride, storage_offset)


@register(prims.item.default)
def item(a):
    """The element of a one-element tensor as a Python number (realizes ``a``)."""
    return _lowering_of(aten._local_scalar_dense.default)(a)


@register(prims.svd.default)
def svd(a, *, full_matrices):
    """U, S, Vh: aten's _linalg_svd with the vectors."""
    want = expected(prims.svd.default, (a,), {"full_matrices": full_matrices})
    return _matching(tuple(_lowering_of(aten._linalg_svd.default)(a, full_matrices, True)), want)


# ------------------------------------------------------------------ reductions
# A prim reduction takes a list of dims (none or empty: the prim reduces nothing when the list is
# empty, where aten's dim=[] reduces everything), no keepdim, and an output_dtype that is the
# result's dtype (aten.sum would promote integers to int64; the prim keeps their dtype).


def _identity(a, want):
    # Reducing over no dims: the values, in the result's dtype, as a new tensor.
    return _lowering_of(prims.convert_element_type.default)(a, want.dtype)


def _sum(a, dims, want):
    return _lowering_of(aten.sum.dim_IntList)(a, list(dims), False, dtype=want.dtype)


def _prod(a, dims, want):
    # aten.prod reduces one dim at a time: the highest first, so the lower ones keep their index.
    out = a
    for d in sorted((d % max(a.dim(), 1) for d in dims), reverse=True):
        out = _lowering_of(aten.prod.dim_int)(out, d, False, dtype=want.dtype)
    return out


def _extremum(op):
    def reduce(a, dims, want):
        return _lowering_of(op)(a, list(dims), False)

    return reduce


_REDUCTIONS = {prims.sum.default: _sum, prims.prod.default: _prod,
               prims.amax.default: _extremum(aten.amax.default),
               prims.amin.default: _extremum(aten.amin.default)}


def _reduction(prim, reduce):
    def lowering(inp, dims, *, output_dtype=None):
        want = expected(prim, (inp, dims), {"output_dtype": output_dtype})
        if dims is None:
            dims = range(inp.dim())
        if not dims or inp.dim() == 0:
            return _identity(inp, want)
        return _matching(reduce(inp, dims, want), want)

    lowering.__doc__ = f"{prim}: zyx's aten reduction over ``dims`` without keepdim."
    return lowering


for _prim, _reduce in _REDUCTIONS.items():
    register(_prim)(_reduction(_prim, _reduce))


@register(prims.var.default)
def var(inp, dims, correction=1, *, output_dtype=None):
    """aten's var.correction over ``dims`` without keepdim; over no dims it declines (the prim
    divides by 1 - correction there, which aten never does)."""
    want = expected(prims.var.default, (inp, dims, correction), {"output_dtype": output_dtype})
    if dims is None:
        dims = list(range(inp.dim()))
    if not dims or inp.dim() == 0:
        raise NotImplementedError("zyx: prims.var over no dims")
    out = _lowering_of(aten.var.correction)(inp, list(dims), correction=correction, keepdim=False)
    if out.dtype != want.dtype:
        out = _lowering_of(prims.convert_element_type.default)(out, want.dtype)
    return _matching(out, want)
