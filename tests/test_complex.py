"""torch.complex64 and torch.complex128 on zyx against CPU torch: transfer and factories, views
sharing storage (view_as_real/view_as_complex, .real/.imag, slices, dtype views), PyTorch's lazy
conjugate bit, elementwise math with complex, real and Python operands (type promotion as CPU
torch), casts both ways, reductions, matmul, cat/stack, copies and autograd (Wirtinger gradients
as CPU torch computes them). With the CPU fallback off: every op here is a zyx lowering. Runs on
zyx:0, the first configured backend (``ZYX_BACKENDS=opencl`` puts it through the OpenCL
renderer)."""

import math
import warnings

import pytest
import torch
from conftest import assert_close

import torch_zyx

pytestmark = pytest.mark.usefixtures("no_fallback")

COMPLEX = [torch.complex64, torch.complex128]


def cmake(shape, dtype=torch.complex64, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.complex(torch.randn(shape, generator=gen, dtype=part) * scale,
                         torch.randn(shape, generator=gen, dtype=part) * scale)


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype in (torch.complex64, torch.float32) else {}


# ------------------------------------------------------------------ creation and transfer


@pytest.mark.parametrize("dtype", COMPLEX)
def test_transfer_round_trip(dtype):
    z = cmake((3, 5), dtype)
    on = z.to("zyx")
    assert on.dtype == dtype and on.shape == z.shape and on.stride() == z.stride()
    assert torch.equal(on.cpu(), z)
    assert torch.equal(z.t().to("zyx").cpu(), z.t())  # (a non-contiguous source)
    assert torch.equal(z[:, 1::2].to("zyx").cpu(), z[:, 1::2])
    assert torch.equal(z.conj().to("zyx").cpu(), z.conj())  # (a CPU conjugate view: resolved)
    assert on[1, 2].item() == z[1, 2].item()
    assert on.tolist() == z.tolist()
    assert "j" in repr(on)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_factories(dtype):
    for fn in (torch.zeros, torch.ones):
        assert torch.equal(fn(2, 3, dtype=dtype, device="zyx").cpu(), fn(2, 3, dtype=dtype))
    assert torch.equal(torch.full((2, 2), 1 - 2j, dtype=dtype, device="zyx").cpu(),
                       torch.full((2, 2), 1 - 2j, dtype=dtype))
    assert torch.full((2,), 1 + 1j, device="zyx").dtype == torch.full((2,), 1 + 1j).dtype
    e = torch.empty(4, 2, dtype=dtype, device="zyx")
    assert e.dtype == dtype and e.shape == (4, 2)
    z = cmake((3,), dtype).to("zyx")
    for fn in (torch.zeros_like, torch.ones_like, torch.empty_like):
        assert fn(z).dtype == dtype and fn(z).shape == z.shape
    assert torch.equal(torch.zeros_like(z).cpu(), torch.zeros(3, dtype=dtype))
    assert torch.equal(z.new_zeros(2).cpu(), torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_randn(dtype):
    torch.manual_seed(0)
    z = torch.randn(200, 100, dtype=dtype, device="zyx").cpu()
    assert z.dtype == dtype
    # As CPU torch: each part has variance 1/2, the complex value variance 1.
    assert abs(z.real.var().item() - 0.5) < 0.03 and abs(z.imag.var().item() - 0.5) < 0.03
    assert abs(z.abs().pow(2).mean().item() - 1.0) < 0.05
    u = torch.rand(1000, dtype=dtype, device="zyx").cpu()
    assert 0 <= u.real.min() and u.real.max() < 1 and 0 <= u.imag.min() and u.imag.max() < 1


@pytest.mark.parametrize("part", [torch.float32, torch.float64])
def test_complex_and_polar(part):
    gen = torch.Generator().manual_seed(1)
    re, im = torch.randn(4, 3, generator=gen, dtype=part), torch.randn(3, generator=gen, dtype=part)
    assert_close(torch.complex(re.to("zyx"), im.to("zyx")), torch.complex(re, im))
    r, theta = re.abs(), im
    assert_close(torch.polar(r.to("zyx"), theta.to("zyx")), torch.polar(r, theta))


# ------------------------------------------------------------------------------ views


def test_view_as_real_shares_storage():
    z = cmake((3, 4))
    zz = z.to("zyx")
    r = torch.view_as_real(zz)
    assert r.dtype == torch.float32 and r.shape == (3, 4, 2) and r.stride() == (8, 2, 1)
    assert torch.equal(r.cpu(), torch.view_as_real(z))
    r[1, 2, 1] = 7.0  # write through the real view
    z2 = z.clone()
    torch.view_as_real(z2)[1, 2, 1] = 7.0
    assert torch.equal(zz.cpu(), z2)
    zz[0, 0] = 1 + 5j  # and through the complex one
    assert r[0, 0].tolist() == [1.0, 5.0]


def test_view_as_complex_shares_storage():
    x = torch.randn(3, 4, 2)
    xx = x.to("zyx")
    c = torch.view_as_complex(xx)
    assert c.dtype == torch.complex64 and c.shape == (3, 4)
    assert torch.equal(c.cpu(), torch.view_as_complex(x))
    c.mul_(2j)
    x2 = x.clone()
    torch.view_as_complex(x2).mul_(2j)
    assert_close(xx, x2)
    # ATen's checks and messages
    for make_bad in (lambda t: t[:, :3], lambda t: t.t(), lambda t: t[1:]):
        base = torch.randn(4, 4)
        bad = make_bad(base)
        with pytest.raises(RuntimeError) as expected:
            torch.view_as_complex(bad.reshape(-1)[1:].view(-1, 1) if bad.is_contiguous() else bad)
        zbad = make_bad(base.to("zyx"))
        with pytest.raises(RuntimeError) as got:
            torch.view_as_complex(zbad.reshape(-1)[1:].view(-1, 1) if zbad.is_contiguous() else zbad)
        assert str(got.value) == str(expected.value)


def test_real_imag_views():
    z = cmake((2, 3))
    zz = z.to("zyx")
    assert torch.equal(zz.real.cpu(), z.real) and torch.equal(zz.imag.cpu(), z.imag)
    assert zz.real.stride() == z.real.stride() and zz.imag.storage_offset() == z.imag.storage_offset()
    zz.real.fill_(1.5)
    zz.imag[0] = -2.0
    z.real.fill_(1.5)
    z.imag[0] = -2.0
    assert torch.equal(zz.cpu(), z)


def test_movement_views_and_copies():
    z = cmake((4, 6))
    zz = z.to("zyx")
    for fn in (lambda t: t[1:3, ::2], lambda t: t.t(), lambda t: t.reshape(3, 8), lambda t: t.view(2, 12),
               lambda t: t.permute(1, 0)[2], lambda t: t.unsqueeze(0).expand(2, 4, 6),
               lambda t: t.t().reshape(24), lambda t: t.flip(0), lambda t: t.diagonal(),
               lambda t: t.narrow(1, 2, 3).contiguous(), lambda t: t.unbind(0)[3]):
        got, want = fn(zz), fn(z)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got.cpu(), want)
    v = zz[1:3, ::2]
    v.add_(1j)
    z[1:3, ::2].add_(1j)
    assert torch.equal(zz.cpu(), z)


def test_dtype_views():
    z = cmake((2, 4))
    zz = z.to("zyx")
    assert torch.equal(zz.view(torch.float32).cpu(), z.view(torch.float32))
    assert torch.equal(zz.view(torch.complex128).cpu(), z.view(torch.complex128))
    assert torch.equal(zz.view(torch.int64).cpu(), z.view(torch.int64))
    x = torch.randn(3, 4)
    assert torch.equal(x.to("zyx").view(torch.complex64).cpu(), x.view(torch.complex64))
    f = zz.view(torch.float32)
    f[0, 0] = 9.0
    assert zz[0, 0].item().real == 9.0


# ------------------------------------------------------------------------------ conjugate bit


def test_conj_bit():
    z = cmake((3, 4))
    zz = z.to("zyx")
    c = zz.conj()
    assert c.is_conj() and not zz.is_conj()
    assert torch.equal(c.cpu(), z.conj())
    assert c.t().is_conj() and torch.equal(c.t().cpu(), z.conj().t())
    r = c.resolve_conj()
    assert not r.is_conj() and torch.equal(r.cpu(), z.conj().resolve_conj())
    p = torch.conj_physical(zz)
    assert not p.is_conj() and torch.equal(p.cpu(), torch.conj_physical(z))
    assert torch.equal(c.imag.cpu(), z.conj().imag)  # (a negative view)
    assert torch.equal((c.imag * 2).cpu(), z.conj().imag * 2)
    assert torch.equal((c + zz).cpu(), z.conj() + z)
    with pytest.raises(RuntimeError, match="unresolved conjugated"):
        torch.view_as_real(c)
    # writing into a conjugate view stores the conjugate
    w = zz.clone()
    w.conj()[0] = 1 + 2j
    z2 = z.clone()
    z2.conj()[0] = 1 + 2j
    assert torch.equal(w.cpu(), z2)
    x = zz.clone()
    x.conj_physical_()
    assert torch.equal(x.cpu(), z.conj_physical())
    assert zz.conj().conj() is not None and not zz.conj().conj().is_conj()


# ------------------------------------------------------------------------------ elementwise


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2 - 1j) if (a.is_complex() or b.is_complex())
    else torch.add(a, b, alpha=2),
    "eq": torch.eq, "ne": torch.ne,
}


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("other", ["complex", "float32", "float64", "int", "complex128", "bcast"])
def test_binary(op, dtype, other):
    fn = BINARY[op]
    a = cmake((3, 4), dtype, seed=1)
    b = {"complex": cmake((3, 4), dtype, seed=2), "float32": torch.randn(3, 4),
         "float64": torch.randn(3, 4, dtype=torch.float64), "int": torch.randint(-3, 4, (3, 4)),
         "complex128": cmake((3, 4), torch.complex128, seed=3), "bcast": cmake((4,), dtype, seed=4)}[other]
    if op in ("eq", "ne"):
        b = torch.where(torch.rand(3, 4) < 0.5, a.to(b.dtype) if b.is_complex() else b, b)
    want = fn(a, b)
    got = fn(a.to("zyx"), b.to("zyx"))
    assert got.dtype == want.dtype
    assert_close(got, want, **tol(want.dtype))
    want_r = fn(b, a)
    assert_close(fn(b.to("zyx"), a.to("zyx")), want_r, **tol(want_r.dtype))


