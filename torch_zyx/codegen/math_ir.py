"""The IR builder of the LLVM renderer's inline math (``llvm_math``): typed emission of float
arithmetic, bit manipulation, selects and polynomials for a floating type, scalar or vector.

Stage 5 of the flow for the CPU device, beside ``codegen/llvm.py``: ``llvm_math``'s generators
write each function once against ``MathBuilder``, which emits LLVM IR through the renderer
(``MathContext``) for a ``MathType`` ("float" or "double", and their integer and mask twins).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Protocol

# --------------------------------------------------------------------------------- IR builder


class MathContext(Protocol):
    """What a generator needs from the renderer."""

    vector_bits: int
    declares: set[str]
    definitions: dict[str, str]  # module-level function definitions by name
    kept: set[str]  # functions to keep alive (``@llvm.compiler.used``)

    def emit(self, text: str, prefix: str = "v") -> str: ...


def hex_literal(value: float, elem: str) -> str:
    """LLVM's hexadecimal form of ``value`` as an ``elem`` ("float" or "double") constant: the
    double with the float's value for float (LLVM's rule for float hex literals)."""
    if elem == "float" and math.isfinite(value):
        value = struct.unpack("f", struct.pack("f", value))[0]
    return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", value))[0])


class MathType:
    """A floating type, scalar (``lanes`` 0) or vector, and its integer and mask twins."""

    def __init__(self, elem: str, lanes: int = 0):
        self.elem, self.lanes = elem, lanes
        self.bits = 32 if elem == "float" else 64
        self.mantissa = 23 if elem == "float" else 52
        self.bias = 127 if elem == "float" else 1023
        ielem = f"i{self.bits}"
        self.t = self._wrap(elem)
        self.it = self._wrap(ielem)
        self.ct = self._wrap("i1")
        self.suffix = self._suffix("f32" if elem == "float" else "f64")
        self.isuffix = self._suffix(ielem)

    def _wrap(self, elem: str) -> str:
        return f"<{self.lanes} x {elem}>" if self.lanes else elem

    def _suffix(self, elem: str) -> str:
        return f"v{self.lanes}{elem}" if self.lanes else elem

    def splat(self, scalar: str, elem: str) -> str:
        return f"splat ({elem} {scalar})" if self.lanes else scalar

    def wide(self) -> MathType:
        return MathType("double", self.lanes)


class MathBuilder:
    """Emits IR for one ``MathType`` into a renderer. Float operations carry no fast-math flags:
    every operation rounds as written, which the error bounds rely on. ``mad`` may fuse (LLVM's
    ``fmuladd``: one FMA where the CPU has it), ``fma`` must (used where the exact product is the
    point: Cody-Waite reduction, splitting x² exactly)."""

    def __init__(self, ctx: MathContext, mtype: MathType):
        self.ctx, self.m = ctx, mtype

    def retyped(self, mtype: MathType) -> MathBuilder:
        return MathBuilder(self.ctx, mtype)

    # constants
    def c(self, value: float) -> str:
        return self.m.splat(hex_literal(value, self.m.elem), self.m.elem)

    def ic(self, value: int) -> str:
        return self.m.splat(str(value), f"i{self.m.bits}")

    def emit(self, text: str) -> str:
        return self.ctx.emit(text, "m")

    def _intrinsic(self, name: str, args: list[str], arg_types: list[str] | None = None,
                   ret: str | None = None, suffix: str | None = None) -> str:
        t = self.m.t
        arg_types = arg_types or [t] * len(args)
        ret = ret or t
        full = f"llvm.{name}.{suffix or self.m.suffix}"
        self.ctx.declares.add(f"declare {ret} @{full}({', '.join(arg_types)})")
        joined = ", ".join(f"{ty} {a}" for ty, a in zip(arg_types, args))
        return self.emit(f"call {ret} @{full}({joined})")

    # float arithmetic
    def add(self, a: str, b: str) -> str:
        return self.emit(f"fadd {self.m.t} {a}, {b}")

    def sub(self, a: str, b: str) -> str:
        return self.emit(f"fsub {self.m.t} {a}, {b}")

    def mul(self, a: str, b: str) -> str:
        return self.emit(f"fmul {self.m.t} {a}, {b}")

    def div(self, a: str, b: str) -> str:
        return self.emit(f"fdiv {self.m.t} {a}, {b}")

    def neg(self, a: str) -> str:
        return self.emit(f"fneg {self.m.t} {a}")

    def mad(self, a: str, b: str, c: str) -> str:
        """a * b + c, fused or not."""
        return self._intrinsic("fmuladd", [a, b, c])

    def fma(self, a: str, b: str, c: str) -> str:
        """a * b + c with one rounding."""
        return self._intrinsic("fma", [a, b, c])

    def poly(self, x: str, coeffs) -> str:
        """sum(coeffs[k] * x**k) by Horner's rule."""
        acc = self.c(coeffs[-1])
        for coef in reversed(coeffs[:-1]):
            acc = self.mad(acc, x, self.c(coef))
        return acc

    def abs(self, a: str) -> str:
        return self._intrinsic("fabs", [a])

    def sqrt(self, a: str) -> str:
        return self._intrinsic("sqrt", [a])

    def rint(self, a: str) -> str:
        return self._intrinsic("rint", [a])

    def minnum(self, a: str, b: str) -> str:
        return self._intrinsic("minnum", [a, b])

    def maxnum(self, a: str, b: str) -> str:
        return self._intrinsic("maxnum", [a, b])

    def clamp(self, a: str, lo: float, hi: float) -> str:
        """``a`` clamped to [lo, hi]; NaN becomes a number (what the integer steps need)."""
        return self.minnum(self.maxnum(a, self.c(lo)), self.c(hi))

    def clamp_keep_nan(self, a: str, lo: float, hi: float) -> str:
        """``a`` clamped to [lo, hi], NaN staying NaN (one x86 min and max each)."""
        a = self.select(self.cmp("olt", a, self.c(lo)), self.c(lo), a)
        return self.select(self.cmp("ogt", a, self.c(hi)), self.c(hi), a)

    def copysign(self, mag: str, sign: str) -> str:
        """``mag``'s magnitude with ``sign``'s sign bit (bit-exact, NaNs and zeros included),
        written as a choice between ``|mag|`` and ``-|mag|``: LLVM's code generator, given IR
        the optimizer had not seen, failed an assertion (a shift of mismatched types) on
        ``llvm.copysign`` or its and/or bit form when ``sign`` was a widened bfloat16."""
        magnitude = self.abs(mag)
        return self.select(self.signbit(sign), self.neg(magnitude), magnitude)

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.emit(f"fcmp {pred} {self.m.t} {a}, {b}")

    def isnan(self, a: str) -> str:
        return self.cmp("uno", a, a)

    def both(self, a: str, b: str) -> str:
        return self.emit(f"and {self.m.ct} {a}, {b}")

    def either(self, a: str, b: str) -> str:
        return self.emit(f"or {self.m.ct} {a}, {b}")

    def negate(self, a: str) -> str:
        return self.emit(f"xor {self.m.ct} {a}, {self.m.splat('true', 'i1')}")

    def signbit(self, a: str) -> str:
        # (frozen first: given unoptimized IR, LLVM's code generator folded the sign test of a
        # widened bfloat16, bits shifted left by 16, into a shift of mismatched types and failed
        # an assertion; a frozen value is not looked through)
        frozen = self.emit(f"freeze {self.m.t} {a}")
        return self.icmp("slt", self.to_bits(frozen), self.ic(0))

    def select(self, cond: str, a: str, b: str) -> str:
        return self.emit(f"select {self.m.ct} {cond}, {self.m.t} {a}, {self.m.t} {b}")

    # integer view
    def to_bits(self, a: str) -> str:
        return self.emit(f"bitcast {self.m.t} {a} to {self.m.it}")

    def from_bits(self, a: str) -> str:
        return self.emit(f"bitcast {self.m.it} {a} to {self.m.t}")

    def iop(self, op: str, a: str, b: str) -> str:
        return self.emit(f"{op} {self.m.it} {a}, {b}")

    def icmp(self, pred: str, a: str, b: str) -> str:
        return self.emit(f"icmp {pred} {self.m.it} {a}, {b}")

    def iselect(self, cond: str, a: str, b: str) -> str:
        return self.emit(f"select {self.m.ct} {cond}, {self.m.it} {a}, {self.m.it} {b}")

    def to_int(self, a: str) -> str:
        """An integral float (already rounded) as an integer; NaN (or out of range) gives some
        integer (``freeze``: LLVM's fptosi makes poison of it)."""
        return self.emit(f"freeze {self.m.it} {self.emit(f'fptosi {self.m.t} {a} to {self.m.it}')}")

    def to_float(self, a: str) -> str:
        return self.emit(f"sitofp {self.m.it} {a} to {self.m.t}")

    def pow2(self, k: str) -> str:
        """2**k for an integer k in the normal exponent range."""
        return self.from_bits(self.iop("shl", self.iop("add", k, self.ic(self.m.bias)),
                                       self.ic(self.m.mantissa)))

    def ldexp(self, y: str, n: str) -> str:
        """y * 2**n with one rounding: over- or underflowing to inf / 0 / denormals exactly where
        the result does. With AVX-512 LLVM's ``llvm.ldexp`` is one ``vscalefps``; elsewhere it is
        a libm call per element, so there it is two scalings by 2**(n/2) (each factor a normal
        number, the rounding in the second)."""
        if self.ctx.vector_bits >= 512:  # the CPU runtime asks for 512-bit vectors with AVX-512
            return self._intrinsic("ldexp", [y, n], [self.m.t, self.m.it],
                                   suffix=f"{self.m.suffix}.{self.m.isuffix}")
        half = self.iop("ashr", n, self.ic(1))
        rest = self.iop("sub", n, half)
        return self.mul(self.mul(y, self.pow2(half)), self.pow2(rest))

    def scale(self, y: str, n: str) -> str:
        """y * 2**n for y * 2**n and 2**n normal (or inf) numbers."""
        if self.ctx.vector_bits >= 512:
            return self.ldexp(y, n)
        return self.mul(y, self.pow2(n))

    # conversions between float and double of the same lane count
    def extend(self, a: str) -> str:
        return self.emit(f"fpext {self.m.t} {a} to {self.m.wide().t}")

    def truncate(self, a: str) -> str:
        """A double value (of ``self.m.wide()``) rounded to this float type."""
        return self.emit(f"fptrunc {self.m.wide().t} {a} to {self.m.t}")


def is_float32(m: MathType) -> bool:
    return m.elem == "float"




def poly_tail(b: MathBuilder, x: str, z: str, coeffs) -> str:
    """x + x * (z * P(z)) for an odd function's polynomial in z = x**2 (|z P(z)| < 1), with the
    sign of x: -0 + (-0 * -0) would be +0. Denormal x come back unchanged."""
    return b.copysign(b.mad(x, b.mul(z, b.poly(z, coeffs)), x), x)


def near_zero(b: MathBuilder, x: str, limit: float) -> str:
    """|x| < limit: where f(x) rounds to x (sin, tan, expm1, log1p near 0; also ±0 and denormals)."""
    return b.cmp("olt", b.abs(x), b.c(limit))


def in_double(b: MathBuilder, x: str, body: Callable[[MathBuilder, str], str]) -> str:
    """body(x) computed in double and rounded once to float (where float alone loses ulps to
    cancellation); on double it is just body(x)."""
    if not is_float32(b.m):
        return body(b, x)
    wide = b.retyped(b.m.wide())
    return b.truncate(body(wide, b.extend(x)))
