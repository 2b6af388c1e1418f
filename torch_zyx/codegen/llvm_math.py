"""Vectorizable math for the LLVM renderer: IR generators for the transcendental float ops.

Stage 5 of the flow for the CPU device, called from ``codegen/llvm.py``'s ``INLINE_MATH`` and
``INLINE_BINARY`` tables: the renderer hands a generator a ``MathBuilder`` for the register type
("float" or "double") and the operands; the generator emits plain arithmetic (polynomials, bit
manipulation, selects) and returns the result's name. No branches and no calls per element, so
the loop vectorizer widens the code like any other ALU op (a libm call per element does not
vectorize: tanh on 4M floats took 29.5 ms against CPU torch's 3.5). The generators are written
once for any floating type, scalar or vector (``MathType``); the renderer's code is scalar IR that
the loop vectorizer widens.

Accuracy (tests/test_math_accuracy.py measures it against float64 and mpmath over every binade
and the special values): float32 results within 2 ulp (most within 1), float64 within about
1 ulp; NaN, ±inf, signed zeros and denormals as CPU torch (C99 Annex F) gives them. The
polynomials are minimax fits (Remez exchange on the stated interval, relative error unless said
otherwise, coefficients rounded to the type); each table gives its interval and the fit's error,
the rest of the error is rounding in the evaluation. float32 functions off the hot path
(inverse trigonometric and hyperbolic ones, tan, erfc, pow, atan2) finish in double where float
alone would lose ulps to cancellation. float64 has exp, exp2, log, log2, sin and cos here; its
other functions stay libm calls (llvm.py).

Large arguments: sin, cos and tan reduce by pi/2 with a Cody-Waite split, exact up to
``TRIG_REDUCTION_LIMIT``. Larger arguments (and inf, NaN) go to libm (Payne-Hanek) through a
helper function that the loop vectorizer maps to vector helpers (``vector-function-abi-variant``):
a vector helper tests its lanes and calls libm only when one of them is out of range, so a loop
whose arguments are all in range pays a call and a test per vector.
"""

from __future__ import annotations

import math

from .math_ir import (
    MathBuilder,
    MathContext,
    MathType,
    hex_literal,
    in_double,
    is_float32,
    near_zero,
    poly_tail,
)

# ------------------------------------------------------------------------------- exp family

# exp(x) = 2**n * exp(r), n = rint(x / ln 2), r = x - n ln 2 by Cody-Waite: ln 2 in two parts
# whose first has few enough bits that n * part and x - n * part are exact.
LN2_SPLIT = {"float": (0.693359375, -2.12194440e-4),
             "double": (6.93147180369123816490e-01, 1.90821492927058770002e-10)}
# exp(r) = 1 + r + r**2 * P(r) on [-ln2/2, ln2/2] (evaluated as 1 + r (1 + r P(r))). Relative
# error of the fit: 3.8e-9 (float, degree 4, 0.06 ulp), 1.1e-17 (double, degree 9, 0.1 ulp).
EXP_POLY = {
    "float": (0.4999999403953552, 0.1666652113199234, 0.04166838899254799, 0.008368710055947304,
              0.001381461275741458),
    "double": (0.5000000000000011, 0.16666666666666413, 0.041666666666530267, 0.008333333333494336,
               0.001388888894359778, 0.00019841269506770898, 2.4801493136097612e-05,
               2.7557586274666723e-06, 2.763023395101817e-07, 2.5000069565431012e-08),
}
# Clamps: below the low limit exp rounds to 0, above the high one to inf (the ldexp makes both).
EXP_LIMITS = {"float": (-104.0, 89.0), "double": (-746.0, 710.0)}


def _exp_poly(b: MathBuilder, r: str) -> str:
    """exp(r) for |r| <= ln2/2: 1 + r (1 + r P(r)) by Horner's rule."""
    return b.mad(r, b.poly(r, (1.0, *EXP_POLY[b.m.elem])), b.c(1.0))


def _exp_argument(b: MathBuilder, x: str) -> tuple[str, str]:
    """(r, n): x = n ln 2 + r, |r| <= ln2/2 (n an integral float)."""
    n = b.rint(b.mul(x, b.c(1 / math.log(2))))
    high, low = LN2_SPLIT[b.m.elem]
    minus_n = b.neg(n)
    r = b.mad(minus_n, b.c(high), x)  # exact, fused or not
    return b.mad(minus_n, b.c(low), r), n


def exp_reduce(b: MathBuilder, x: str) -> tuple[str, str]:
    """(y, n) with exp(x) = y * 2**n, y in [0.7, 1.42], n an integer; x clamped to
    ``EXP_LIMITS``."""
    r, n = _exp_argument(b, x)
    return _exp_poly(b, r), b.to_int(n)


