"""ATen's argument and dtype checks that several lowerings and dispatch's in-place and out=
handling share: each raises CPU torch's exception type with its message, when the op is
recorded (never at a later realization), where zyx could compute something CPU torch refuses.

- ``kernel_error``/``check_float_kernel``/``check_not_bool``: the NotImplementedError of a CPU
  kernel that lacks a dtype ('"silu_cpu" not implemented for 'Long''), marked final
  (record.pending.unsupported) so that dispatch neither decomposes the op nor runs it on the CPU;
- ``check_alpha``: ``alpha`` of add/sub/rsub against the result dtype (ATen's alpha_check);
- ``check_neg``, ``check_sub``, ``check_lerp_dtypes``/``check_lerp_kernel``,
  ``check_clamp_bounds``/``check_clamp_kernel``, ``check_hardtanh``, ``HEAVISIDE_DTYPES``: the
  checks of one op family, shared by its lowering and its in-place and out= rules;
- ``cast_error``: "result type Float can't be cast to the desired output type Long", the
  safe-casting rule of in-place and out= writes;
- ``check_out`` and ``check_inplace`` (before the result is computed), ``check_out_result``
  (after): the dtype rules of out= and in-place destinations. ATen checks them when it builds
  the op's TensorIterator, before its kernel looks at dtypes and before some of the op's own
  checks (add's alpha), while zyx computes the result with the functional op, whose lowering
  makes those: so the rules run first, and the errors come in CPU torch's order.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..record.pending import unsupported
from ..record.tensor import ZyxTensor
from ..record.transfer import ZYX_TO_TORCH
from .registry import dtype_name, result_dtype, type_meta_name


def _torch_dtype(dtype) -> torch.dtype:
    """``dtype`` (a torch dtype or a zyx one) as a torch dtype."""
    return dtype if isinstance(dtype, torch.dtype) else ZYX_TO_TORCH[dtype]


def _dtype_of(x) -> torch.dtype:
    """The torch dtype of tensor ``x`` (a zyx tensor's from its storage: torch's accessor of a
    tensor subclass costs more, and the check runs while recording)."""
    return ZYX_TO_TORCH[x._storage.dtype] if x.__class__ is ZyxTensor else x.dtype


def kernel_error(kernel: str, dtype) -> NotImplementedError:
    """CPU torch's error for ``kernel`` (its name in ATen's AT_DISPATCH) given ``dtype``, which
    the kernel has no version of (raise it)."""
    return unsupported(f"\"{kernel}\" not implemented for '{dtype_name(_torch_dtype(dtype))}'")


# aten op → the name of its CPU kernel, for ops whose CPU kernels exist for floating dtypes only
# (AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16)): zyx's formulas would compute integers too.
FLOAT_KERNELS = {
    "gelu": "GeluKernelImpl", "silu": "silu_cpu", "mish": "mish_cpu", "hardswish": "hardswish_cpu",
    "hardsigmoid": "hardsigmoid_cpu", "elu": "elu_cpu", "celu": "elu_cpu", "softplus": "softplus_cpu",
    "softshrink": "softshrink_check", "hardshrink": "hardshrink_cpu", "leaky_relu": "leaky_relu_cpu",
    "log_sigmoid_forward": "log_sigmoid_cpu",
}


def check_float_kernel(op: str, x) -> None:
    """Raise CPU torch's kernel error unless tensor ``x`` (the input of aten op ``op``, a key of
    ``FLOAT_KERNELS``) is of a floating dtype."""
    dtype = _dtype_of(x)
    if not dtype.is_floating_point:
        raise kernel_error(FLOAT_KERNELS[op], dtype)


def check_not_bool(kernel: str, dtype) -> None:
    """Raise CPU torch's error of ``kernel`` (which has every dtype but bool) for a bool ``dtype``."""
    if _torch_dtype(dtype) == torch.bool:
        raise kernel_error(kernel, torch.bool)


def check_neg(x) -> None:
    """neg (and its out= and in-place forms) refuses bool tensors, before anything else."""
    if isinstance(x, torch.Tensor) and _dtype_of(x) == torch.bool:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")


def _is_bool(x) -> bool:
    return x.__class__ is bool or (isinstance(x, torch.Tensor) and _dtype_of(x) == torch.bool)


def check_sub(x, y) -> None:
    """sub (and rsub, with its operands swapped) refuses bools, before anything else (ATen's
    sub_check)."""
    if _is_bool(x) and _is_bool(y):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(x) or _is_bool(y):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")


