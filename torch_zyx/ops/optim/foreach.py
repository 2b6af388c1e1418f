"""``aten._foreach_*`` lowerings (the multi-tensor ops torch.optim and clip_grad_norm_ use).

PyTorch has no decompositions for them, and on zyx a "fused multi-tensor kernel" needs no
special code: each element op is recorded lazily and the whole optimizer step realizes
together with the loss, so the kernelizer fuses it. The lowering is generic, read from the
op's schema: ``Tensor[]`` arguments are zipped, everything else is shared, and the per-tensor
aten op (``_foreach_add_.List`` → ``aten.add``) computes each element; in-place forms write
the result into ``self[i]`` (tensor.write).

An optimizer step's commonest forms (dense float tensors, Python numbers as scalars) take a
fast path that builds each element's nodes directly (below, "the fast path"); its scalar lists
(Adam's bias corrections change every step) become constants, which the schedule keys as
parameters, so the graph keeps its key from step to step. The general path uploads a scalar
list as one small buffer and reads it as 0-dim tensors.

Recording cost: an optimizer step records a few ops per parameter, so the per-element ops call
their lowerings directly (the overload resolved once per signature) instead of going through
PyTorch's dispatcher and back (~20 us each), and the schema is read once per foreach op.
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record.pending import reraise_deferred
from ...record.tensor import ZyxTensor, assign_whole, meta, read, wrap, wrap_like, write
from ...record.transfer import ZYX_TO_TORCH, from_cpu
from ..argument_checks import cast_error
from ..fastpath import whole_node
from ..math.combine import addc_by_tensor, lerp_scalar_weight
from ..registry import LOWERINGS, aten, register

# Per-tensor op for a foreach base name, when it is not simply ``aten.<name>``; scalar forms of
# maximum/minimum are clamps.
_RENAMED = {"norm": aten.linalg_vector_norm, "zero": aten.zeros_like, "copy": None}
_SCALAR_RENAMED = {"maximum": aten.clamp_min, "minimum": aten.clamp_max}


def _scalar_tensor(values, like: ZyxTensor) -> ZyxTensor:
    """``values`` (numbers, or a CPU tensor) as a 1-d zyx tensor read per element."""
    if isinstance(values, ZyxTensor):
        return values
    if isinstance(values, torch.Tensor):
        cpu = values
    else:
        values = list(values)
        if like.dtype.is_floating_point:
            dtype = like.dtype
        elif all(isinstance(v, (bool, int)) for v in values):
            dtype = torch.int64
        else:
            dtype = torch.get_default_dtype()
        cpu = torch.tensor(values, dtype=dtype)
    device = like._storage.device
    return wrap(from_cpu(cpu, device), device)


def _scalar_at(scalars: ZyxTensor, i: int):
    """Element ``i`` of the 1-d ``scalars`` as a 0-d view (made directly: no dispatcher trip)."""
    shape, strides, offset, _ = scalars._zmeta or meta(scalars)
    if len(shape) != 1:
        return scalars[i]
    return ZyxTensor(scalars._storage, (), (), offset + i * strides[0])


# (id of an op packet, classes of the positional arguments, keyword names and classes) → overload.
_overloads: dict[tuple, object] = {}
_lowering_of = LOWERINGS.by_id


def _call(op, args: list, kwargs: dict):
    """``op(*args, **kwargs)`` for an op packet: the overload PyTorch would pick, resolved once
    per signature, and its lowering called directly (through PyTorch's dispatcher only when it
    has none or declines, as dispatch.py does)."""
    key = (id(op), *map(type, args))
    if kwargs:
        key += tuple((k, type(v)) for k, v in kwargs.items())
    overload = _overloads.get(key)
    if overload is None:
        try:
            name = torch._C._jit_resolve_packet(op._qualified_op_name, *args, **kwargs)
        except RuntimeError:  # no overload takes these: PyTorch raises its own error
            return op(*args, **kwargs)
        overload = _overloads[key] = getattr(op, name)
    lowering = _lowering_of.get(id(overload))
    if lowering is not None:
        try:
            return lowering(*args, **kwargs)
        except NotImplementedError as exc:
            reraise_deferred(exc)
    return overload(*args, **kwargs)


def _element(base: str, args: list, kwargs: dict, scalar_list: bool):
    """The functional per-tensor result for one element's arguments."""
    if base in ("addcdiv", "addcmul") and scalar_list:
        self, t1, t2, value = args
        if all(isinstance(t, ZyxTensor) for t in args):
            out = addc_by_tensor(self, t1, t2, value, divide=base == "addcdiv")
            if out is not None:
                return out
        inner = _call(aten.div if base == "addcdiv" else aten.mul, [t1, t2], {})
        return _call(aten.add, [self, _call(aten.mul, [inner, value], {})], {})
    if base == "copy":
        return args[1]
    if base == "norm":
        self, ord_ = args[0], args[1] if len(args) > 1 else 2
        return aten.linalg_vector_norm(self, ord_, dtype=args[2] if len(args) > 2 else kwargs.get("dtype"))
    op = _RENAMED.get(base)
    if base in _SCALAR_RENAMED and not isinstance(args[1], torch.Tensor):
        op = _SCALAR_RENAMED[base]
    if op is None:
        op = getattr(aten, base)
    return _call(op, args, kwargs)


