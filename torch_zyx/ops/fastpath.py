"""Recording fast paths of the elementwise table ops: the per-op cost of every model.

The commonest signatures skip math/elementwise.py's general lowerings: a dense tensor that is its
whole storage (any op's fresh result, 0-d ones too: BatchNorm's batch counter), with a Python
scalar or another such tensor of its shape and dtype, or alone (unary ops), and no cast
needed. Each check and lookup is inline (a Python call costs ~0.1 us), the node is interned
by graph.binary_node / the table function, and the result wrapped by tensor.wrap_like (shape,
strides, device and size taken from the input) or, for in-place forms, assigned to the input's
storage (tensor.assign_whole: no result tensor at all). Any other case goes to the general
lowering; for in-place forms, which have none, the lowering declines (NotImplementedError) and
dispatch writes the functional result.
"""

from __future__ import annotations

import math

from ..lazy import graph as g
from ..lazy.graph import Node
from ..record.tensor import ZyxTensor, assign_whole, read, wrap_like
from .registry import LOWERINGS, PROMOTE_DEFAULT, aten, fast_plan

# aten ops that are one graph op on operands of one dtype and shape:
# name → (graph op, whether the operands swap, whether only floating dtypes take it).
_FAST_BINARY = {
    "add": ("add", False, False), "sub": ("sub", False, False), "rsub": ("sub", True, False),
    "mul": ("mul", False, False), "div": ("div", False, False), "true_divide": ("div", False, False),
    "maximum": ("max", False, False), "minimum": ("min", False, False),
    "eq": ("eq", False, False), "ne": ("ne", False, False), "lt": ("lt", False, False),
    "le": ("le", False, False), "gt": ("lt", True, False), "ge": ("le", True, False),
    "pow": ("pow", False, True), "atan2": ("atan2", False, False), "copysign": ("copysign", False, False),
}
_scalars = g._scalars  # graph.const's memo of scalar constants, looked up inline
_binary_node = g.binary_node


def whole_node(x) -> Node | None:
    """``x``'s node when ``x`` is a zyx tensor that is its whole storage (dense, and as many
    elements: a fresh result, or a realized tensor; 0-d ones too), else None."""
    if x.__class__ is ZyxTensor:
        meta = x._zmeta
        if meta is not None and meta[3]:
            storage = x._storage
            node = storage._shaped
            if node is not None and node.shape == meta[0]:
                return node
            if storage.numel == math.prod(meta[0]):
                return read(x)
    return None


