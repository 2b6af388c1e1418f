"""Movement lowerings: views share storage (metadata only), copies build movement nodes.

View ops (view, t, permute, slice, select, expand, as_strided, ...) are new wrappers on the
same storage. The common ones compute the result's (shape, strides, offset) directly, as ATen
does (``_GEOMETRY``); the rest, and any call those decline (odd arguments, errors), are
evaluated on a meta tensor with the input's metadata: PyTorch itself computes the result and
raises its own errors (a meta round trip costs ~50 us, the direct path a few).
cat, stack, flip, roll and constant padding build lazy movement nodes (masks, no copies).
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, meta, read, reinterpreted, restride, wrap
from ...record.transfer import TORCH_TO_ZYX, zdtype
from ..registry import aten, cast, register, wrap_dim

VIEW_OPS = [
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.transpose.int, aten.permute.default,
    aten.expand.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
    aten.select.int, aten.slice.Tensor, aten.narrow.default, aten.diagonal.default, aten.as_strided.default,
    aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default, aten.alias.default,
    aten.detach.default, aten.unfold.default, aten.view_as.default, aten.expand_as.default, aten.movedim.int,
    aten.movedim.intlist, aten.swapaxes.default, aten.swapdims.default, aten.tensor_split.sections,
    aten.tensor_split.indices, aten.unflatten.int, aten._reshape_alias.default,
    aten.numpy_T.default, aten.mT.default, aten.mH.default, aten.adjoint.default, aten.hsplit.int,
    aten.vsplit.int, aten.split.sizes, aten.unsafe_split.Tensor,
]


def _meta_of(x: ZyxTensor) -> torch.Tensor:
    base = torch.empty(x._storage.numel, dtype=x.dtype, device="meta")
    return base.as_strided(tuple(x.shape), tuple(x.stride()), x.storage_offset())


# ------------------------------------------------------------------ view geometry, as ATen
# Each function maps the input's (shape, strides, offset) and the op's arguments to the result's
# (shape, strides, offset), or None to leave the call to the meta path (which raises PyTorch's
# errors): only well-formed calls are handled here.


def _dim(d, ndim: int) -> int | None:
    """``d`` wrapped into [0, ndim) (ATen's maybe_wrap_dim; a 0-d tensor takes -1 and 0), or None."""
    if d.__class__ is not int:
        return None
    bound = max(ndim, 1)
    if not -bound <= d < bound:
        return None
    return d % bound


def _view(shape, strides, offset, size):
    # Only views of contiguous tensors: ATen's computeStride then gives contiguous strides.
    if strides != g.contiguous_strides(shape) or not all(s.__class__ is int for s in size):
        return None
    numel = math.prod(shape)
    size = list(size)
    if size.count(-1) == 1:
        known = math.prod(s for s in size if s != -1)
        if known == 0 or numel % known:
            return None
        size[size.index(-1)] = numel // known
    size = tuple(size)
    if numel == 0 or min(size, default=1) < 0 or math.prod(size) != numel:
        return None
    return size, g.contiguous_strides(size), offset


def reshape_strides(shape, strides, new_shape) -> tuple | None:
    """The strides of ``new_shape`` viewing a tensor of ``shape`` and ``strides`` (ATen's
    computeStride), or None when no view can: each run of input axes that is contiguous in
    memory must split into whole output axes."""
    if not shape:
        return (1,) * len(new_shape)
    numel = math.prod(shape)
    if numel == 0:
        if tuple(shape) == tuple(new_shape):
            return tuple(strides)
        return g.contiguous_strides(tuple(max(s, 1) for s in new_shape))
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1
                             and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def _t(shape, strides, offset):
    if len(shape) < 2:
        return shape, strides, offset
    if len(shape) > 2:
        return None
    return shape[::-1], strides[::-1], offset


def _transpose(shape, strides, offset, dim0, dim1):
    ndim = len(shape)
    dim0, dim1 = _dim(dim0, ndim), _dim(dim1, ndim)
    if dim0 is None or dim1 is None:
        return None
    if ndim == 0:
        return shape, strides, offset
    shape, strides = list(shape), list(strides)
    shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
    strides[dim0], strides[dim1] = strides[dim1], strides[dim0]
    return tuple(shape), tuple(strides), offset


def _permute(shape, strides, offset, dims):
    ndim = len(shape)
    wrapped = [_dim(d, ndim) for d in dims]
    if len(wrapped) != ndim or None in wrapped or len(set(wrapped)) != ndim:
        return None
    return tuple(shape[d] for d in wrapped), tuple(strides[d] for d in wrapped), offset


def _unsqueeze(shape, strides, offset, dim):
    ndim = len(shape)
    dim = _dim(dim, ndim + 1)
    if dim is None:
        return None
    stride = shape[dim] * strides[dim] if dim < ndim else 1
    return shape[:dim] + (1,) + shape[dim:], strides[:dim] + (stride,) + strides[dim:], offset


def _squeeze_dims(shape, strides, offset, dims):
    ndim = len(shape)
    wrapped = {_dim(d, ndim) for d in dims}
    if None in wrapped or len(wrapped) != len(dims):  # (a repeated dim is an error)
        return None
    keep = [i for i in range(ndim) if not (i in wrapped and shape[i] == 1)]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep), offset