def exp(b: MathBuilder, x: str) -> str:
    """NaN goes through: a NaN r makes y NaN, and ldexp(NaN, any n) is NaN."""
    low, high = EXP_LIMITS[b.m.elem]
    y, n = exp_reduce(b, b.clamp_keep_nan(x, low, high))
    return b.ldexp(y, n)


def _exp_moderate(b: MathBuilder, x: str) -> str:
    """exp(x) for x known to be a number in [-87, 88]: one scaling."""
    y, n = exp_reduce(b, x)
    return b.scale(y, n)


# 2**r = 1 + r * P(r) on [-1/2, 1/2] (float), relative error of the fit 1.6e-8 (0.27 ulp).
EXP2_POLY = (0.6931471824645996, 0.24022647738456726, 0.055503323674201965, 0.00961843691766262,
             0.0013398873852565885, 0.00015353361959569156)
EXP2_LIMITS = {"float": (-151.0, 129.0), "double": (-1076.0, 1025.0)}


def exp2(b: MathBuilder, x: str) -> str:
    """2**x = 2**n * 2**r, n = rint(x), r = x - n exact."""
    low, high = EXP2_LIMITS[b.m.elem]
    xc = b.clamp_keep_nan(x, low, high)  # NaN goes through, as in exp
    n = b.rint(xc)
    r = b.sub(xc, n)
    if is_float32(b.m):
        y = b.mad(r, b.poly(r, EXP2_POLY), b.c(1.0))
    else:  # exp(r ln 2) with r ln 2 = t + t_low exactly: exp(t) (1 + t_low)
        t = b.mul(r, b.c(math.log(2)))
        t_low = b.mad(r, b.c(2.319046813846299558e-17), b.fma(r, b.c(math.log(2)), b.neg(t)))
        y = _exp_poly(b, t)
        y = b.mad(y, t_low, y)
    return b.ldexp(y, b.to_int(n))


# expm1(r) = r + r**2 / 2 + r**3 * Q(r) on [-ln2/2, ln2/2] (float, degree 4, fit 8.4e-9).
EXPM1_POLY = (0.1666666567325592, 0.04166668280959129, 0.008334008976817131, 0.0013907644897699356,
              0.00019083086226601154)
EXPM1_LIMITS = {"float": (-30.0, 89.0)}


def expm1(b: MathBuilder, x: str) -> str:
    """2**n (expm1(r) + 1) - 1 = 2**n expm1(r) + (2**n - 1): 2**n expm1(r) is exact and 2**n - 1
    is exact for |n| <= 24, so one rounding (C99: x for tiny x, -1 below -17, inf above 88.7)."""
    low, high = EXPM1_LIMITS[b.m.elem]
    r, n = _exp_argument(b, b.clamp(x, low, high))
    p = b.mad(b.mul(r, r), b.poly(r, (0.5, *EXPM1_POLY)), r)
    ni = b.to_int(n)
    scale = b.pow2(ni)
    near = b.mad(scale, p, b.sub(scale, b.c(1.0)))
    far = b.ldexp(b.add(p, b.c(1.0)), ni)  # 2**n overflows for n = 128; the -1 is lost anyway
    out = b.select(b.cmp("ogt", n, b.c(100.0)), far, near)
    return b.select(b.either(near_zero(b, x, 2.0 ** -25), b.isnan(x)), x, out)


# ------------------------------------------------------------------------------- log family

# log(1 + f) = f - f**2 / 2 + f**3 * P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1] (float, degree 8;
# relative error of the fit 3.2e-9, 0.05 ulp; Cephes logf's form with a fresh fit).
LOG_POLY = (0.3333331346511841, -0.25000008940696716, 0.2000211924314499, -0.1666799634695053,
            0.14219552278518677, -0.1240558847784996, 0.11888162046670914, -0.11675652116537094,
            0.06746642291545868)
# fdlibm's log (double): log(1 + f) = f - f**2/2 + s (f**2/2 + R(s**2)), s = f / (2 + f),
# R(z) = z * P(z), z <= 0.0295; refitted, error of the fit 1.8e-18 relative to the result.
LOG_POLY_DOUBLE = (0.6666666666666734, 0.3999999999941468, 0.28571428742387506, 0.22222198573194615,
                   0.18183564325667642, 0.15314050562241321, 0.1479594961068369)
# Bits of sqrt(1/2): subtracting them puts the exponent split at sqrt(2) (musl's trick).
SQRT_HALF_BITS = {"float": 0x3F3504F3, "double": 0x3FE6A09E667F3BCD}
SMALLEST_NORMAL = {"float": 2.0 ** -126, "double": 2.0 ** -1022}
DENORMAL_SCALE = {"float": 24, "double": 54}


