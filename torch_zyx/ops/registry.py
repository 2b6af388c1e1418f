"""The lowering table and the helpers lowerings share (operands, promotion, broadcasting)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..lazy import graph as g
from ..lazy.graph import Node
from ..record.tensor import ZyxTensor, meta, read, wrap
from ..record.transfer import TORCH_TO_ZYX, ZYX_TO_TORCH, zdtype
from .layout import CONTIGUOUS_RESULTS, follow_inputs, operand_arguments

aten = torch.ops.aten


class LoweringTable(dict):
    """aten overload → lowering, also indexed by the overload's ``id`` in ``by_id`` and by its
    qualified name ("aten::add.Tensor", ``op._name``) in ``by_name``: an OpOverload's ``__hash__``
    is Python code (~0.5 us per lookup), and the dispatcher looks one up per recorded op. The
    table holds the overloads, so their ids stay theirs. The dispatcher uses ``by_name``: the
    ids of overloads are multiples of 64 and crowd a few slots of a dict keyed by them, and a
    string's hash is computed once and kept by the string (name lookups cost ~0.6 us less per
    recorded op on the 2-core box)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[int, Callable] = {}
        self.by_name: dict[str, Callable] = {}
        # name of the overload → ``fn.pair`` of a lowering ``fn`` that has one: the lowering for exactly
        # two positional operands, ``pair(x, y)`` (the binary fast paths of ops.fastpath),
        # which the dispatcher calls without building ``*rest`` and ``**kwargs`` per op.
        self.pairs: dict[str, Callable] = {}

    def __setitem__(self, op, fn) -> None:
        if torch.Tag.pointwise in op.tags and not op._schema.is_mutable and not hasattr(fn, "pair") \
                and not getattr(fn, "dense_only", False) and not getattr(fn, "follows_inputs", False) \
                and not any(a.name == "memory_format" for a in op._schema.arguments) \
                and op._name not in CONTIGUOUS_RESULTS:
            # Results laid out as TensorIterator lays them out (ops/layout.py); an op with a
            # memory_format argument (clone) lays its result out itself.
            fn = follow_inputs(fn, operand_arguments(op._schema))
        super().__setitem__(op, fn)
        self.by_id[id(op)] = fn
        self.by_name[op._name] = fn
        pair = getattr(fn, "pair", None)
        if pair is None:
            self.pairs.pop(op._name, None)
        else:
            self.pairs[op._name] = pair

    def __delitem__(self, op) -> None:
        super().__delitem__(op)
        del self.by_id[id(op)]
        del self.by_name[op._name]
        self.pairs.pop(op._name, None)

    def setdefault(self, op, fn):
        if op not in self:
            self[op] = fn
        return self[op]

    def pop(self, op, *default):
        self.by_id.pop(id(op), None)
        self.by_name.pop(op._name, None)
        self.pairs.pop(op._name, None)
        return super().pop(op, *default)

    def update(self, *args, **kwargs) -> None:
        for op, fn in dict(*args, **kwargs).items():
            self[op] = fn

    def clear(self) -> None:
        super().clear()
        self.by_id.clear()
        self.by_name.clear()
        self.pairs.clear()


