"""Complex dense linear algebra on zyx against CPU torch (LAPACK): LU (pivots as zgetrf picks
them), solves with every side/adjoint variant, inverse, det/slogdet (singular matrices too),
triangular solves, Cholesky (A = L L^H, upper and lower, a failing pivot) and its solves,
addbmm, and gradients through solve and det. CPU fallback off: every op is a zyx lowering."""

import pytest
import torch
from conftest import assert_close

pytestmark = pytest.mark.usefixtures("no_fallback")

COMPLEX = [torch.complex64, torch.complex128]


def cmake(shape, dtype=torch.complex64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.complex(torch.randn(shape, generator=gen, dtype=part), torch.randn(shape, generator=gen, dtype=part))


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.complex64 else {"rtol": 1e-9, "atol": 1e-9}


def z(x):
    return x.to("zyx")


@pytest.mark.parametrize("dtype", COMPLEX)
def test_lu_and_solves(dtype):
    a, b = cmake((2, 4, 4), dtype, 1), cmake((2, 4, 3), dtype, 2)
    lu, piv = torch.linalg.lu_factor(a)
    zlu, zpiv = torch.linalg.lu_factor(z(a))
    assert torch.equal(zpiv.cpu(), piv)
    assert_close(zlu, lu, **tol(dtype))
    for got, want in zip(torch.linalg.lu(z(a)), torch.linalg.lu(a)):
        assert_close(got, want, **tol(dtype))
    for got, want in zip(torch.lu_unpack(zlu, zpiv), torch.lu_unpack(lu, piv)):
        assert_close(got, want, **tol(dtype))
    for left in (True, False):
        for adjoint in (True, False):
            rhs = b if left else b.mT
            assert_close(torch.linalg.lu_solve(zlu, zpiv, z(rhs), left=left, adjoint=adjoint),
                         torch.linalg.lu_solve(lu, piv, rhs, left=left, adjoint=adjoint), **tol(dtype))
        rhs = b if left else b.mT
        assert_close(torch.linalg.solve(z(a), z(rhs), left=left), torch.linalg.solve(a, rhs, left=left),
                     **tol(dtype))
    assert_close(torch.linalg.solve(z(a), z(b[..., 0])), torch.linalg.solve(a, b[..., 0]), **tol(dtype))
    assert_close(torch.linalg.inv(z(a)), torch.linalg.inv(a), **tol(dtype))
    assert_close(torch.linalg.inv(z(a).conj()), torch.linalg.inv(a.conj()), **tol(dtype))
    wide = cmake((3, 5), dtype, 3)
    for got, want in zip(torch.linalg.lu_factor(z(wide)), torch.linalg.lu_factor(wide)):
        assert_close(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_determinants(dtype):
    a = cmake((3, 4, 4), dtype, 4)
    a[1, 2] = a[1, 0] * (2 - 1j)  # (singular)
    assert_close(torch.linalg.det(z(a)), torch.linalg.det(a), **tol(dtype))
    assert_close(torch.linalg.det(z(a).mT), torch.linalg.det(a.mT), **tol(dtype))
    sign, logabs = torch.linalg.slogdet(z(a[[0, 2]]))
    want_sign, want_logabs = torch.linalg.slogdet(a[[0, 2]])
    assert_close(sign, want_sign, **tol(dtype))
    assert_close(logabs, want_logabs, **tol(dtype))
    sign, logabs = torch.linalg.slogdet(z(a[1]))
    assert abs(sign.item()) < 1e-3 or logabs.item() < -10  # (singular: 0 and -inf up to rounding)
    assert_close(torch.linalg.det(z(a[:, :0, :0])), torch.linalg.det(a[:, :0, :0]))
    _, info = torch.linalg.inv_ex(z(torch.zeros(3, 3, dtype=dtype)))
    assert info.item() == torch.linalg.inv_ex(torch.zeros(3, 3, dtype=dtype))[1].item()


@pytest.mark.parametrize("dtype", COMPLEX)
def test_triangular(dtype):
    a, b = cmake((4, 4), dtype, 5) + 3 * torch.eye(4, dtype=dtype), cmake((2, 4, 2), dtype, 6)
    for upper in (True, False):
        for unit in (True, False):
            assert_close(torch.linalg.solve_triangular(z(a), z(b), upper=upper, unitriangular=unit),
                         torch.linalg.solve_triangular(a, b, upper=upper, unitriangular=unit), **tol(dtype))
            assert_close(torch.linalg.solve_triangular(z(a), z(b.mT), upper=upper, left=False),
                         torch.linalg.solve_triangular(a, b.mT, upper=upper, left=False), **tol(dtype))
        for transpose in (True, False):
            for got, want in zip(torch.triangular_solve(z(b), z(a), upper, transpose),
                                 torch.triangular_solve(b, a, upper, transpose)):
                assert_close(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_cholesky(dtype):
    m = cmake((2, 4, 4), dtype, 7)
    a = m @ m.mH + torch.eye(4, dtype=dtype)
    b = cmake((2, 4, 3), dtype, 8)
    for upper in (True, False):
        f = torch.linalg.cholesky(a, upper=upper)
        assert_close(torch.linalg.cholesky(z(a), upper=upper), f, **tol(dtype))
        assert_close(torch.cholesky_solve(z(b), z(f), upper), torch.cholesky_solve(b, f, upper), **tol(dtype))
        assert_close(torch.cholesky_inverse(z(f[0]), upper), torch.cholesky_inverse(f[0], upper), **tol(dtype))
    bad = a.clone()
    bad[1, 2, 2] = -50
    got, info = torch.linalg.cholesky_ex(z(bad))
    want, want_info = torch.linalg.cholesky_ex(bad)
    assert torch.equal(info.cpu(), want_info)
    assert_close(got, want, **tol(dtype))
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(z(bad))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_addbmm(dtype):
    bias, a, b = cmake((3, 5), dtype, 9), cmake((2, 3, 4), dtype, 10), cmake((2, 4, 5), dtype, 11)
    for beta, alpha in ((1, 1), (0.5, 2 - 1j), (0, 1)):
        assert_close(torch.addbmm(z(bias), z(a), z(b), beta=beta, alpha=alpha),
                     torch.addbmm(bias, a, b, beta=beta, alpha=alpha), **tol(dtype))


def test_gradients():
    a, b = cmake((3, 3), torch.complex128, 12), cmake((3, 2), torch.complex128, 13)

    def loss(x, y):
        return torch.linalg.solve(x, y).abs().sum() + torch.linalg.det(x).abs()

    grads = []
    for device in ("cpu", "zyx"):
        x, y = a.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        loss(x, y).backward()
        grads.append((x.grad.cpu(), y.grad.cpu()))
    for got, want in zip(*grads[::-1]):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_svd(dtype):
    a = cmake((2, 4, 3), dtype, 14)
    assert_close(torch.linalg.svdvals(z(a)), torch.linalg.svdvals(a), **tol(dtype))
    assert_close(torch.linalg.matrix_norm(z(a), "nuc"), torch.linalg.matrix_norm(a, "nuc"), **tol(dtype))
    assert_close(torch.linalg.cond(z(a[:, :3])), torch.linalg.cond(a[:, :3]), **tol(dtype))
    # (the vectors' phases are arbitrary: checked through A = U S V^H and U^H U = V^H V = I)
    for x in (a, a.mT, a[:, :3].conj()):
        U, S, Vh = (t.cpu() for t in torch.linalg.svd(z(x), full_matrices=False))
        close = torch.testing.assert_close
        close(S, torch.linalg.svdvals(x), **tol(dtype))
        close(U @ torch.diag_embed(S.to(dtype)) @ Vh, x, **tol(dtype))
        eye = torch.eye(S.shape[-1], dtype=dtype)
        close(U.mH @ U, eye.expand(U.mH.shape[:-1] + (S.shape[-1],)), **tol(dtype))
        close(Vh @ Vh.mH, eye.expand(Vh.shape[:-1] + (S.shape[-1],)), **tol(dtype))
