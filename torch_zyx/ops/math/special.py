"""Special functions: Bessel i0/i1 (and scaled), digamma, polygamma, Hurwitz zeta, erfinv,
plus the small float utilities signbit, angle, frexp, nextafter and integer gcd/lcm. The
Cephes-style functions (ops/math/cephes.py), the incomplete gamma functions (ops/math/igamma.py)
and the orthogonal polynomials (ops/math/polynomials.py) register from their own modules.

Everything is written with primitive nodes (no libm beyond exp/log/sin/...), following ATen's
algorithms (Cephes) where results must match closely: fixed-length unrolled loops with ``where``
in place of data-dependent exits, so each function stays one fused elementwise expression.
Half-precision inputs are computed in float32, as ATen's opmath does.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.pending import unsupported
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..registry import PROMOTE_INT_TO_FLOAT, aten, broadcast, dtype_name, operand, register, result_dtype

prims = torch.ops.prims


def c(value, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def add(x, y): return g.binary("add", x, y)
def sub(x, y): return g.binary("sub", x, y)
def mul(x, y): return g.binary("mul", x, y)
def div(x, y): return g.binary("div", x, y)
def lt(x, y): return g.binary("lt", x, y)
def eq(x, y): return g.binary("eq", x, y)


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _float_unary(fn, *ops):
    """Register ``fn`` (node -> node in a float dtype) for ``ops`` with int-to-float promotion."""

    def lowering(x):
        _, result = result_dtype(x, kind=PROMOTE_INT_TO_FLOAT)
        out = fn(operand(x, _opmath(result)))
        return wrap(g.cast(out, zdtype(result)), x._storage.device)

    register(*ops)(lowering)
    return fn


# ---------------------------------------------------------------------------- Bessel I0 / I1

SERIES_TERMS = 40  # power series up to |x| = SERIES_LIMIT: terms fall below 1e-17 of the sum
SERIES_LIMIT = 15.0
ASYMPTOTIC_TERMS = 12


def _bessel_i(x: Node, order: int, scaled: bool) -> Node:
    """I_order(x) (order 0 or 1), times exp(-|x|) when ``scaled``."""
    ax = g.unary("abs", x)
    small = g.binary("le", ax, c(SERIES_LIMIT, x))
    xs = g.where(small, ax, c(1.0, x))  # keep each branch's arithmetic finite on the other's inputs
    half_sq = mul(mul(xs, xs), c(0.25, x))
    term = c(1.0, x) if order == 0 else mul(xs, c(0.5, x))
    series = term
    for k in range(1, SERIES_TERMS):
        term = mul(term, div(half_sq, c(float(k * (k + order)), x)))
        series = add(series, term)
    if scaled:
        series = mul(series, g.unary("exp", g.unary("neg", xs)))
    # Large |x|: I_v(x) ~ e^x / sqrt(2 pi x) * sum_k (-1)^k prod_{j<=k} (mu - (2j-1)^2) / (k! (8x)^k).
    xl = g.where(small, c(SERIES_LIMIT + 1.0, x), ax)
    inv8x = g.unary("recip", mul(xl, c(8.0, x)))
    mu = 4 * order * order
    coef, total, power = 1.0, c(1.0, x), c(1.0, x)
    for k in range(1, ASYMPTOTIC_TERMS):
        coef *= -(mu - (2 * k - 1) ** 2) / k
        power = mul(power, inv8x)
        total = add(total, mul(c(coef, x), power))
    large = div(total, g.unary("sqrt", mul(xl, c(2 * math.pi, x))))
    if not scaled:
        large = mul(large, g.unary("exp", xl))
    out = g.where(small, series, large)
    if order == 1:  # odd function
        out = g.binary("copysign", out, x)
    return g.where(g.unary("isnan", x), x, out)


_float_unary(lambda x: _bessel_i(x, 0, False), aten.i0, prims.bessel_i0, aten.special_modified_bessel_i0)
_float_unary(lambda x: _bessel_i(x, 0, True), aten.special_i0e, prims.bessel_i0e)
_float_unary(lambda x: _bessel_i(x, 1, False), aten.special_i1, prims.bessel_i1,
             aten.special_modified_bessel_i1)
_float_unary(lambda x: _bessel_i(x, 1, True), aten.special_i1e, prims.bessel_i1e)


# ---------------------------------------------------------------------------- digamma, zeta

PSI_10 = 2.25175258906672110764
# B_2k / 2k, highest power first (ATen's calc_digamma table).
DIGAMMA_A = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
             -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
             8.33333333333333333333e-2)


def _digamma_positive(x: Node) -> Node:
    """psi(x) for x > 0: shift up to x >= 10 (psi(x) = psi(x + 1) - 1/x), then the asymptotic series."""
    result = c(0.0, x)
    for _ in range(10):
        low = lt(x, c(10.0, x))
        result = g.where(low, sub(result, g.unary("recip", x)), result)
        x = g.where(low, add(x, c(1.0, x)), x)
    z = g.unary("recip", mul(x, x))
    poly = c(DIGAMMA_A[0], x)
    for a in DIGAMMA_A[1:]:
        poly = add(mul(poly, z), c(a, x))
    y = g.where(lt(x, c(1.0e17, x)), mul(z, poly), c(0.0, x))
    asym = sub(sub(add(result, g.unary("log", x)), div(c(0.5, x), x)), y)
    return g.where(eq(x, c(10.0, x)), add(result, c(PSI_10, x)), asym)


def digamma(x: Node) -> Node:
    negative = lt(x, c(0.0, x))
    # Reflection for x < 0: psi(x) = psi(1 - x) - pi / tan(pi * frac(x)).
    pos = _digamma_positive(g.where(negative, sub(c(1.0, x), x), g.where(eq(x, c(0.0, x)), c(1.0, x), x)))
    frac = sub(x, g.unary("trunc", x))
    reflected = sub(pos, div(c(math.pi, x), g.unary("tan", mul(c(math.pi, x), frac))))
    out = g.where(negative, reflected, pos)
    out = g.where(g.binary("and", negative, eq(frac, c(0.0, x))), c(float("nan"), x), out)
    zero = g.binary("copysign", c(float("inf"), x), g.unary("neg", x))
    return g.where(eq(x, c(0.0, x)), zero, out)


_float_unary(digamma, aten.digamma, prims.digamma, aten.special_digamma, aten.special_psi)


def _zeta_coefficients() -> tuple[float, ...]:
    # Cephes' A[i] = (2i+2)! / B_{2i+2}, from exact Bernoulli numbers.
    bern = [Fraction(1)]
    for m in range(1, 26):
        bern.append(-sum(Fraction(math.comb(m + 1, k)) * bern[k] for k in range(m)) / (m + 1))
    return tuple(float(Fraction(math.factorial(2 * i + 2)) / bern[2 * i + 2]) for i in range(12))


ZETA_A = _zeta_coefficients()
ZETA_EXTRA_STEPS = 20  # extra terms while a <= 9: covers q >= -20 (ATen loops until then)


def zeta(x: Node, q: Node) -> Node:
    """Hurwitz zeta(x, q) = sum_k (q + k)^-x, Euler-Maclaurin as in ATen's zeta."""
    def pw(a):
        return g.binary("pow", a, g.unary("neg", x))

    # ATen adds (q + i)^-x for i = 1..9, then keeps going while q + i <= 9 (q <= 0 only). The
    # number of extra terms has a closed form, so each term is masked by its index instead of a
    # chain of ``where``s carrying a (such chains of dependent selects make LLVM's optimizer
    # take minutes).
    s = pw(q)
    extra = g.where(g.binary("le", q, c(0.0, x)), add(g.unary("floor", g.unary("neg", q)), c(1.0, x)),
                    c(0.0, x))
    for i in range(1, 10 + ZETA_EXTRA_STEPS):
        term = pw(add(q, c(float(i), x)))
        if i > 9:
            term = g.where(lt(c(float(i - 10), x), extra), term, c(0.0, x))
        s = add(s, term)
    a = add(q, add(c(9.0, x), g.binary("min", extra, c(float(ZETA_EXTRA_STEPS), x))))
    b = pw(a)
    w = a
    s = add(s, div(mul(b, w), sub(x, c(1.0, x))))
    s = sub(s, mul(c(0.5, x), b))
    fac = c(1.0, x)
    k = 0.0
    for coef in ZETA_A:
        fac = mul(fac, add(x, c(k, x)))
        b = div(b, w)
        s = add(s, div(mul(fac, b), c(coef, x)))
        k += 1.0
        fac = mul(fac, add(x, c(k, x)))
        b = div(b, w)
        k += 1.0
    nonpos = g.binary("le", q, c(0.0, x))
    s = g.where(g.binary("and", nonpos, g.binary("ne", x, g.unary("floor", x))), c(float("nan"), x), s)
    s = g.where(g.binary("and", nonpos, eq(q, g.unary("floor", q))), c(float("inf"), x), s)
    s = g.where(lt(x, c(1.0, x)), c(float("nan"), x), s)
    return g.where(eq(x, c(1.0, x)), c(float("inf"), x), s)


