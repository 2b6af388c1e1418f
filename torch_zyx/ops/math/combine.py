"""Elementwise ops of several operands beyond the binary table: clamp, lerp, addcmul/addcdiv and
heaviside, with the argument and dtype checks ATen makes for them (stage 1: lowerings, next to
math/elementwise.py whose node helpers they use)."""

from __future__ import annotations

import struct

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ..argument_checks import (
    HEAVISIDE_DTYPES,
    check_clamp_bounds,
    check_clamp_kernel,
    check_lerp_dtypes,
    check_lerp_kernel,
    kernel_error,
)
from ..registry import aten, broadcast, cast, new, operand, promoted, register, result_dtype
from .elementwise import _device, add, b, c, div, maximum, minimum, mul, sub, u, where


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    check_clamp_bounds(min, max)
    _, result = result_dtype(x, min, max)
    check_clamp_kernel(result, min, max)
    out = operand(x, result)
    if min is not None:
        lo = operand(min, result)
        out = where(u("isnan", lo), lo, maximum(out, lo)) if out.dtype.is_float and not _is_scalar(min) \
            else maximum(out, lo)
    if max is not None:
        out = minimum(out, operand(max, result))
    return new(out, _device([x, min, max]))


def _is_scalar(x) -> bool:
    return not isinstance(x, torch.Tensor)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return clamp(x, min=min)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return clamp(x, max=max)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start, end, weight):
    check_lerp_dtypes(start, end, weight)
    tensor_weight = isinstance(weight, torch.Tensor)
    # A number weight leaves the computation in the operands' dtype (ATen's lerp.Scalar is a
    # binary op of start and end); a 0-d tensor weight promotes with them (lerp.Tensor).
    compute, result = result_dtype(start, end, weight) if tensor_weight else result_dtype(start, end)
    check_lerp_kernel(compute, tensor_weight)
    s, e, w = operand(start, compute), operand(end, compute), operand(weight, compute)
    # PyTorch's formula: weight < 0.5 ? start + w*(end-start) : end - (end-start)*(1-w)
    if not isinstance(weight, torch.Tensor):
        return new(cast(lerp_scalar_weight(s, e, weight, compute), result), _device([start, end]))
    diff = sub(e, s)
    low = add(s, mul(w, diff))
    high = sub(e, mul(diff, sub(c(1.0, w), w)))
    return new(cast(where(b("lt", u("abs", w), c(0.5, w)), low, high), result), _device([start, end, weight]))


def lerp_scalar_weight(s: Node, e: Node, weight, compute: torch.dtype) -> Node:
    """``lerp`` of the nodes ``s`` and ``e`` (of ``compute``) with a Python number ``weight``:
    it picks the same side of PyTorch's formula everywhere, so the side is decided here (an
    optimizer's exp_avg.lerp_(grad, 1 - beta1) records half the nodes)."""
    w = operand(weight, compute)
    diff = sub(e, s)
    if _is_small_weight(weight, compute):
        return add(s, mul(w, diff))
    return sub(e, mul(diff, sub(c(1.0, w), w)))


def _is_small_weight(weight, compute: torch.dtype) -> bool:
    """``abs(weight) < 0.5`` on the weight as the kernel holds it (rounded to ``compute``)."""
    if compute == torch.float32:
        try:
            weight = struct.unpack("f", struct.pack("f", weight))[0]
        except OverflowError:  # beyond float32: an infinity in the kernel
            return False
    return abs(weight) < 0.5


@register(aten.addcmul.default)
def addcmul(x, t1, t2, value=1):
    (xn, a, bn), result, device = promoted((x, t1, t2))
    if xn.dtype is dtypes.bool_:
        raise kernel_error("addcmul_cpu_out", xn.dtype)
    return wrap(g.cast(add(xn, mul(mul(a, bn), g.const(value, xn.dtype))), result), device)


_ADDCDIV_INTEGERS = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a true "
    "division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * "
    "torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
    "for float inputs. The future addcdiv behavior is just the latter implementation: (input + value * tensor1 / "
    "tensor2), for all dtypes.")


@register(aten.addcdiv.default)
def addcdiv(x, t1, t2, value=1):
    if not t1.dtype.is_floating_point and not t2.dtype.is_floating_point:
        raise RuntimeError(_ADDCDIV_INTEGERS)
    (xn, a, bn), result, device = promoted((x, t1, t2))
    return wrap(g.cast(add(xn, mul(div(a, bn), g.const(value, xn.dtype))), result), device)


def addc_by_tensor(x, t1, t2, value, divide: bool):
    """``addcdiv``/``addcmul`` (``divide`` picks) scaled by a 0-d zyx tensor ``value`` (a foreach
    op's per-tensor scalar): one recorded op instead of a div or mul, a mul and an add. None
    where the computation is not floating point (the caller then records the three ops)."""
    (xn, a, bn), result, device = promoted((x, t1, t2))
    if not xn.dtype.is_float:
        return None
    scale = g.cast(read(value), xn.dtype)
    return wrap(g.cast(add(xn, mul(div(a, bn) if divide else mul(a, bn), scale)), result), device)


@register(aten.heaviside.default)
def heaviside(x, values):
    """0 below zero (and for NaN), 1 above, ``values`` at zero, as ATen's kernel; one dtype only."""
    if x.dtype != values.dtype:
        raise RuntimeError(HEAVISIDE_DTYPES)
    xn, vn = broadcast(operand(x, x.dtype), operand(values, x.dtype))
    step = cast(b("lt", c(0, xn), xn), x.dtype)
    return new(where(b("eq", xn, c(0, xn)), vn, step), _device([x, values]))
