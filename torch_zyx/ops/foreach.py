"""``aten._foreach_*`` lowerings (the multi-tensor ops torch.optim and clip_grad_norm_ use).

PyTorch has no decompositions for them, and on zyx a "fused multi-tensor kernel" needs no
special code: each element op is recorded lazily and the whole optimizer step realizes
together with the loss, so the kernelizer fuses it. The lowering is generic, read from the
op's schema: ``Tensor[]`` arguments are zipped, everything else is shared, and the per-tensor
aten op (``_foreach_add_.List`` → ``aten.add``) computes each element; in-place forms write
the result into ``self[i]`` (tensor.write).

Scalar lists (Adam's bias corrections change every step) are uploaded as one small buffer and
read as 0-dim tensors rather than baked in as constants, so the graph keeps the same structure
from step to step and the schedule cache hits.
"""

from __future__ import annotations

import torch

from ..tensor import ZyxTensor, from_cpu, read, wrap, write
from .registry import aten, register

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


def _element(base: str, args: list, kwargs: dict, scalar_list: bool):
    """The functional per-tensor result for one element's arguments."""
    if base in ("addcdiv", "addcmul") and scalar_list:
        self, t1, t2, value = args
        inner = aten.div(t1, t2) if base == "addcdiv" else aten.mul(t1, t2)
        return aten.add(self, aten.mul(inner, value))
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
    return op(*args, **kwargs)


def _make_lowering(func):
    schema = func._schema
    name = schema.name.split("::")[-1][len("_foreach_"):]
    inplace = name.endswith("_")
    base = name.rstrip("_")
    arguments = list(schema.arguments)

    def lowering(*args, **kwargs):
        bound = {}
        for i, arg in enumerate(arguments):
            if i < len(args):
                bound[arg.name] = args[i]
            elif arg.name in kwargs:
                bound[arg.name] = kwargs[arg.name]
            elif arg.has_default_value():
                bound[arg.name] = arg.default_value
        lists = [a for a in arguments if str(a.type) in ("List[Tensor]", "Tensor[]")]
        count = len(bound[lists[0].name])
        first = next((t for a in lists for t in bound[a.name] if isinstance(t, ZyxTensor)), None)
        if first is None:
            raise NotImplementedError("foreach on no zyx tensor")
        # A scalar list (``Scalar[]``, or the ``Tensor scalars`` of addcdiv/addcmul.Tensor).
        scalar_arg = next((a for a in arguments if str(a.type) in ("List[number]", "Scalar[]")
                           or a.name == "scalars"), None)
        scalars = None
        if scalar_arg is not None:
            values = bound[scalar_arg.name]
            if len(values) != count:
                raise RuntimeError(f"Tensor list must have same number of elements as scalar list, got "
                                   f"{count} and {len(values)}")
            scalars = _scalar_tensor(values, first)
        results = []
        for i in range(count):
            call_args, call_kwargs = [], {}
            for arg in arguments:
                if arg.name not in bound:
                    continue
                value = bound[arg.name]
                if arg in lists:
                    value = value[i]
                elif arg is scalar_arg:
                    value = scalars[i]
                # value/alpha are positional in foreach schemas but keyword-only per tensor.
                keyword = arg.kwarg_only or arg.name in ("value", "alpha")
                (call_kwargs.__setitem__(arg.name, value) if keyword else call_args.append(value))
            results.append(_element(base, call_args, call_kwargs, scalars is not None))
        if not inplace:
            return results
        for dst, value in zip(bound[arguments[0].name], results):
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