def _log_reduce(b: MathBuilder, x: str) -> tuple[str, str]:
    """(k, f) with x = 2**k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)) (k as a float), for finite
    x > 0 (denormals scaled up first)."""
    m = b.m
    shift = DENORMAL_SCALE[m.elem]
    small = b.cmp("olt", x, b.c(SMALLEST_NORMAL[m.elem]))
    scaled = b.select(small, b.mul(x, b.c(2.0 ** shift)), x)
    adjust = b.iselect(small, b.ic(-shift), b.ic(0))
    bits = b.iop("sub", b.to_bits(scaled), b.ic(SQRT_HALF_BITS[m.elem]))
    k = b.iop("add", b.iop("ashr", bits, b.ic(m.mantissa)), adjust)
    mantissa = b.iop("and", bits, b.ic((1 << m.mantissa) - 1))
    one_plus_f = b.from_bits(b.iop("add", mantissa, b.ic(SQRT_HALF_BITS[m.elem])))
    return b.to_float(k), b.sub(one_plus_f, b.c(1.0))


def _log1p_tail(b: MathBuilder, f: str) -> str:
    """log(1 + f) - f for f from ``_log_reduce`` (small next to f)."""
    if is_float32(b.m):
        z = b.mul(f, f)
        return b.mad(z, b.c(-0.5), b.mul(f, b.mul(z, b.poly(f, LOG_POLY))))
    s = b.div(f, b.add(f, b.c(2.0)))
    z = b.mul(s, s)
    hfsq = b.mul(b.c(0.5), b.mul(f, f))
    r = b.mul(z, b.poly(z, LOG_POLY_DOUBLE))
    return b.sub(b.mul(s, b.add(hfsq, r)), hfsq)


def _log_specials(b: MathBuilder, x: str, y: str, zero: float = -math.inf) -> str:
    """y where 0 < x < inf; else log's special values: -inf at 0 (``zero``), NaN below, x itself
    for +inf and NaN."""
    regular = b.both(b.cmp("ogt", x, b.c(0.0)), b.cmp("olt", x, b.c(math.inf)))
    special = b.select(b.cmp("oeq", x, b.c(0.0)), b.c(zero),
                       b.select(b.cmp("olt", x, b.c(0.0)), b.c(math.nan), x))
    return b.select(regular, y, special)


def log(b: MathBuilder, x: str) -> str:
    k, f = _log_reduce(b, x)
    c1, c2 = LN2_SPLIT[b.m.elem]
    tail = b.mad(k, b.c(c2), _log1p_tail(b, f))
    return _log_specials(b, x, b.mad(k, b.c(c1), b.add(f, tail)))


def log2(b: MathBuilder, x: str) -> str:
    """k + log(1 + f) / ln 2; the float version sums in double (one rounding at the end)."""
    k, f = _log_reduce(b, x)
    tail = _log1p_tail(b, f)
    if is_float32(b.m):
        w = b.retyped(b.m.wide())
        part = w.add(b.extend(f), b.extend(tail))
        y = b.truncate(w.mad(part, w.c(1 / math.log(2)), b.extend(k)))
    else:
        y = b.add(k, b.mul(b.add(f, tail), b.c(1 / math.log(2))))
    return _log_specials(b, x, y)


def log1p(b: MathBuilder, x: str) -> str:
    """log(u) for u = 1 + x rounded, plus the rounding error of u over u (FreeBSD's log1pf); the
    float version sums the parts in double (in float the sum of k ln 2, f and the tails cost
    up to 2 ulp)."""
    u = b.add(x, b.c(1.0))
    k, f = _log_reduce(b, u)
    # Exactly (1 + x) - u: u - 1 is exact for u < 2, u - x for u >= 2 (Sterbenz).
    above = b.cmp("oge", u, b.c(2.0))
    error = b.select(above, b.sub(b.c(1.0), b.sub(u, x)), b.sub(x, b.sub(u, b.c(1.0))))
    tail = b.add(_log1p_tail(b, f), b.div(error, u))
    if is_float32(b.m):
        w = b.retyped(b.m.wide())
        y = b.truncate(w.mad(b.extend(k), w.c(math.log(2)), w.add(b.extend(f), b.extend(tail))))
    else:
        c1, c2 = LN2_SPLIT[b.m.elem]
        y = b.mad(k, b.c(c1), b.add(f, b.mad(k, b.c(c2), tail)))
    y = _log_specials(b, u, y)  # u = 0 at x = -1: -inf; u < 0: NaN
    return b.select(near_zero(b, x, 2.0 ** -24), x, y)


# ------------------------------------------------------------------------- trigonometric

# pi/2 in three parts, each the nearest value of the type to what the parts before leave out
# (72 bits for float, 159 for double). With FMAs x - q * part1 is exact and the parts after it
# round once each. Exact enough for |x| up to TRIG_REDUCTION_LIMIT (tests/test_math_accuracy.py
# checks every float up to it and sampled doubles); past it (or for inf, NaN) ``_far_call``
# asks libm, which reduces with Payne-Hanek.
PIO2_SPLIT = {"float": (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15),
              "double": (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)}
