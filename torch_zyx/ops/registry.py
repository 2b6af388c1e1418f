"""The lowering table and the helpers lowerings share (operands, promotion, broadcasting)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import ZyxTensor, read, wrap, zdtype

aten = torch.ops.aten
LOWERINGS: dict[object, Callable] = {}
PROMOTE_DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
PROMOTE_INT_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
PROMOTE_BOOL = ELEMENTWISE_TYPE_PROMOTION_KIND.ALWAYS_BOOL
PROMOTE_NO_OPMATH = ELEMENTWISE_TYPE_PROMOTION_KIND.NO_OPMATH


def register(*ops) -> Callable:
    """Register the decorated function as the lowering of every overload in ``ops``."""

    def wrapper(fn: Callable) -> Callable:
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                for name in op.overloads():
                    overload = getattr(op, name)
                    if "out" not in name and not overload._schema.is_mutable:
                        LOWERINGS.setdefault(overload, fn)
            else:
                LOWERINGS[op] = fn
        return fn

    return wrapper


def device_of(*args):
    for a in args:
        if isinstance(a, ZyxTensor):
            return a._storage.device
        if isinstance(a, (list, tuple)):
            found = device_of(*a)
            if found is not None:
                return found
    return None


_promotion_cache: dict[tuple, tuple[torch.dtype, torch.dtype]] = {}


def _promotion_key(a) -> tuple:
    # What PyTorch's promotion looks at: a tensor's dtype and whether it is 0-d; a scalar's type.
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.dim() == 0)
    return (type(a),)


def result_dtype(*args, kind=PROMOTE_DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) by PyTorch's promotion rules (memoized: recording is hot)."""
    operands = [a for a in args if a is not None]
    key = (kind, torch.get_default_dtype()) + tuple(_promotion_key(a) for a in operands)
    cached = _promotion_cache.get(key)
    if cached is None:
        cached = _promotion_cache[key] = elementwise_dtypes(*operands, type_promotion_kind=kind)
    return cached


def operand(x, dtype: torch.dtype) -> Node:
    """``x`` (zyx tensor or Python scalar) as a node of ``dtype``."""
    if isinstance(x, ZyxTensor):
        return g.cast(read(x), zdtype(dtype))
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.numel() != 1:
            raise RuntimeError(f"zyx: expected a zyx tensor or a scalar, got a tensor on {x.device}")
        x = x.item()
    return g.const(x, zdtype(dtype))


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy-style broadcast of ``shapes`` with PyTorch's error for mismatches."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, size in enumerate(shape):
            current = out[offset + i]
            if size != current and size != 1:
                if current != 1:
                    raise RuntimeError(f"The size of tensor a ({current}) must match the size of tensor b ({size}) "
                                       f"at non-singleton dimension {offset + i}")
                out[offset + i] = size
            elif size == 0:
                out[offset + i] = 0
    return tuple(out)


def broadcast(*nodes: Node) -> list[Node]:
    first = nodes[0].shape
    if all(n.shape == first for n in nodes):
        return list(nodes)
    shape = broadcast_shape(*(n.shape for n in nodes))
    out = []
    for n in nodes:
        if n.shape != shape:
            n = g.expand(g.reshape(n, (1,) * (len(shape) - len(n.shape)) + n.shape), shape)
        out.append(n)
    return out


def new(node: Node, like) -> ZyxTensor:
    """Wrap ``node`` as a new tensor on the device of ``like`` (a tensor or a device)."""
    device = like._storage.device if isinstance(like, ZyxTensor) else like
    return wrap(node, device)


def cast(node: Node, dtype: torch.dtype) -> Node:
    return g.cast(node, zdtype(dtype))
