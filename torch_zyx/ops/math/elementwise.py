"""Elementwise lowerings: unary math, binary arithmetic, comparisons, where/clamp/lerp/addc*.

Each aten op is an entry in a table: a function of nodes (already promoted to the
computation dtype) plus its type-promotion kind. Composite math (sigmoid, gelu, erf-based
ops, python-style remainder, ...) is written with primitive nodes so it fuses.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.checks import check_nonzero
from ...record.tensor import wrap
from .. import fastpath
from ..argument_checks import check_alpha, check_float_kernel, check_neg, check_sub, kernel_error
from ..registry import (
    PROMOTE_BOOL,
    PROMOTE_DEFAULT,
    PROMOTE_INT_TO_FLOAT,
    aten,
    broadcast,
    cast,
    device_of,
    new,
    operand,
    promoted,
    promoted_one,
    promoted_pair,
    register,
    result_dtype,
)


def c(value, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def b(op: str, x: Node, y: Node) -> Node:
    xs, ys = x.shape, y.shape
    if xs != ys:
        # A 0-d operand (a scalar) broadcasts to the other's shape: the common case, done directly.
        if not ys:
            y = g.broadcast_to(y, xs)
        elif not xs:
            x = g.broadcast_to(x, ys)
        else:
            x, y = broadcast(x, y)
    return g.binary(op, x, y)


def u(op: str, x: Node) -> Node:
    return g.unary(op, x)


def neg(x): return u("neg", x) if x.dtype.kind != "b" else x
def add(x, y): return b("add", x, y)
def sub(x, y): return b("sub", x, y)
def mul(x, y): return b("mul", x, y)
def div(x, y): return b("div", x, y)
def maximum(x, y): return b("max", x, y)
def minimum(x, y): return b("min", x, y)


def where(cond: Node, x: Node, y: Node) -> Node:
    cond, x, y = broadcast(cond, x, y)
    return g.where(cond, x, y)


def sigmoid(x: Node) -> Node:
    return g.unary("recip", add(c(1.0, x), u("exp", neg(x))))


def tanh(x: Node) -> Node:
    return u("tanh", x)


def erf(x: Node) -> Node:
    return u("erf", x)


def relu(x: Node) -> Node:
    return maximum(x, c(0, x)) if x.dtype.kind != "b" else x


def check_gelu_approximate(approximate: str) -> None:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")


def gelu(x: Node, approximate: str = "none") -> Node:
    if approximate == "tanh":
        inner = mul(c(math.sqrt(2 / math.pi), x), add(x, mul(c(0.044715, x), mul(x, mul(x, x)))))
        return mul(mul(c(0.5, x), x), add(c(1.0, x), tanh(inner)))
    return mul(mul(c(0.5, x), x), add(c(1.0, x), erf(mul(x, c(1 / math.sqrt(2), x)))))


def _int_div_mod(x: Node, y: Node) -> tuple[Node, Node]:
    """C's truncating quotient and remainder of integer nodes, without the division's traps: a
    zero divisor divides by 1 (the lowering records ATen's ZeroDivisionError as a device check:
    ``_check_divisor``), and INT_MIN / -1, which traps on x86 (CPU torch dies of SIGFPE),
    wraps as -x does. A constant divisor other than 0 and -1 needs neither."""
    if y.op == "CONST" and y.arg != 0 and (y.arg != -1 or y.dtype.kind == "u"):
        return b("idiv", x, y), b("mod", x, y)
    x, y = broadcast(x, y)
    hazard = b("eq", y, c(0, y))
    minus_one = b("eq", y, c(-1, y)) if y.dtype.kind == "i" else None
    if minus_one is not None:
        hazard = b("or", hazard, minus_one)
    safe = where(hazard, c(1, y), y)
    q, r = b("idiv", x, safe), b("mod", x, safe)
    if minus_one is not None:
        q = where(minus_one, sub(c(0, x), x), q)
        r = where(minus_one, c(0, x), r)
    return q, r


def floor_div(x: Node, y: Node) -> Node:
    if x.dtype.is_float:
        return u("floor", div(x, y))
    q, r = _int_div_mod(x, y)
    # C division truncates; floor differs when the remainder is non-zero and the signs differ.
    adjust = b("and", b("ne", r, c(0, r)), b("ne", b("lt", r, c(0, r)), b("lt", y, c(0, y))))
    return where(adjust, sub(q, c(1, q)), q)


def remainder(x: Node, y: Node) -> Node:
    x, y = broadcast(x, y)
    r = g.binary("mod", x, y) if x.dtype.is_float else _int_div_mod(x, y)[1]
    adjust = b("and", b("ne", r, c(0, r)), b("ne", b("lt", r, c(0, r)), b("lt", y, c(0, y))))
    return where(adjust, add(r, y), r)


def fmod(x: Node, y: Node) -> Node:
    return b("mod", x, y) if x.dtype.is_float else _int_div_mod(x, y)[1]


def trunc_div(x: Node, y: Node) -> Node:
    if x.dtype.is_float:
        return u("trunc", div(x, y))
    return _int_div_mod(x, y)[0]


# The table functions above that divide integers: their lowerings check the divisor.
_INTEGER_DIVISIONS = frozenset({floor_div, remainder, fmod, trunc_div})


def _check_divisor(fn, divisor: Node, device) -> None:
    """ATen's ZeroDivisionError for an integer division by ``divisor``: at once for a constant
    0, else as a device check raised at the next realization (checks.check_nonzero)."""
    if fn not in _INTEGER_DIVISIONS or divisor.dtype.is_float or divisor.dtype.kind == "b":
        return
    if divisor.op == "CONST":
        if divisor.arg == 0:
            raise RuntimeError("ZeroDivisionError")
        return
    check_nonzero(divisor, device)


def pow_(x: Node, y: Node) -> Node:
    if x.dtype.is_float:
        return b("pow", x, y)
    # Integer power by repeated squaring over the exponent's bits (exponent < 2**63).
    x, y = broadcast(x, y)
    result = c(1, x)
    base = x
    # Only shifts below the bit width: wider ones are poison in LLVM (not zero).
    for bit in range(x.dtype.itemsize * 8):
        if y.op == "CONST" and (y.arg >> bit) == 0:
            break
        take = b("ne", b("and", b("shr", y, c(bit, y)), c(1, y)), c(0, y))
        # Select the factor, not the product: a chain of selects each feeding the next makes
        # LLVM's optimizer take minutes on 32/64-bit exponents.
        result = mul(result, where(take, base, c(1, base)))
        base = mul(base, base)
    if x.dtype.kind != "i":
        return result
    # Negative exponents (ATen): 1 -> 1, -1 -> +-1 by the exponent's parity, anything else -> 0.
    odd = b("ne", b("and", y, c(1, y)), c(0, y))
    minus_one = where(odd, c(-1, x), c(1, x))
    negative = where(b("eq", x, c(1, x)), c(1, x), where(b("eq", x, c(-1, x)), minus_one, c(0, x)))
    return where(b("lt", y, c(0, y)), negative, result)


def sign(x: Node) -> Node:
    if x.dtype.kind == "b":
        return x
    pos = g.cast(b("lt", c(0, x), x), x.dtype)
    negative = g.cast(b("lt", x, c(0, x)), x.dtype)
    return sub(pos, negative)  # NaN compares false both ways: sign(nan) == 0 as in PyTorch


def shift(op: str, x: Node, y: Node) -> Node:
    """x << y / x >> y with PyTorch's meaning for shifts past the width (0, or -1 for negative
    x >> y); LLVM leaves those undefined, so they are selected explicitly."""
    x, y = broadcast(x, y)
    bits = x.dtype.itemsize * 8
    big = b("or", b("lt", y, c(0, y)), b("le", c(bits, y), y))
    out = g.binary(op, x, where(big, c(0, y), y))
    if op == "shl" or x.dtype.kind == "u":
        fill = c(0, x)
    else:
        fill = where(b("lt", x, c(0, x)), c(-1, x), c(0, x))
    return where(big, fill, out)


def bitwise(op: str):
    def fn(x: Node, y: Node) -> Node:
        if x.dtype.is_float:
            # PyTorch has no float kernel either; NotImplementedError is what the CPU raises.
            raise NotImplementedError(f"bitwise op {op} is not implemented for floating point")
        return b(op, x, y)

    return fn


def isinf(x: Node) -> Node:
    if not x.dtype.is_float:
        return g.const(False, dtypes.bool_, x.shape)
    return b("eq", u("abs", x), c(float("inf"), x))


def logical(x: Node) -> Node:
    return g.cast(x, dtypes.bool_)


def _kernel_for(name: str, x: Node, floats: bool) -> Node:
    """``x``, where CPU torch's kernel of ``name`` has ``x``'s dtype (``floats``: floating-point
    dtypes only, else none of them); else its NotImplementedError."""
    if x.dtype.is_float != floats:
        raise kernel_error(f"{name}_cpu", x.dtype)
    return x


def _not_bool(kernel: str, x: Node) -> Node:
    """``x``, unless it is bool: CPU torch's ``kernel`` has no bool version (NotImplementedError)."""
    if x.dtype.kind == "b":
        raise kernel_error(kernel, x.dtype)
    return x


