"""Output layout of pointwise ops: the strides ATen's TensorIterator gives a result it allocates.

Lowerings build a pointwise op's value as a node of the result's shape and ``wrap`` it in a
fresh contiguous tensor. CPU torch instead lays the result out like its inputs: contiguous
inputs give a contiguous result, channels-last ones a channels-last result, inputs with one
dense layout that layout, and otherwise the input dimensions ordered by their strides (ATen's
``reorder_dimensions``). ``follow_inputs`` wraps the lowering of every pointwise overload
(registry.LoweringTable) so that a result whose inputs ask for another layout is stored in that
order (a permute of the same node: no extra kernel, and the kernel reads its inputs in memory
order) and returned as a strided view, as on the CPU: ``relu`` of a channels-last activation
stays channels-last, ``(x.t() * 2).stride()`` is ``x.t()``'s. Every stride counts, those of
size-1 dimensions too: a later op's order of dimensions compares them.
"""

from __future__ import annotations

import math

import torch

from ..lazy import graph as g
from ..record.overlap import non_overlapping_and_dense
from ..record.tensor import ZyxTensor, meta, wrap

# Pointwise overloads whose ATen implementation computes into a fresh ``empty({0})`` through
# the op's out= form: the output is resized, hence contiguous, whatever the inputs' layout.
CONTIGUOUS_RESULTS = frozenset({"aten::pow.Scalar"})


def follow_inputs(lowering, operands: tuple = ()):
    """``lowering`` of a pointwise op, its tensor results laid out as TensorIterator would.
    ``operands``: (position, name) of the op's arguments that TensorIterator takes as operands
    when given a number (``operand_arguments``)."""

    def laid_out(*args, **kwargs):
        result = lowering(*args, **kwargs)
        for a in args:
            if isinstance(a, ZyxTensor) and not meta(a)[3]:
                break
        else:
            return result  # (every zyx input contiguous from 0: the result's layout already)
        if isinstance(result, ZyxTensor):
            return _relaid(result, args, _numbers(args, kwargs, operands))
        if isinstance(result, tuple):
            numbers = _numbers(args, kwargs, operands)
            return tuple(_relaid(r, args, numbers) if isinstance(r, ZyxTensor) else r for r in result)
        return result

    laid_out.follows_inputs = True
    return laid_out


def operand_arguments(schema) -> tuple:
    """(position, name) of the arguments of an aten pointwise op that TensorIterator takes as
    operands when they are numbers: a Tensor argument given a Python number (a wrapped number),
    and the Scalar ``self``/``other`` of the Scalar overloads (``gt.Scalar``, ``where.ScalarOther``,
    ``pow.Scalar``...), which ATen wraps into a 0-dim tensor; other Scalars (``alpha``,
    ``min``, a ``pow.Tensor_Scalar`` exponent) are parameters of the kernel."""
    return tuple((i, a.name) for i, a in enumerate(schema.arguments) if not a.kwarg_only and (
        a.type.kind() == "TensorType" or (a.type.kind() == "NumberType" and a.name in ("self", "other"))))


def _numbers(args, kwargs, operands: tuple) -> int:
    """How many of ``operands`` are numbers in this call."""
    count = 0
    for position, name in operands:
        value = args[position] if position < len(args) else kwargs.get(name)
        count += isinstance(value, (bool, int, float, complex))
    return count


def _relaid(result: ZyxTensor, args, numbers: int = 0) -> ZyxTensor:
    """``result`` (fresh, contiguous) stored in the order ``output_strides`` gives; ``numbers``:
    the 0-dim operands TensorIterator makes of number arguments."""
    shape, _strides, _offset, dense = meta(result)
    fresh = not any(isinstance(a, ZyxTensor) and a._storage is result._storage for a in args)
    if not dense or len(shape) < 2 or result._storage.numel == 0 or not fresh:
        return result  # (an input returned as it is, or a view: not a fresh result)
    operands = [meta(a)[:2] if isinstance(a, ZyxTensor) else (tuple(a.shape), a.stride())
                for a in args if isinstance(a, torch.Tensor)] + [((), ())] * numbers
    strides = output_strides(shape, operands)
    if strides is None:
        return result
    order = sorted(range(len(shape)), key=lambda d: -strides[d])  # slowest first
    storage = result._storage
    node = storage._shaped
    if node is None:
        # Realized already (the pending-graph limit was reached when it was wrapped): its buffer
        # (a complex value is held as real pairs: not one element per position).
        value = storage._value
        if value is None or value.op != "BUFFER" or value.shape != (math.prod(shape),):
            return result
        node = g.reshape(value, shape)
    elif node.shape != shape:
        return result
    stored = wrap(g.permute(node, tuple(order)), storage.device)
    return ZyxTensor(stored._storage, shape, strides, 0)


def output_strides(shape: tuple, operands: list[tuple]) -> tuple | None:
    """The strides of a result of ``shape`` allocated for inputs ``operands`` ((shape, strides)
    each), or None where that is the contiguous layout (ATen's fast setup and
    ``reorder_dimensions``)."""
    ndim = len(shape)
    same_shape = all(tuple(s) == shape for s, _ in operands)
    if same_shape and operands:
        if all(_contiguous(s, st) for s, st in operands):
            return None
        if ndim == 4 and all(_channels_last(s, st) for s, st in operands):
            return _strides_in_order(shape, (0, 2, 3, 1))
        if all(_dense(s, st) for s, st in operands):
            first = tuple(operands[-1][1])
            if all(tuple(st) == first for _, st in operands):
                return first if not _contiguous(shape, first) else None
    # The operands' strides, broadcast to ``shape`` (0 along broadcast dimensions).
    aligned = []
    for s, st in operands:
        lead = ndim - len(s)
        aligned.append([0] * lead + [0 if size == 1 and shape[lead + k] != 1 else stride
                                     for k, (size, stride) in enumerate(zip(s, st))])
    perm = list(range(ndim - 1, -1, -1))  # fastest first

    def should_swap(dim0: int, dim1: int) -> int:
        for st in aligned:
            s0, s1 = st[dim0], st[dim1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[dim0] > shape[dim1]:
                return 1
        return 0

    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    if perm == list(range(ndim - 1, -1, -1)):
        return None
    return _strides_in_order(shape, tuple(reversed(perm)))


def _strides_in_order(shape: tuple, slowest_first: tuple) -> tuple:
    """Dense strides of ``shape`` with its dimensions stored in the order ``slowest_first``."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(slowest_first):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def _contiguous(shape, strides) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _channels_last(shape, strides) -> bool:
    nhwc = (0, 2, 3, 1)
    return len(shape) == 4 and _contiguous([shape[i] for i in nhwc], [strides[i] for i in nhwc])


def _dense(shape, strides) -> bool:
    """ATen's is_non_overlapping_and_dense (an empty tensor is)."""
    return math.prod(shape) == 0 or non_overlapping_and_dense(shape, strides)
