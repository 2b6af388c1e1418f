"""torch.linalg on zyx against CPU torch (LAPACK), CPU fallback disabled: factorizations
(Cholesky, LU, QR) and their conventions (pivots, info, Householder signs), solves, inverses,
determinants, eigen/singular values (vectors up to sign), pinv, lstsq, matrix_exp, gradients."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_close

pytestmark = pytest.mark.usefixtures("no_fallback")


def zyx(*tensors):
    moved = [t.to("zyx") for t in tensors]
    return moved[0] if len(moved) == 1 else moved


def same(fn, *args, **kwargs):
    """``fn`` on CPU and on zyx copies of the tensor arguments: equal structure, dtypes, values."""
    cpu = fn(*args, **kwargs)
    out = fn(*[a.to("zyx") if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    tol = {"atol": 1e-4, "rtol": 1e-4} if args[0].dtype == torch.float32 else {"atol": 1e-9, "rtol": 1e-9}
    assert_close(tuple(out) if isinstance(out, tuple) else out, tuple(cpu) if isinstance(cpu, tuple) else cpu,
                 **tol)
    return out


def spd(*shape, dtype=torch.float64):
    a = torch.randn(*shape, dtype=dtype)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


DTYPES = [torch.float64, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, upper):
    torch.manual_seed(0)
    same(torch.linalg.cholesky_ex, spd(2, 4, 4, dtype=dtype), upper=upper)


def test_cholesky_failure_stops_like_potf2():
    a = torch.tensor([[4., 2, 1, 3], [2, 5, 2, 1], [1, 2, -9, 2], [3, 1, 2, 7]], dtype=torch.float64)
    _L, info = same(torch.linalg.cholesky_ex, a)
    assert int(info.cpu()) == 3
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 3"):
        torch.linalg.cholesky(zyx(a))


def test_cholesky_solve_and_inverse():
    torch.manual_seed(1)
    L = torch.linalg.cholesky(spd(2, 4, 4))
    same(torch.cholesky_solve, torch.randn(2, 4, 3, dtype=torch.float64), L)
    same(torch.cholesky_inverse, L[0])
    same(torch.cholesky_inverse, L[0].mT, upper=True)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit):
    torch.manual_seed(2)
    a = torch.randn(2, 4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    b = torch.randn(2, 4, 3, dtype=torch.float64)
    same(torch.linalg.solve_triangular, a, b if left else b.mT, upper=upper, left=left, unitriangular=unit)


def test_triangular_solve_transpose_broadcast():
    torch.manual_seed(3)
    a = torch.randn(4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    same(torch.triangular_solve, torch.randn(3, 4, 2, dtype=torch.float64), a, upper=False, transpose=True)


@pytest.mark.parametrize("shape", [(5, 5), (2, 6, 4), (3, 4, 6)])
def test_lu_factor_pivots_match_getrf(shape):
    torch.manual_seed(4)
    a = torch.randn(*shape, dtype=torch.float64)
    _lu, pivots, info = same(torch.linalg.lu_factor_ex, a)
    assert pivots.dtype == torch.int32 and info.dtype == torch.int32
    same(torch.linalg.lu, a)
    same(torch.lu_unpack, *torch.linalg.lu_factor(a))


def test_lu_singular_info():
    a = torch.tensor([[1., 2, 3], [2, 4, 6], [1, 1, 1]], dtype=torch.float64)
    _, _, info = same(torch.linalg.lu_factor_ex, a)
    assert int(info.cpu()) == 3
    with pytest.raises(RuntimeError, match=r"U\[3,3\] is zero"):
        torch.linalg.lu_factor(zyx(a))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left, adjoint):
    torch.manual_seed(5)
    lu, piv = torch.linalg.lu_factor(torch.randn(2, 4, 4, dtype=torch.float64))
    b = torch.randn(2, 4, 3, dtype=torch.float64)
    same(torch.linalg.lu_solve, lu, piv, b if left else b.mT, left=left, adjoint=adjoint)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(dtype):
    torch.manual_seed(6)
    a = torch.randn(2, 4, 4, dtype=dtype)
    same(torch.linalg.solve, a, torch.randn(2, 4, 2, dtype=dtype))
    same(torch.linalg.solve, a, torch.randn(4, dtype=dtype))  # vector right-hand side
    same(torch.linalg.inv, a)
    same(torch.linalg.det, a)
    same(torch.linalg.slogdet, a)
    same(torch.linalg.matrix_power, a, -2)


def test_det_of_singular_and_empty():
    same(torch.linalg.slogdet, torch.tensor([[1., 2], [2, 4]], dtype=torch.float64))
    same(torch.linalg.det, torch.randn(2, 0, 0, dtype=torch.float64))
    same(torch.linalg.det, torch.randn(0, 3, 3, dtype=torch.float64))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(zyx(torch.zeros(3, 3)))


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("shape", [(2, 6, 4), (3, 5)])
def test_qr_matches_lapack_signs(mode, shape):
    torch.manual_seed(7)
    same(torch.linalg.qr, torch.randn(*shape, dtype=torch.float64), mode=mode)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_geqrf_householder_ormqr(left, transpose):
    torch.manual_seed(8)
    a, tau = same(torch.geqrf, torch.randn(2, 5, 3, dtype=torch.float64))
    same(torch.linalg.householder_product, a.cpu(), tau.cpu())
    c = torch.randn(2, 5, 2, dtype=torch.float64) if left else torch.randn(2, 2, 5, dtype=torch.float64)
    same(torch.ormqr, a.cpu(), tau.cpu(), c, left, transpose)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3, 6])
def test_eigh_values_and_vectors_up_to_sign(dtype, n):
    torch.manual_seed(9)
    a = torch.randn(2, n, n, dtype=dtype)
    same(torch.linalg.eigvalsh, a)  # reads the lower triangle only
    same(torch.linalg.eigvalsh, a, UPLO="U")
    values, vectors = (t.cpu() for t in torch.linalg.eigh(zyx(a)))
    ref_values, ref_vectors = torch.linalg.eigh(a)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(values, ref_values, atol=tol, rtol=tol)
    torch.testing.assert_close(vectors.abs(), ref_vectors.abs(), atol=tol, rtol=tol)
    identity = torch.eye(n, dtype=dtype).expand(2, n, n)
    torch.testing.assert_close(vectors.mT @ vectors, identity, atol=tol, rtol=0)


@pytest.mark.parametrize("shape", [(2, 6, 4), (4, 7), (3, 3)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_values_and_factors(shape, full):
    torch.manual_seed(10)
    a = torch.randn(*shape, dtype=torch.float64)
    same(torch.linalg.svdvals, a)
    u, s, vh = (t.cpu() for t in torch.linalg.svd(zyx(a), full_matrices=full))
    ref_u, ref_s, ref_vh = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == ref_u.shape and vh.shape == ref_vh.shape
    k = s.shape[-1]
    torch.testing.assert_close(s, ref_s)
    torch.testing.assert_close(u[..., :k] * s[..., None, :] @ vh[..., :k, :], a)
    torch.testing.assert_close(u.mT @ u, torch.eye(u.shape[-1], dtype=a.dtype).expand_as(u.mT @ u))
    torch.testing.assert_close(vh @ vh.mT, torch.eye(vh.shape[-2], dtype=a.dtype).expand_as(vh @ vh.mT))


def test_rank_deficient_svd_and_pinv():
    torch.manual_seed(11)
    a = torch.randn(5, 2, dtype=torch.float64) @ torch.randn(2, 4, dtype=torch.float64)
    same(torch.linalg.matrix_rank, a)
    same(torch.linalg.pinv, a)
    s = torch.randn(4, 4, dtype=torch.float64)
    same(torch.linalg.pinv, s + s.mT, hermitian=True)
    same(torch.linalg.matrix_norm, a, "nuc")
    same(torch.linalg.cond, s)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(6, 4), (3, 5)])
def test_lstsq(driver, shape):
    torch.manual_seed(12)
    a = torch.randn(2, *shape, dtype=torch.float64)
    same(torch.linalg.lstsq, a, torch.randn(2, shape[0], 3, dtype=torch.float64), driver=driver)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale", [0.1, 3.0])
def test_matrix_exp(dtype, scale):
    torch.manual_seed(13)
    same(torch.linalg.matrix_exp, scale * torch.randn(2, 4, 4, dtype=dtype))


def test_gradients_through_lowerings():
    """Autograd runs the aten ops' derivative formulas; their backward ops land on the lowerings."""
    torch.manual_seed(14)
    a = spd(4, 4, dtype=torch.float32)
    b = torch.randn(4, 2)
    fns = [lambda x: torch.linalg.cholesky(x).sum(), lambda x: torch.linalg.det(x),
           lambda x: torch.linalg.solve(x, b.to(x.device)).sum(),
           lambda x: torch.linalg.eigvalsh(x).pow(2).sum(),
           lambda x: torch.linalg.svdvals(x).sum(), lambda x: torch.linalg.qr(x)[1].sum()]
    for fn in fns:
        ref_in = a.clone().requires_grad_()
        (ref,) = torch.autograd.grad(fn(ref_in), ref_in)
        z = a.to("zyx").requires_grad_()
        (got,) = torch.autograd.grad(fn(z), z)
        torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 3, 5])