@pytest.mark.parametrize("scalar", [2, 2.5, 1 - 3j, True])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_scalars(op, scalar):
    fn = BINARY[op]
    if scalar is True and op == "sub":
        return  # (CPU torch refuses bool subtraction)
    z = cmake((5,), seed=5)
    assert_close(fn(z.to("zyx"), scalar), fn(z, scalar), **tol(torch.complex64))
    assert_close(fn(scalar, z.to("zyx")) if op in ("add", "mul") else fn(z.to("zyx") * 0 + scalar, z.to("zyx")),
                 fn(scalar, z) if op in ("add", "mul") else fn(z * 0 + scalar, z), **tol(torch.complex64))
    x = torch.randn(5)
    if isinstance(scalar, complex):  # real tensor, complex scalar: a complex result
        want = fn(x, scalar)
        got = fn(x.to("zyx"), scalar)
        assert got.dtype == want.dtype == torch.complex64
        assert_close(got, want, **tol(torch.complex64))


def test_inplace_and_out():
    z = cmake((3, 3))
    w = cmake((3, 3), seed=3)
    zz, ww = z.to("zyx"), w.to("zyx")
    zz.mul_(ww).add_(1j).div_(2)
    z.mul_(w).add_(1j).div_(2)
    assert_close(zz, z, **tol(torch.complex64))
    out = torch.empty(3, 3, dtype=torch.complex64, device="zyx")
    torch.sub(zz, ww, out=out)
    assert_close(out, z - w, **tol(torch.complex64))
    x = torch.randn(3, 3, device="zyx")
    with pytest.raises(RuntimeError, match="ComplexFloat can't be cast to the desired output type Float"):
        x.add_(zz)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "angle": torch.angle, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "reciprocal": torch.reciprocal, "sgn": torch.sgn, "isnan": torch.isnan,
    "isfinite": torch.isfinite, "isinf": torch.isinf, "real": torch.real, "conj_physical": torch.conj_physical,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "sinh": torch.sinh, "cosh": torch.cosh,
    "tanh": torch.tanh, "log2": torch.log2, "log10": torch.log10, "exp2": torch.exp2, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid,
}
# Formulas whose special values (infinities, NaN, huge parts) take other branches than c10's.
FINITE_ONLY = ("log", "reciprocal", "sgn", "sqrt", "exp", "sin", "cos", "tan", "sinh", "cosh", "tanh",
               "log2", "log10", "exp2", "rsqrt", "sigmoid")


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op, dtype):
    fn = UNARY[op]
    z = cmake((4, 5), dtype, seed=6)
    z[0, 0] = 0
    z[0, 1] = -3 + 0j
    z[0, 2] = -3 - 0j * 1
    z[1, 0] = complex(float("nan"), 1)
    z[1, 1] = complex(float("inf"), 2)
    z[1, 2] = complex(1e30, 1e30) if dtype == torch.complex64 else complex(1e300, 1e300)
    want = fn(z)
    got = fn(z.to("zyx"))
    assert got.dtype == want.dtype and got.shape == want.shape
    if op in FINITE_ONLY:
        # Special values where c10's formulas and ours may take other branches: compared on the
        # finite inputs only.
        got, want = got.cpu()[2:], want[2:]
        torch.testing.assert_close(got, want, **tol(dtype))
    else:
        assert_close(got, want, equal_nan=True, **tol(want.dtype))