def _rounding(op: str):
    """floor, ceil, trunc, round: the identity on integers, none on bool (as CPU torch's)."""
    return lambda x: u(op, x) if x.dtype.is_float else _not_bool(f"{op}_vml_cpu", x)


UNARY = {
    # aten name: (function of node, promotion kind)
    "abs": (lambda x: u("abs", _not_bool("abs_cpu", x)), PROMOTE_DEFAULT),
    "neg": (neg, PROMOTE_DEFAULT),
    "exp": (lambda x: u("exp", x), PROMOTE_INT_TO_FLOAT),
    "exp2": (lambda x: u("exp2", x), PROMOTE_INT_TO_FLOAT),
    "log": (lambda x: u("log", x), PROMOTE_INT_TO_FLOAT),
    "log2": (lambda x: u("log2", x), PROMOTE_INT_TO_FLOAT),
    "log10": (lambda x: mul(u("log2", x), c(math.log10(2), x)), PROMOTE_INT_TO_FLOAT),
    "log1p": (lambda x: u("log1p", x), PROMOTE_INT_TO_FLOAT),
    "expm1": (lambda x: u("expm1", x), PROMOTE_INT_TO_FLOAT),
    "sqrt": (lambda x: u("sqrt", x), PROMOTE_INT_TO_FLOAT),
    "rsqrt": (lambda x: u("recip", u("sqrt", x)), PROMOTE_INT_TO_FLOAT),
    "sin": (lambda x: u("sin", x), PROMOTE_INT_TO_FLOAT),
    "cos": (lambda x: u("cos", x), PROMOTE_INT_TO_FLOAT),
    "tan": (lambda x: u("tan", x), PROMOTE_INT_TO_FLOAT),
    "asin": (lambda x: u("asin", x), PROMOTE_INT_TO_FLOAT),
    "acos": (lambda x: u("acos", x), PROMOTE_INT_TO_FLOAT),
    "atan": (lambda x: u("atan", x), PROMOTE_INT_TO_FLOAT),
    "sinh": (lambda x: u("sinh", x), PROMOTE_INT_TO_FLOAT),
    "cosh": (lambda x: u("cosh", x), PROMOTE_INT_TO_FLOAT),
    "asinh": (lambda x: u("asinh", x), PROMOTE_INT_TO_FLOAT),
    "acosh": (lambda x: u("acosh", x), PROMOTE_INT_TO_FLOAT),
    "atanh": (lambda x: u("atanh", x), PROMOTE_INT_TO_FLOAT),
    "tanh": (tanh, PROMOTE_INT_TO_FLOAT),
    "sigmoid": (sigmoid, PROMOTE_INT_TO_FLOAT),
    "erf": (erf, PROMOTE_INT_TO_FLOAT),
    "erfc": (lambda x: u("erfc", x), PROMOTE_INT_TO_FLOAT),
    "lgamma": (lambda x: u("lgamma", x), PROMOTE_INT_TO_FLOAT),
    "reciprocal": (lambda x: u("recip", x), PROMOTE_INT_TO_FLOAT),
    "relu": (relu, PROMOTE_DEFAULT),
    "silu": (lambda x: mul(x, sigmoid(x)), PROMOTE_INT_TO_FLOAT),
    "floor": (_rounding("floor"), PROMOTE_DEFAULT),
    "ceil": (_rounding("ceil"), PROMOTE_DEFAULT),
    "trunc": (_rounding("trunc"), PROMOTE_DEFAULT),
    "round": (_rounding("round"), PROMOTE_DEFAULT),
    "frac": (lambda x: sub(_kernel_for("frac", x, floats=True), u("trunc", x)), PROMOTE_DEFAULT),
    "sign": (sign, PROMOTE_DEFAULT),
    "sgn": (sign, PROMOTE_DEFAULT),
    "isnan": (lambda x: u("isnan", x) if x.dtype.is_float else g.const(False, dtypes.bool_, x.shape),
              PROMOTE_DEFAULT),
    "isinf": (isinf, PROMOTE_DEFAULT),
    "isfinite": (lambda x: u("not", b("or", u("isnan", x), isinf(x))) if x.dtype.is_float
                 else g.const(True, dtypes.bool_, x.shape), PROMOTE_DEFAULT),
    "logical_not": (lambda x: u("not", logical(x)), PROMOTE_DEFAULT),
    "bitwise_not": (lambda x: u("not", _kernel_for("bitwise_not", x, floats=False)), PROMOTE_DEFAULT),
    "square": (lambda x: mul(x, x), PROMOTE_DEFAULT),
    "positive": (lambda x: x, PROMOTE_DEFAULT),
}
# Result is bool whatever the input.
BOOL_RESULT = {"isnan", "isinf", "isfinite", "logical_not"}