LOWERINGS = LoweringTable()
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


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` wrapped into [0, ndim), raising ATen's IndexError when out of range (maybe_wrap_dim:
    a 0-d tensor takes -1 and 0)."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                         f"but got {dim})")
    return dim % bound


def dtype_name(dtype: torch.dtype) -> str:
    """``dtype`` as ATen names it in its error messages ("Float", "Long", ...)."""
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
            torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int16: "Short",
            torch.int8: "Char", torch.uint8: "Byte", torch.uint16: "UInt16", torch.uint32: "UInt32",
            torch.uint64: "UInt64", torch.complex64: "ComplexFloat",
            torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


_TYPE_META_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
                    torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int",
                    torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char",
                    torch.uint16: "unsigned short", torch.uint32: "unsigned int",
                    torch.uint64: "unsigned long", torch.bool: "bool"}


def type_meta_name(dtype: torch.dtype) -> str:
    """``dtype`` as ATen's messages name it where they print a TypeMeta ("float", "long int", ...)."""
    return _TYPE_META_NAMES.get(dtype, str(dtype))


def device_of(*args):
    for a in args:
        if isinstance(a, ZyxTensor):
            return a._storage.device
        if isinstance(a, (list, tuple)):
            found = device_of(*a)
            if found is not None:
                return found
    return None


# (id of the promotion kind, default dtype, operand keys...) → (computation dtype, result dtype,
# their zyx dtypes or None where zyx lacks them). Recording is hot: promotion runs once per
# signature. Kinds are keyed by id: they are enum singletons, and an enum's __hash__ is Python code.
_promotion_cache: dict[tuple, tuple[torch.dtype, torch.dtype, object, object]] = {}


def _promotion_key(a) -> object:
    # What PyTorch's promotion looks at: a tensor's dtype and whether it is 0-d; a scalar's type.
    if a.__class__ is ZyxTensor:  # (from its storage and metadata: torch's accessors are slower)
        return (a._storage.dtype, not meta(a)[0])
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.dim() == 0)
    return type(a)


def _promoted(key: tuple, operands, kind) -> tuple[torch.dtype, torch.dtype, object, object]:
    cached = _promotion_cache.get(key)
    if cached is None:
        check_unsigned_promotion(operands)
        compute, result = elementwise_dtypes(*operands, type_promotion_kind=kind)
        cached = (compute, result, TORCH_TO_ZYX.get(compute), TORCH_TO_ZYX.get(result))
        _promotion_cache[key] = cached
    return cached


# torch's "barebones" unsigned dtypes: c10's promoteTypes refuses to mix them with any other
# integer or bool dtype (and with each other), which torch._prims_common's elementwise_dtypes
# does not know (it promotes uint32 with int64 to uint32, where CPU torch raises).
BAREBONES_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def _promote_types(a, b):
    """c10's promoteTypes(a, b) where it matters here: None (no operand yet) or ``a`` when the
    two agree, the float when one is floating, else the error for a barebones unsigned dtype
    (the pair's other promotions are not needed: elementwise_dtypes gives the result)."""
    if a is None or a == b:
        return b
    if (a in BAREBONES_UNSIGNED or b in BAREBONES_UNSIGNED) \
            and not (a.is_floating_point or b.is_floating_point):
        raise RuntimeError("Promotion for uint16, uint32, uint64 types is not supported, attempted to "
                           f"promote {dtype_name(a)} and {dtype_name(b)}")
    return torch.promote_types(a, b)


def check_unsigned_promotion(operands) -> None:
    """Raise CPU torch's RuntimeError where ``operands`` (tensors and Python scalars) mix a
    barebones unsigned dtype with another integer or bool dtype in a way ATen's result_type
    refuses: as its ResultTypeState, operands promote within their category (tensors of
    dimension > 0, 0-d tensors, Python scalars: int as Long, bool as Bool), then the categories
    combine, a lower one only where it is floating or the higher is Bool."""
    dtypes_of = [a._storage.dtype if a.__class__ is ZyxTensor else getattr(a, "dtype", None)
                 for a in operands]
    if not any(ZYX_TO_TORCH.get(d, d) in BAREBONES_UNSIGNED for d in dtypes_of):
        return
    dim = zero = wrapped = None
    for a in operands:
        if isinstance(a, torch.Tensor):
            if a.dim() > 0:
                dim = _promote_types(dim, a.dtype)
            else:
                zero = _promote_types(zero, a.dtype)
        elif isinstance(a, bool):
            wrapped = _promote_types(wrapped, torch.bool)
        elif isinstance(a, int):
            wrapped = _promote_types(wrapped, torch.int64)
        elif isinstance(a, float):
            wrapped = _promote_types(wrapped, torch.get_default_dtype())

    def combine(higher, lower):
        if higher is None:
            return lower
        if lower is not None and (higher == torch.bool or lower.is_floating_point) \
                and not higher.is_floating_point:
            return _promote_types(higher, lower)
        return higher

    combine(combine(dim, zero), wrapped)


def result_dtype(*args, kind=PROMOTE_DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) by PyTorch's promotion rules (memoized: recording is hot)."""
    operands = [a for a in args if a is not None]
    key = (id(kind), torch.get_default_dtype(), *map(_promotion_key, operands))
    return _promoted(key, operands, kind)[:2]


def operands(args, kind=PROMOTE_DEFAULT) -> tuple[list[Node], torch.dtype, torch.dtype, object]:
    """``args`` (zyx tensors, CPU scalar tensors, Python scalars; ``None`` skipped) as nodes of
    their computation dtype, with the computation and result dtypes (torch dtypes, PyTorch's
    promotion rules) and the device of the first zyx tensor: ``result_dtype`` + ``operand`` +
    ``device_of`` in one pass (``promoted`` gives the result dtype as a zyx dtype)."""
    nodes, result, device = promoted(args, kind)
    return nodes, ZYX_TO_TORCH[nodes[0].dtype], ZYX_TO_TORCH[result], device


def promoted(args, kind=PROMOTE_DEFAULT) -> tuple[list[Node], object, object]:
    """(nodes of ``args`` in their computation dtype, zyx result dtype, device of the first zyx
    tensor): ``operands`` for lowerings that build nodes (the recording hot path). Each zyx
    tensor is read once and its node's dtype and rank key the memoized promotion (metadata
    accessors of a tensor subclass cost ~0.5 us each)."""
    key = [id(kind), torch.get_default_dtype()]
    values = []
    device = None
    for a in args:
        cls = a.__class__
        # Class tests first: isinstance against a tensor class goes through torch's metaclass
        # __instancecheck__ (~0.2 us for a Python scalar).
        if cls is float or cls is int or cls is bool:
            key.append(cls)
            values.append(a)
        elif cls is ZyxTensor or isinstance(a, ZyxTensor):
            node = read(a)
            key.append((node.dtype, node.shape == ()))
            values.append(node)
            if device is None:
                device = a._storage.device
        elif a is not None:
            key.append((a.dtype, a.dim() == 0) if isinstance(a, torch.Tensor) else cls)
            values.append(a)
    cached = _promotion_cache.get(tuple(key))
    if cached is None:
        cached = _promoted(tuple(key), [a for a in args if a is not None], kind)
    compute, result, zcompute, zresult = cached
    if zcompute is None:
        zcompute = zdtype(compute)  # raises: zyx does not compute this dtype
    nodes = []
    for v in values:
        cls = v.__class__
        if cls is Node:
            if v.dtype is not zcompute:
                v = g.cast(v, zcompute)
        elif cls is float or cls is int or cls is bool or not isinstance(v, torch.Tensor):
            v = g.const(v, zcompute)
        else:
            v = _scalar(v, zcompute, device)
        nodes.append(v)
    if zresult is None:
        zresult = zdtype(result)  # raises: zyx does not hold this dtype
    return nodes, zresult, device


# The fast paths of ``promoted`` for the commonest signatures: one zyx tensor; two zyx tensors;
# a zyx tensor and a Python scalar. Keyed by (id of kind, each operand's zyx dtype and 0-d-ness
# or a scalar's class, the default dtype) → (zyx computation dtype, zyx result dtype). The
# default dtype only matters without a float tensor among the operands (PyTorch takes the float
# type from a float tensor when there is one): None in the key then, one call less per op.
_plans: dict[tuple, tuple[object, object]] = {}
_default_dtype = torch.get_default_dtype
_FLOATS = frozenset(d for d in ZYX_TO_TORCH if d.kind == "f")


def _plan(key: tuple, args, kind) -> tuple[object, object]:
    check_unsigned_promotion(args)
    compute, result = elementwise_dtypes(*args, type_promotion_kind=kind)
    plan = (TORCH_TO_ZYX.get(compute), TORCH_TO_ZYX.get(result))
    if plan[0] is None:
        zdtype(compute)  # raises: zyx does not compute this dtype
    if plan[1] is None:
        zdtype(result)  # raises: zyx does not hold this dtype
    _plans[key] = plan
    return plan


def _node_of(x: ZyxTensor) -> Node:
    """``read(x)`` with its commonest case (a tensor that is its whole storage) inline."""
    shape, _, _, dense = x._zmeta or meta(x)
    node = x._storage._shaped
    if dense and node is not None and node.shape == shape:
        return node
    return read(x)


def promoted_one(x, kind=PROMOTE_DEFAULT) -> tuple[Node, object, object] | None:
    """``promoted((x,), kind)`` as (node, zyx result dtype, device) when ``x`` is a zyx tensor,
    else None (the caller takes the general path)."""
    if x.__class__ is not ZyxTensor:
        return None
    node = _node_of(x)
    dtype = node.dtype
    key = (id(kind), dtype, not node.shape, None if dtype in _FLOATS else _default_dtype())
    plan = _plans.get(key) or _plan(key, (x,), kind)
    compute = plan[0]
    if dtype is not compute:
        node = g.cast(node, compute)
    return node, plan[1], x._storage.device


def promoted_pair(x, y, kind=PROMOTE_DEFAULT) -> tuple[Node, Node, object, object] | None:
    """``promoted((x, y), kind)`` as (node of x, node of y, zyx result dtype, device) for two zyx
    tensors or a zyx tensor and a Python scalar, else None (the caller takes the general path).
    A scalar becomes a CONST of the tensor's shape: what broadcasting makes of it anyway, built
    in one step (the common case of recording: ``x * 0.5``)."""
    yc = y.__class__
    if x.__class__ is ZyxTensor:
        xn = _node_of(x)
        xd = xn.dtype
        if yc is ZyxTensor:
            yn = _node_of(y)
            yd = yn.dtype
            key = (id(kind), xd, not xn.shape, yd, not yn.shape,
                   None if xd in _FLOATS or yd in _FLOATS else _default_dtype())
            compute, result = _plans.get(key) or _plan(key, (x, y), kind)
            if xd is not compute:
                xn = g.cast(xn, compute)
            if yd is not compute:
                yn = g.cast(yn, compute)
            return xn, yn, result, x._storage.device
        if yc is float or yc is int or yc is bool:
            if xn.shape and xd in _FLOATS:  # (the commonest case, with the shortest key)
                key = (id(kind), xd, yc)
            else:
                key = (id(kind), xd, not xn.shape, yc, _default_dtype())
            compute, result = _plans.get(key) or _plan(key, (x, y), kind)
            if xd is not compute:
                xn = g.cast(xn, compute)
            return xn, g.const(y, compute, xn.shape), result, x._storage.device
        return None
    if yc is ZyxTensor:
        xc = x.__class__
        if xc is float or xc is int or xc is bool:
            yn = _node_of(y)
            yd = yn.dtype
            key = (id(kind), xc, yd, not yn.shape, None if yd in _FLOATS else _default_dtype())
            compute, result = _plans.get(key) or _plan(key, (x, y), kind)
            if yd is not compute:
                yn = g.cast(yn, compute)
            return g.const(x, compute, yn.shape), yn, result, y._storage.device
    return None


def fast_plan(args, kind, floats_only: bool = False):
    """The result's zyx dtype when the op ``kind`` of ``args`` computes in the dtype of
    ``args[0]`` (a zyx tensor; the others Python scalars or zyx tensors of its dtype), else
    False: the test of the recording fast paths in ops/fastpath.py, memoized there per op.

    Neither answer depends on the default dtype, though the fast paths key it by operand
    classes only: the default dtype enters promotion only for an integer or bool tensor with a
    float operand (or an int-to-float op), whose computation dtype is then not the tensor's.
    Bool tensors never take the fast path (their add is an ``or``, their sub an error), nor
    other integers when ``floats_only`` (the op is no primitive on them, as pow)."""
    dtype = args[0]._storage.dtype
    if dtype.kind == "b" or (floats_only and dtype.kind != "f"):
        return False
    if any(isinstance(a, torch.Tensor) and a.dtype in BAREBONES_UNSIGNED for a in args):
        return False  # (their promotion errors and CPU torch's missing kernels: general path)
    compute, result = elementwise_dtypes(*args, type_promotion_kind=kind)
    if TORCH_TO_ZYX.get(compute) is not dtype:
        return False
    return TORCH_TO_ZYX.get(result, False)


def _scalar(x, dtype, device=None) -> Node:
    """A Python scalar or a 0-d CPU tensor (which PyTorch takes as a scalar with tensors of any
    device) as a 0-d CONST of zyx ``dtype``; other tensors are on another device (``device``:
    the zyx operands')."""
    if isinstance(x, torch.Tensor):
        if not x.is_cpu or x.dim() != 0:
            ours = f"zyx:{device.index}" if device is not None else "zyx"
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                               f"devices, {ours} and {x.device}!")
        x = x.item()
    return g.const(x, dtype)


def operand(x, dtype: torch.dtype) -> Node:
    """``x`` (zyx tensor or Python scalar) as a node of ``dtype``."""
    if isinstance(x, ZyxTensor):
        return g.cast(read(x), zdtype(dtype))
    return _scalar(x, zdtype(dtype))


# shapes → their broadcast shape (bounded like graph.contiguous_strides' memo).
_broadcast_shapes: dict[tuple, tuple[int, ...]] = {}


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy-style broadcast of ``shapes`` with PyTorch's error for mismatches."""
    out = _broadcast_shapes.get(shapes)
    if out is None:
        out = _broadcast_shape(shapes)
        if len(_broadcast_shapes) >= 4096:
            _broadcast_shapes.clear()
        _broadcast_shapes[shapes] = out
    return out


def _broadcast_shape(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, size in enumerate(shape):
            current = out[offset + i]
            if size != current and size != 1:
                if current != 1:
                    raise RuntimeError(f"The size of tensor a ({current}) must match the size of tensor b "
                                       f"({size}) at non-singleton dimension {offset + i}")
                out[offset + i] = size
            elif size == 0:
                out[offset + i] = 0
    return tuple(out)


def broadcast(*nodes: Node) -> list[Node]:
    first = nodes[0].shape
    for n in nodes:
        if n.shape != first:
            break
    else:
        return list(nodes)
    shape = broadcast_shape(*[n.shape for n in nodes])
    return [g.broadcast_to(n, shape) for n in nodes]


def new(node: Node, like) -> ZyxTensor:
    """Wrap ``node`` as a new tensor on the device of ``like`` (a tensor or a device)."""
    device = like._storage.device if isinstance(like, ZyxTensor) else like
    return wrap(node, device)


def cast(node: Node, dtype: torch.dtype) -> Node:
    return g.cast(node, zdtype(dtype))