def check_alpha(dtype, alpha) -> None:
    """ATen's alpha_check: ``alpha`` of add/sub/rsub against the op's result ``dtype`` (a zyx or
    torch dtype): a bool alpha only for bool results, a float one only for floating results, no
    complex one (zyx has no complex dtypes). Made for every call, ``alpha=1.0`` included."""
    cls = alpha.__class__
    if cls is int:  # (the commonest case: always allowed)
        return
    dtype = _torch_dtype(dtype)
    if cls is bool:
        if dtype != torch.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
        return
    if not dtype.is_floating_point:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if cls is complex:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


def check_lerp_dtypes(start, end, weight) -> None:
    """lerp's meta checks: ``end`` of ``start``'s dtype, and ``weight`` too unless it is a number
    or a 0-d tensor (PyTorch promotes those with the operands)."""
    expected = _dtype_of(start)
    if isinstance(end, torch.Tensor) and _dtype_of(end) != expected:
        raise RuntimeError(f"expected dtype {type_meta_name(expected)} for `end` but got dtype "
                           f"{type_meta_name(_dtype_of(end))}")
    if isinstance(weight, torch.Tensor) and weight.dim() != 0 and _dtype_of(weight) != expected:
        raise RuntimeError(f"expected dtype {type_meta_name(expected)} for `weight` but got dtype "
                           f"{type_meta_name(_dtype_of(weight))}")


def check_lerp_kernel(compute, tensor_weight: bool) -> None:
    """lerp's CPU kernels (of a scalar or a tensor weight) exist for floating dtypes only;
    ``compute``: the dtype the op computes in (its operands' promoted dtype)."""
    if not _torch_dtype(compute).is_floating_point:
        raise kernel_error("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", compute)


def check_clamp_bounds(low, high) -> None:
    """clamp (and clip) need at least one bound."""
    if low is None and high is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")


def check_clamp_kernel(compute, low, high) -> None:
    """clamp's CPU kernels of two bounds, or of one number, have no bool version; one tensor bound
    is a maximum or minimum, which has. ``compute``: the dtype clamp computes in."""
    if _torch_dtype(compute) != torch.bool:
        return
    if low is not None and high is not None:
        tensors = isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor)
        raise kernel_error("clamp_cpu" if tensors else "clamp_scalar_cpu", torch.bool)
    bound = high if low is None else low
    if not isinstance(bound, torch.Tensor):
        raise kernel_error("clamp_max_scalar_cpu" if low is None else "clamp_min_scalar_cpu", torch.bool)