TRIG_REDUCTION_LIMIT = {"float": 2.0 ** 19, "double": 2.0 ** 20}
# sin(r) = r + r**3 S(r**2), cos(r) = 1 - r**2/2 + r**4 C(r**2) on
# |r| <= pi/4. Relative errors of the fits: float 8.3e-9, 1.7e-10 (degree 2 in r**2); double
# 1.1e-17, 1.1e-18 (fdlibm's degrees, refitted).
SIN_POLY = {"float": (-0.16666655242443085, 0.00833216030150652, -0.00019515282474458218),
            "double": (-0.1666666666666663, 0.008333333333322118, -0.0001984126982958954,
                       2.7557313621385676e-06, -2.5050747762850355e-08, 1.5896230157221839e-10)}
COS_POLY = {"float": (0.04166664555668831, -0.0013887316454201937, 2.44331567955669e-05),
            "double": (0.041666666666666595, -0.0013888888888873056, 2.4801587288851704e-05,
                       -2.755731417929674e-07, 2.087570084197473e-09, -1.1358536521387682e-11)}
# tan (float, evaluated in double): degree 7 in r**2, fit 8.9e-11; reduced by pi/2 in two
# double parts (106 bits, x exact in double) up to TAN_REDUCTION_LIMIT.
TAN_POLY = (0.33333331850165093, 0.13333410366973095, 0.05395466675419794, 0.021984387906100848,
            0.008332555126324288, 0.004990159701409524, -0.0005929453968339543, 0.0020398588928874)
TAN_REDUCTION_LIMIT = 2.0 ** 24
# Below these sin(x) and tan(x) round to x (and the reduction would lose the sign of -0).
TRIG_TINY = {"float": 2.0 ** -12, "double": 2.0 ** -27}


def _trig_reduce(b: MathBuilder, x: str, near: str, parts: int = 3) -> tuple[str, str]:
    """(r, q): x = q pi/2 + r, |r| <= pi/4, q an integer, for the lanes where ``near``."""
    xs = b.select(near, x, b.c(0.0))  # keeps q an integer where x is out of range, inf or NaN
    q = b.rint(b.mul(xs, b.c(2 / math.pi)))
    minus_q = b.neg(q)
    r = xs
    for part in PIO2_SPLIT[b.m.elem][:parts]:
        r = b.fma(minus_q, b.c(part), r)
    return r, b.to_int(q)


def _sin_cos_poly(b: MathBuilder, r: str) -> tuple[str, str]:
    z = b.mul(r, r)
    sin = poly_tail(b, r, z, SIN_POLY[b.m.elem])
    # cos: w = 1 - z/2 and the rounding error of w added back with the tail (fdlibm's trick).
    hz = b.mul(z, b.c(0.5))
    w = b.sub(b.c(1.0), hz)
    error = b.sub(b.sub(b.c(1.0), w), hz)
    cos = b.add(w, b.mad(b.mul(z, z), b.poly(z, COS_POLY[b.m.elem]), error))
    return sin, cos


def _sin_or_cos(b: MathBuilder, x: str, fn: str) -> str:
    limit = TRIG_REDUCTION_LIMIT[b.m.elem]
    far = _far_call(b, x, fn, limit)  # first: fewer values live across the call
    near = b.cmp("ole", b.abs(x), b.c(limit))
    r, q = _trig_reduce(b, x, near)
    sin, cos = _sin_cos_poly(b, r)
    quadrant = q if fn == "sin" else b.iop("add", q, b.ic(1))  # cos(x) = sin(x + pi/2)
    odd = b.icmp("ne", b.iop("and", quadrant, b.ic(1)), b.ic(0))
    y = b.select(odd, cos, sin)
    sign = b.iop("shl", b.iop("and", quadrant, b.ic(2)), b.ic(b.m.bits - 2))
    y = b.from_bits(b.iop("xor", b.to_bits(y), sign))
    if fn == "sin":
        y = b.select(near_zero(b, x, TRIG_TINY[b.m.elem]), x, y)
    return b.select(near, y, far)


def sin(b: MathBuilder, x: str) -> str:
    return _sin_or_cos(b, x, "sin")


def cos(b: MathBuilder, x: str) -> str:
    return _sin_or_cos(b, x, "cos")


def tan(b: MathBuilder, x: str) -> str:
    """Float: reduced and evaluated in double (near its poles tan amplifies the reduction's
    rounding), tan(r) on even quadrants, -1/tan(r) on odd ones."""
    limit = TAN_REDUCTION_LIMIT
    far = _far_call(b, x, "tan", limit)

    def body(w: MathBuilder, xd: str) -> str:
        r, q = _trig_reduce(w, xd, w.cmp("ole", w.abs(xd), w.c(limit)), parts=2)
        t = poly_tail(w, r, w.mul(r, r), TAN_POLY)
        odd = w.icmp("ne", w.iop("and", q, w.ic(1)), w.ic(0))
        return w.select(odd, w.div(w.c(-1.0), t), t)

    y = b.select(near_zero(b, x, TRIG_TINY[b.m.elem]), x, in_double(b, x, body))
    return b.select(b.cmp("ole", b.abs(x), b.c(limit)), y, far)


