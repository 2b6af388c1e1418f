"""Complex tensors made, copied, converted and viewed: factories, fills, copies and casts between
complex and real dtypes, ``torch.complex``/``polar``, the conjugate and negative bits, views
(``view_as_real``/``view_as_complex``, slices and the other view ops, dtype views), cat/stack and
the random fills.

Lowerings of the complex table (ops/complex/base.py): dispatch gives them every op on complex
values. Views are metadata on the shared storage, as for real tensors (ops/core/movement.py); the
bits PyTorch keeps on a view are carried over to it.
"""

from __future__ import annotations

import math
import sys

import torch

from ...lazy import graph as g
from ...record import overlap
from ...record.pending import unsupported
from ...record.tensor import ZyxTensor, read, reinterpreted, restride, wrap, write
from ...record.transfer import COMPLEX_TO_ZYX, TORCH_TO_ZYX, from_cpu, to_cpu, to_torch_device
from ..core import factory, storage_views  # noqa: F401  (their lowerings, shared below)
from ..core.movement import INPLACE_VIEW_OPS, VIEW_OPS, _meta_of, concat_nodes, view_of
from ..random.sampling import normal_node, uniform_node
from ..registry import LOWERINGS, aten, dtype_name, register, wrap_dim
from .base import (
    as_pairs,
    conj,
    device_of,
    is_complex,
    join,
    pairs,
    part_of,
    re,
    real_node,
    register_complex,
    scalar_pair,
    wrap_pairs,
    zpart,
)


def value_of(x, dtype: torch.dtype, device=None):
    """``x`` (zyx tensor of any dtype, CPU tensor, Python number) as a node of ``dtype``: pairs
    for a complex ``dtype``, else the real part cast (complex → real keeps the real part)."""
    if not isinstance(x, ZyxTensor) and isinstance(x, torch.Tensor) and x.dim() and device is not None:
        node = from_cpu(x, device)  # (pairs when x is complex)
        if dtype.is_complex:
            part = part_of(dtype)
            if not x.is_complex():
                node = join(g.cast(node, part), g.const(0, part, node.shape))
            return g.cast(node, part)
        return g.cast(re(node) if x.is_complex() else node, TORCH_TO_ZYX[dtype])
    if dtype.is_complex:
        return as_pairs(x, part_of(dtype))
    if is_complex(x):
        return g.cast(re(pairs(x)), TORCH_TO_ZYX[dtype])
    if isinstance(x, ZyxTensor):
        return g.cast(real_node(x), TORCH_TO_ZYX[dtype])
    value = x.item() if isinstance(x, torch.Tensor) else x
    return g.const(value.real if isinstance(value, complex) else value, TORCH_TO_ZYX[dtype])


def new_tensor(node, dtype: torch.dtype, device) -> ZyxTensor:
    """A fresh contiguous tensor of ``dtype`` holding ``node`` (pairs when complex)."""
    return wrap_pairs(node, device) if dtype.is_complex else wrap(node, device)


def laid_out(x, node, dtype, device, memory_format) -> ZyxTensor:
    """factory._laid_out for values that may be complex: a copy of ``x``'s layout in
    ``memory_format`` holding ``node``."""
    strides = factory.copy_strides(x, memory_format)
    if strides is None:
        return new_tensor(node, dtype, device)
    out = factory.empty_storage(tuple(x.shape), strides, dtype, device.index)
    write(out, node)
    return out


# ------------------------------------------------------------------------ factories and fills

for _op in (aten.empty_like.default, aten.empty.memory_format, aten.empty_strided.default):
    register_complex(_op)(LOWERINGS[_op])  # (factory.empty_storage makes complex storages)


@register_complex(aten.fill_.Scalar, aten.fill_.Tensor)
def fill_(x, value):
    if isinstance(value, torch.Tensor):
        overlap.check_internal(x)
        if value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.dim()} dimensions.")
    if not x.is_complex():
        raise NotImplementedError  # (a real tensor filled with a complex value: CPU torch's error)
    node = value_of(value, x.dtype)
    write(x, conj(node) if x.is_conj() else node)
    return x