def check_hardtanh(x, min_val=-1.0, max_val=1.0) -> None:
    """hardtanh's checks (ATen's hardtanh_out): no bool input, and on uint8 no negative bound
    (ATen truncates bounds of integer inputs to integers first)."""
    dtype = _dtype_of(x)
    if dtype == torch.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if dtype == torch.uint8 and (int(min_val) < 0 or int(max_val) < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")


HEAVISIDE_DTYPES = "heaviside is not yet implemented for tensors with different dtypes."


def cast_error(result, dst, op_name: str = "") -> RuntimeError:
    """The error for writing a ``result`` dtype into a ``dst`` dtype it cannot safely be cast to
    (torch.can_cast). ``op_name``: the in-place overload (``func._name``) writing it: clamp's
    number forms check it in their meta function, which names the destination as a TypeMeta
    ("long int")."""
    dst_name = type_meta_name(dst) if op_name in _META_NAMED_CASTS else dtype_name(dst)
    return RuntimeError(f"result type {dtype_name(result)} can't be cast to the desired output type "
                        f"{dst_name}")


_META_NAMED_CASTS = frozenset({"aten::clamp_", "aten::clamp_min_", "aten::clamp_max_", "aten::clip_"})


# --------------------------------------------------------------------------- out= rules


def _bound(names: tuple[str, ...], args, kwargs) -> dict:
    """The call's arguments by name (``names``: the schema's leading ones, in order)."""
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _found_dtype(outs, expected: torch.dtype) -> None:
    """TensorIterator's check of ops built with ``check_all_same_dtype``: every out tensor has
    the dtype of the first input (``expected``)."""
    for out in outs:
        if out.dtype != expected:
            raise RuntimeError(f"Found dtype {dtype_name(out.dtype)} but expected {dtype_name(expected)}")


def _same_dtype(args, kwargs, outs) -> None:
    if args and isinstance(args[0], torch.Tensor):
        _found_dtype(outs, args[0].dtype)


def _neg_out(args, kwargs, outs) -> None:
    check_neg(args[0])
    _same_dtype(args, kwargs, outs)


def _float_kernel_same_dtype(op: str):
    """The rule of an op whose CPU kernel is dispatched in its meta function (before the out
    check): softshrink's."""

    def rule(args, kwargs, outs) -> None:
        check_float_kernel(op, args[0])
        _same_dtype(args, kwargs, outs)

    return rule


def _log_sigmoid_out(args, kwargs, outs) -> None:
    # ATen's log_sigmoid_forward_out_cpu dispatches on the input's dtype first, then its kernel
    # reads the output as the input's scalar type (the output and the buffer of the backward).
    check_float_kernel("log_sigmoid_forward", args[0])
    expected = args[0].dtype
    for out in outs:
        if out.dtype != expected:
            raise RuntimeError(f"expected scalar type {dtype_name(expected)} but found "
                               f"{dtype_name(out.dtype)}")


def _hardtanh_out(args, kwargs, outs) -> None:
    bound = _bound(("self", "min_val", "max_val"), args, kwargs)
    check_hardtanh(args[0], bound.get("min_val", -1.0), bound.get("max_val", 1.0))
    _same_dtype(args, kwargs, outs)  # (hardtanh_out writes through clamp_out, of one dtype)


def _clamp_out(names: tuple[str, ...]):
    """The out= rule of clamp/clip (``names`` ("min", "max")), clamp_min ("min",) or clamp_max
    ("max",): the number forms compute in the promoted dtype of the input and the bounds, and
    their out tensor must have that dtype; the tensor forms cast safely (dispatch's rule)."""

    def rule(args, kwargs, outs) -> None:
        bound = _bound(("self", *names), args, kwargs)
        x, low, high = bound["self"], bound.get("min"), bound.get("max")
        check_clamp_bounds(low, high)
        if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
            return
        expected = x.dtype if x.dtype.is_floating_point else result_dtype(x, low, high)[1]
        _found_dtype(outs, expected)

    return rule


def _check_casts(result: torch.dtype, dsts, op_name: str = "") -> None:
    """The safe cast of a ``result`` dtype into each tensor of ``dsts`` (cast_error's rule)."""
    for dst in dsts:
        if dst.dtype != result and not torch.can_cast(result, dst.dtype):
            raise cast_error(result, dst.dtype, op_name)


def _lerp_casts(start, end, weight, dsts, op_name: str = "") -> None:
    """lerp's dtype checks, then (before its kernel's) the cast of its result into ``dsts``."""
    check_lerp_dtypes(start, end, weight)
    if isinstance(weight, torch.Tensor) and weight.dim() != 0:
        # A weight of more than 0 dimensions has the operands' dtype, and so must the output.
        _found_dtype(dsts, start.dtype)
        return
    # A number weight is no operand (ATen's lerp.Scalar is a binary op of start and end); a 0-d
    # weight promotes with them.
    operands = (start, end, weight) if isinstance(weight, torch.Tensor) else (start, end)
    _check_casts(result_dtype(*operands)[1], dsts, op_name)


def _lerp_out(args, kwargs, outs) -> None:
    bound = _bound(("self", "end", "weight"), args, kwargs)
    _lerp_casts(bound["self"], bound["end"], bound["weight"], outs)


def _add_casts(sub: bool):
    """add's and sub's rule: ATen checks the result's cast into the output when it builds the
    op, before its alpha_check; only an alpha that is no int can fail that check, so only then
    is the result's dtype computed here (in-place adds are hot)."""

    def rule(args, kwargs, dsts, op_name: str = "") -> None:
        # (alpha: keyword-only in the Tensor forms, positional in the Scalar ones)
        alpha = args[2] if len(args) > 2 else kwargs.get("alpha", 1) if kwargs else 1
        if alpha.__class__ is int:
            return
        x, y = args[0], args[1]
        if sub:
            check_sub(x, y)
        _check_casts(result_dtype(x, y)[1], dsts, op_name)

    return rule


def _heaviside_out(args, kwargs, outs) -> None:
    bound = _bound(("self", "values"), args, kwargs)
    x, values = bound["self"], bound["values"]
    if x.dtype != values.dtype or any(out.dtype != x.dtype for out in outs):
        raise RuntimeError(HEAVISIDE_DTYPES)


def _nonzero_out(args, kwargs, outs) -> None:
    # ATen's nonzero_out checks the out tensor before counting: a Long tensor (its CPU message,
    # missing space included), on the input's device (its CUDA message: zyx's dispatch would
    # otherwise count, then fail copying into a CPU tensor of the wrong shape).
    x = args[0]
    for out in outs:
        if out.dtype != torch.int64:
            raise RuntimeError("nonzero: Expected out tensor to have scalar type Long but got scalar "
                               f"type{dtype_name(out.dtype)}")
        if out.device != x.device:
            raise RuntimeError("expected self and out to be on the same device, but got out on "
                               f"{out.device} and self on {x.device}")


def _cat_out(args, kwargs, outs) -> None:
    # cat's meta function refuses 0-d tensors, wraps dim and wants a tensor (the functional op's
    # errors), then checks the cast into out= (a TypeError, not dispatch's general RuntimeError)
    # before the tensors' shapes.
    tensors = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0) if kwargs else 0
    if not tensors or any(t.dim() == 0 for t in tensors):
        return
    ranked = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]  # (legacy empties)
    nd = ranked[0].dim() if ranked else 1
    if not isinstance(dim, int) or not -nd <= dim < nd:
        return
    result = tensors[0].dtype
    for t in tensors[1:]:
        result = torch.promote_types(result, t.dtype)
    for out in outs:
        if out.dtype != result and not torch.can_cast(result, out.dtype):
            raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "
                            f"{dtype_name(out.dtype)}")


