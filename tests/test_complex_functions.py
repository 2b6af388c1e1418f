"""Complex functions, reductions, scans and the prims decompositions leave for complex values,
against CPU torch (tests/test_complex.py has the basics): expm1/log1p, the inverse
trigonometric and hyperbolic functions (branch cuts and special values included), pow in all
its overloads, var/std, cumsum/cumprod/logcumsumexp, padding, closeness, put/masked_scatter,
0-d scatters and scatter's reduce= argument, and the errors of ops CPU torch refuses for complex
values. CPU fallback off: every op here is a zyx lowering."""

import re
import warnings

import pytest
import torch
from conftest import assert_close

pytestmark = pytest.mark.usefixtures("no_fallback")

COMPLEX = [torch.complex64, torch.complex128]


def cmake(shape, dtype=torch.complex64, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.complex(torch.randn(shape, generator=gen, dtype=part) * scale,
                         torch.randn(shape, generator=gen, dtype=part) * scale)


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype in (torch.complex64, torch.float32) else \
        {"rtol": 1e-9, "atol": 1e-10}


INVERSE = {"asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "asinh": torch.asinh,
           "acosh": torch.acosh, "atanh": torch.atanh, "expm1": torch.expm1, "log1p": torch.log1p}


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", list(INVERSE))
def test_functions(op, dtype):
    fn = INVERSE[op]
    z = torch.cat([cmake((40,), dtype, seed=3), cmake((20,), dtype, seed=4, scale=1e-3),
                   cmake((10,), dtype, seed=5, scale=50.0)])
    # Both sides of the branch cuts (real axis beyond ±1, imaginary axis beyond ±i), 0 and
    # values near 1, where the naive formulas cancel.
    edges = [2 + 0j, -2 + 0j, 3j, -3j, 0j, 0.5 + 1e-7j, 1e-6 - 2e-6j, 1 + 1e-3j, -1 - 1e-3j, 1e5 + 1e5j]
    z = torch.cat([z, torch.tensor(edges, dtype=dtype)])
    z = torch.cat([z, torch.complex(z.real, -z.imag)])
    assert_close(fn(z.to("zyx")), fn(z), **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_function_special_values(dtype):
    inf, nan = float("inf"), float("nan")
    z = torch.tensor([complex(inf, 0), complex(nan, 0), complex(0, nan), complex(-inf, 1)], dtype=dtype)
    for fn in (torch.expm1, torch.log1p):
        got, want = fn(z.to("zyx")).cpu(), fn(z)
        assert torch.equal(got.isnan(), want.isnan()), (fn, got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_pow(dtype):
    z, w = cmake((4, 5), dtype, seed=1, scale=1.0), cmake((4, 5), dtype, seed=2, scale=1.0)
    z[0, :3] = 0
    w[0, :3] = torch.tensor([0j, 2 + 1j, -1 + 0j])
    zz, wz = z.to("zyx"), w.to("zyx")
    assert_close(torch.pow(zz, wz), torch.pow(z, w), equal_nan=True, **tol(dtype))
    for e in (0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5, 1 - 1j, 1j):
        assert_close(torch.pow(zz[1:], e), torch.pow(z[1:], e), **tol(dtype))
        assert_close(torch.pow(zz[0, 3:], e), torch.pow(z[0, 3:], e), **tol(dtype))
    assert_close(torch.pow(zz[0, :2], 2.5), torch.pow(z[0, :2], 2.5), equal_nan=True)
    for base in (2, 1, 0.5 + 1j):
        assert_close(torch.pow(base, wz), torch.pow(base, w), **tol(dtype))
    x = torch.rand(4, 5, dtype=z.real.dtype) + 0.5
    assert_close(torch.pow(x.to("zyx"), wz), torch.pow(x, w), **tol(dtype))
    assert_close(torch.pow(x.to("zyx"), 1 + 2j), torch.pow(x, 1 + 2j), **tol(dtype))
    assert_close(torch.float_power(zz, wz), torch.float_power(z, w), equal_nan=True)
    e = torch.randint(-3, 4, (4, 5))
    assert_close(torch.ldexp(zz, e.to("zyx")), torch.ldexp(z, e), **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_var_std(dtype):
    z = cmake((3, 4, 5), dtype, seed=4)
    zz = z.to("zyx")
    for fn in (lambda t: t.var(), lambda t: t.var(1), lambda t: t.std((0, 2), keepdim=True),
               lambda t: t.var(0, correction=0), lambda t: torch.var_mean(t, 2),
               lambda t: torch.std_mean(t, (0, 1), correction=2, keepdim=True),
               lambda t: t.conj().var(1), lambda t: t[0, 0, 0].var(correction=0)):
        want, got = fn(z), fn(zz)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert g.dtype == w.dtype
            assert_close(g, w, **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_scans(dtype):
    z = cmake((3, 9), dtype, seed=5, scale=0.8)
    zz = z.to("zyx")
    for d in (0, 1, -1):
        assert_close(torch.cumsum(zz, d), torch.cumsum(z, d), **tol(dtype))
        assert_close(torch.cumprod(zz, d), torch.cumprod(z, d), **tol(dtype))
    assert_close(torch.cumprod(zz.conj(), 1), torch.cumprod(z.conj(), 1), **tol(dtype))
    assert_close(torch.cumsum(zz[0, 0], 0), torch.cumsum(z[0, 0], 0))
    assert_close(torch.cumprod(zz[:, :0], 1), torch.cumprod(z[:, :0], 1))
    x = torch.randn(3, 4)
    assert_close(torch.cumsum(x.to("zyx"), 1, dtype=dtype), torch.cumsum(x, 1, dtype=dtype))


def test_pad_and_prim_copies():
    z = cmake((3, 4), seed=6)
    zz = z.to("zyx")
    F = torch.nn.functional
    for pad, value in (((1, 2), 0), ((1, 1, 2, 0), 1.5), ((-1, 2), 0.5)):
        assert torch.equal(F.pad(zz, pad, value=value).cpu(), F.pad(z, pad, value=value))
    assert torch.equal(torch.constant_pad_nd(zz, (0, 1, 1, 0), 1 - 2j).cpu(),
                       torch.constant_pad_nd(z, (0, 1, 1, 0), 1 - 2j))
    d = cmake((3,), seed=7)
    assert torch.equal(torch.diagonal_scatter(zz, d.to("zyx")).cpu(), torch.diagonal_scatter(z, d))
    src = cmake((2, 2), seed=8)
    assert torch.equal(torch.as_strided_scatter(zz, src.to("zyx"), (2, 2), (1, 2), 1).cpu(),
                       torch.as_strided_scatter(z, src, (2, 2), (1, 2), 1))
    assert torch.equal(zz.unfold(1, 2, 1).contiguous().cpu(), z.unfold(1, 2, 1).contiguous())


def test_closeness_and_selection():
    z = cmake((3, 4), seed=9)
    zz, wz = z.to("zyx"), (z + 1e-7).to("zyx")
    assert torch.allclose(zz, wz) and not torch.allclose(zz, wz + 1j)
    assert torch.equal(torch.isclose(zz, wz + 1e-3).cpu(), torch.isclose(z, z + 1e-7 + 1e-3))
    src = cmake((6,), seed=10)
    idx = torch.tensor([0, -1, 5])
    assert torch.equal(zz.put(idx.to("zyx"), src[:3].to("zyx")).cpu(), z.put(idx, src[:3]))
    assert_close(zz.put(idx.to("zyx"), src[:3].to("zyx"), accumulate=True), z.put(idx, src[:3], accumulate=True))
    mask = z.real > 0
    assert torch.equal(zz.masked_scatter(mask.to("zyx"), src.to("zyx").repeat(2)).cpu(),
                       z.masked_scatter(mask, src.repeat(2)))
    assert torch.equal(torch.nonzero_static(zz, size=20).cpu(), torch.nonzero_static(z, size=20))
    s, i = z[0, 0], torch.tensor(0)
    assert_close(s.to("zyx").scatter_add(0, i.to("zyx"), s.to("zyx")), s.scatter_add(0, i, s))
    assert torch.equal(s.to("zyx").gather(0, i.view(1).to("zyx")).cpu(), s.gather(0, i.view(1)))
    r = torch.randn_like(zz, dtype=torch.float64)
    assert r.dtype == torch.float64 and r.device.type == "zyx"
    grown = torch.ops.aten.resize(zz, (4, 4))
    assert torch.equal(grown.cpu()[:3], z) and torch.equal(grown.cpu()[3], torch.zeros(4, dtype=z.dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_logcumsumexp(dtype):
    # Wide values, so the running value's imaginary part leaves (-π, π] and must follow ATen's
    # sequential scan's branch; infinities and a NaN take ATen's special cases.
    z = cmake((4, 37), dtype, seed=11, scale=6.0)
    z[0, 3], z[1, 5], z[1, 6] = complex(float("-inf"), 0), complex(float("inf"), 1), complex(float("inf"), 2)
    z[2, 7], z[3, 0] = complex(float("nan"), 0), complex(float("-inf"), 2)
    zz = z.to("zyx")
    for d in (0, 1, -1):
        got, want = torch.logcumsumexp(zz, d), torch.logcumsumexp(z, d)
        assert got.dtype == want.dtype
        assert_close(got, want, equal_nan=True, **tol(dtype))
    assert_close(torch.logcumsumexp(zz[0, 1], 0), torch.logcumsumexp(z[0, 1], 0))
    assert torch.logcumsumexp(zz[:, :0], 1).shape == (4, 0)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_scatter_reduce_argument(dtype):
    z, src = cmake((3, 4), dtype, seed=12), cmake((2, 4), dtype, seed=13)
    idx = torch.tensor([[0, 1, 0, 2], [0, 0, 1, 2]])
    zz, iz, sz = z.to("zyx"), idx.to("zyx"), src.to("zyx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch deprecates reduce= with a tensor src)
        for reduce in ("add", "multiply"):
            for value, zvalue in ((src, sz), (2.5, 2.5), (1 - 2j, 1 - 2j)):
                got, want = zz.scatter(0, iz, zvalue, reduce=reduce), z.scatter(0, idx, value, reduce=reduce)
                assert got.dtype == want.dtype
                assert_close(got, want, **tol(dtype))
        with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
            zz.scatter(0, iz, sz, reduce="max")
    assert_close(zz.scatter(0, iz, 1 + 1j), z.scatter(0, idx, 1 + 1j))


REFUSED = {"max.dim": lambda t: t.max(0), "min.dim": lambda t: t.min(0),
           "maximum": lambda t: torch.maximum(t, t), "argmax": torch.argmax, "sort": torch.sort, "sort_stable": lambda t: t.sort(stable=True),
           "topk": lambda t: t.topk(1), "clamp": lambda t: t.clamp(0, 1), "relu": torch.relu,
           "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc}


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", list(REFUSED))
def test_refused_as_cpu_torch(op, dtype):
    # (raised when recorded, CPU torch's type and message, without a CPU fallback)
    z = cmake((3, 3), dtype, seed=14)
    with pytest.raises(Exception) as want:  # (whatever CPU torch raises)
        REFUSED[op](z)
    with pytest.raises(want.type, match=f"^{re.escape(str(want.value))}$"):
        REFUSED[op](z.to("zyx"))