def trigamma(x: Node) -> Node:
    """ATen's calc_trigamma: reflection below 1/2, six recurrence steps, asymptotic series."""
    reflect = lt(x, c(0.5, x))
    sin_pi_x = g.unary("sin", mul(c(math.pi, x), x))
    pole = div(c(math.pi * math.pi, x), mul(sin_pi_x, sin_pi_x))
    result = g.where(reflect, g.unary("neg", pole), c(0.0, x))
    x = g.where(reflect, sub(c(1.0, x), x), x)
    for _ in range(6):
        result = add(result, g.unary("recip", mul(x, x)))
        x = add(x, c(1.0, x))
    ixx = g.unary("recip", mul(x, x))
    inner = sub(c(1 / 30, x), mul(ixx, c(1 / 42, x)))
    inner = sub(c(1 / 6, x), mul(ixx, inner))
    series = add(add(c(1.0, x), div(c(1.0, x), mul(c(2.0, x), x))), mul(ixx, inner))
    result = add(result, div(series, x))
    return g.where(reflect, g.unary("neg", result), result)


def polygamma(n: int, x: Node) -> Node:
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    sign = 1.0 if n % 2 else -1.0
    return mul(c(sign * math.factorial(n), x), zeta(c(float(n + 1), x), x))


@register(aten.polygamma.default, aten.special_polygamma.default)
def polygamma_(n, x):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    _, result = result_dtype(x, kind=PROMOTE_INT_TO_FLOAT)
    out = polygamma(n, operand(x, _opmath(result)))
    return wrap(g.cast(out, zdtype(result)), x._storage.device)