BINARY = {
    "mul": (mul, PROMOTE_DEFAULT),
    "div": (div, PROMOTE_INT_TO_FLOAT),
    "true_divide": (div, PROMOTE_INT_TO_FLOAT),
    "floor_divide": (floor_div, PROMOTE_DEFAULT),
    "remainder": (remainder, PROMOTE_DEFAULT),
    "fmod": (fmod, PROMOTE_DEFAULT),
    "pow": (pow_, PROMOTE_DEFAULT),
    "maximum": (maximum, PROMOTE_DEFAULT),
    "minimum": (minimum, PROMOTE_DEFAULT),
    "fmax": (lambda x, y: where(u("isnan", x), y, where(u("isnan", y), x, maximum(x, y)))
             if x.dtype.is_float else maximum(x, y), PROMOTE_DEFAULT),
    "fmin": (lambda x, y: where(u("isnan", x), y, where(u("isnan", y), x, minimum(x, y)))
             if x.dtype.is_float else minimum(x, y), PROMOTE_DEFAULT),
    "atan2": (lambda x, y: b("atan2", x, y), PROMOTE_INT_TO_FLOAT),
    "copysign": (lambda x, y: b("copysign", x, y), PROMOTE_INT_TO_FLOAT),
    "eq": (lambda x, y: b("eq", x, y), PROMOTE_BOOL),
    "ne": (lambda x, y: b("ne", x, y), PROMOTE_BOOL),
    "lt": (lambda x, y: b("lt", x, y), PROMOTE_BOOL),
    "le": (lambda x, y: b("le", x, y), PROMOTE_BOOL),
    "gt": (lambda x, y: b("lt", y, x), PROMOTE_BOOL),
    "ge": (lambda x, y: b("le", y, x), PROMOTE_BOOL),
    "logical_and": (lambda x, y: b("and", logical(x), logical(y)), PROMOTE_BOOL),
    "logical_or": (lambda x, y: b("or", logical(x), logical(y)), PROMOTE_BOOL),
    "logical_xor": (lambda x, y: b("xor", logical(x), logical(y)), PROMOTE_BOOL),
    "bitwise_and": (bitwise("and"), PROMOTE_DEFAULT),
    "bitwise_or": (bitwise("or"), PROMOTE_DEFAULT),
    "bitwise_xor": (bitwise("xor"), PROMOTE_DEFAULT),
    "bitwise_left_shift": (lambda x, y: shift("shl", x, y), PROMOTE_DEFAULT),
    "bitwise_right_shift": (lambda x, y: shift("shr", x, y), PROMOTE_DEFAULT),
    "__lshift__": (lambda x, y: shift("shl", x, y), PROMOTE_DEFAULT),
    "__rshift__": (lambda x, y: shift("shr", x, y), PROMOTE_DEFAULT),
    "xlogy": (lambda x, y: where(u("isnan", y), y,
                                 where(b("eq", x, c(0, x)), c(0.0, x), mul(x, u("log", y)))),
              PROMOTE_INT_TO_FLOAT),
    "hypot": (lambda x, y: u("sqrt", add(mul(x, x), mul(y, y))), PROMOTE_DEFAULT),
}