# ------------------------------------------------------------------------- the fast path
# An optimizer step's foreach ops on float32/float64 tensors that are each their whole storage
# (parameters, gradients, optimizer state, fresh results), the lists of one shape per element
# and one dtype, with Python numbers for scalars: each element's nodes are built here and the
# result assigned to the tensor's storage, without a 0-d tensor per scalar, an aten op per
# element and a result tensor written back (Adam's step on an MLP: ~24-63 us per tensor ->
# a few us on the 2-core box). Scalars are constants of the tensors' dtype, as the per-tensor
# ops with a Python scalar make them; a scalar list's values change every step (Adam's bias
# corrections), and constants that are not one of the few inlined values (kernelize.py
# INLINE_FLOATS) are parameters of the schedule, so the graph's key stays the same. Anything
# else takes the general path below.

_FAST_DTYPES = (dtypes.float32, dtypes.float64)


def _binary_form(op: str):
    """The node builder of a binary foreach op: ``x op other`` (the List and Tensor forms) or
    ``x op scalar`` (the Scalar and ScalarList forms)."""
    return lambda x, others, s, dt: g.binary(op, x, others[0] if others else g.const(s, dt, x.shape))


# foreach base name → (x node, nodes of the other list arguments, scalar, dtype) → result node.
_FAST_NODES = {
    **{name: _binary_form(name) for name in ("add", "sub", "mul", "div")},
    "lerp": lambda x, others, s, dt: lerp_scalar_weight(x, others[0], s, ZYX_TO_TORCH[dt]),
    "addcmul": lambda x, others, s, dt: g.binary(
        "add", x, g.binary("mul", g.binary("mul", others[0], others[1]), g.const(s, dt, x.shape))),
    "addcdiv": lambda x, others, s, dt: g.binary(
        "add", x, g.binary("mul", g.binary("div", others[0], others[1]), g.const(s, dt, x.shape))),
    "sqrt": lambda x, others, s, dt: g.unary("sqrt", x),
}
_NUMBERS = (float, int)


def _fast(base: str, inplace: bool, bound: dict, lists: list[str], scalar_name, count: int,
          tensor_other: bool):
    """The op's results by the fast path (in-place forms: None when done), or ``_DECLINED``.
    ``tensor_other``: the op's ``other`` is one 0-d tensor for every element (the ``.Tensor``
    forms: clip_grad_norm_ scales every gradient by one)."""
    selfs = bound[lists[0]]
    others = [bound[name] for name in lists[1:]]
    single = None
    if tensor_other:
        other = bound["other"]
        if other.__class__ is not ZyxTensor or (other._zmeta or meta(other))[0] != ():
            return _DECLINED
        single = read(other)
    if scalar_name is not None:
        scalars = bound[scalar_name]
        if scalars.__class__ is not list and scalars.__class__ is not tuple:
            return _DECLINED  # (a tensor of scalars: the general path)
    else:
        scalars = None
    # The one scalar of the Scalar forms (alpha of add/sub.List scales the other operand).
    scalar = bound.get("scalar", bound.get("value", bound.get("weight", 1)))
    alpha = bound.get("alpha", 1)
    if scalar.__class__ not in _NUMBERS or alpha.__class__ not in _NUMBERS:
        return _DECLINED
    if alpha != 1 and base not in ("add", "sub"):
        return _DECLINED
    nodes = []
    for i in range(count):
        x = whole_node(selfs[i])
        if x is None:
            return _DECLINED
        dtype = x.dtype
        if dtype not in _FAST_DTYPES:
            return _DECLINED
        operands = []
        for tensors in others:
            y = whole_node(tensors[i])
            if y is None or y.dtype is not dtype or y.shape != x.shape:
                return _DECLINED
            operands.append(y)
        if single is not None:
            if single.dtype is not dtype:
                return _DECLINED
            operands.append(g.expand(g.reshape(single, (1,) * len(x.shape)), x.shape))
        if scalars is not None:
            value = scalars[i]
            if value.__class__ not in _NUMBERS:
                return _DECLINED
        else:
            value = scalar
        if alpha != 1:
            operands[0] = g.binary("mul", operands[0], g.const(alpha, dtype, x.shape))
        nodes.append(_FAST_NODES[base](x, operands, value, dtype))
    if not inplace:
        return [wrap_like(node, t) for node, t in zip(nodes, selfs)]
    for t, node in zip(selfs, nodes):
        assign_whole(t, node)
    return None


