"""CPU torch's kernel coverage of the "barebones" unsigned dtypes uint16, uint32 and uint64.

ATen's CPU kernels dispatch over these dtypes for few ops (copies and casts, fill, mul, div,
bitwise and/or/xor, eq/ne, sort, cat, views and indexing, sum/prod/cumsum of the promoted
Long); the rest raise ``NotImplementedError: "add_stub" not implemented for 'UInt32'``. zyx's
lowerings would compute them all (its arithmetic is generic over integer dtypes), so
``check`` raises CPU torch's error, when the op is recorded, where CPU torch would.

The table maps an aten op (its name without overload, in-place ``_`` stripped: the out= and
in-place forms check as the functional op) to the CPU kernel's name in ATen's message and how
the kernel's dtype is found: ``"self"`` the first tensor's dtype, ``"common"`` the operands'
promoted dtype (uint32 + 2.5 computes in float and works), ``"dtype"`` the ``dtype=`` argument
(sum/prod/cumsum of these dtypes compute in Long unless asked for the dtype itself). Measured
on torch 2.13's CPU build with the OpInfo samples of every op (uint32).
"""
from __future__ import annotations

import torch

from ..record.tensor import ZyxTensor
from ..record.transfer import barebones_seen
from .argument_checks import kernel_error
from .registry import BAREBONES_UNSIGNED, result_dtype

_SELF = {
    "abs": "abs_cpu", "neg": "neg_cpu", "sign": "sign_cpu", "sgn": "sign_cpu",
    "bitwise_not": "bitwise_not_cpu",
    "logical_not": "logical_not_cpu", "frac": "frac_cpu", "amax": "max_values_cpu", "amin": "min_values_cpu",
    "aminmax": "aminmax_cpu", "argmax": "argmax_cpu", "argmin": "argmin_cpu", "max": "max_all",
    "min": "min_all", "cummax": "cummax_cpu", "cummin": "cummin_cpu", "topk": "topk_cpu",
    "kthvalue": "kthvalue_cpu", "median": "median_cpu", "nanmedian": "median_cpu", "mode": "mode_cpu",
    "clamp": "clamp_scalar_cpu", "clamp_min": "clamp_min_scalar_cpu", "clamp_max": "clamp_max_scalar_cpu",
    "relu": "clamp_min_scalar_cpu", "hardtanh": "clamp_scalar_cpu", "threshold": "threshold_cpu",
    "masked_fill": "masked_fill", "count_nonzero": "nonzero_count_cpu", "nonzero": "nonzero_count_cpu",
    "tril": "tril", "triu": "triu", "trace": "trace", "take": "take_cpu", "put": "take_put_cpu",
    "gather": "scatter_gather_tensor_cpu", "scatter": "scatter_gather_tensor_cpu",
    "scatter_add": "scatter_gather_tensor_cpu", "index_add": "index_add_", "index_copy": "index_copy_cpu",
    "index_fill": "index_fill_cpu", "index_put": "index_put", "masked_scatter": "masked_scatter",
    "masked_select": "masked_select", "flip": "flip_cpu", "mm": "addmm_impl_cpu_", "addmm": "addmm_impl_cpu_",
    "bmm": "bmm", "dot": "dot", "vdot": "dot", "mv": "addmv_impl_cpu", "addmv": "addmv_impl_cpu",
    "round": "round_cpu", "isin": "isin_default_cpu", "bucketize": "searchsorted_out_cpu",
}
_COMMON = {
    "add": "add_stub", "sub": "add_stub", "rsub": "add_stub", "lt": "lt_cpu", "le": "le_cpu", "gt": "gt_cpu",
    "ge": "ge_cpu", "maximum": "maximum_cpu", "minimum": "minimum_cpu", "fmax": "maximum_cpu",
    "fmin": "minimum_cpu", "remainder": "remainder_cpu", "fmod": "fmod_cpu", "floor_divide": "div_floor_cpu",
    "bitwise_left_shift": "lshift_cpu", "bitwise_right_shift": "rshift_cpu", "__lshift__": "lshift_cpu",
    "__rshift__": "rshift_cpu", "logical_and": "logical_and_cpu", "logical_or": "logical_or_cpu",
    "logical_xor": "logical_xor_cpu", "pow": "pow", "gcd": "gcd_cpu", "lcm": "lcm_cpu",
    "heaviside": "heaviside_cpu", "hypot": "hypot_cpu", "nextafter": "nextafter_cpu",
    "logaddexp": "logaddexp_cpu", "logaddexp2": "logaddexp2_cpu",
}
_DTYPE_ARG = {"sum": "sum_cpu", "nansum": "nansum_cpu", "prod": "prod_cpu", "cumsum": "cumsum_out_cpu",
              "cumprod": "cumprod_out_cpu"}
# div's floor and trunc rounding modes compute in the operands' dtype ("div_floor_cpu",
# "div_trunc_cpu"); its true division promotes to float and works.
_DIV_MODES = {"floor": "div_floor_cpu", "trunc": "div_trunc_cpu"}

KERNELS = {**{k: (v, "self") for k, v in _SELF.items()}, **{k: (v, "common") for k, v in _COMMON.items()},
           **{k: (v, "dtype") for k, v in _DTYPE_ARG.items()}}

# Set once a tensor of these dtypes exists (``transfer.zdtype`` marks it): dispatch runs
# ``check`` only then, so that other programs pay one lookup per op.
SEEN = barebones_seen

_op_names: dict[str, str] = {}


def _base_name(func) -> str:
    """``func``'s op name without namespace, overload or in-place underscore (cached)."""
    name = _op_names.get(func._name)
    if name is None:
        name = func._schema.name.split("::")[-1]
        if name.endswith("_") and not name.endswith("__"):
            name = name[:-1]
        _op_names[func._name] = name
    return name


def _unsigned(dtype) -> bool:
    return dtype in BAREBONES_UNSIGNED


def check(func, args, kwargs) -> None:
    """Raise CPU torch's kernel error when aten op ``func`` would run a CPU kernel that has no
    version of uint16/uint32/uint64 (see the module docstring)."""
    name = _base_name(func)
    if name == "div":
        mode = kwargs.get("rounding_mode") if kwargs else (args[2] if len(args) > 2 else None)
        if mode in _DIV_MODES:
            dtype = result_dtype(*args[:2])[0]
            if _unsigned(dtype):
                raise kernel_error(_DIV_MODES[mode], dtype)
        return
    entry = KERNELS.get(name)
    if entry is None or not args:
        return
    kernel, how = entry
    if name in ("max", "min") and len(args) > 1:  # (max.dim: "max_cpu"; max.other: maximum)
        other = isinstance(args[1], torch.Tensor)
        kernel, how = (f"{name}imum_cpu", "common") if other else (f"{name}_cpu", "self")
    if how == "dtype":
        dtype = kwargs.get("dtype") if kwargs else None
        if dtype is None:
            dtype = next((a for a in args[1:] if isinstance(a, torch.dtype)), None)
    elif how == "self":
        dtype = args[0].dtype if isinstance(args[0], torch.Tensor) else None
    else:
        operands = [a for a in args[:2] if isinstance(a, (torch.Tensor, int, float, bool))]
        if not any(isinstance(a, ZyxTensor) and _unsigned(a.dtype) for a in operands):
            return
        dtype = result_dtype(*operands)[0]  # (raises the promotion error first, as ATen)
    if dtype is not None and _unsigned(dtype):
        raise kernel_error(kernel, dtype)