def test_where():
    z, w = cmake((3, 4), seed=1), cmake((3, 4), seed=2)
    cond = torch.rand(3, 4) > 0.5
    assert_close(torch.where(cond.to("zyx"), z.to("zyx"), w.to("zyx")), torch.where(cond, z, w))
    assert_close(torch.where(cond.to("zyx"), z.to("zyx"), 0.0), torch.where(cond, z, 0.0))
    x = torch.randn(4)
    assert_close(torch.where(cond.to("zyx"), z.to("zyx"), x.to("zyx")), torch.where(cond, z, x))


def test_type_promotion():
    cases = [(cmake(2), torch.randn(2, dtype=torch.float64)), (cmake(2), torch.tensor(1.5, dtype=torch.float64)),
             (cmake(2, torch.complex128), torch.randn(2)), (torch.randn(2), 1j), (torch.arange(2), 1j),
             (cmake(2), torch.arange(2)), (torch.randn(2, dtype=torch.float64), torch.tensor(1j))]
    for a, b in cases:
        za = a.to("zyx")
        zb = b.to("zyx") if isinstance(b, torch.Tensor) and b.dim() else b
        assert torch.result_type(za, zb) == torch.result_type(a, b)
        assert (za * zb).dtype == (a * b).dtype
        assert_close(za * zb, a * b, **tol(torch.complex64))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_casts(dtype):
    z = cmake((3, 2), dtype)
    zz = z.to("zyx")
    for target in (torch.float32, torch.float64, torch.int64, torch.complex64, torch.complex128):
        with warnings.catch_warnings():  # (CPU torch warns once that the imaginary part is dropped)
            warnings.simplefilter("ignore")
            want = z.to(target)
        got = zz.to(target)
        assert got.dtype == target
        assert_close(got, want, **tol(target))
    for source in (torch.randn(3), torch.arange(3), torch.tensor([True, False, True])):
        assert_close(source.to("zyx").to(dtype), source.to(dtype))