def _compute(fn, kind, args, bool_result=False):
    nodes, result, device = promoted(args, kind)
    if len(nodes) == 2:
        _check_divisor(fn, nodes[1], device)
    out = fn(*nodes)
    return wrap(g.cast(out, dtypes.bool_ if bool_result or kind is PROMOTE_BOOL else result), device)


# The lowerings below are the recording hot path: the common signatures (zyx tensors and Python
# scalars) go through promoted_one/promoted_pair, everything else through _compute.


def _device(args):
    return device_of(*args)


def _check_relu(x) -> None:
    if _is_bool(x):
        raise RuntimeError("Boolean inputs not supported for relu")


def _check_bitwise_not(x) -> None:
    # (on the input's dtype: the table function sees half and bfloat16 computed in float)
    if x.dtype.is_floating_point:
        raise kernel_error("bitwise_not_cpu", x.dtype)


# Table ops with argument checks CPU torch makes before computing (x: the op's input). Only the
# general lowering makes them: the fast paths take inputs that pass them (floating dtypes, for
# silu's float kernel; no bools for neg and relu; bitwise_not's table function checks floats).
_UNARY_CHECKS = {"neg": check_neg, "relu": _check_relu, "bitwise_not": _check_bitwise_not,
                 "silu": lambda x: check_float_kernel("silu", x)}


