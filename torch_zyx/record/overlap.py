"""ATen's memory-overlap rules for writes, applied before a write is recorded (stage 1, beside dispatch).

A lazy device computes every value before it writes it, so ``x[1:] = x[:-1]`` or an expanded
tensor's ``add_`` would give a well-defined result on zyx where CPU torch refuses them (its kernels
read and write the same memory at once). These checks make zyx refuse the same calls with the same
messages, as ATen's ``assert_no_internal_overlap``, ``assert_no_partial_overlap`` and
``assert_no_overlap`` do:

- internal overlap: the written-to tensor has two elements at one memory location (a stride 0
  over more than one element: an expanded tensor). Other layouts ATen calls "too hard" to judge
  and lets through; so does this module.
- partial overlap: an input shares memory with the written-to tensor without being exactly it
  (same elements, same strides). Judged only when both fill their span of the storage without
  gaps or repeats (in any order of axes), as ATen judges it.

Which ops check what was measured against CPU torch 2.13 (tests/test_semantics.py): pointwise ops,
copies and the indexed writes check both; reductions, matmuls and softmax check only their
output's internal overlap (they do not read an input element after writing an output one); fills
and masked or indexed fills check neither (an expanded destination is written, with ATen's
deprecation warning for some).

Those writes to an expanded destination go element by element on CPU: a memory location shared
by several elements ends with the value of the last element written to it, and keeps its value
when none of them is written. A lazy write replaces a whole view at once; ``write_aliased``
reduces such a write to one value per location first.
"""

from __future__ import annotations

import functools
import math
import warnings

import torch

from .. import dtypes
from ..lazy import graph as g
from .tensor import ZyxTensor, meta, write

INTERNAL_OVERLAP_ERROR = ("unsupported operation: more than one element of the written-to tensor refers to "
                          "a single memory location. Please clone() the tensor before performing the "
                          "operation.")
PARTIAL_OVERLAP_ERROR = ("unsupported operation: some elements of the input tensor and the written-to tensor "
                         "refer to a single memory location. Please clone() the tensor before performing the "
                         "operation.")

# Writes ATen lets an expanded destination take (base names: in-place and out= forms alike).
_INTERNAL_ALLOWED = frozenset({"fill", "zero", "masked_fill", "index_fill", "index_put", "tril", "triu"})
# Of those, the ones CPU torch warns about when their destination is expanded.
_DEPRECATED_ON_EXPANDED = {"masked_fill": "advanced indexing e.g. tensor[mask] = scalar",
                           "index_fill": "advanced indexing e.g. tensor[mask] = scalar",
                           "index_put": "advanced indexing e.g. tensor[indices] = tensor"}
# Writes that are not pointwise (torch.Tag.pointwise) and still refuse an input that partly
# overlaps the destination.
_PARTIAL_CHECKED = frozenset({"copy", "index_put", "index_copy", "index_add", "index_reduce", "scatter",
                              "scatter_add", "scatter_reduce", "masked_scatter", "put", "sort", "cumsum",
                              "cumprod", "logcumsumexp", "cummax", "cummin", "where", "cat", "index_select",
                              "take", "masked_select", "gather", "kthvalue"})
# Out= forms that refuse any shared memory with an input, even exactly the same elements.
_ANY_OVERLAP_CHECKED = frozenset({"cat", "index_select", "take", "masked_select", "gather", "kthvalue"})
# Out= forms whose checks see the output already resized to the result's shape (ATen checks in
# the kernel, after resizing; the others check the output as given).
_CHECKED_AFTER_RESIZE = frozenset({"gather"})


class Rules:
    """What one op's write checks: its destination's internal overlap, inputs partly overlapping
    it, inputs overlapping it at all."""

    __slots__ = ("after_resize", "any", "internal", "partial")

    def __init__(self, internal: bool, partial: bool, any_overlap: bool, after_resize: bool):
        self.internal, self.partial, self.any = internal, partial, any_overlap
        self.after_resize = after_resize


@functools.cache
def rules_of(func) -> Rules:
    """The overlap rules of the in-place or out= overload ``func``."""
    base = func._schema.name.split("::")[-1].rstrip("_")
    pointwise = torch.Tag.pointwise in func.tags
    return Rules(base not in _INTERNAL_ALLOWED, pointwise or base in _PARTIAL_CHECKED,
                 base in _ANY_OVERLAP_CHECKED, base in _CHECKED_AFTER_RESIZE)


def non_overlapping_and_dense(shape, strides) -> bool:
    """Whether elements of these sizes and strides fill a block of memory without gaps or repeats,
    in any order of axes (ATen's is_non_overlapping_and_dense for a non-empty tensor)."""
    axes = sorted((stride, size) for size, stride in zip(shape, strides) if size != 1)
    expected = 1
    for stride, size in axes:
        if stride != expected:
            return False
        expected *= size
    return True


def _dense_span(t: ZyxTensor) -> tuple[int, int] | None:
    """The element range [start, end) of ``t``'s storage that ``t`` covers when its elements fill it
    without gaps or repeats (any order of axes), else None: like ATen, overlap is only judged there."""
    shape, strides, offset, _dense = meta(t)
    if not non_overlapping_and_dense(shape, strides):
        return None
    return offset, offset + math.prod(shape)


def check_internal(dst) -> None:
    """ATen's assert_no_internal_overlap: no stride 0 over more than one element."""
    if isinstance(dst, ZyxTensor):
        shape, strides, _offset, dense = meta(dst)
        if not dense and any(stride == 0 and size > 1 for size, stride in zip(shape, strides)):
            raise RuntimeError(INTERNAL_OVERLAP_ERROR)