@register(aten.special_zeta.default, aten.special_zeta.other_scalar, aten.special_zeta.self_scalar,
          prims.zeta.default)
def zeta_(x, q):
    compute, result = result_dtype(x, q, kind=PROMOTE_INT_TO_FLOAT)
    xn, qn = operand(x, _opmath(compute)), operand(q, _opmath(compute))
    xn, qn = broadcast(xn, qn)
    device = x._storage.device if isinstance(x, torch.Tensor) else q._storage.device
    return wrap(g.cast(zeta(xn, qn), zdtype(result)), device)


# ---------------------------------------------------------------------------- erfinv

ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
ERFINV_D = (3.543889200, 1.637067800)


def _horner(z: Node, coefs) -> Node:
    out = c(coefs[-1], z)
    for a in reversed(coefs[:-1]):
        out = add(mul(out, z), c(a, z))
    return out


def erfinv(y: Node) -> Node:
    """ATen's calc_erfinv: a rational first guess, then Newton steps on erf(x) = y."""
    ay = g.unary("abs", y)
    central = g.binary("le", ay, c(0.7, y))
    z = mul(y, y)
    x_c = div(mul(y, _horner(z, ERFINV_A)), add(mul(_horner(z, ERFINV_B), z), c(1.0, y)))
    tail_in = g.where(central, c(0.5, y), g.binary("min", ay, c(1.0, y)))
    zt = g.unary("sqrt", g.unary("neg", g.unary("log", div(sub(c(1.0, y), tail_in), c(2.0, y)))))
    x_t = div(g.binary("copysign", _horner(zt, ERFINV_C), y), add(mul(_horner(zt, ERFINV_D), zt), c(1.0, y)))
    x = g.where(central, x_c, x_t)
    k = 2.0 / math.sqrt(math.pi)
    for _ in range(2):
        x = sub(x, div(sub(g.unary("erf", x), y), mul(c(k, y), g.unary("exp", g.unary("neg", mul(x, x))))))
    x = g.where(eq(ay, c(1.0, y)), g.binary("copysign", c(float("inf"), y), y), x)
    return g.where(lt(c(1.0, y), ay), c(float("nan"), y), x)