def _far_call(b: MathBuilder, x: str, fn: str, limit: float) -> str:
    """libm's fn(x) where |x| > limit or x is inf or NaN, 0 elsewhere, through a helper that
    LLVM's loop vectorizer maps to vector helpers (``vector-function-abi-variant``): each tests
    its lanes and calls libm (``llvm.sin.v16f32``: one call per lane) only if one is out of
    range. The helpers are ``memory(none)`` (as the llvm.sin intrinsic is), so the vectorizer
    may widen the call; ``@llvm.compiler.used`` keeps the vector helpers (unused until then)."""
    m = b.m
    name = f"zyx_{fn}_{m.suffix}_far"
    variants = []
    for lanes in _helper_lanes(b.ctx.vector_bits, m.bits):
        vector = MathType(m.elem, lanes)
        vname = f"{name}_v{lanes}"
        variants.append(f"_ZGV_LLVM_N{lanes}v_{name}({vname})")
        if vname not in b.ctx.definitions:
            b.ctx.definitions[vname] = _far_definition(b.ctx, vname, vector, fn, limit)
            b.ctx.kept.add(vname)
    if name not in b.ctx.definitions:
        b.ctx.definitions[name] = _far_definition(b.ctx, name, m, fn, limit)
    mapping = ",".join(variants)
    return b.emit(f'call {m.t} @{name}({m.t} {x}) "vector-function-abi-variant"="{mapping}"')