# ------------------------------------------------------------------------------ reductions, matmul


@pytest.mark.parametrize("dtype", COMPLEX)
def test_reductions(dtype):
    z = cmake((3, 4, 5), dtype, scale=0.6)
    zz = z.to("zyx")
    for fn in (lambda t: t.sum(), lambda t: t.sum(1), lambda t: t.sum((0, 2), keepdim=True),
               lambda t: t.mean(), lambda t: t.mean(-1), lambda t: t.prod(), lambda t: t.prod(1),
               lambda t: t.prod(2, keepdim=True), lambda t: t[:, :0].sum(1), lambda t: t[:, :0].prod(1),
               lambda t: t.conj().sum(0)):
        assert_close(fn(zz), fn(z), rtol=1e-4 if dtype == torch.complex64 else 1e-10, atol=1e-5)
    x = torch.randn(3, 4)
    assert_close(x.to("zyx").sum(1, dtype=dtype), x.sum(1, dtype=dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_matmul(dtype):
    a, b = cmake((5, 7), dtype, seed=1), cmake((7, 3), dtype, seed=2)
    za, zb = a.to("zyx"), b.to("zyx")
    t = tol(dtype) if dtype == torch.complex128 else {"rtol": 1e-4, "atol": 1e-4}
    assert_close(za @ zb, a @ b, **t)
    assert_close(za.mm(zb), a.mm(b), **t)
    assert_close(za.conj() @ zb, a.conj() @ b, **t)
    assert_close(za @ zb.mH.mH, a @ b, **t)
    assert_close(zb.t() @ za.t(), b.t() @ a.t(), **t)
    ba, bb = cmake((2, 5, 7), dtype, seed=3), cmake((2, 7, 3), dtype, seed=4)
    assert_close(torch.bmm(ba.to("zyx"), bb.to("zyx")), torch.bmm(ba, bb), **t)
    assert_close(ba.to("zyx") @ bb.to("zyx"), ba @ bb, **t)
    v = cmake((7,), dtype, seed=5)
    assert_close(za @ v.to("zyx"), a @ v, **t)
    assert_close(torch.dot(v.to("zyx"), v.to("zyx")), torch.dot(v, v), **t)
    assert_close(torch.vdot(v.to("zyx"), v.to("zyx")), torch.vdot(v, v), **t)
    c = cmake((5, 3), dtype, seed=6)
    assert_close(torch.addmm(c.to("zyx"), za, zb, beta=0.5, alpha=1j), torch.addmm(c, a, b, beta=0.5, alpha=1j), **t)


def test_cat_stack_clone_copy():
    z, w = cmake((2, 3), seed=1), cmake((2, 3), seed=2)
    x = torch.randn(2, 3)
    zz, zw, zx = z.to("zyx"), w.to("zyx"), x.to("zyx")
    assert_close(torch.cat([zz, zw], 1), torch.cat([z, w], 1))
    assert_close(torch.cat([zz, zx]), torch.cat([z, x]))
    assert_close(torch.stack([zz, zw], 2), torch.stack([z, w], 2))
    c = zz.clone()
    c.add_(1)
    assert torch.equal(zz.cpu(), z) and torch.equal(c.cpu(), z + 1)
    assert torch.equal(zz.t().clone().cpu(), z.t().clone())
    d = torch.empty(2, 3, dtype=torch.complex64, device="zyx")
    d.copy_(zx)  # real into complex
    assert torch.equal(d.cpu(), x.to(torch.complex64))
    d.copy_(w)  # from a CPU tensor
    assert torch.equal(d.cpu(), w)
    d[0].copy_(zz[1])
    e = w.clone()
    e[0].copy_(z[1])
    assert torch.equal(d.cpu(), e)
    r = torch.empty(2, 3, device="zyx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r2 = torch.empty(2, 3).copy_(z)
    r.copy_(zz)  # complex into real: the real part
    assert torch.equal(r.cpu(), r2)
    d.copy_(zz.to(torch.complex128))
    assert torch.equal(d.cpu(), z)


def test_indexing_through_the_real_view():
    z = cmake((5, 4), seed=7)
    zz = z.to("zyx")
    i = torch.tensor([4, 0, 2])
    assert torch.equal(zz[i.to("zyx")].cpu(), z[i])
    assert torch.equal(zz[:, i[1:].to("zyx")].cpu(), z[:, i[1:]])
    mask = z.real > 0
    assert torch.equal(zz[mask.to("zyx")].cpu(), z[mask])
    assert torch.equal(zz.nonzero().cpu(), z.nonzero())
    idx = torch.randint(0, 5, (3, 4))
    assert torch.equal(zz.gather(0, idx.to("zyx")).cpu(), z.gather(0, idx))
    src = cmake((3, 4), seed=8)
    assert torch.equal(zz.scatter(0, idx[:1].to("zyx"), src.to("zyx")).cpu(), z.scatter(0, idx[:1], src))
    assert_close(zz.scatter_add(0, idx.to("zyx"), src.to("zyx")), z.scatter_add(0, idx, src))
    a, b = zz.clone(), z.clone()
    a[i.to("zyx")] = 1 - 1j
    b[i] = 1 - 1j
    assert torch.equal(a.cpu(), b)
    a.index_put_((i.to("zyx"),), src[:3].to("zyx"), accumulate=True)
    b.index_put_((i,), src[:3], accumulate=True)
    assert_close(a, b)
    assert torch.equal(zz, zz.clone()) and not torch.equal(zz, zz + 1)


# ------------------------------------------------------------------------------ autograd


def _grads(fn, *inputs):
    cpu = [t.clone().requires_grad_() for t in inputs]
    fn(*cpu).backward()
    dev = [t.to("zyx").requires_grad_() for t in inputs]
    fn(*dev).backward()
    return [t.grad for t in dev], [t.grad for t in cpu]


LOSSES = {
    "abs": lambda a, b: (a * b).abs().sum(),
    "add_sub": lambda a, b: ((a + b) * (a - 2 * b)).abs().sum(),
    "div": lambda a, b: (a / b).real.sum(),
    "exp_log": lambda a, b: (a.exp() + (b * b).log()).abs().sum(),
    "sqrt_recip": lambda a, b: (a.sqrt() * b.reciprocal()).imag.sum(),
    "conj_angle": lambda a, b: (a.conj() * b).angle().sum(),
    "matmul": lambda a, b: (a @ b.t()).abs().pow(2).sum(),
    "mean_sum": lambda a, b: (a.sum(0) * b.mean(0)).real.sum(),
    "view_as_real": lambda a, b: torch.view_as_real(a * b).pow(2).sum(),
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_autograd(loss):
    a, b = cmake((3, 4), seed=1, scale=1.0), cmake((3, 4), seed=2, scale=1.0)
    got, want = _grads(LOSSES[loss], a, b)
    for g_, w_ in zip(got, want):
        assert g_.dtype == w_.dtype
        assert_close(g_, w_, rtol=1e-4, atol=1e-4)


def test_autograd_real_to_complex():
    x, y = torch.randn(3, 4), torch.randn(3, 4)

    def f(x, y):
        return (torch.complex(x, y) * (1 + 2j)).abs().sum() + torch.polar(x.abs() + 1, y).real.sum()

    got, want = _grads(f, x, y)
    for g_, w_ in zip(got, want):
        assert g_.dtype == torch.float32
        assert_close(g_, w_, rtol=1e-4, atol=1e-4)


def test_counters_native():
    torch_zyx.reset_counters()
    z = cmake((8, 8)).to("zyx")
    ((z @ z).exp().abs().sum() + z.angle().mean()).item()
    assert torch_zyx.counters()["cpu_fallbacks"] == 0
    assert math.isfinite(z.abs().sum().item())
