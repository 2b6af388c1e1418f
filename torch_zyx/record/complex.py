"""Complex storages: the storage of a complex64 / complex128 tensor, held as real pairs.

Stage 1 support (record/, DESIGN.md "Tensors, storages, views, mutation"). PyTorch stores a
complex tensor as interleaved (real, imaginary) pairs of its part dtype (float32 for complex64,
float64 for complex128); zyx does the same, and a complex value in the lazy graph is a node of the
part dtype whose last axis (of size 2) holds the pair. The kernelizer, codegen and every renderer
therefore see real dtypes only, and complex arithmetic is real arithmetic on pairs built by the
lowerings (ops/complex/).

A ``ComplexStorage`` is to its real storage what ``tensor.ReinterpretedStorage`` is to its base:
the same memory read in another dtype. Its ``base`` is the real ``Storage`` holding the bytes (a
fresh complex result's, or the storage of a real tensor ``view_as_complex`` views); ``real`` is
that memory in the part dtype (the base itself, or a dtype view of it). So ``view_as_real`` is a
view of ``base``, a complex tensor's views (slices, ``.real``, ``.imag``) share it, and writes
through any of them reach the others. Sizes, strides and offsets of a complex tensor are counted
in complex elements, as torch counts them; ``read`` and ``write`` double them and add the pair
axis.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from .transfer import complex_seen

# Set once a complex32 storage exists: dispatch then checks CPU torch's few ComplexHalf kernels
# (ops/complex/base.py ``check_complex32``), so that other programs pay nothing for them.
complex32_seen = [False]


def pair_geometry(shape, strides, offset) -> tuple[tuple, tuple, int]:
    """The (shape, strides, offset) in part elements of a complex view with these ones."""
    return (*shape, 2), (*(2 * s for s in strides), 1), 2 * offset


class ComplexStorage:
    """``real`` (a storage of the part dtype) read as complex pairs; see the module docstring."""

    __slots__ = ("__weakref__", "base", "device", "dtype", "part", "real")
    _shaped = None  # never one node of its shape: reads go through ``read``

    def __init__(self, base, dtype: dtypes.DType, real):
        self.base, self.dtype, self.real = base, dtype, real
        self.part = dtypes.COMPLEX_PART[dtype]
        self.device = base.device
        complex_seen[0] = True
        if dtype is dtypes.complex32:
            complex32_seen[0] = True

    @property
    def numel(self) -> int:
        return self.real.numel // 2

    @numel.setter
    def numel(self, numel: int) -> None:
        # (resize_ sets it after assigning the grown value, which grew the real storage)
        assert numel <= self.numel

    @property
    def value(self) -> Node:
        """The whole storage as pairs, shape (numel, 2)."""
        real = self.real
        value = real.value
        if real.numel % 2:  # (a real storage of odd size: its last element is part of no pair)
            value = g.shrink(value, ((0, real.numel - 1),))
        return g.reshape(value, (real.numel // 2, 2))

    @value.setter
    def value(self, value: Node) -> None:
        real = self.real
        flat = g.flat(value)
        if flat.shape[0] >= real.numel:
            real.value = flat
            real.numel = flat.shape[0]  # (resize_ grows a complex tensor's storage: its real one)
        else:
            real.value = g.setview(real.value, flat, flat.shape, (1,), 0)

    # (what code reading a storage's current node asks: ``storage._shaped or storage._value``)
    _value = value

    @property
    def shaped(self) -> None:
        return None

    def assign(self, node: Node) -> None:
        """Make ``node`` (pairs of the whole storage, shape (..., 2)) the whole contents."""
        self.value = node

    def read(self, shape, strides, offset, dense: bool) -> Node:
        """The pairs of the complex view (``shape``, ``strides``, ``offset``): shape (*shape, 2)."""
        real = self.real
        pshape, pstrides, poffset = pair_geometry(shape, strides, offset)
        shaped = real._shaped
        if dense and shaped is not None and shaped.shape == pshape:
            return shaped  # (a fresh result read whole, as ``tensor.read`` returns it)
        return g.strided(real.value, pshape, pstrides, poffset)

    def write(self, node: Node, shape, strides, offset, dense: bool) -> None:
        """Overwrite the complex view's region with ``node`` (pairs, broadcast to (*shape, 2))."""
        real = self.real
        if node.dtype is not self.part:
            node = g.cast(node, self.part)
        pshape, pstrides, poffset = pair_geometry(shape, strides, offset)
        if node.shape != pshape:
            node = g.expand(g.reshape(node, (1,) * (len(pshape) - len(node.shape)) + node.shape), pshape)
        numel = math.prod(pshape)
        if dense and numel == real.numel:
            real.assign(node)
        elif numel:
            real.value = g.setview(real.value, node, pshape, pstrides, poffset)

    def realize(self):
        """The base's buffer (the pairs, in the base's dtype)."""
        return self.base.realize()