def test_ldl_bunch_kaufman_pivots(seed):
    """Symmetric indefinite matrices: 1x1 and 2x2 pivots, interchanges, pivots in sytrf's format."""
    torch.manual_seed(seed)
    a = torch.randn(2, 5, 5, dtype=torch.float64)
    a = a + a.mT
    _, pivots, info = same(torch.linalg.ldl_factor_ex, a)
    assert info.dtype == torch.int32
    assert pivots.dtype == torch.int32
    ld, pivots = torch.linalg.ldl_factor(a)
    same(torch.linalg.ldl_solve, ld, pivots, torch.randn(2, 5, 3, dtype=torch.float64))


FACTORIZATIONS = {  # name: (function, n)
    "cholesky": (lambda a: torch.linalg.cholesky_ex(
        a @ a.mT + a.shape[-1] * torch.eye(a.shape[-1], device=a.device, dtype=a.dtype)), 24),
    "lu_factor": (torch.linalg.lu_factor_ex, 24),
    "solve_triangular": (lambda a: torch.linalg.solve_triangular(
        a + 24 * torch.eye(24, device=a.device, dtype=a.dtype), a, upper=True), 24),
}  # QR and LDL^T loops use the same helpers; at sizes that show it they cost ~1 min on PoCL


@pytest.mark.parametrize("name", list(FACTORIZATIONS))
def test_step_loops_compile_fewer_kernels_than_steps(name, counters):
    """The step number of a factorization's loop is data (lazymat.step) and the carried state is
    stored each step (lazymat.stored), so the kernels of one step serve every step: an n x n
    factorization compiles fewer than n kernels (with the step as a constant, each step had
    its own few kernels, ~1 s each on PoCL)."""
    fn, n = FACTORIZATIONS[name]
    torch.manual_seed(15)
    a = torch.randn(3, n, n, dtype=torch.float64)
    ref = fn(a)
    got = fn(zyx(a))
    assert_close(tuple(got), tuple(ref), atol=1e-7, rtol=1e-7)
    assert counters()["kernels_compiled"] < n