def _squeeze(shape, strides, offset, dim=None):
    if dim is None:
        return _squeeze_dims(shape, strides, offset, tuple(range(len(shape))))
    if dim.__class__ is int:
        return _squeeze_dims(shape, strides, offset, (dim,))
    return _squeeze_dims(shape, strides, offset, dim)


def _expand(shape, strides, offset, size, implicit=False):
    ndim, new_ndim = len(shape), len(size)
    if new_ndim < ndim or not all(s.__class__ is int for s in size):
        return None
    out_shape, out_strides = [0] * new_ndim, [0] * new_ndim
    for i in range(new_ndim - 1, -1, -1):
        d = i - (new_ndim - ndim)
        want = size[i]
        if d < 0:  # a new leading axis: size 1 keeps the stride ATen gives it
            if want < 0 or i == new_ndim - 1:
                return None
            out_shape[i] = want
            out_strides[i] = out_shape[i + 1] * out_strides[i + 1] if want == 1 else 0
            continue
        if want == -1:
            want = shape[d]
        if want < 0:
            return None
        if shape[d] == want:
            out_shape[i], out_strides[i] = want, strides[d]
        elif shape[d] == 1:
            out_shape[i], out_strides[i] = want, 0
        else:
            return None
    return tuple(out_shape), tuple(out_strides), offset


def _select(shape, strides, offset, dim, index):
    ndim = len(shape)
    if ndim == 0 or index.__class__ is not int:
        return None
    dim = _dim(dim, ndim)
    if dim is None or not -shape[dim] <= index < shape[dim]:
        return None
    if index < 0:
        index += shape[dim]
    return shape[:dim] + shape[dim + 1:], strides[:dim] + strides[dim + 1:], offset + index * strides[dim]


def _slice(shape, strides, offset, dim=0, start=None, end=None, step=1):
    ndim = len(shape)
    if ndim == 0 or step.__class__ is not int or step <= 0:
        return None
    dim = _dim(dim, ndim)
    start = 0 if start is None else start
    end = shape[dim] if end is None else end
    if dim is None or start.__class__ is not int or end.__class__ is not int:
        return None
    size = shape[dim]
    # ATen's clamping: negative bounds count from the end, then both are clamped to [0, size]
    # and an end before the start gives an empty slice at the start.
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    length = (end - start + step - 1) // step
    out_shape = shape[:dim] + (length,) + shape[dim + 1:]
    out_strides = strides[:dim] + (strides[dim] * step,) + strides[dim + 1:]
    return out_shape, out_strides, offset + start * strides[dim]


def _alias(shape, strides, offset):
    return shape, strides, offset


_GEOMETRY = {
    aten.view.default: _view, aten._unsafe_view.default: _view, aten.t.default: _t,
    aten.transpose.int: _transpose, aten.permute.default: _permute, aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.default: _squeeze, aten.squeeze.dim: _squeeze, aten.squeeze.dims: _squeeze,
    aten.expand.default: _expand, aten.select.int: _select, aten.slice.Tensor: _slice,
    aten.alias.default: _alias, aten.detach.default: _alias,
}