def _fast_binary(name: str, kind, slow, inplace: bool):
    """The fast lowering of binary op ``name`` (functional, or its in-place form) with promotion
    ``kind``, falling back to ``slow`` (functional) or declining (in-place)."""
    op, swap, floats_only = _FAST_BINARY[name]
    plans: dict[tuple, object] = {}  # (x's zyx dtype, y's class) → fast_plan

    def fallback(x, y, rest, kwargs):
        if inplace:
            raise NotImplementedError  # dispatch computes the functional op and writes it
        return slow(x, y, *rest, **kwargs)

    def general(x, y, *rest, **kwargs):
        alpha = kwargs.get("alpha", 1) if kwargs else 1  # (add, sub, rsub: y scaled by alpha)
        if rest or (kwargs and (len(kwargs) > 1 or "alpha" not in kwargs)):
            return fallback(x, y, rest, kwargs)
        # whole_node(x), its commonest case (an op's fresh result) inline: a call less per op
        xn = x._storage._shaped if x.__class__ is ZyxTensor else None
        meta = x._zmeta if xn is not None else None
        if meta is None or not meta[3] or xn.shape != meta[0]:
            xn = whole_node(x)
            if xn is None:
                return fallback(x, y, rest, kwargs)
        dtype, shape = xn.dtype, xn.shape
        yc = y.__class__
        if yc is ZyxTensor:
            yn = whole_node(y)
            if yn is None or yn.shape != shape or yn.dtype is not dtype:
                return fallback(x, y, rest, kwargs)
        elif yc is not float and yc is not int and yc is not bool:
            return fallback(x, y, rest, kwargs)
        plan = plans.get((dtype, yc))
        if plan is None:
            plan = plans[(dtype, yc)] = fast_plan((x, y), kind, floats_only)
        if not plan:
            return fallback(x, y, rest, kwargs)
        ac = alpha.__class__
        scaled = ac is not int or alpha != 1
        if scaled and (swap or dtype.kind != "f" or (ac is not int and ac is not float)):
            # Only a number alpha on floats is taken here; the slow lowering checks any other
            # against the result dtype (ATen's alpha_check: alpha=1.0 on integers raises, and
            # alpha=True on anything but bools).
            return fallback(x, y, rest, kwargs)
        if yc is not ZyxTensor:  # (after the plan: a float scalar need not fit x's dtype, e.g. nan)
            yn = _scalars.get((y, dtype, shape)) if y else None  # (zeros: graph.const keys their sign)
            if yn is None:
                yn = g.const(y, dtype, shape)
        if alpha != 1:
            yn = _binary_node("mul", yn, g.const(alpha, dtype, shape), dtype)
        node = _binary_node(op, yn, xn, plan) if swap else _binary_node(op, xn, yn, plan)
        return result(node, x, plan is dtype)

    def result(node: Node, x, same_dtype: bool):
        """``node`` as the op's result: a new tensor, or written into ``x`` (in-place forms).
        (``pair`` has this inline: a call less on the commonest path.)"""
        if not inplace:
            return wrap_like(node, x)
        if not same_dtype:  # (a comparison's bool result written into x: the general path casts)
            raise NotImplementedError
        return assign_whole(x, node)

    # class of y → {x's zyx dtype → fast_plan}: no key tuple per op, unlike ``plans``
    plans_by_class: dict[type, dict] = {ZyxTensor: {}, float: {}, int: {}, bool: {}}
    # The last call with a nonzero Python scalar that took the fast path: [x's metadata (the
    # very tuple object: wrap_like hands it on from operand to result, so along a chain of ops
    # it stays the same), x's zyx dtype, the scalar, its class, its CONST node, the plan]. A
    # model (or a chain) applying this op with one scalar then skips every check that the
    # metadata and dtype already passed, the plan lookup and the constant's key tuple. (Equal
    # scalars of one class (1, True are not) make the same constant of a dtype, as
    # graph.const's memo; nan never equals itself and never hits.)
    last_scalar: list = [None, None, None, None, None, None]

    def pair(x, y):
        # ``general`` for the commonest calls (two operands, ``x`` an op's fresh result) with as
        # few steps as possible: called as ``fn(x, y)`` by dispatch.torch_dispatch (see
        # registry.LoweringTable.pairs); any other case is ``general``'s.
        if x.__class__ is not ZyxTensor:
            return general(x, y)
        xn = x._storage._shaped
        meta = x._zmeta
        last = last_scalar
        if meta is last[0] and xn is not None and y.__class__ is last[3] and y == last[2] \
                and xn.dtype is last[1] and xn.shape == meta[0]:
            yn = last[4]  # (the metadata passed every check below when it was cached)
            node = _binary_node(op, yn, xn, last[5]) if swap else _binary_node(op, xn, yn, last[5])
            if not inplace:
                return wrap_like(node, x)
            if last[5] is not xn.dtype:  # (a comparison's bool result written into x)
                raise NotImplementedError
            return assign_whole(x, node)
        if xn is None or meta is None or not meta[3] or xn.shape != meta[0]:
            return general(x, y)
        yc = y.__class__
        by_dtype = plans_by_class.get(yc)
        if by_dtype is None:
            return general(x, y)
        dtype = xn.dtype
        if yc is ZyxTensor:  # (checked before the plan: plans of tensors are for ones of x's dtype)
            yn = whole_node(y)
            if yn is None or yn.shape != xn.shape or yn.dtype is not dtype:
                return general(x, y)
        plan = by_dtype.get(dtype)
        if plan is None:
            plan = by_dtype[dtype] = fast_plan((x, y), kind, floats_only)
        if not plan:
            return general(x, y)
        if yc is not ZyxTensor:
            shape = xn.shape
            yn = _scalars.get((y, dtype, shape)) if y else None  # (zeros: graph.const keys their sign)
            if yn is None:
                yn = g.const(y, dtype, shape)
            if y:
                last[0], last[1], last[2], last[3], last[4], last[5] = meta, dtype, y, yc, yn, plan
        node = _binary_node(op, yn, xn, plan) if swap else _binary_node(op, xn, yn, plan)
        if not inplace:
            return wrap_like(node, x)
        if plan is not dtype:  # (a comparison's bool result written into x: the general path casts)
            raise NotImplementedError
        return assign_whole(x, node)

    def lowering(x, y, *rest, **kwargs):
        if rest or kwargs:
            return general(x, y, *rest, **kwargs)
        return pair(x, y)

    lowering.pair = pair
    return lowering


def _fast_unary(fn, kind, slow, inplace: bool):
    """The fast lowering of a unary table op ``fn`` (functional, or its in-place form)."""
    plans: dict[object, object] = {}  # x's zyx dtype → fast_plan

    def lowering(x, *rest, **kwargs):
        xn = whole_node(x)
        if xn is not None and not rest and not kwargs:
            dtype = xn.dtype
            plan = plans.get(dtype)
            if plan is None:
                plan = plans[dtype] = fast_plan((x,), kind)
            if plan is dtype:
                node = fn(xn)
                if node.dtype is dtype:
                    return assign_whole(x, node) if inplace else wrap_like(node, x)
        if inplace:
            raise NotImplementedError  # dispatch computes the functional op and writes it
        return slow(x, *rest, **kwargs)

    # (its other cases go to ``slow``, which lays results out as ops/layout.py does)
    lowering.dense_only = True
    return lowering


def install(unary: dict, binary: dict, bool_result: set) -> None:
    """Put the fast lowerings in front of the general ones (math/elementwise.py's tables ``unary`` and
    ``binary``: name → (function of nodes, promotion kind)), for the functional overloads already
    registered and the in-place overloads (which have no lowering of their own)."""
    kinds = {"add": PROMOTE_DEFAULT, "sub": PROMOTE_DEFAULT, "rsub": PROMOTE_DEFAULT,
             **{name: kind for name, (_, kind) in binary.items()}}
    unary_names = [name for name in unary if name not in bool_result]
    for name in [*_FAST_BINARY, *unary_names]:
        for inplace in (False, True):
            packet = getattr(aten, name + "_" if inplace else name, None)
            if packet is None:
                continue
            for overload_name in packet.overloads():
                functional = getattr(getattr(aten, name), overload_name, None)
                slow = LOWERINGS.get(functional) if functional is not None else None
                if slow is None or "out" in overload_name:
                    continue
                if name in _FAST_BINARY:
                    fast = _fast_binary(name, kinds[name], slow, inplace)
                else:
                    fast = _fast_unary(unary[name][0], unary[name][1], slow, inplace)
                LOWERINGS[getattr(packet, overload_name)] = fast
