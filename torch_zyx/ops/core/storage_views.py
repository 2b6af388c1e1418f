"""Ops that change which storage a tensor views and how (resize_, as_strided_, set_ to a tensor
or a storage), and the queries about it (is_set_to, _has_same_storage_numel). A zyx tensor's
storage is a ``tensor.Storage`` holding a lazy flat value; these ops point the tensor at one
with new sizes, strides and offset (``tensor.restride``).
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import suggest_memory_format

from ...lazy import graph as g
from ...record.tensor import Storage, ZyxTensor, read, reinterpreted, restride, storage_from_host, wrap
from ...record.tensor import meta as meta_of
from ...record.transfer import zdtype
from ..registry import aten, register
from .factory import _contiguous_for


@register(aten.resize_.default)
def resize_(x, size, memory_format=None):
    size = tuple(int(s) for s in size)
    storage = x._storage
    if memory_format is None and size == tuple(x.shape):
        return x  # (ATen: the same sizes keep the strides, a channels-last layout too)
    strides = _contiguous_for(size, memory_format)
    needed = x.storage_offset() + g.strided_extent(size, strides)
    if needed > storage.numel:
        # Grow: the old contents stay in front, new elements are zero (PyTorch leaves them undefined).
        storage.value = g.pad(storage.value, ((0, needed - storage.numel),))
        storage.numel = needed
    restride(x, storage, size, strides, x.storage_offset())
    return x


@register(aten.resize_as_.default)
def resize_as_(x, other, memory_format=None):
    if memory_format == torch.preserve_format:  # (the template's layout, as ATen suggests it)
        template = torch.empty_strided(tuple(other.shape), tuple(other.stride()), device="meta")
        memory_format = suggest_memory_format(template)
    return resize_(x, tuple(other.shape), memory_format)


@register(aten.resize.default)
def resize(x, size, memory_format=None):
    """Functional resize: a new tensor of ``size`` holding ``x``'s elements in order (new ones 0)."""
    size = tuple(int(s) for s in size)
    n = x.numel()
    want = math.prod(size)
    flat = g.reshape(read(x), (n,))
    flat = g.pad(flat, ((0, want - n),)) if want > n else g.shrink(flat, ((0, want),))
    return wrap(g.reshape(flat, size), x._storage.device)


@register(aten.as_strided_.default)
def as_strided_(x, size, stride, storage_offset=None):
    offset = x.storage_offset() if storage_offset is None else storage_offset
    restride(x, x._storage, tuple(size), tuple(stride), offset)
    return x


@register(aten.set_.source_Tensor)
def set_tensor_(x, source):
    restride(x, source._storage, tuple(source.shape), tuple(source.stride()), source.storage_offset())
    return x


@register(aten.set_.source_Storage, aten.set_.source_Storage_storage_offset)
def set_storage_(x, source, storage_offset=0, size=None, stride=None):
    """``x`` set to a zyx storage. A tensor's ``untyped_storage()`` (record/tensor.py
    ``torch_storage``) carries its ``Storage``: ``x`` views that one (read as ``x``'s dtype), so
    writes through either tensor reach the other, and a view past its end grows it, as CPU torch
    grows a storage there. A storage of host memory (integration/storage.py) is copied: ``x``
    views a zyx storage holding its bytes. torch.load rebuilds each saved tensor this way under
    map_location="zyx": the tensors it sets to one storage object (views of one tensor, tied
    weights) share one zyx storage, as they shared theirs when saved."""
    if source.device.type != "zyx":
        raise RuntimeError(f"Attempted to set the storage of a tensor on device \"{x.device}\" to a storage "
                           f"on different device \"{source.device}\".  This is no longer allowed; the "
                           "devices must match.")
    if size is None:
        size, stride, storage_offset = (source.nbytes() // x.element_size(),), (1,), 0
    size = tuple(int(s) for s in size)
    stride = tuple(int(s) for s in stride) if stride is not None else g.contiguous_strides(size)
    if len(size) != len(stride):  # (ATen's check, before any other: setStrided)
        raise RuntimeError(f"unequal size length ({len(size)}) and stride length ({len(stride)})")
    storage_offset = int(storage_offset)
    own = getattr(source, "_zyx", None)
    if own is None:
        storage = storage_from_host(source, x.dtype, x._storage.device)
    else:
        storage = reinterpreted(own, zdtype(x.dtype))
        needed = storage_offset + g.strided_extent(size, stride) if math.prod(size) else 0
        if needed > storage.numel:
            storage.value = g.pad(storage.value, ((0, needed - storage.numel),))
            storage.numel = needed
    restride(x, storage, size, stride, storage_offset)
    return x


@register(aten.is_set_to.default)
def is_set_to(x, other):
    """Whether ``x`` views the same storage as ``other`` with the same offset, sizes, strides (as
    ATen: whatever the dtypes, so a dtype view's storage counts as its base's)."""
    return (isinstance(other, ZyxTensor) and _base(x._storage) is _base(other._storage)
            and meta_of(x)[:3] == meta_of(other)[:3])


def _base(storage):
    """The storage whose memory ``storage`` is (itself, or a dtype view's base)."""
    return getattr(storage, "base", storage)


@register(aten._has_same_storage_numel.default)
def has_same_storage_numel(x, other):
    """Whether the storages of ``x`` and ``other`` hold as many elements (forward AD asks it of a
    primal and its tangent)."""
    return isinstance(other, ZyxTensor) and x._storage.numel == other._storage.numel


@register(aten.set_.default)
def set_empty_(x):
    storage = Storage(g.const(0, zdtype(x.dtype), (0,)), x._storage.device)
    restride(x, storage, (0,), (1,), 0)
    return x