def view_geometry(geometry, x: ZyxTensor, args, kwargs) -> tuple | None:
    """(shape, strides, offset) of ``x`` viewed by ``geometry`` (a ``_GEOMETRY`` entry or None)
    with the op's arguments, computed directly, or None."""
    if geometry is None:
        return None
    shape, strides, offset, _ = x._zmeta or meta(x)
    try:
        return geometry(shape, strides, offset, *args, **kwargs)
    except (TypeError, ValueError, IndexError):
        return None  # arguments of another form (symbolic sizes, tensors, ...): the meta path


_inference_mode_enabled = torch.is_inference_mode_enabled


def view_of(x: ZyxTensor, shape, strides, offset: int, storage=None) -> ZyxTensor:
    """A view of ``x``'s storage (or of ``storage``, one reading it as another dtype). In
    inference mode a view of a normal tensor is a normal tensor, as on CPU (PyTorch gives it the
    base's version counter, which an inference tensor refuses: ``cache[:, pos] = k`` in an
    inference-mode loop over a cache made outside raised)."""
    if storage is None:
        storage = x._storage
    if _inference_mode_enabled() and not x.is_inference():
        with torch.inference_mode(False):
            return ZyxTensor(storage, shape, strides, offset)
    return ZyxTensor(storage, shape, strides, offset)


def _view_lowering(func):
    geometry_of = _GEOMETRY.get(func)

    def lowering(x, *args, **kwargs):
        geometry = view_geometry(geometry_of, x, args, kwargs)
        if geometry is not None:
            return view_of(x, *geometry)
        args = tuple(_meta_of(a) if isinstance(a, ZyxTensor) else a for a in args)
        result = func(_meta_of(x), *args, **kwargs)

        def rewrap(r):
            return view_of(x, tuple(r.shape), tuple(r.stride()), r.storage_offset())

        if isinstance(result, (list, tuple)):
            return type(result)(rewrap(r) for r in result)
        return rewrap(result)

    return lowering


for _op in VIEW_OPS:
    register(_op)(_view_lowering(_op))


@register(aten.view.dtype)
def view_dtype(x, dtype):
    """``x``'s bytes read as ``dtype``: a view of its memory (record/tensor.py
    ``ReinterpretedStorage``), so writes through it reach ``x`` and writes to ``x`` show in it.
    ATen's own view_dtype, run on a meta tensor of ``x``'s geometry, makes its checks with its
    messages (the last axis divisible, stride(-1) 1, offset and strides divisible, ...) and gives
    the view's shape, strides and offset in elements of ``dtype``."""
    result = aten.view.dtype(_meta_of(x), dtype)
    new = TORCH_TO_ZYX.get(dtype)
    if new is None:
        raise NotImplementedError  # (a dtype zyx has no storage for)
    return view_of(x, tuple(result.shape), tuple(result.stride()), result.storage_offset(),
                   reinterpreted(x._storage, new))


@register(aten.flatten.using_ints)
def flatten(x, start_dim=0, end_dim=-1):
    """A view where the flattened axes are one run in memory, else a contiguous copy, as
    reshape. (It reaches the device below autograd: in inference mode, in decompositions.)"""
    new_shape = tuple(aten.flatten.using_ints(_meta_of(x), start_dim, end_dim).shape)  # ATen's errors
    shape, strides, offset, _ = x._zmeta or meta(x)
    new_strides = reshape_strides(shape, strides, new_shape)
    if new_strides is not None:
        return view_of(x, new_shape, new_strides, offset)
    return wrap(g.reshape(read(x), new_shape), x._storage.device)


# In-place view ops change the tensor's own metadata (same storage): matmul's decomposition
# uses squeeze_, and user code t_ / unsqueeze_.
INPLACE_VIEW_OPS = {
    aten.t_.default: aten.t.default, aten.transpose_.default: aten.transpose.int,
    aten.squeeze_.default: aten.squeeze.default, aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims, aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.swapaxes_.default: aten.swapaxes.default, aten.swapdims_.default: aten.swapdims.default,
}