def _unary_lowering(name, fn, kind):
    bool_result = name in BOOL_RESULT
    check = _UNARY_CHECKS.get(name)

    def lowering(x, *extra, **kwargs):
        if check is not None:
            check(x)
        one = promoted_one(x, kind)
        if one is None:
            return _compute(fn, kind, [x], bool_result=bool_result)
        node, result, device = one
        return wrap(g.cast(fn(node), dtypes.bool_ if bool_result else result), device)

    return lowering


def _binary_lowering(fn, kind, primitive=None):
    """The lowering of a BINARY table entry; ``primitive``: the graph op ``fn`` is, when it is
    one (then operands of one shape are combined directly, without ``fn``'s broadcasting)."""

    def lowering(x, y, *extra, **kwargs):
        if extra or kwargs:
            raise NotImplementedError
        pair = promoted_pair(x, y, kind)
        if pair is None:
            return _compute(fn, kind, [x, y])
        xn, yn, result, device = pair
        _check_divisor(fn, yn, device)
        if primitive is not None and xn.shape == yn.shape:
            out = g.binary(primitive, xn, yn)
        else:
            out = fn(xn, yn)
        # (ALWAYS_BOOL promotion's result dtype is bool)
        return wrap(out if out.dtype is result else g.cast(out, result), device)

    return lowering


for _name, (_fn, _kind) in UNARY.items():
    _packet = getattr(aten, _name, None)
    if _packet is not None:
        register(_packet)(_unary_lowering(_name, _fn, _kind))

_square = _unary_lowering("square", *UNARY["square"])


@register(aten.square.default)
def square(x):
    """ATen's square is ``pow(x, 2)``: a bool tensor squares to int64. (The op reaches the device
    itself only below autograd, in inference mode or inside decompositions.)"""
    if _is_bool(x):
        x = x.to(torch.int64)
    return _square(x)


# BINARY entries that are one graph op on operands of one shape.
_PRIMITIVE = {mul: "mul", div: "div", maximum: "max", minimum: "min"}

for _name, (_fn, _kind) in BINARY.items():
    _packet = getattr(aten, _name, None)
    if _packet is not None:
        register(_packet)(_binary_lowering(_fn, _kind, _PRIMITIVE.get(_fn)))


def _make_add(sign_: int, reverse: bool):
    op = "add" if sign_ > 0 else "sub"

    def lowering(x, y, alpha=1):
        if reverse:
            x, y = y, x
        if sign_ < 0:
            check_sub(x, y)
        pair = promoted_pair(x, y)
        if pair is None:
            (xn, yn), result, device = promoted((x, y))
        else:
            xn, yn, result, device = pair
        check_alpha(result, alpha)
        if alpha != 1:
            yn = mul(yn, g.const(alpha, xn.dtype))
        if xn.dtype is dtypes.bool_:  # computing in bool
            out = b("or", xn, yn)
        elif xn.shape == yn.shape:
            out = g.binary(op, xn, yn)
        else:
            out = b(op, xn, yn)
        return wrap(out if out.dtype is result else g.cast(out, result), device)

    return lowering


for _op, _sign, _rev in ((aten.add.Tensor, 1, False), (aten.add.Scalar, 1, False),
                         (aten.sub.Tensor, -1, False), (aten.sub.Scalar, -1, False),
                         (aten.rsub.Tensor, -1, True), (aten.rsub.Scalar, -1, True)):
    register(_op)(_make_add(_sign, _rev))