_float_unary(erfinv, aten.erfinv, prims.erf_inv, aten.special_erfinv)


# ---------------------------------------------------------------------------- float utilities


@register(aten.signbit.default, prims.signbit.default)
def signbit(x):
    node = read(x)
    if node.dtype.is_float:
        # copysign reads the sign bit, so -0.0 and -nan count as negative as in ATen.
        out = lt(g.binary("copysign", c(1.0, node), node), c(0.0, node))
    elif node.dtype.kind in "ub":
        out = g.const(False, dtypes.bool_, node.shape)
    else:
        out = lt(node, c(0, node))
    return wrap(out, x._storage.device)


@register(aten.angle.default)
def angle(x):
    _, result = result_dtype(x, kind=PROMOTE_INT_TO_FLOAT)
    node = operand(x, _opmath(result))
    out = g.where(lt(node, c(0.0, node)), c(math.pi, node), c(0.0, node))
    out = g.where(g.unary("isnan", node), node, out)
    return wrap(g.cast(out, zdtype(result)), x._storage.device)


@register(aten.frexp.Tensor, prims.frexp.default)
def frexp(x):
    if not x.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    node = read(x)
    wide = g.cast(node, dtypes.float64)
    ax = g.unary("abs", wide)
    finite_nonzero = g.binary("and", lt(c(0.0, wide), ax), lt(ax, c(float("inf"), wide)))
    safe = g.where(finite_nonzero, ax, c(1.0, wide))
    e = add(g.unary("floor", g.unary("log2", safe)), c(1.0, wide))
    # log2 may round across a power of two: fix the exponent so |mantissa| is in [0.5, 1).
    for _ in range(2):
        m = _scale_pow2(safe, g.unary("neg", e))
        e = g.where(lt(m, c(0.5, wide)), sub(e, c(1.0, wide)), g.where(g.binary("le", c(1.0, wide), m),
                                                                      add(e, c(1.0, wide)), e))
    mant = _scale_pow2(wide, g.unary("neg", e))
    mant = g.where(finite_nonzero, mant, wide)
    exp = g.where(finite_nonzero, e, c(0.0, wide))
    dev = x._storage.device
    return wrap(g.cast(mant, node.dtype), dev), wrap(g.cast(exp, dtypes.int32), dev)


def _scale_pow2(x: Node, e: Node) -> Node:
    # x * 2^e in two halves: 2^e alone overflows for float64 denormals (e up to 1074).
    half = g.unary("trunc", mul(e, c(0.5, e)))
    return mul(mul(x, g.unary("exp2", half)), g.unary("exp2", sub(e, half)))


# (significand bits p, minimum normal exponent) per float dtype, for nextafter.
FLOAT_FORMATS = {torch.float64: (53, -1022), torch.float32: (24, -126), torch.float16: (11, -14),
                 torch.bfloat16: (8, -126)}