def _inplace_view_lowering(functional):
    geometry_of = _GEOMETRY.get(functional)

    def lowering(x, *args, **kwargs):
        geometry = view_geometry(geometry_of, x, args, kwargs)
        if geometry is None:
            r = functional(_meta_of(x), *args, **kwargs)
            geometry = tuple(r.shape), tuple(r.stride()), r.storage_offset()
        restride(x, x._storage, *geometry)
        return x

    return lowering


for _op, _functional in INPLACE_VIEW_OPS.items():
    register(_op)(_inplace_view_lowering(_functional))


def concat_nodes(nodes: list[Node], axis: int) -> Node:
    """``nodes`` (one dtype, equal shapes but along ``axis``) side by side along ``axis``: each
    padded to the whole extent and the pieces added (or'ed, for bools)."""
    total = sum(node.shape[axis] for node in nodes)
    out = None
    offset = 0
    for node in nodes:
        size = node.shape[axis]
        padding = tuple((offset, total - offset - size) if i == axis else (0, 0)
                        for i in range(len(node.shape)))
        padded = g.pad(node, padding)
        if out is None:
            out = padded
        else:
            out = g.binary("or" if padded.dtype is dtypes.bool_ else "add", out, padded)
        offset += size
    return out


@register(aten.cat.default)
def cat(tensors, dim=0):
    tensors = [t for t in tensors]
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    # CPU torch's rank check (the meta kernel words it differently); legacy empty 1-D tensors
    # (shape (0,)) join anything.
    ranked = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    for t in ranked[1:]:
        if t.dim() != ranked[0].dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ranked[0].dim()} "
                               f"and {t.dim()}")
    meta = torch.cat([torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors], dim)
    dim = dim % meta.dim() if meta.dim() else 0
    parts = [cast(read(t), meta.dtype) for t in ranked]
    if parts:
        out = concat_nodes(parts, dim)
    else:
        out = g.const(0, zdtype(meta.dtype), tuple(meta.shape))
    device = next(t for t in tensors if isinstance(t, ZyxTensor))._storage.device
    return wrap(out, device)