def _helper_lanes(vector_bits: int, elem_bits: int) -> list[int]:
    """Vector widths to provide helpers for: the one the loop vectorizer prefers (from the
    device's ``vector_bits``, or 256-bit vectors), half and four times it (a loop of bytes and
    floats may take more lanes than a register holds)."""
    lanes = (vector_bits or 256) // elem_bits
    return [n for n in (lanes // 2, lanes, lanes * 2, lanes * 4) if n >= 2]


def _far_definition(ctx: MathContext, name: str, m: MathType, fn: str, limit: float) -> str:
    t, suffix = m.t, m.suffix
    ctx.declares.add(f"declare {t} @llvm.fabs.{suffix}({t})")
    ctx.declares.add(f"declare {t} @llvm.{fn}.{suffix}({t})")
    if m.lanes:
        ctx.declares.add(f"declare i1 @llvm.vector.reduce.and.v{m.lanes}i1({m.ct})")
        test = (f"  %all = call i1 @llvm.vector.reduce.and.v{m.lanes}i1({m.ct} %in)\n"
                f"  br i1 %all, label %near, label %far\n")
    else:
        test = "  br i1 %in, label %near, label %far\n"
    # The scalar helper must stay a call for the vectorizer to map it (inlined, it would be
    # code with a branch the vectorizer cannot widen).
    attributes = ("" if m.lanes else "noinline ") + "nounwind willreturn memory(none)"
    return (f"define internal {t} @{name}({t} %x) {attributes} {{\n"
            f"entry:\n"
            f"  %a = call {t} @llvm.fabs.{suffix}({t} %x)\n"
            f"  %in = fcmp ole {t} %a, {m.splat(hex_literal(limit, m.elem), m.elem)}\n"
            f"{test}"
            f"near:\n  ret {t} {m.splat(hex_literal(0.0, m.elem), m.elem)}\n"
            f"far:\n  %y = call {t} @llvm.{fn}.{suffix}({t} %x)\n  ret {t} %y\n}}\n")


# ------------------------------------------------------------------------------ hyperbolic

# tanh(x) = x + x**3 T(x**2) for |x| < TANH_SMALL (float, degree 5 in x**2; relative error of
# the fit 2.7e-9), else 1 - 2 / (exp(2|x|) + 1) with the sign of x.
TANH_SMALL = 0.625
TANH_POLY = (-0.3333333134651184, 0.1333320587873459, -0.05394676327705383, 0.021700702607631683,
             -0.008177398703992367, 0.002142961835488677)


def tanh(b: MathBuilder, x: str) -> str:
    a = b.abs(x)
    small = poly_tail(b, x, b.mul(x, x), TANH_POLY)
    e = _exp_moderate(b, b.mul(b.minnum(a, b.c(10.0)), b.c(2.0)))  # 1 - 2/(e**20 + 1) rounds to 1
    large = b.copysign(b.sub(b.c(1.0), b.div(b.c(2.0), b.add(e, b.c(1.0)))), x)
    return b.select(b.cmp("ult", a, b.c(TANH_SMALL)), small, large)  # NaN: small


# sinh(x) = x + x**3 S(x**2) for |x| < 1 (float, degree 4 in x**2, fit 3.8e-9); else
# h - 1/(4h), h = exp(|x|)/2, and cosh(x) = h + 1/(4h), in double.
SINH_POLY = (0.1666666716337204, 0.00833333283662796, 0.00019841294852085412, 2.755214154603891e-06,
             2.5526643909756785e-08)


def _half_exp_abs(w: MathBuilder, x: str) -> str:
    """exp(|x|)/2 in double for float x (exact to a double rounding or two)."""
    y, n = exp_reduce(w, w.minnum(w.abs(x), w.c(90.0)))
    return w.ldexp(y, w.iop("sub", n, w.ic(1)))


def sinh(b: MathBuilder, x: str) -> str:
    def large(w: MathBuilder, xd: str) -> str:
        h = _half_exp_abs(w, xd)
        return w.copysign(w.sub(h, w.div(w.c(0.25), h)), xd)

    small = poly_tail(b, x, b.mul(x, x), SINH_POLY)
    return b.select(b.cmp("ult", b.abs(x), b.c(1.0)), small, in_double(b, x, large))


def cosh(b: MathBuilder, x: str) -> str:
    def body(w: MathBuilder, xd: str) -> str:
        h = _half_exp_abs(w, xd)
        return w.add(h, w.div(w.c(0.25), h))

    return b.select(b.isnan(x), x, in_double(b, x, body))


# asinh(x), atanh(x) = x + x**3 P(x**2) for |x| < 1/2 (float, degree 5 in x**2; fits 1.0e-9 and
# 4.7e-9); else logarithms in double: asinh = log(|x| + sqrt(x**2 + 1)), acosh(x) =
# log(x + sqrt(x**2 - 1)), atanh = log((1 + x) / (1 - x)) / 2 (exact operands in double).
ASINH_POLY = (-0.1666666567325592, 0.0749988928437233, -0.044613249599933624, 0.0300129521638155,
              -0.01997998356819153, 0.009167712181806564)
ATANH_POLY = (0.33333301544189453, 0.20002518594264984, 0.14222761988639832, 0.11823729425668716,
              0.05135825276374817, 0.1766911745071411)


def asinh(b: MathBuilder, x: str) -> str:
    def large(w: MathBuilder, xd: str) -> str:
        a = w.abs(xd)
        return w.copysign(log(w, w.add(a, w.sqrt(w.mad(a, a, w.c(1.0))))), xd)

    small = poly_tail(b, x, b.mul(x, x), ASINH_POLY)
    return b.select(b.cmp("ult", b.abs(x), b.c(0.5)), small, in_double(b, x, large))


def acosh(b: MathBuilder, x: str) -> str:
    def body(w: MathBuilder, xd: str) -> str:
        y = log(w, w.add(xd, w.sqrt(w.mad(xd, xd, w.c(-1.0)))))
        return w.select(w.cmp("oge", xd, w.c(1.0)), y, w.c(math.nan))  # NaN below 1 and for NaN

    return in_double(b, x, body)


def atanh(b: MathBuilder, x: str) -> str:
    def large(w: MathBuilder, xd: str) -> str:  # |x| = 1: ±inf; |x| > 1: NaN
        ratio = w.div(w.add(w.c(1.0), xd), w.sub(w.c(1.0), xd))
        return w.mul(w.c(0.5), log(w, ratio))

    small = poly_tail(b, x, b.mul(x, x), ATANH_POLY)
    return b.select(b.cmp("ult", b.abs(x), b.c(0.5)), small, in_double(b, x, large))


# --------------------------------------------------------------------- inverse trigonometric

# atan(t) = t + t**3 P(t**2) for |t| <= tan(pi/8) (double coefficients, fit 7.9e-13: float
# accuracy), after Cephes' reduction: |x| > tan(3pi/8): pi/2 + atan(-1/x); > tan(pi/8):
# pi/4 + atan((x-1)/(x+1)). Evaluated in double (the reduction's division and pi/4 + ...
# would cost float ulps).
ATAN_POLY = (-0.3333333329572932, 0.19999994326773532, -0.14285423642390274, 0.11104004304776609,
             -0.08996844635185786, 0.06991239865956662, -0.03792474292137405)
# asin(s) = s + s**3 P(s**2) for |s| <= 1/2 (double coefficients, fit 9.7e-13); for |x| > 1/2,
# asin(x) = pi/2 - 2 asin(sqrt((1 - |x|)/2)) (Cephes). In double.
ASIN_POLY = (0.16666666627480178, 0.07500004965298664, 0.044640714121554285, 0.03042641156401854,
             0.021866766746598175, 0.02064099340547093, 0.0019933684344558993, 0.03289646763093199)


def _atan_positive(w: MathBuilder, a: str) -> str:
    """atan(a) for a >= 0 (or NaN), in double."""
    big = w.cmp("ogt", a, w.c(2.414213562373095))
    mid = w.cmp("ogt", a, w.c(0.41421356237309503))
    num = w.select(big, w.c(-1.0), w.select(mid, w.sub(a, w.c(1.0)), a))
    den = w.select(big, a, w.select(mid, w.add(a, w.c(1.0)), w.c(1.0)))
    base = w.select(big, w.c(math.pi / 2), w.select(mid, w.c(math.pi / 4), w.c(0.0)))
    t = w.div(num, den)
    return w.add(base, poly_tail(w, t, w.mul(t, t), ATAN_POLY))


def atan(b: MathBuilder, x: str) -> str:
    def body(w: MathBuilder, xd: str) -> str:
        return w.copysign(_atan_positive(w, w.abs(xd)), xd)

    return in_double(b, x, body)


def _asin_parts(w: MathBuilder, xd: str) -> tuple[str, str]:
    """(big, v): |x| > 1/2 and v = asin(sqrt((1 - |x|)/2)) there, asin(x) elsewhere."""
    a = w.abs(xd)
    big = w.cmp("ogt", a, w.c(0.5))
    z_big = w.mul(w.c(0.5), w.sub(w.c(1.0), a))
    z = w.select(big, z_big, w.mul(xd, xd))
    s = w.select(big, w.sqrt(z_big), xd)
    return big, poly_tail(w, s, z, ASIN_POLY)


def asin(b: MathBuilder, x: str) -> str:
    def body(w: MathBuilder, xd: str) -> str:
        big, v = _asin_parts(w, xd)
        return w.select(big, w.copysign(w.mad(v, w.c(-2.0), w.c(math.pi / 2)), xd), v)

    return in_double(b, x, body)


def acos(b: MathBuilder, x: str) -> str:
    def body(w: MathBuilder, xd: str) -> str:
        big, v = _asin_parts(w, xd)
        positive = w.cmp("ogt", xd, w.c(0.0))
        far = w.select(positive, w.mul(v, w.c(2.0)), w.mad(v, w.c(-2.0), w.c(math.pi)))
        return w.select(big, far, w.sub(w.c(math.pi / 2), v))

    return in_double(b, x, body)


# ---------------------------------------------------------------------------- error function

# erf(x) = x + x Q(x**2) for |x| < ERF_SMALL (float, degree 5 in x**2; relative error of the
# fit 2.7e-8); beyond, erf(x) = 1 - 2**L(|x|) with L a fit of log2(erfc(x)) on [0.9, 3.92]
# (degree 5; error of the fit, as erfc(x) ln 2 times the error in L: 3.0e-8, 0.5 ulp of erf):
# where erfc is not small an error in L is one in erfc, which is at most 0.2 of erf. Past 3.92
# erf rounds to ±1. No division and one exp2.
ERF_SMALL = 0.9
ERF_SMALL_POLY = (0.12837915122509003, -0.3761252462863922, 0.11282140761613846, -0.02677890844643116,
                  0.005011962726712227, -0.0006090360111556947)
ERF_LOG2_ERFC_POLY = (-0.0027088795322924852, -1.616093635559082, -0.9388415217399597, -0.13144269585609436,
                      0.022475795820355415, -0.0018056200351566076)
ERF_ONE = 3.92


def _exp2_moderate(b: MathBuilder, v: str) -> str:
    """2**v for float v known to be a number in [-126, 127]."""
    n = b.rint(v)
    r = b.sub(v, n)  # exact
    return b.scale(b.mad(r, b.poly(r, EXP2_POLY), b.c(1.0)), b.to_int(n))


def _erf_poly(b: MathBuilder, x: str) -> tuple[str, str]:
    """(small, P): |x| < ERF_SMALL (or NaN) and P = Q(x**2) there, L(|x|) elsewhere. Both
    polynomials in one Horner chain on coefficients selected per lane: a select costs less than
    the multiply-adds of a second chain."""
    a = b.abs(x)
    small = b.cmp("ult", a, b.c(ERF_SMALL))
    u = b.select(small, b.mul(x, x), b.minnum(a, b.c(ERF_ONE)))
    p = None
    for k in reversed(range(len(ERF_SMALL_POLY))):
        coef = b.select(small, b.c(ERF_SMALL_POLY[k]), b.c(ERF_LOG2_ERFC_POLY[k]))
        p = coef if p is None else b.mad(p, u, coef)
    return small, p


def erf(b: MathBuilder, x: str) -> str:
    small, p = _erf_poly(b, x)
    large = b.copysign(b.sub(b.c(1.0), _exp2_moderate(b, p)), x)
    return b.select(small, b.mad(x, p, x), large)


# erfc(x) = t exp(-x**2 + P(t)), t = 1 / (1 + x/2), for x >= 1/2 (Numerical Recipes' form, refit
# on [1/2, 10.1] (t in [0.165, 0.8]): error of the fit 1.2e-9 relative, in double: exp(-x**2)
# needs x**2 exactly, exact in double for a float x, and results reach the denormals, where one
# rounding from double is the correct one). Below 1/2 erfc = 1 - erf(x) (in double: no rounding
# of erf before the subtraction), from -0.9 down 2 - erfc(|x|) (erf's polynomials).
ERFC_POLY = (-1.265536790295308, 1.0007227308636304, 0.36578419608423873, 0.15054726944134286,
             -0.3952541026298994, 0.7871901251742999, -1.9139447284499231, 2.2176744469584047,
             -1.2030553466750844, 0.25590389558081705)
ERFC_ZERO = 10.1  # erfc(10.1) rounds to 0 in float


def erfc(b: MathBuilder, x: str) -> str:
    def right(w: MathBuilder, xd: str) -> str:
        xc = w.clamp(xd, 0.5, ERFC_ZERO)
        t = w.div(w.c(1.0), w.mad(xc, w.c(0.5), w.c(1.0)))
        return w.mul(t, exp(w, w.mad(xc, w.neg(xc), w.poly(t, ERFC_POLY))))

    def middle(w: MathBuilder, xd: str) -> str:  # |x| < ERF_SMALL: p = Q(x**2)
        return w.sub(w.c(1.0), w.mad(xd, b.extend(p), xd))

    small, p = _erf_poly(b, x)
    left = b.sub(b.c(2.0), _exp2_moderate(b, p))  # x <= -ERF_SMALL: p = L(|x|)
    out = b.select(small, in_double(b, x, middle), left)
    return b.select(b.cmp("oge", x, b.c(0.5)), in_double(b, x, right), out)


# -------------------------------------------------------------------------------- binary


def pow(b: MathBuilder, x: str, y: str) -> str:
    """x**y = 2**(y log2|x|) in double (float x, y: the product is exact enough for every float
    result), with the sign of x for odd integer y and C99's special cases: x**0 = 1 and 1**y = 1
    (NaN included), (-1)**±inf = 1, NaN for x < 0 and y not an integer. The rest (zeros and
    infinities of x and y) come out of log2 and exp2: log2(0) = -inf, exp2(±inf) = inf, 0."""
    w = b.retyped(b.m.wide())
    xd, yd = b.extend(x), b.extend(y)
    ax = w.abs(xd)
    r = exp2(w, w.mul(yd, log2(w, ax)))
    is_integer = w.cmp("oeq", w.rint(yd), yd)  # true for ±inf too
    half = w.mul(yd, w.c(0.5))
    odd = w.both(is_integer, w.cmp("une", w.rint(half), half))  # false for ±inf
    r = w.select(w.both(w.signbit(xd), odd), w.neg(r), r)  # -0 included
    finite_negative = w.both(w.cmp("olt", xd, w.c(0.0)), w.cmp("one", xd, w.c(-math.inf)))
    not_integer = w.both(w.cmp("ord", yd, yd), w.negate(is_integer))
    r = w.select(w.both(finite_negative, not_integer), w.c(math.nan), r)
    one = w.either(w.cmp("oeq", yd, w.c(0.0)), w.cmp("oeq", xd, w.c(1.0)))
    unit_inf = w.both(w.cmp("oeq", ax, w.c(1.0)), w.cmp("oeq", w.abs(yd), w.c(math.inf)))
    return b.truncate(w.select(w.either(one, unit_inf), w.c(1.0), r))


def atan2(b: MathBuilder, y: str, x: str) -> str:
    """atan(min/max) of |x|, |y| in double, moved to its octant: pi/2 - a where |y| > |x|,
    pi - a where x < 0 (or -0), with the sign of y. 0/0 and inf/inf count as 0 and 1, which
    gives C99's special values (atan2(±0, -0) = ±pi, atan2(±inf, -inf) = ±3pi/4, ...)."""
    def body(w: MathBuilder, yd: str, xd: str) -> str:
        ax, ay = w.abs(xd), w.abs(yd)
        steep = w.cmp("ogt", ay, ax)
        num, den = w.select(steep, ax, ay), w.select(steep, ay, ax)
        q = w.div(num, den)
        zeros = w.both(w.cmp("oeq", num, w.c(0.0)), w.cmp("oeq", den, w.c(0.0)))
        infinities = w.both(w.cmp("oeq", num, w.c(math.inf)), w.cmp("oeq", den, w.c(math.inf)))
        q = w.select(infinities, w.c(1.0), w.select(zeros, w.c(0.0), q))
        a = _atan_positive(w, q)
        a = w.select(steep, w.sub(w.c(math.pi / 2), a), a)
        a = w.select(w.signbit(xd), w.sub(w.c(math.pi), a), a)
        return w.copysign(a, yd)

    if not is_float32(b.m):
        return body(b, y, x)
    w = b.retyped(b.m.wide())
    return b.truncate(body(w, b.extend(y), b.extend(x)))