def nextafter(x: Node, y: Node, dtype: torch.dtype) -> Node:
    """The ``dtype`` value after x toward y, by arithmetic (the graph has no bit casts): x plus or
    minus the spacing of ``dtype`` at |x|, 2^(e - p + 1) for |x| in [2^e, 2^(e+1)) (half that
    when stepping down from an exact power of two), never below the subnormal spacing.
    ``x``, ``y`` are exact in their (possibly wider) computation dtype."""
    p, emin = FLOAT_FORMATS[dtype]
    finfo = torch.finfo(dtype)
    ax = g.unary("abs", x)
    finite_nonzero = g.binary("and", lt(c(0.0, x), ax), lt(ax, c(float("inf"), x)))
    safe = g.where(finite_nonzero, ax, c(1.0, x))
    e = g.unary("floor", g.unary("log2", safe))
    # log2 may round across a power of two: make 2^e <= |x| < 2^(e+1) exact.
    e = g.where(lt(safe, _scale_pow2(c(1.0, x), e)), sub(e, c(1.0, x)), e)
    e = g.where(g.binary("le", _scale_pow2(c(1.0, x), add(e, c(1.0, x))), safe), add(e, c(1.0, x)), e)
    e = g.binary("max", e, c(float(emin), x))
    spacing = _scale_pow2(c(1.0, x), sub(e, c(float(p - 1), x)))
    away = g.binary("eq", lt(x, y), lt(c(0.0, x), x))  # the step grows |x|
    power_of_two = eq(safe, _scale_pow2(c(1.0, x), e))
    halve = g.binary("and", g.binary("and", g.unary("not", away), power_of_two), lt(c(float(emin), x), e))
    spacing = g.where(halve, mul(spacing, c(0.5, x)), spacing)
    magnitude = g.where(away, add(ax, spacing), sub(ax, spacing))
    out = g.binary("copysign", magnitude, x)
    out = g.where(eq(ax, c(float("inf"), x)), g.binary("copysign", c(finfo.max, x), x), out)
    out = g.where(eq(x, c(0.0, x)), g.binary("copysign", c(finfo.smallest_normal * finfo.eps, x), y), out)
    out = g.where(eq(x, y), y, out)
    return g.where(g.binary("or", g.unary("isnan", x), g.unary("isnan", y)), add(x, y), out)


@register(aten.nextafter.default, prims.nextafter.default)
def nextafter_(x, y):
    compute, result = result_dtype(x, y)
    if not result.is_floating_point:
        raise RuntimeError(f"\"nextafter_cpu\" not implemented for '{str(result).replace('torch.', '')}'")
    xn, yn = broadcast(operand(x, _opmath(compute)), operand(y, _opmath(compute)))
    device = x._storage.device if isinstance(x, torch.Tensor) else y._storage.device
    return wrap(g.cast(nextafter(xn, yn, result), zdtype(result)), device)


GCD_STEPS = {dtypes.int8: 14, dtypes.uint8: 14, dtypes.int16: 26, dtypes.int32: 48, dtypes.int64: 94}


def gcd(a: Node, b: Node) -> Node:
    """Euclid's algorithm unrolled to its worst case (consecutive Fibonacci numbers)."""
    a, b = g.unary("abs", a), g.unary("abs", b)
    zero, one = c(0, a), c(1, a)
    for _ in range(GCD_STEPS.get(a.dtype, 94)):
        done = eq(b, zero)
        r = g.binary("mod", a, g.where(done, one, b))  # never divide by zero, even in dead lanes
        a, b = g.where(done, a, b), g.where(done, b, r)
    return a


def _int_binary(name: str, fn, *ops):
    def lowering(x, y):
        compute, result = result_dtype(x, y)
        if compute.is_floating_point or compute == torch.bool:
            # The CPU kernel table has no float entry: NotImplementedError is what ATen raises.
            raise unsupported(f"\"{name}_cpu\" not implemented for '{dtype_name(compute)}'")
        xn, yn = broadcast(operand(x, compute), operand(y, compute))
        device = x._storage.device if isinstance(x, torch.Tensor) else y._storage.device
        return wrap(g.cast(fn(xn, yn), zdtype(result)), device)

    register(*ops)(lowering)


def lcm(a: Node, b: Node) -> Node:
    d = gcd(a, b)
    zero = eq(d, c(0, d))
    quotient = g.binary("idiv", b, g.where(zero, c(1, d), d))
    if a.dtype.itemsize < 4:
        # ATen's abs(a / g * b) on 8- and 16-bit integers is C++ int arithmetic (integer
        # promotion), truncated to the dtype after the abs: int16 lcm(32767, 2) is -2.
        wide = dtypes.int32
        return g.cast(g.unary("abs", mul(g.cast(a, wide), g.cast(quotient, wide))), a.dtype)
    return g.unary("abs", mul(a, quotient))


_int_binary("gcd", gcd, aten.gcd.default, prims.gcd.default)
_int_binary("lcm", lcm, aten.lcm.default)