def _signbit_out(args, kwargs, outs) -> None:
    if any(out.dtype != torch.bool for out in outs):
        raise RuntimeError("signbit does not support non-boolean outputs.")


# aten op (its schema name, no namespace) → its out= rule, run before the result is computed:
# rule(args, kwargs, outs) with the functional call's arguments.
_OUT_RULES: dict[str, Callable] = {
    # ATen's unary ops built with check_all_same_dtype ("borrowing" unary ops and the
    # activations' build_unary_op): the out tensor has the input's dtype.
    **dict.fromkeys(("abs", "sign", "sgn", "ceil", "floor", "round", "trunc", "frac", "bitwise_not",
                     "fix", "conj_physical", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "elu",
                     "softplus", "hardshrink", "leaky_relu"), _same_dtype),
    "neg": _neg_out,
    "softshrink": _float_kernel_same_dtype("softshrink"),
    "log_sigmoid_forward": _log_sigmoid_out,
    "hardtanh": _hardtanh_out,
    "clamp": _clamp_out(("min", "max")),
    "clip": _clamp_out(("min", "max")),
    "clamp_min": _clamp_out(("min",)),
    "clamp_max": _clamp_out(("max",)),
    "lerp": _lerp_out,
    "add": _add_casts(sub=False),
    "sub": _add_casts(sub=True),
    "heaviside": _heaviside_out,
    "signbit": _signbit_out,
    "nonzero": _nonzero_out,
    "cat": _cat_out,
}


def check_out(op: str, args, kwargs, outs) -> None:
    """The out= dtype rule of aten op ``op`` (schema name), checked before its functional
    result is computed from ``args`` and ``kwargs`` (that result's safe cast into each of
    ``outs`` is dispatch's general rule)."""
    rule = _OUT_RULES.get(op)
    if rule is not None:
        rule(args, kwargs, outs)


def _lerp_inplace(args, kwargs, dsts, op_name: str) -> None:
    weight = args[2] if len(args) > 2 else kwargs["weight"]
    if isinstance(weight, torch.Tensor):  # (a number weight: the result has self's dtype)
        _lerp_casts(args[0], args[1], weight, dsts, op_name)


# In-place overload (``func._name``) → its rule, run before its result is computed:
# rule(args, kwargs, (self,), name), args with self first. Casts that ATen checks before later
# checks of the op (which the functional op computing the result makes first).
_INPLACE_RULES: dict[str, Callable] = {
    "aten::add_.Tensor": _add_casts(sub=False), "aten::add_.Scalar": _add_casts(sub=False),
    "aten::sub_.Tensor": _add_casts(sub=True), "aten::sub_.Scalar": _add_casts(sub=True),
    "aten::lerp_.Scalar": _lerp_inplace, "aten::lerp_.Tensor": _lerp_inplace,
}


def check_inplace(func_name: str, args, kwargs) -> None:
    """The checks of in-place overload ``func_name`` (``func._name``) that come before those of
    the functional op computing its result (``args[0]`` is the destination)."""
    rule = _INPLACE_RULES.get(func_name)
    if rule is not None:
        rule(args, kwargs, (args[0],), func_name)


# Ops whose out= tensors must have their result's dtype exactly (ATen's structured kernels that
# are not elementwise), with ATen's message where it is not the common one: checked after the
# result is computed, whose dtype they compare with.
_EXACT_DTYPE_OUT = {"gather": None, "aminmax": None,
                    "multinomial": "multinomial expects Long tensor out, got: {got}",
                    "nan_to_num": "nan_to_num: dtype of out: {got} should be same as input: {expected}"}


def check_out_result(op: str, outs, results) -> None:
    """The out= rule of ``op`` that compares ``outs`` with its computed ``results``."""
    if op not in _EXACT_DTYPE_OUT:
        return
    message = _EXACT_DTYPE_OUT[op]
    for out, value in zip(outs, results):
        if out.dtype == value.dtype:
            continue
        if message is not None:
            raise RuntimeError(message.format(got=dtype_name(out.dtype), expected=dtype_name(value.dtype)))
        raise RuntimeError(f"Expected out tensor to have dtype {type_meta_name(value.dtype)}, "
                           f"but got {type_meta_name(out.dtype)} instead")