# The commonest signatures of the table ops above skip these lowerings (ops/fastpath.py); this
# must come after every functional overload they wrap is registered.
fastpath.install(UNARY, BINARY, BOOL_RESULT)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(x, y, rounding_mode=None):
    if rounding_mode is None:
        return _compute(div, PROMOTE_INT_TO_FLOAT, [x, y])
    if rounding_mode == "trunc":
        compute, result = result_dtype(x, y)
        if compute != result and compute.is_floating_point:
            # ATen rounds the quotient to the (half) result dtype before truncating.
            q = cast(div(operand(x, compute), operand(y, compute)), result)
            return new(u("trunc", q), _device([x, y]))
    fn = trunc_div if rounding_mode == "trunc" else floor_div
    return _compute(fn, PROMOTE_DEFAULT, [x, y])


@register(aten.round.decimals)
def round_decimals(x, decimals=0):
    compute, result = result_dtype(x)
    node = operand(x, compute)
    if not node.dtype.is_float or decimals == 0:
        return new(cast(u("round", node) if node.dtype.is_float else node, result), _device([x]))
    # ATen: round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for negative d.
    scale = c(10.0 ** abs(decimals), node)
    if decimals > 0:
        out = div(u("round", mul(node, scale)), scale)
    else:
        out = mul(u("round", div(node, scale)), scale)
    return new(cast(out, result), _device([x]))


@register(torch.ops.prims.convert_element_type.default)
def convert_element_type(x, dtype):
    return new(cast(operand(x, x.dtype), dtype), _device([x]))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where_(cond, x, y):
    _, result = result_dtype(x, y)
    out = where(cast(operand(cond, torch.bool), torch.bool), operand(x, result), operand(y, result))
    return new(out, _device([cond, x, y]))


def _is_bool(x) -> bool:
    return isinstance(x, bool) or (isinstance(x, torch.Tensor) and x.dtype == torch.bool)


@register(aten.gelu.default)
def gelu_(x, approximate="none"):
    check_gelu_approximate(approximate)
    check_float_kernel("gelu", x)
    compute, result = result_dtype(x, kind=PROMOTE_INT_TO_FLOAT)
    return new(cast(gelu(operand(x, compute), approximate), result), _device([x]))


@register(aten.gelu_backward.default)
def gelu_backward(grad, x, approximate="none"):
    check_gelu_approximate(approximate)
    compute, result = result_dtype(grad, x, kind=PROMOTE_INT_TO_FLOAT)
    gn, xn = operand(grad, compute), operand(x, compute)
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        inner = mul(c(k, xn), add(xn, mul(c(0.044715, xn), mul(xn, mul(xn, xn)))))
        t = tanh(inner)
        dinner = mul(c(k, xn), add(c(1.0, xn), mul(c(3 * 0.044715, xn), mul(xn, xn))))
        d = add(mul(c(0.5, xn), add(c(1.0, xn), t)),
                mul(mul(c(0.5, xn), xn), mul(sub(c(1.0, xn), mul(t, t)), dinner)))
    else:
        cdf = mul(c(0.5, xn), add(c(1.0, xn), erf(mul(xn, c(1 / math.sqrt(2), xn)))))
        pdf = mul(c(1 / math.sqrt(2 * math.pi), xn), u("exp", mul(c(-0.5, xn), mul(xn, xn))))
        d = add(cdf, mul(xn, pdf))
    return new(cast(mul(gn, d), result), _device([grad, x]))


@register(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    (gn, xn), result, device = promoted((grad, x))
    return wrap(g.cast(where(b("le", xn, c(threshold, xn)), c(0, gn), gn), result), device)


@register(aten.sigmoid_backward.default)
def sigmoid_backward(grad, y):
    compute, result = result_dtype(grad, y)
    gn, yn = operand(grad, compute), operand(y, compute)
    return new(cast(mul(gn, mul(yn, sub(c(1.0, yn), yn))), result), _device([grad, y]))


@register(aten.tanh_backward.default)
def tanh_backward(grad, y):
    compute, result = result_dtype(grad, y)
    gn, yn = operand(grad, compute), operand(y, compute)
    return new(cast(mul(gn, sub(c(1.0, yn), mul(yn, yn))), result), _device([grad, y]))


@register(aten.silu_backward.default)
def silu_backward(grad, x):
    compute, result = result_dtype(grad, x)
    gn, xn = operand(grad, compute), operand(x, compute)
    s = sigmoid(xn)
    return new(cast(mul(gn, mul(s, add(c(1.0, xn), mul(xn, sub(c(1.0, s), s))))), result), _device([grad, x]))