@register_complex(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    return fill_(factory.empty_like(x), value)


@register_complex(aten.zero_.default)
def zero_(x):
    if not x.is_complex():
        raise NotImplementedError
    write(x, scalar_pair(0, part_of(x.dtype)))
    return x


@register_complex(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    if not dtype.is_complex:
        raise NotImplementedError
    return fill_(factory.empty_memory_format(size, dtype=dtype, device=device), fill_value)


@register_complex(aten.full_like.default)
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    out = factory.empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
    if out.__class__ is not ZyxTensor or not out.is_complex():
        return out.fill_(fill_value)  # (another device, or a real result)
    return fill_(out, fill_value)


@register_complex(aten.zeros_like.default)
def zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 0, dtype=dtype, device=device, memory_format=memory_format)


@register_complex(aten.ones_like.default)
def ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 1, dtype=dtype, device=device, memory_format=memory_format)


@register_complex(aten.normal_.default)
def normal_(x, mean=0.0, std=1.0, generator=None):
    """As CPU torch: each part normal with ``std`` / sqrt(2) (the complex value's deviation is
    ``std``), ``mean`` added to both."""
    if not x.is_complex():
        raise NotImplementedError
    part = part_of(x.dtype)
    z = normal_node((*x.shape, 2), x._storage.device, part, generator)
    # (complex32's halves are drawn in float32: scaled there, rounded once by the write)
    scale = g.const(std / math.sqrt(2), z.dtype, z.shape)
    write(x, g.binary("add", g.binary("mul", z, scale), g.const(mean, z.dtype, z.shape)))
    return x


@register_complex(aten.uniform_.default)
def uniform_(x, from_=0.0, to=1.0, generator=None):
    """As CPU torch: both parts uniform in [from, to)."""
    if not x.is_complex():
        raise NotImplementedError
    part = part_of(x.dtype)
    u = g.cast(uniform_node((*x.shape, 2), x._storage.device, generator), part)
    shape = u.shape
    write(x, g.binary("add", g.binary("mul", u, g.const(to - from_, part, shape)), g.const(from_, part, shape)))
    return x


# ------------------------------------------------------------------------ copies and casts


@register_complex(aten.copy_.default)
def copy_(dst, src, non_blocking=False):
    if not isinstance(dst, ZyxTensor):
        dst.copy_(to_torch_device(src, dst.device))
        return dst
    src = factory._plain(src)
    overlap.check_internal(dst)
    overlap.check_inputs(dst, (src,))
    try:
        torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape))
    except RuntimeError:
        raise RuntimeError(f"The size of tensor a ({dst.shape[-1] if dst.dim() else 1}) "
                           f"must match the size of tensor b ({src.shape[-1] if src.dim() else 1}) "
                           "at non-singleton dimension") from None
    device = dst._storage.device
    if isinstance(src, ZyxTensor) and src._storage.device is not device:
        src = to_cpu(src)  # (another zyx device: through the host)
    node = value_of(src, dst.dtype, device)
    if dst.is_conj():  # (a conjugate view stores the conjugate of what it shows)
        node = conj(node)
    if dst.is_neg():
        node = g.unary("neg", node)
    write(dst, node)
    return dst


@register_complex(aten._to_copy.default)
def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    dtype = dtype or x.dtype
    if device is not None and torch.device(device).type == "cpu":
        return to_cpu(x, sys.getrefcount(x)).to(dtype)
    if device is not None and torch.device(device).type == "cuda":
        return to_torch_device(x, torch.device(device)).to(dtype)
    target = factory._device(torch.device(device).index) if device is not None else x._storage.device
    if not isinstance(x, ZyxTensor) or x._storage.device is not target:
        x = to_cpu(x) if isinstance(x, ZyxTensor) else x
        node = value_of(x, dtype, target) if x.dim() else value_of(x.item(), dtype)
        return new_tensor(node, dtype, target)
    return laid_out(x, value_of(x, dtype), dtype, target, memory_format)