@register(aten.stack.default)
def stack(tensors, dim=0):
    for i, t in enumerate(tensors[1:], start=1):
        if t.shape != tensors[0].shape:
            raise RuntimeError("stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(t.shape)} at entry {i}")
    dim = wrap_dim(dim, tensors[0].dim() + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


@register(aten.flip.default)
def flip(x, dims):
    wrapped = [wrap_dim(d, x.dim()) for d in dims]
    for i, d in enumerate(wrapped):
        if d in wrapped[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    dims = wrapped if x.dim() else []
    return wrap(g.flip(read(x), tuple(dims)), x._storage.device)


@register(aten.roll.default)
def roll(x, shifts, dims=()):
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if not shifts:
        raise RuntimeError("`shifts` required")
    if dims and len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if not dims and len(shifts) != 1:
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    for d in dims:
        if x.dim() == 0:
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        if not -x.dim() <= d < x.dim():
            raise IndexError(f"Dimension out of range (expected to be in range of [{-x.dim()}, "
                             f"{x.dim() - 1}], but got {d})")
    node = read(x)
    if not dims:
        flat = g.reshape(node, (node.numel,))
        return wrap(g.reshape(_roll_axis(flat, shifts[0], 0), node.shape), x._storage.device)
    for shift, dim in zip(shifts, dims):
        node = _roll_axis(node, shift, dim % x.dim())
    return wrap(node, x._storage.device)


def _roll_axis(node: g.Node, shift: int, dim: int) -> g.Node:
    n = node.shape[dim]
    if n == 0:
        return node
    shift %= n
    if shift == 0:
        return node
    # out = cat(x[n-shift:], x[:n-shift]) along dim, expressed as two padded shrinks.
    def bounds(lo, hi):
        return tuple((lo, hi) if i == dim else (0, s) for i, s in enumerate(node.shape))

    def pads(before, after):
        return tuple((before, after) if i == dim else (0, 0) for i in range(len(node.shape)))

    tail = g.pad(g.shrink(node, bounds(n - shift, n)), pads(0, n - shift))
    head = g.pad(g.shrink(node, bounds(0, n - shift)), pads(shift, 0))
    if node.dtype == dtypes.bool_:
        return g.binary("or", tail, head)
    return g.binary("add", tail, head)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    node = read(x)
    nd = len(node.shape)
    padding = [(0, 0)] * nd
    for i in range(len(pad) // 2):
        padding[nd - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    padded = g.pad(node, tuple(padding))
    if value != 0:
        inside = g.pad(g.const(True, dtypes.bool_, node.shape), tuple(padding))
        padded = g.where(inside, padded, g.const(value, node.dtype, padded.shape))
    return wrap(padded, x._storage.device)


def _scatter_into_view(x, src, view) -> ZyxTensor:
    """A copy of ``x`` with the region ``view(x)`` (a view op applied to a contiguous copy)
    replaced by ``src``: one SETVIEW on the flattened value, no index arithmetic."""
    meta = view(torch.empty(tuple(x.shape), dtype=x.dtype, device="meta"))
    if tuple(src.shape) != tuple(meta.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(meta.shape)}")
    n = x.numel()
    base = g.reshape(read(x), (n,))
    value = cast(read(src), x.dtype)
    if meta.numel():
        base = g.setview(base, value, tuple(meta.shape), tuple(meta.stride()), meta.storage_offset())
    return wrap(g.reshape(base, tuple(x.shape)), x._storage.device)


@register(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    offset = storage_offset or 0
    itemsize = x.element_size()
    needed = offset + g.strided_extent(size, stride) if all(size) else 0
    if needed > x.numel():
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, "
                           f"storage offset {offset}, and itemsize {itemsize} requiring a storage size of "
                           f"{needed * itemsize} are out of bounds for storage of size "
                           f"{x.numel() * itemsize}")
    return _scatter_into_view(x, src, lambda m: m.as_strided(size, stride, storage_offset))


@register(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    return _scatter_into_view(x, src, lambda m: m.diagonal(offset, dim1, dim2))


# The backward of select and of a unit-step slice: the gradient padded with zeros to the
# input's size (one PAD node) instead of PyTorch's decomposition (zeros made, then scattered
# into: ~70 us of recording). Anything else (steps, bad indices) takes the decomposition.


def _padded_gradient(grad, node, dim: int, before: int, after: int):
    """``node`` (``grad``'s value, the input's rank) padded by ``before``/``after`` zeros on ``dim``."""
    padding = tuple((before, after) if d == dim else (0, 0) for d in range(len(node.shape)))
    return wrap(g.pad(node, padding), grad._storage.device)


@register(aten.select_backward.default)
def select_backward(grad, input_sizes, dim, index):
    sizes = tuple(input_sizes)
    if not sizes or not -len(sizes) <= dim < len(sizes):
        raise NotImplementedError
    dim %= len(sizes)
    if not -sizes[dim] <= index < sizes[dim] or tuple(grad.shape) != sizes[:dim] + sizes[dim + 1:]:
        raise NotImplementedError
    index %= sizes[dim]
    unsqueezed = g.reshape(read(grad), sizes[:dim] + (1,) + sizes[dim + 1:])
    return _padded_gradient(grad, unsqueezed, dim, index, sizes[dim] - index - 1)


@register(aten.slice_backward.default)
def slice_backward(grad, input_sizes, dim, start, end, step):
    sizes = tuple(input_sizes)
    if step != 1 or not sizes or not -len(sizes) <= dim < len(sizes):
        raise NotImplementedError
    dim %= len(sizes)
    size = sizes[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    if tuple(grad.shape) != sizes[:dim] + (end - start,) + sizes[dim + 1:]:
        raise NotImplementedError
    return _padded_gradient(grad, read(grad), dim, start, size - end)


@register(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    return _scatter_into_view(x, src, lambda m: m.select(dim, index))


@register(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    return _scatter_into_view(x, src, lambda m: aten.slice.Tensor(m, dim, start, end, step))
