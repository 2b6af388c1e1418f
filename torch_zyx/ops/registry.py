"""The lowering table and the helpers lowerings share (operands, promotion, broadcasting)."""

from __future__ import annotations

from typing import Callable

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


def result_dtype(*args, kind=PROMOTE_DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) by PyTorch's promotion rules."""
    operands = [a for a in args if a is not None]
    return elementwise_dtypes(*operands, type_promotion_kind=kind)


def operand(x, dtype: torch.dtype) -> Node:
    """``x`` (zyx tensor or Python scalar) as a node of ``dtype``."""
    if isinstance(x, ZyxTensor):
        return g.cast(read(x), zdtype(dtype))
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.numel() != 1:
            raise RuntimeError(f"zyx: expected a zyx tensor or a scalar, got a tensor on {x.device}")
        x = x.item()
    return g.const(x, zdtype(dtype))


def broadcast(*nodes: Node) -> list[Node]:
    shape = tuple(torch.broadcast_shapes(*(n.shape for n in nodes)))
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