@register_complex(aten.clone.default)
def clone(x, memory_format=None):
    return laid_out(x, value_of(x, x.dtype), x.dtype, x._storage.device, memory_format)


@register_complex(aten.resolve_conj.default, aten.resolve_neg.default)
def resolve(x):
    """A tensor without the lazy bit: ``x`` itself when it has none, else a copy."""
    return clone(x) if x.is_conj() or x.is_neg() else x


@register_complex(aten._conj_physical.default, aten.conj_physical.default)
def conj_physical(x):
    if not x.is_complex():
        return clone(x)
    return wrap_pairs(conj(pairs(x)), x._storage.device)


@register_complex(aten.conj_physical_.default)
def conj_physical_(x):
    if x.is_complex():
        write(x, conj(read_stored(x)))
    return x


def read_stored(x):
    """``x``'s stored pairs, without its conjugate or negative bit (what a write through it
    replaces)."""
    return read(x)


@register_complex(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def lift_fresh(x):
    if isinstance(x, ZyxTensor):
        return x
    device = factory._device(0)
    return new_tensor(value_of(x, x.dtype, device), x.dtype, device)


@register_complex(aten._local_scalar_dense.default)
def local_scalar_dense(x):
    return to_cpu(x).item()


# (also the real table's: its operands are real, so dispatch's gate may not see complex values)
@register(aten.complex.default)
@register_complex(aten.complex.default)
def complex_(real, imag):
    if real.dtype != imag.dtype:
        raise RuntimeError(f"Expected object of scalar type {real.dtype} but got scalar type "
                           f"{imag.dtype} for second argument")
    if real.dtype not in (torch.float16, torch.float32, torch.float64):
        raise RuntimeError("Expected both inputs to be Half, Float or Double tensors but got "
                           f"{dtype_name(real.dtype)} and {dtype_name(imag.dtype)}")
    shape = tuple(torch.broadcast_shapes(real.shape, imag.shape))
    r, i = (g.broadcast_to(real_node(t), shape) for t in (real, imag))
    return wrap_pairs(join(r, i), device_of(real, imag))


_SCALAR_NAMES = {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


@register_complex(aten.complex.out)
def complex_out(real, imag, *, out):
    """``torch.complex(..., out=)``: ATen wants ``out`` of exactly the result's dtype."""
    result = complex_(real, imag)
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected object of scalar type {_SCALAR_NAMES[result.dtype]} but got scalar "
                           f"type {_SCALAR_NAMES.get(out.dtype, out.dtype)} for argument 'out'")
    if tuple(out.shape) != tuple(result.shape):
        aten.resize_.default(out, result.shape)
    return aten.copy_.default(out, result)


# (also the real table's: its operands are real, so dispatch's gate may not see complex values)
@register(aten.polar.default)
@register_complex(aten.polar.default)
def polar(abs, angle):
    if abs.dtype == angle.dtype == torch.float16:  # (complex32 has no polar kernel in CPU torch)
        raise unsupported("\"polar_cpu\" not implemented for 'Half'")
    if abs.dtype != angle.dtype or abs.dtype not in (torch.float32, torch.float64):
        raise NotImplementedError  # (CPU torch's errors)
    shape = tuple(torch.broadcast_shapes(abs.shape, angle.shape))
    r, t = (g.broadcast_to(real_node(x), shape) for x in (abs, angle))
    return wrap_pairs(join(g.binary("mul", r, g.unary("cos", t)), g.binary("mul", r, g.unary("sin", t))),
                      device_of(abs, angle))


# ------------------------------------------------------------------------------------ views


def _with_bits(x, out):
    """``out`` (a view of ``x``, or views) with ``x``'s conjugate and negative bits."""
    conj_bit, neg_bit = x.is_conj(), x.is_neg()
    if conj_bit or neg_bit:
        for view in out if isinstance(out, (list, tuple)) else (out,):
            if conj_bit:
                torch._C._set_conj(view, True)
            if neg_bit:
                torch._C._set_neg(view, True)
    return out


def _view_keeping_bits(lowering):
    def view(x, *args, **kwargs):
        return _with_bits(x, lowering(x, *args, **kwargs))

    return view


for _op in (*VIEW_OPS, *INPLACE_VIEW_OPS):
    register_complex(_op)(_view_keeping_bits(LOWERINGS[_op]))


@register_complex(aten._conj.default)
def _conj(x):
    shape, strides, offset = tuple(x.shape), tuple(x.stride()), x.storage_offset()
    out = view_of(x, shape, strides, offset)
    torch._C._set_conj(out, not x.is_conj())
    return out


# (also the real table's: its operands are real, so dispatch's gate may not see complex values)
@register(aten._neg_view.default)
@register_complex(aten._neg_view.default)
def _neg_view(x):
    out = view_of(x, tuple(x.shape), tuple(x.stride()), x.storage_offset())
    if x.is_conj():
        torch._C._set_conj(out, True)
    torch._C._set_neg(out, not x.is_neg())
    return out


@register_complex(aten.view_as_real.default)
def view_as_real(x):
    if x.is_conj():
        raise RuntimeError("view_as_real doesn't work on unresolved conjugated tensors.  To resolve the "
                           "conjugate tensor so you can view it as real, use self.resolve_conj(); however, "
                           "be warned that the resulting tensor will NOT alias the original.")
    if not x.is_complex():
        raise RuntimeError("view_as_real is only supported for complex tensors")
    result = aten.view_as_real.default(_meta_of(x))
    storage = reinterpreted(x._storage, zpart(x.dtype))
    return view_of(x, tuple(result.shape), tuple(result.stride()), result.storage_offset(), storage)


# (also the real table's: its operands are real, so dispatch's gate may not see complex values)
@register(aten.view_as_complex.default)
@register_complex(aten.view_as_complex.default)
def view_as_complex(x):
    result = aten.view_as_complex.default(_meta_of(x))  # (ATen's checks and messages)
    storage = reinterpreted(x._storage, COMPLEX_TO_ZYX[result.dtype])
    return view_of(x, tuple(result.shape), tuple(result.stride()), result.storage_offset(), storage)


@register_complex(aten.view.dtype)
def view_dtype(x, dtype):
    if x.is_conj():
        raise NotImplementedError  # (CPU torch refuses a conjugate's dtype view)
    result = aten.view.dtype(_meta_of(x), dtype)
    new = COMPLEX_TO_ZYX.get(dtype) or TORCH_TO_ZYX.get(dtype)
    if new is None:
        raise NotImplementedError
    return view_of(x, tuple(result.shape), tuple(result.stride()), result.storage_offset(),
                   reinterpreted(x._storage, new))


# Storage-changing ops that only change metadata work for complex tensors as they are.
for _op in (aten.as_strided_.default, aten.set_.source_Tensor, aten.is_set_to.default,
            aten._has_same_storage_numel.default):
    register_complex(_op)(LOWERINGS[_op])


@register_complex(aten.resize.default)
def resize(x, size, memory_format=None):
    """Functional resize: a new tensor of ``size`` holding ``x``'s elements in order (new ones 0)."""
    if not x.is_complex():
        raise NotImplementedError
    size = tuple(int(s) for s in size)
    n, want = x.numel(), math.prod(size)
    flat = g.reshape(pairs(x), (n, 2))
    flat = g.pad(flat, ((0, want - n), (0, 0))) if want > n else g.shrink(flat, ((0, want), (0, 2)))
    return wrap_pairs(g.reshape(flat, (*size, 2)), x._storage.device)


@register_complex(aten.resize_.default)
def resize_(x, size, memory_format=None):
    """storage_views.resize_ for a complex tensor: growing pads the pairs."""
    size = tuple(int(s) for s in size)
    if memory_format is None and size == tuple(x.shape):
        return x
    storage = x._storage
    strides = factory._contiguous_for(size, memory_format)
    needed = x.storage_offset() + g.strided_extent(size, strides)
    if needed > storage.numel:
        storage.value = g.pad(storage.value, ((0, needed - storage.numel), (0, 0)))
    restride(x, storage, size, strides, x.storage_offset())
    return x


# ------------------------------------------------------------------------------ joining


@register_complex(aten.cat.default)
def cat(tensors, dim=0):
    tensors = list(tensors)
    meta = torch.cat([torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors], dim)
    if not meta.dtype.is_complex:
        raise NotImplementedError
    dim = dim % meta.dim() if meta.dim() else 0
    ranked = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    part = part_of(meta.dtype)
    parts = [as_pairs(t, part) for t in ranked]
    out = concat_nodes(parts, dim) if parts else g.const(0, part, (*meta.shape, 2))
    return wrap_pairs(out, device_of(tensors))


@register_complex(aten.stack.default)
def stack(tensors, dim=0):
    for i, t in enumerate(tensors[1:], start=1):
        if t.shape != tensors[0].shape:
            raise RuntimeError("stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(t.shape)} at entry {i}")
    dim = wrap_dim(dim, tensors[0].dim() + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


@register_complex(aten.flip.default)
def flip(x, dims):
    if not x.is_complex():
        raise NotImplementedError
    wrapped = tuple(wrap_dim(d, x.dim()) for d in dims)
    if len(set(wrapped)) != len(wrapped):
        raise NotImplementedError  # (ATen's error for repeated dims)
    return wrap_pairs(g.flip(pairs(x), wrapped), x._storage.device)



# --------------------------------------------------------- data movement through the real view
# Ops that move or select whole elements along a complex tensor's axes do the same to its real
# view, whose trailing axis (the pair) they leave alone: the real lowerings run on it, and the
# result is read back as complex.


def _real_view(x):
    """``x`` as its real view (a conjugate first resolved: the view holds the stored values)."""
    return view_as_real(clone(x) if x.is_conj() else x)


def _complex_result(r):
    return view_as_complex(r.contiguous())


def _like(value, x):
    """``value`` (any operand) as a contiguous complex tensor of ``x``'s dtype on its device."""
    return wrap_pairs(value_of(value, x.dtype, x._storage.device), x._storage.device)


@register_complex(aten.index.Tensor)
def index(x, indices):
    if not x.is_complex():
        raise NotImplementedError
    return _complex_result(aten.index.Tensor(_real_view(x), indices))


@register_complex(aten.index_put.default)
def index_put(x, indices, values, accumulate=False):
    if not x.is_complex():
        raise NotImplementedError
    return _complex_result(aten.index_put.default(_real_view(x), indices, _real_view(_like(values, x)),
                                                  accumulate))


def _pair_index(index):
    return index.unsqueeze(-1).expand(*index.shape, 2)


@register_complex(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    if not x.is_complex():
        raise NotImplementedError
    if x.dim() == 0:  # (the real view's only axis would be the pair: gather from a 1-element x)
        wrap_dim(dim, 0)
        return gather(x.reshape(1), 0, index.reshape(-1)).reshape(index.shape)
    dim = wrap_dim(dim, x.dim())
    return _complex_result(aten.gather.default(_real_view(x), dim, _pair_index(index)))


@register_complex(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    if not x.is_complex():
        raise NotImplementedError
    if not isinstance(src, torch.Tensor):  # (a number: every entry of the index writes it)
        src = _like(src, x).expand(index.shape)
    if x.dim() == 0:
        wrap_dim(dim, 0)
        return scatter(x.reshape(1), 0, index.reshape(-1), src.reshape(-1)).reshape(())
    dim = wrap_dim(dim, x.dim())
    return _complex_result(aten.scatter.src(_real_view(x), dim, _pair_index(index),
                                            _real_view(_like(src, x))))


@register_complex(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    if not x.is_complex():
        raise NotImplementedError
    if x.dim() == 0:  # (the real view's only axis would be the pair: add into a 1-element x)
        wrap_dim(dim, 0)
        return scatter_add(x.reshape(1), 0, index.reshape(-1), src.reshape(-1)).reshape(())
    dim = wrap_dim(dim, x.dim())
    return _complex_result(aten.scatter_add.default(_real_view(x), dim, _pair_index(index),
                                                    _real_view(_like(src, x))))


@register_complex(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_reduce(x, dim, index, src, reduce):
    """``scatter(..., reduce=)``: "add" is scatter_add (a value ``src`` expanded to the index);
    "multiply" multiplies each element by the product of the entries landing on it, in polar
    form (magnitudes multiplied, angles added: the real scatters do both), so elements no
    entry reaches keep their exact value."""
    if not x.is_complex():
        raise NotImplementedError
    if reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    if not isinstance(src, torch.Tensor):
        src = _like(src, x).expand(index.shape)
    if reduce == "add":
        return scatter_add(x, dim, index, src)
    if x.dim() == 0:
        wrap_dim(dim, 0)
        return scatter_reduce(x.reshape(1), 0, index.reshape(-1), src.reshape(-1), reduce).reshape(())
    src = _like(src, x)
    one = aten.ones_like.default(x, dtype=aten.abs.default(src).dtype)
    size = aten.scatter_reduce.two(one, dim, index, aten.abs.default(src), "prod", include_self=False)
    turn = aten.scatter_reduce.two(one * 0, dim, index, aten.angle.default(src), "sum", include_self=False)
    hit = aten.scatter_reduce.two(one * 0, dim, index, aten.ones_like.default(index, dtype=one.dtype),
                                  "sum", include_self=False)
    factor = aten.polar.default(size, turn)
    return aten.where.self(aten.ne.Scalar(hit, 0), aten.mul.Tensor(x, factor), x)


@register_complex(aten.masked_select.default)
def masked_select(x, mask):
    if not x.is_complex():
        raise NotImplementedError
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    real = _real_view(x.expand(shape))
    picked = aten.masked_select.default(real, mask.expand(shape).unsqueeze(-1).expand(*shape, 2))
    return _complex_result(picked.view(-1, 2))


@register_complex(aten.nonzero.default)
def nonzero(x):
    if not x.is_complex():
        raise NotImplementedError
    return aten.nonzero.default(aten.ne.Scalar(x, 0))


@register_complex(aten.equal.default)
def equal(x, y):
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return bool(aten.all.default(aten.eq.Tensor(x, y)).item())


@register_complex(aten.copy.default)
def copy(dst, src, non_blocking=False):
    """Functional copy: ``src`` broadcast to ``dst``'s shape in ``dst``'s dtype (a new tensor)."""
    shape = tuple(torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape)))
    if shape != tuple(dst.shape):
        raise NotImplementedError
    node = value_of(src, dst.dtype, dst._storage.device)
    node = g.broadcast_to(node, (*shape, 2) if dst.is_complex() else shape)
    return new_tensor(node, dst.dtype, dst._storage.device)


def _random_like(fill, real_fill):
    def lowering(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        out = factory.empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
        if out.__class__ is not ZyxTensor:
            raise NotImplementedError
        # (a complex input with a real ``dtype``: the real fill, through the dispatcher)
        return fill(out) if out.is_complex() else real_fill(out)

    return lowering


register_complex(aten.randn_like.default)(_random_like(normal_, aten.normal_.default))
register_complex(aten.rand_like.default)(_random_like(uniform_, aten.uniform_.default))
