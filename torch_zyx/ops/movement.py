"""Movement lowerings: views share storage (metadata only), copies build movement nodes.

View ops (view, t, permute, slice, select, expand, as_strided, ...) are evaluated on a meta
tensor with the input's (shape, strides, offset): PyTorch itself computes the result's
metadata and raises its own errors, and the result is a new wrapper on the same storage.
cat, stack, flip, roll and constant padding build lazy movement nodes (masks, no copies).
"""

from __future__ import annotations

import torch

from .. import dtypes
from ..lazy import graph as g
from ..tensor import ZyxTensor, read, restride, wrap, zdtype
from .registry import aten, cast, register

VIEW_OPS = [
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.transpose.int, aten.permute.default,
    aten.expand.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
    aten.select.int, aten.slice.Tensor, aten.narrow.default, aten.diagonal.default, aten.as_strided.default,
    aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default, aten.alias.default,
    aten.detach.default, aten.unfold.default, aten.view_as.default, aten.expand_as.default, aten.movedim.int,
    aten.movedim.intlist, aten.swapaxes.default, aten.swapdims.default, aten.tensor_split.sections,
    aten.tensor_split.indices, aten.unflatten.int, aten.flatten.using_ints, aten._reshape_alias.default,
    aten.numpy_T.default, aten.mT.default, aten.mH.default, aten.adjoint.default, aten.hsplit.int,
    aten.vsplit.int, aten.split.sizes, aten.unsafe_split.Tensor,
]


def _meta_of(x: ZyxTensor) -> torch.Tensor:
    base = torch.empty(x._storage.numel, dtype=x.dtype, device="meta")
    return base.as_strided(tuple(x.shape), tuple(x.stride()), x.storage_offset())


def _view_lowering(func):
    def lowering(x, *args, **kwargs):
        args = tuple(_meta_of(a) if isinstance(a, ZyxTensor) else a for a in args)
        result = func(_meta_of(x), *args, **kwargs)

        def rewrap(r):
            return ZyxTensor(x._storage, tuple(r.shape), tuple(r.stride()), r.storage_offset())

        if isinstance(result, (list, tuple)):
            return type(result)(rewrap(r) for r in result)
        return rewrap(result)

    return lowering


for _op in VIEW_OPS:
    register(_op)(_view_lowering(_op))

# In-place view ops change the tensor's own metadata (same storage): matmul's decomposition
# uses squeeze_, and user code t_ / unsqueeze_.
INPLACE_VIEW_OPS = {
    aten.t_.default: aten.t.default, aten.transpose_.default: aten.transpose.int,
    aten.squeeze_.default: aten.squeeze.default, aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims, aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.swapaxes_.default: aten.swapaxes.default, aten.swapdims_.default: aten.swapdims.default,
}


def _inplace_view_lowering(functional):
    def lowering(x, *args, **kwargs):
        r = functional(_meta_of(x), *args, **kwargs)
        restride(x, x._storage, tuple(r.shape), tuple(r.stride()), r.storage_offset())
        return x

    return lowering


for _op, _functional in INPLACE_VIEW_OPS.items():
    register(_op)(_inplace_view_lowering(_functional))


@register(aten.cat.default)
def cat(tensors, dim=0):
    tensors = [t for t in tensors]
    meta = torch.cat([torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors], dim)
    dim = dim % meta.dim() if meta.dim() else 0
    parts = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    total = meta.shape[dim]
    out = None
    offset = 0
    for t in parts:
        node = cast(read(t), meta.dtype)
        size = node.shape[dim]
        padding = tuple((offset, total - offset - size) if i == dim else (0, 0) for i in range(len(node.shape)))
        padded = g.pad(node, padding)
        if out is None:
            out = padded
        elif meta.dtype == torch.bool:
            out = g.binary("or", out, padded)
        else:
            out = g.binary("add", out, padded)
        offset += size
    if out is None:
        out = g.const(0, zdtype(meta.dtype), tuple(meta.shape))
    device = next(t for t in tensors if isinstance(t, ZyxTensor))._storage.device
    return wrap(out, device)


@register(aten.stack.default)
def stack(tensors, dim=0):
    dim = dim % (tensors[0].dim() + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


@register(aten.flip.default)
def flip(x, dims):
    dims = [d % x.dim() for d in dims] if x.dim() else []
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
            raise IndexError(f"Dimension out of range (expected to be in range of [{-x.dim()}, {x.dim() - 1}], "
                             f"but got {d})")
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
    needed = (offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))) if all(size) else 0
    if needed > x.numel():
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                           f"itemsize {itemsize} requiring a storage size of {needed * itemsize} are out of "
                           f"bounds for storage of size {x.numel() * itemsize}")
    return _scatter_into_view(x, src, lambda m: m.as_strided(size, stride, storage_offset))


@register(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    return _scatter_into_view(x, src, lambda m: m.diagonal(offset, dim1, dim2))


@register(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    return _scatter_into_view(x, src, lambda m: m.select(dim, index))


@register(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    return _scatter_into_view(x, src, lambda m: aten.slice.Tensor(m, dim, start, end, step))
