"""Accuracy of the CPU renderer's math functions (codegen/llvm_math.py) against float64 and mpmath.

float32: every function on samples of every binade (both signs, denormals included), dense
samples of its working range, the points near its internal thresholds and, for sin, cos and tan,
the floats nearest to multiples of pi/2 and huge arguments; errors in ulps of the float32 result
against CPU torch's float64 value (within 2 ulp). NaN, ±inf and zeros (with their sign) where
CPU torch's float32 result has them, unless CPU torch's value is not the correctly rounded one
(then the math wins: torch's float32 sinh(88.73) is inf, its erf(-1e-7) -0). float64: the
inline functions against mpmath on samples of every binade (about 1 ulp), every function against
CPU torch with OpInfo's float64 tolerance and its special values.
float16 and bfloat16 (computed in float32) against CPU torch. ``python tests/test_math_accuracy.py``
prints the table of maximum errors.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from conftest import ZYX0_BACKEND

import torch_zyx  # noqa: F401  (registers the zyx device)

# The tests use zyx:0: with an OpenCL or CUDA device there they would measure its driver's math
# builtins (PoCL's float32 sin, cos, tan, sinh, cosh and erfc are off by up to ~4 ulp), not
# codegen/llvm_math.py.
pytestmark = pytest.mark.skipif(ZYX0_BACKEND != "cpu", reason="measures the CPU renderer's inline math; "
                                "zyx:0 is not the CPU backend here")

FLOAT32_FUNCTIONS = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh",
                     "sigmoid", "sinh", "cosh", "asinh", "acosh", "atanh", "atan", "asin", "acos", "erf",
                     "erfc"]
# Where the float32 result goes through more than the function: log10 = log2 * log10(2), sigmoid =
# 1 / (1 + exp(-x)) (ops/math/elementwise.py), each adding a rounding.
FLOAT32_BOUND = {"log10": 2.5, "sigmoid": 2.5}
FLOAT32_ULP = 2.0
# float64: functions written out in llvm_math (the rest call libm) and their bound in ulps.
FLOAT64_INLINE = {"exp": 2.0, "exp2": 2.0, "log": 2.0, "log2": 3.0, "sin": 2.0, "cos": 2.0}
FLOAT64_ALL = FLOAT32_FUNCTIONS

# Thresholds inside the implementations (llvm_math), probed from both sides.
EDGES = [0.5, 0.625, 0.9, 1.0, 2.0, 3.92, 10.1, 0.41421356, 2.4142135, 88.7, 89.0, -87.3, -103.9,
         -17.0, -30.0, 2.0 ** 19, 2.0 ** 24]


MANTISSA_BITS = {torch.float32: 23, torch.float64: 52, torch.float16: 10, torch.bfloat16: 7}


def _float32_inputs(fn: str, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Every binade: bit patterns from 0 to inf in steps of 2**9 with a random offset (16384 per
    # binade), both signs.
    step = 1 << 9
    bits = torch.arange(0, 0x7F800000, step, dtype=torch.int64)
    bits = bits + torch.randint(0, step, bits.shape, generator=gen)
    positive = bits.to(torch.int32).view(torch.float32)
    parts = [positive, -positive]
    # The working range, densely.
    span = {"exp": 100.0, "exp2": 150.0, "expm1": 90.0, "sinh": 90.0, "cosh": 90.0, "tanh": 12.0,
            "sigmoid": 40.0, "erf": 5.0, "erfc": 11.0, "atanh": 1.0, "asin": 1.0, "acos": 1.0}.get(fn, 10.0)
    parts.append((torch.rand(1 << 20, generator=gen) * 2 - 1) * span)
    parts.append(torch.rand(1 << 18, generator=gen) * 2 - 1)
    edges = torch.tensor(EDGES + [-e for e in EDGES], dtype=torch.float32)
    around = edges.view(torch.int32)[:, None] + torch.arange(-64, 65, dtype=torch.int32)
    parts.append(around.view(torch.float32).flatten())
    if fn in ("sin", "cos", "tan"):
        parts.append(_near_multiples_of_half_pi())
    return torch.cat(parts + [_specials()])


def _near_multiples_of_half_pi() -> torch.Tensor:
    """The floats nearest to k pi/2 (up to 2**19.3, past sin's and cos's Cody-Waite range) and
    their neighbours, where the reduced argument is smallest; and huge arguments."""
    k = torch.arange(1, 1 << 19, dtype=torch.float64)
    nearest = (k * (math.pi / 2)).float()
    bits = nearest.view(torch.int32)[:, None] + torch.arange(-2, 3, dtype=torch.int32)
    huge = torch.tensor([1e5, 1e6, 1e10, 1e20, 1e30, 3.4e38, 2.0 ** 60, 8.6e37, 1.5e38], dtype=torch.float32)
    return torch.cat([bits.view(torch.float32).flatten(), huge, -huge])


def _specials(dtype=torch.float32) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [0.0, math.inf, math.nan, info.tiny, info.tiny / 2, info.tiny * 2 ** -20, info.max, 1.0, 0.5,
              2.0, math.pi / 2, math.pi]
    values.append(info.tiny * 2.0 ** -MANTISSA_BITS[dtype])  # the smallest denormal
    t = torch.tensor(values, dtype=torch.float64).to(dtype)
    return torch.cat([t, -t])


def _zyx(fn: str, x: torch.Tensor) -> torch.Tensor:
    return getattr(torch, fn)(x.to("zyx")).cpu()


def _reference(fn: str, x: torch.Tensor) -> torch.Tensor:
    return getattr(torch, fn)(x.double())


def ulp_errors(result: torch.Tensor, ref: torch.Tensor, dtype=torch.float32, same_as=None) -> torch.Tensor:
    """|result - ref| in ulps of ``dtype`` at ref (NaN where both are NaN is 0; a NaN on one side
    only, or an inf where ref does not round to it, is inf). Where ``same_as`` (CPU torch's
    result in ``dtype``) is given, a result equal to it counts as exact: sigmoid(-88.73) is 0 in
    float32 for both, the true value a denormal (exp(88.73) overflows in 1 / (1 + exp(-x)))."""
    info = torch.finfo(dtype)
    ref64 = ref.double()
    res64 = result.double()
    _, exponent = torch.frexp(ref64.abs())
    exponent = torch.clamp(exponent - 1, min=int(math.log2(info.tiny)))
    ulp = torch.ldexp(torch.ones_like(ref64), (exponent - MANTISSA_BITS[dtype]).double())
    err = (res64 - ref64).abs() / ulp
    rounded = ref64.to(dtype).double()
    same = (res64 == rounded) & torch.isinf(rounded) | (torch.isnan(res64) & torch.isnan(ref64))
    if same_as is not None:
        same |= (res64 == same_as.double()) & (res64 != rounded)
    err = torch.where(same, torch.zeros_like(err), err)
    broken = torch.isnan(res64) != torch.isnan(ref64)
    broken |= torch.isinf(res64) & ~same
    broken |= torch.isinf(rounded) & ~same
    return torch.where(broken, torch.full_like(err, math.inf), err)


def _worst(x, result, ref, err):
    i = int(torch.argmax(torch.nan_to_num(err, posinf=1e30)))
    return f"x={x[i].item()!r} got {result[i].item()!r} want {ref[i].item()!r} ({err[i].item():.3g} ulp)"


def _check_specials(fn: str, x: torch.Tensor, result: torch.Tensor, ref: torch.Tensor | None = None,
                    dtype=torch.float32) -> None:
    """NaN, inf and zeros (zeros with their sign) where CPU torch has them: everywhere CPU torch's
    result is the correctly rounded ``ref`` (float64 values), and at special inputs (NaN, ±inf,
    ±0) when there is no ``ref``. Where CPU torch's float result is not the rounded exact value
    (its float32 sinh(88.73) overflows to inf, its erf(-1e-7) is -0, its log1p of a denormal
    is 0) the math wins."""
    torch_result = getattr(torch, fn)(x.to(dtype))
    if ref is not None:
        rounded = ref.to(dtype)
        trusted = (torch_result == rounded) | (torch.isnan(torch_result) & torch.isnan(rounded))
    else:
        trusted = ~torch.isfinite(x) | (x == 0)
    for name, mask in (("nan", torch.isnan(torch_result)), ("inf", torch.isinf(torch_result)),
                       ("zero", torch_result == 0)):
        mask = mask & trusted
        mismatch = mask & ~((result == torch_result) | (torch.isnan(result) & torch.isnan(torch_result)))
        if name == "zero":
            mismatch |= mask & (result == 0) & (torch.signbit(result) != torch.signbit(torch_result))
        bad = mismatch.nonzero().flatten()
        assert bad.numel() == 0, (f"{fn}({x[bad[0]].item()!r}): {result[bad[0]].item()!r}, "
                                  f"CPU torch {torch_result[bad[0]].item()!r} ({name})")


def measure_float32(fn: str) -> tuple[float, str]:
    x = _float32_inputs(fn)
    result = _zyx(fn, x)
    ref = _reference(fn, x)
    err = ulp_errors(result, ref, same_as=getattr(torch, fn)(x))
    return float(err.max()), _worst(x, result, ref, err)


@pytest.mark.parametrize("fn", FLOAT32_FUNCTIONS)
def test_float32_ulp(fn):
    x = _float32_inputs(fn)
    result = _zyx(fn, x)
    assert result.dtype == torch.float32
    ref = _reference(fn, x)
    err = ulp_errors(result, ref, same_as=getattr(torch, fn)(x))
    bound = FLOAT32_BOUND.get(fn, FLOAT32_ULP)
    assert float(err.max()) <= bound, _worst(x, result, ref, err)
    _check_specials(fn, x, result, ref)


def _binary_inputs(fn: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs: both arguments over every binade; x over every binade with integer, half-integer
    and small y (pow: negative bases, results near overflow and underflow); the special values
    crossed with each other."""
    gen = torch.Generator().manual_seed(seed)
    n = 1 << 20
    bits = torch.randint(0, 0x7F800000, (2, n), generator=gen, dtype=torch.int64).to(torch.int32)
    signs = torch.randint(0, 2, (2, n), generator=gen, dtype=torch.int32) << 31
    x, y = (bits | signs).view(torch.float32)
    if fn == "pow":  # results in range: |y log2|x|| up to ~150
        x = torch.cat([x, (torch.rand(n, generator=gen) * 2 - 1) * 100, torch.rand(n, generator=gen) * 4])
        y = torch.cat([y, torch.randint(-40, 41, (n,), generator=gen).float() / 2,
                       (torch.rand(n, generator=gen) * 2 - 1) * 60])
    specials = torch.cat([_specials(), torch.tensor([3.0, -3.0, 0.25, -1.0, 1e10, -1e10])])
    sx, sy = torch.meshgrid(specials, specials, indexing="ij")
    return torch.cat([x, sx.flatten()]), torch.cat([y, sy.flatten()])


