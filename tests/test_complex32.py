"""torch.complex32 (torch.chalf, ComplexHalf) on zyx against CPU torch: interleaved float16 pairs
(record/complex.py), transfers and casts both ways, factories and fills, views (view_as_real,
view_as_complex of halves, dtype views), indexing and joining, and the arithmetic CPU torch has
ComplexHalf kernels for (add/sub/mul, neg, abs, sgn, conj, comparisons, where, var) with CPU
torch's values; every other op raises CPU torch's own exception and message ("div_cpu" not
implemented for 'ComplexHalf'), as CPU torch does. CPU fallback off: all of it is native."""

import warnings

import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"),
              pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")]


def chalf(shape=(4, 3), seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)) * 3
    return x.to(torch.complex32)


def same(zyx_value, cpu_value):
    """Exact equality of values (NaNs where CPU torch has them), dtype and shape; CPU torch has no
    ComplexHalf equal, so complex results compare through their real views."""
    if isinstance(cpu_value, (tuple, list)):
        assert len(zyx_value) == len(cpu_value)
        for z, c in zip(zyx_value, cpu_value):
            same(z, c)
        return
    if not isinstance(cpu_value, torch.Tensor):
        assert zyx_value == cpu_value
        return
    assert zyx_value.device.type == "zyx"
    got = zyx_value.cpu()
    assert got.dtype == cpu_value.dtype and got.shape == cpu_value.shape
    if cpu_value.is_complex():
        got, cpu_value = torch.view_as_real(got.resolve_conj()), torch.view_as_real(cpu_value.resolve_conj())
    torch.testing.assert_close(got, cpu_value, atol=0, rtol=0, equal_nan=True)


def test_storage_and_transfers():
    h = chalf()
    z = h.to("zyx")
    assert z.dtype == torch.complex32 and z.element_size() == 4 and z.is_complex()
    same(z, h)
    same(z.t().contiguous(), h.t().contiguous())
    same(z[1:, ::2], h[1:, ::2])
    same(torch.tensor([1 + 2j, 3], dtype=torch.chalf).to("zyx"), torch.tensor([1 + 2j, 3], dtype=torch.chalf))
    assert z[1, 2].item() == h[1, 2].item() and z.tolist() == h.tolist()


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.float32, torch.float16,
                                   torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_casts(dtype):
    h = chalf(seed=1)
    h[0, 0] = complex(float("inf"), float("nan"))
    x = torch.randn(4, 3) * 100
    x = x.to(dtype) if not dtype.is_complex else torch.complex(x, -x).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (complex to real discards the imaginary part)
        same(x.to("zyx").chalf(), x.chalf())
        same(x.to("zyx").to(torch.complex32), x.to(torch.complex32))
        if dtype not in (torch.int32, torch.int64, torch.bool):  # (inf/NaN to integers: undefined)
            same(h.to("zyx").to(dtype), h.to(dtype))
        same(h.to("zyx").to(torch.complex64), h.to(torch.complex64))
        z = h.to("zyx").clone()
        z.copy_(x.to("zyx"))
        c = h.clone()
        c.copy_(x)
        same(z, c)


def test_factories_and_fills():
    z = torch.zeros(3, dtype=torch.chalf, device="zyx")
    same(z, torch.zeros(3, dtype=torch.chalf))
    same(torch.ones(2, 2, dtype=torch.chalf, device="zyx"), torch.ones(2, 2, dtype=torch.chalf))
    same(torch.full((3,), 1 + 2j, dtype=torch.chalf, device="zyx"),
         torch.full((3,), 1 + 2j, dtype=torch.chalf))
    h = chalf()
    zh = h.to("zyx")
    for fn in (torch.zeros_like, torch.ones_like, lambda t: torch.full_like(t, 0.1 - 3j),
               lambda t: t.new_full((2,), 1j), lambda t: t.clone().fill_(2 - 1j),
               lambda t: t.clone().zero_()):
        same(fn(zh), fn(h))
    assert torch.empty_like(zh).dtype == torch.complex32
    for draw in (torch.randn_like(zh), torch.rand_like(zh), zh.clone().normal_(), zh.clone().uniform_(),
                 torch.randn(5, dtype=torch.chalf, device="zyx")):
        assert draw.dtype == torch.complex32 and draw.device.type == "zyx"
        assert torch.isfinite(torch.view_as_real(draw.cpu())).all()


def test_views():
    h = chalf()
    z = h.to("zyx")
    same(torch.view_as_real(z), torch.view_as_real(h))
    same(z.real, h.real)
    same(z.imag, h.imag)
    halves = torch.randn(4, 2).half()
    same(torch.view_as_complex(halves.to("zyx")), torch.view_as_complex(halves))
    same(z.view(torch.float32), h.view(torch.float32))
    same(z.view(torch.int16), h.view(torch.int16))
    f = torch.randn(6)
    same(f.to("zyx").view(torch.complex32), f.view(torch.complex32))
    # a write through the real view reaches the complex tensor (one storage)
    torch.view_as_real(z)[0, 0, 1] = 5
    c = h.clone()
    torch.view_as_real(c)[0, 0, 1] = 5
    same(z, c)
    for fn in (lambda t: t.t(), lambda t: t.reshape(12), lambda t: t[:1].expand(3, 3),
               lambda t: t.unfold(0, 2, 1),
               lambda t: t.diagonal(), lambda t: t.movedim(0, 1), lambda t: t.as_strided((2,), (1,)),
               lambda t: t.conj(), lambda t: t.conj().resolve_conj(), lambda t: t.conj_physical(),
               lambda t: torch._neg_view(t).resolve_neg()):
        same(fn(z), fn(c))