_DECLINED = object()


def _make_lowering(func):
    schema = func._schema
    name = schema.name.split("::")[-1][len("_foreach_"):]
    inplace = name.endswith("_")
    base = name.rstrip("_")
    arguments = list(schema.arguments)
    names = [a.name for a in arguments]
    defaults = [(a.name, a.default_value) for a in arguments if a.has_default_value()]
    lists = [a.name for a in arguments if str(a.type) in ("List[Tensor]", "Tensor[]")]
    # A scalar list (``Scalar[]``, or the ``Tensor scalars`` of addcdiv/addcmul.Tensor).
    scalar_name = next((a.name for a in arguments if str(a.type) in ("List[number]", "Scalar[]")
                        or a.name == "scalars"), None)
    # How each argument is passed per tensor: value/alpha are positional in foreach schemas but
    # keyword-only per tensor.
    keyword = {a.name: a.kwarg_only or a.name in ("value", "alpha") for a in arguments}
    # The fast path takes this op: its base has a node builder, and its arguments are the
    # lists, at most one scalar list and the scalars the builder reads.
    tensor_other = "other" in names and "other" not in lists
    plain = {"self", "scalar", "scalars", "value", "weight", "alpha", "other", *lists}
    # The per-tensor in-place op, for the message of a result it cannot hold (clamp's forms with
    # numbers name the destination's dtype their own way: argument_checks.cast_error).
    per_tensor = _SCALAR_RENAMED[base].__name__ if base in _SCALAR_RENAMED else base
    inplace_name = f"aten::{per_tensor}_" if "other" not in lists else ""
    fast = (base in _FAST_NODES and set(names) <= plain and (inplace or base == "sqrt")
            and len(lists) + tensor_other == 1 + {"lerp": 1, "addcmul": 2, "addcdiv": 2}.get(
                base, "other" in names)
            and not (base == "lerp" and scalar_name is not None) and "weight" not in lists)

    def lowering(*args, **kwargs):
        bound = dict(zip(names, args))
        bound.update(kwargs)
        for arg_name, default in defaults:
            bound.setdefault(arg_name, default)
        count = len(bound[lists[0]])
        first = next((t for a in lists for t in bound[a] if isinstance(t, ZyxTensor)), None)
        if first is None:
            raise NotImplementedError("foreach on no zyx tensor")
        if fast:
            done = _fast(base, inplace, bound, lists, scalar_name, count, tensor_other)
            if done is not _DECLINED:
                return done
        scalars = None
        if scalar_name is not None:
            values = bound[scalar_name]
            if len(values) != count:
                raise RuntimeError(f"Tensor list must have same number of elements as scalar list, got "
                                   f"{count} and {len(values)}")
            scalars = _scalar_tensor(values, first)
        results = []
        for i in range(count):
            call_args, call_kwargs = [], {}
            for arg_name in names:
                if arg_name not in bound:
                    continue
                value = bound[arg_name]
                if arg_name in lists:
                    value = value[i]
                elif arg_name == scalar_name:
                    value = _scalar_at(scalars, i)
                if keyword[arg_name]:
                    call_kwargs[arg_name] = value
                else:
                    call_args.append(value)
            results.append(_element(base, call_args, call_kwargs, scalars is not None))
        if not inplace:
            return results
        if base != "copy":  # (copy_ casts freely; other in-place ops only to a wider dtype)
            for dst, value in zip(bound[names[0]], results):
                if value.dtype != dst.dtype and not torch.can_cast(value.dtype, dst.dtype):
                    raise cast_error(value.dtype, dst.dtype, inplace_name)
        for dst, value in zip(bound[names[0]], results):
            if isinstance(value, ZyxTensor):
                write(dst, read(value))
            else:  # _foreach_copy_ from CPU tensors
                write(dst, from_cpu(value, dst._storage.device))
        return None

    return lowering


def _register_all() -> None:
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::_foreach_"):
            continue
        name, _, overload = full[len("aten::"):].partition(".")
        if overload.endswith("out") or name.rstrip("_") in ("_foreach_mm", "_foreach_powsum"):
            continue  # out= forms go through dispatch's generic handling; mm/powsum: CPU
        func = getattr(getattr(aten, name), overload or "default")
        register(func)(_make_lowering(func))


_register_all()