@pytest.mark.parametrize("fn", ["pow", "atan2"])
def test_float32_binary_ulp(fn):
    x, y = _binary_inputs(fn)
    f = getattr(torch, fn)
    result = f(x.to("zyx"), y.to("zyx")).cpu()
    ref = f(x.double(), y.double())
    err = ulp_errors(result, ref)
    worst = int(torch.argmax(torch.nan_to_num(err, posinf=1e30)))
    assert float(err.max()) <= FLOAT32_ULP, (f"{fn}({x[worst].item()!r}, {y[worst].item()!r}) = "
                                             f"{result[worst].item()!r}, want {ref[worst].item()!r}")
    expected = f(x, y)
    masks = (("nan", torch.isnan(expected)), ("inf", torch.isinf(expected)), ("zero", expected == 0))
    for name, mask in masks:
        bad = mask & ~((result == expected) | (torch.isnan(result) & torch.isnan(expected)))
        if name == "zero":
            bad |= mask & (result == 0) & (torch.signbit(result) != torch.signbit(expected))
        assert not bool(bad.any()), name


def _float64_inputs(count: int, seed: int = 0) -> torch.Tensor:
    """Samples of every binade of float64 (``count`` per sign), plus a dense [-10, 10]."""
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 0x7FF0000000000000, (count,), generator=gen, dtype=torch.int64)
    positive = bits.view(torch.float64)
    dense = (torch.rand(count, generator=gen, dtype=torch.float64) * 2 - 1) * 10
    return torch.cat([positive, -positive, dense])