def test_indexing_and_joining():
    h, x = chalf(), torch.randn(4, 3, dtype=torch.complex64)
    z, zx = h.to("zyx"), x.to("zyx")
    i, m = torch.tensor([0, 2]), torch.randn(4, 3) > 0
    zi, zm = i.to("zyx"), m.to("zyx")
    same(z[zi], h[i])
    same(z.index_select(0, zi), h.index_select(0, i))
    same(z.masked_fill(zm, 1j), h.masked_fill(m, 1j))
    same(z.masked_select(zm), h.masked_select(m))
    same(z.index_put((zi,), z[:2]), h.index_put((i,), h[:2]))
    same(z.index_add(0, zi, z[:2]), h.index_add(0, i, h[:2]))
    same(torch.where(zm, z, 0), torch.where(m, h, 0))
    same(torch.cat([z, z]), torch.cat([h, h]))
    same(torch.cat([z, zx]), torch.cat([h, x]))
    same(torch.stack([z, z], 1), torch.stack([h, h], 1))
    same(z.flip(0), h.flip(0))
    same(z.roll(1, 0), h.roll(1, 0))
    same(torch.nn.functional.pad(z, (1, 1)), torch.nn.functional.pad(h, (1, 1)))
    same(z.tril(), h.tril())
    same(z.nonzero(), h.nonzero())


def test_arithmetic():
    h, g = chalf(seed=2), chalf(seed=3)
    h[0, 0] = 0
    x, f = torch.randn(4, 3, dtype=torch.complex64), torch.randn(4, 3)
    z, zg, zx, zf = h.to("zyx"), g.to("zyx"), x.to("zyx"), f.to("zyx")
    # (complex32 computes in complex64 and rounds once, as CPU torch: the products are exact)
    for fn in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
               lambda a, b: torch.add(a, b, alpha=2),
               lambda a, b: torch.sub(a, b, alpha=2), lambda a, b: a + 1, lambda a, b: a * 2.5,
               lambda a, b: a * (1 + 1j), lambda a, b: 1 - a, lambda a, b: a == b, lambda a, b: a != b,
               lambda a, b: a == 0, lambda a, b: -a, lambda a, b: a.abs(), lambda a, b: a.sgn(),
               lambda a, b: a.conj() * b, lambda a, b: a.isnan(), lambda a, b: a.isfinite(),
               lambda a, b: torch.isclose(a, b), lambda a, b: a.var(), lambda a, b: a.std(),
               lambda a, b: a.any(), lambda a, b: a.all(), lambda a, b: a.count_nonzero()):
        same(fn(z, zg), fn(h, g))
    same(z + zx, h + x)  # (promoted: complex64)
    same(z * zf, h * f)
    same(z.sum(dtype=torch.complex64), h.sum(dtype=torch.complex64))
    assert torch.allclose(z, z) and torch.allclose(z, zg) == torch.allclose(h, g)
    same(torch.complex(f.half().to("zyx"), f.half().to("zyx")), torch.complex(f.half(), f.half()))


def _error(fn, *args):
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001  (whatever CPU torch raises: zyx must raise the same)
        return type(exc), str(exc).splitlines()[0]
    return None


REFUSED = {
    "div": lambda t: t / t, "div_scalar": lambda t: t / 2, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt,
    "sin": torch.sin, "tanh": torch.tanh, "reciprocal": torch.reciprocal, "sigmoid": torch.sigmoid,
    "angle": torch.angle, "pow": lambda t: t ** 2, "square": torch.square, "sum": torch.sum,
    "mean": torch.mean, "max_dim": lambda t: t.max(0),
    "prod": torch.prod, "cumsum": lambda t: t.cumsum(0), "cumprod": lambda t: t.cumprod(0),
    "logcumsumexp": lambda t: t.logcumsumexp(0), "equal": lambda t: torch.equal(t, t),
    "mm": lambda t: t @ t.t(), "dot": lambda t: t[0].dot(t[0]), "max": torch.max, "amax": torch.amax,
    "gather": lambda t: t.gather(0, torch.zeros(1, 3, dtype=torch.long, device=t.device)),
    "take": lambda t: t.take(torch.zeros(2, dtype=torch.long, device=t.device)),
    "lerp": lambda t: torch.lerp(t, t, 0.5), "lerp_tensor": lambda t: torch.lerp(t, t, t),
    "addcdiv": lambda t: torch.addcdiv(t, t, t), "logical_not": torch.logical_not, "trace": torch.trace,
    "atan2": lambda t: torch.atan2(t, t), "lt": lambda t: torch.lt(t, t),
    "linspace": lambda t: torch.linspace(0, 1, 3, dtype=torch.chalf, device=t.device),
    "eye": lambda t: torch.eye(2, dtype=torch.chalf, device=t.device),
    "polar": lambda t: torch.polar(t.real.contiguous(), t.real.contiguous()),
}


@pytest.mark.parametrize("op", list(REFUSED))
def test_refused_as_cpu_torch(op):
    fn, h = REFUSED[op], chalf()
    want = _error(fn, h)
    assert want is not None, f"CPU torch computes {op} for complex32 now: allow it on zyx"
    assert _error(fn, h.to("zyx")) == want