def _overlap(dst: ZyxTensor, src, exact_allowed: bool) -> bool:
    """Whether ``src`` overlaps ``dst`` in a way the rule forbids (ATen's get_overlap_status:
    PARTIAL, or FULL too when ``exact_allowed`` is false)."""
    if src is dst:
        return not exact_allowed
    if not isinstance(src, ZyxTensor) or src.numel() == 0:
        return False
    # (dtype views, tensor.ReinterpretedStorage, share their base's memory)
    if src._storage is not dst._storage and _memory(src._storage) is not _memory(dst._storage):
        return False
    span, other = _byte_span(dst), _byte_span(src)
    if span is None or other is None or span[0] >= other[1] or other[0] >= span[1]:
        return False
    if span == other and meta(src)[1] == meta(dst)[1]:  # (as ATen: strides compared in elements)
        return not exact_allowed
    return True


def _memory(storage):
    """The storage whose memory ``storage`` is: itself, or a dtype view's base."""
    return getattr(storage, "base", storage)


def _byte_span(t: ZyxTensor) -> tuple[int, int] | None:
    """``_dense_span`` in bytes, as ATen compares memory: tensors of one storage may differ in
    dtype (dtype views)."""
    span = _dense_span(t)
    if span is None:
        return None
    size = t._storage.dtype.itemsize
    return span[0] * size, span[1] * size


def check_inputs(dst, inputs, exact_allowed: bool = True) -> None:
    """ATen's assert_no_partial_overlap (``exact_allowed``) or assert_no_overlap between the
    written-to ``dst`` and each tensor in ``inputs`` (lists of tensors are looked into)."""
    # (An empty destination overlaps nothing, but where any overlap is refused ATen checks after
    # resizing it to the result: an input passed as the out= tensor itself is refused even empty.)
    if not isinstance(dst, ZyxTensor) or (dst.numel() == 0 and exact_allowed):
        return
    for value in inputs:
        if isinstance(value, (list, tuple)):
            check_inputs(dst, value, exact_allowed)
        elif _overlap(dst, value, exact_allowed):
            raise RuntimeError(PARTIAL_OVERLAP_ERROR)


def check_write(func, dsts, inputs) -> None:
    """Every check ``func`` (an in-place or out= overload) makes before writing ``dsts`` (the
    destination of an in-place op is not among its ``inputs``; an out= tensor may be)."""
    rules = rules_of(func)
    if rules.internal:
        for dst in dsts:
            check_internal(dst)
    if rules.partial or rules.any:
        for dst in dsts:
            check_inputs(dst, inputs, exact_allowed=not rules.any)


def _aliased_axes(dst: ZyxTensor) -> list[int]:
    """The axes over which several elements of ``dst`` share one memory location (stride 0)."""
    shape, strides, _offset, dense = meta(dst)
    return [] if dense else [d for d, (size, stride) in enumerate(zip(shape, strides))
                             if stride == 0 and size > 1]


def write_aliased(func, dst, node) -> None:
    """``write(dst, node)`` for a write ATen lets an expanded ``dst`` take (``func``: its in-place
    or out= overload), as CPU torch's element-by-element kernels leave the memory: over each
    axis of stride 0, the location takes the value of the last element whose value changed,
    and keeps its own where none did (an element written with the value it had changes nothing
    either way). The CPU kernels' order for elements written with different values, where ATen
    promises none, is taken as row-major."""
    axes = _aliased_axes(dst) if isinstance(dst, ZyxTensor) else []
    if not axes:
        write(dst, node)
        return
    base = func._schema.name.split("::")[-1].rstrip("_")
    if base in _DEPRECATED_ON_EXPANDED:
        warnings.warn(f"Use of {base}_ on expanded tensors is deprecated. Please clone() the tensor before "
                      f"performing this operation. This also applies to {_DEPRECATED_ON_EXPANDED[base]}",
                      UserWarning, stacklevel=4)
    storage = dst._storage
    shape, strides, offset, _dense = meta(dst)
    node = g.cast(node, storage.dtype)
    if node.shape != shape:
        node = g.expand(g.reshape(node, (1,) * (len(shape) - len(node.shape)) + node.shape), shape)
    old = g.strided(storage.value, shape, strides, offset)
    changed = g.binary("ne", node, old)
    if storage.dtype.is_float:  # NaN over NaN is no change
        both_nan = g.binary("and", g.unary("isnan", node), g.unary("isnan", old))
        changed = g.binary("and", changed, g.unary("not", both_nan))
    # Picked by a sum with zeros (exact for integers) or a max with -inf (exact for floats,
    # -0.0 included); booleans as int8.
    compute = dtypes.int8 if storage.dtype is dtypes.bool_ else storage.dtype
    pick_op, filler = ("max", float("-inf")) if compute.is_float else ("sum", 0)
    value = g.cast(node, compute)
    old = g.cast(old, compute)
    current = list(shape)
    for axis in axes:
        wide = tuple(current)
        position = g.expand(g.reshape(g.iota((wide[axis],)), tuple(wide[axis] if d == axis else 1
                                                                      for d in range(len(wide)))), wide)
        last = g.reduce("max", g.where(changed, position, g.const(-1, dtypes.int64, wide)), (axis,))
        hit = g.binary("eq", position, g.expand(last, wide))
        picked = g.reduce(pick_op, g.where(hit, value, g.const(filler, compute, wide)), (axis,))
        current[axis] = 1
        old = g.shrink(old, tuple((0, 1) if d == axis else (0, size) for d, size in enumerate(wide)))
        changed = g.binary("lt", g.const(-1, dtypes.int64, tuple(current)), last)
        value = g.where(changed, picked, old)
    storage.value = g.setview(storage.value, g.cast(value, storage.dtype), tuple(current), strides, offset)