def _mpmath_errors(fn: str, x: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """|result - fn(x)| in float64 ulps of the exact fn(x) (mpmath, 160 bits); outside the domain
    and for non-finite values or results: 0 where CPU torch has the same result, else inf."""
    import mpmath

    mpmath.mp.prec = 160
    f = {"exp": mpmath.exp, "exp2": lambda v: mpmath.mpf(2) ** v, "log": mpmath.log,
         "log2": lambda v: mpmath.log(v, 2), "sin": mpmath.sin, "cos": mpmath.cos}[fn]
    expected = getattr(torch, fn)(x).tolist()
    errors = []
    for v, got, want in zip(x.tolist(), result.tolist(), expected):
        exact = None
        if math.isfinite(v) and not (fn.startswith("log") and v <= 0):
            exact = f(mpmath.mpf(v))
            if not math.isfinite(float(exact)) or exact == 0:
                exact = None
        if exact is None:
            same = got == want or (math.isnan(got) and math.isnan(want))
            errors.append(0.0 if same else math.inf)
            continue
        _, exponent = mpmath.frexp(exact)
        ulp = mpmath.ldexp(1, max(int(exponent) - 1, -1022) - 52)
        errors.append(float(abs(mpmath.mpf(got) - exact) / ulp) if math.isfinite(got) else math.inf)
    return torch.tensor(errors, dtype=torch.float64)


def measure_float64(fn: str, count: int = 3000) -> tuple[float, str]:
    x = _float64_inputs(count)
    if fn.startswith("log"):
        x = x.abs()
    result = _zyx(fn, x)
    err = _mpmath_errors(fn, x, result)
    i = int(torch.argmax(err))
    return float(err.max()), f"x={x[i].item()!r} got {result[i].item()!r} ({err[i].item():.3g} ulp)"


@pytest.mark.parametrize("fn", sorted(FLOAT64_INLINE))
def test_float64_ulp(fn):
    worst, where = measure_float64(fn)
    assert worst <= FLOAT64_INLINE[fn], where


@pytest.mark.parametrize("fn", FLOAT64_ALL)
def test_float64_against_torch(fn):
    x = torch.cat([_float64_inputs(20000, seed=1), _specials(torch.float64)])
    result = _zyx(fn, x)
    expected = getattr(torch, fn)(x)
    torch.testing.assert_close(result, expected, rtol=1e-7, atol=1e-7, equal_nan=True)
    _check_specials(fn, x, result, dtype=torch.float64)


def test_sin_cos_huge_float64():
    """Past the Cody-Waite range float64 goes to libm: within OpInfo's float64 tolerance of the
    exact value (glibc's cos is 8 ulp off at 6381956970095103 * 2**797, the input whose
    remainder by pi/2 is smallest; 1 ulp elsewhere)."""
    x = torch.tensor([1e6, 1e10, 1e22, 1e300, 2.0 ** 1000, 1.7e308, 6381956970095103.0 * 2.0 ** 797],
                     dtype=torch.float64)
    x = torch.cat([x, -x])
    for fn in ("sin", "cos"):
        result = _zyx(fn, x)
        err = _mpmath_errors(fn, x, result)
        assert float(err[x.abs() != x[6]].max()) <= 1.0, fn
        torch.testing.assert_close(result, getattr(torch, fn)(x), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", FLOAT32_FUNCTIONS)
def test_half_types(fn, dtype):
    """Computed in float32 and rounded: within a rounding of CPU torch's result."""
    x = torch.linspace(-12, 12, 4001).to(dtype)
    x = torch.cat([x, _specials(dtype)])
    result = _zyx(fn, x)
    expected = getattr(torch, fn)(x)
    assert result.dtype == dtype
    finite = torch.isfinite(expected) & torch.isfinite(result)
    err = ulp_errors(result[finite], expected[finite].float(), dtype)
    assert float(err.max()) <= 1.0, _worst(x[finite], result[finite], expected[finite], err)
    _check_specials(fn, x, result, _reference(fn, x), dtype)


@pytest.mark.parametrize("fn", ["gelu", "gelu_tanh", "silu"])
def test_activations_float32(fn):
    """Whole activations (their lowerings around erf, tanh, exp) with OpInfo's float32 tolerance.
    Not at ±inf and the largest floats: CPU torch's gelu(inf) is NaN and its gelu(3.4e38) inf, the
    lowering's 0.5 x (1 + erf(x / sqrt 2)) gives inf and 3.4e38."""
    import torch.nn.functional as F

    f = {"gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu}[fn]
    x = torch.cat([torch.linspace(-20, 20, 100001), _specials()])
    x = x[~(x.abs() > 1e30)]
    torch.testing.assert_close(f(x.to("zyx")).cpu(), f(x), rtol=1.3e-6, atol=1e-5, equal_nan=True)


if __name__ == "__main__":
    only = sys.argv[1:]
    print("float32 (ulp):")
    for name in FLOAT32_FUNCTIONS:
        if not only or name in only:
            worst, where = measure_float32(name)
            print(f"  {name:8s} {worst:.3f}   {where}")
    for name in ("pow", "atan2"):
        if not only or name in only:
            x, y = _binary_inputs(name)
            f = getattr(torch, name)
            err = ulp_errors(f(x.to("zyx"), y.to("zyx")).cpu(), f(x.double(), y.double()))
            print(f"  {name:8s} {float(err.max()):.3f}")
    print("float64 vs mpmath (ulp):")
    for name in sorted(FLOAT64_INLINE):
        if not only or name in only:
            worst, where = measure_float64(name)
            print(f"  {name:8s} {worst:.3f}   {where}")
