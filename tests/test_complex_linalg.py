"""Complex dense linear algebra on zyx against CPU torch (LAPACK): LU (pivots as zgetrf picks
them), solves with every side/adjoint variant, inverse, det/slogdet (singular matrices too),
triangular solves, Cholesky (A = L L^H, upper and lower, a failing pivot) and its solves,
addbmm, gradients through solve and det; Householder QR (geqrf, householder_product, ormqr:
LAPACK's values), eigh and SVD (vectors equal to LAPACK's up to one sign per vector), pinv,
lstsq, matrix_rank, matrix_exp and their gradients. CPU fallback off: every op is a zyx lowering."""

import pytest
import torch
from conftest import assert_close

pytestmark = pytest.mark.usefixtures("no_fallback")

COMPLEX = [torch.complex64, torch.complex128]


def cmake(shape, dtype=torch.complex64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.complex(torch.randn(shape, generator=gen, dtype=part),
                         torch.randn(shape, generator=gen, dtype=part))


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
        assert_close(torch.cholesky_inverse(z(f[0]), upper), torch.cholesky_inverse(f[0], upper),
                     **tol(dtype))
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


# ------------------------------------------------------------------ QR, eigh, SVD and what uses them


@pytest.mark.parametrize("dtype", COMPLEX)
def test_qr_family(dtype):
    """zgeqrf's reflectors and taus, zungqr's Q and zunmqr's products, exactly LAPACK's."""
    for shape in ((4, 3), (3, 5), (2, 4, 4)):
        a = cmake(shape, dtype, 20)
        for mode in ("reduced", "complete", "r"):
            assert_close(torch.linalg.qr(z(a), mode=mode), torch.linalg.qr(a, mode=mode), **tol(dtype))
        got, want = torch.geqrf(z(a)), torch.geqrf(a)
        assert_close(got, want, **tol(dtype))
        if shape[-2] >= shape[-1]:
            assert_close(torch.linalg.householder_product(*got), torch.linalg.householder_product(*want),
                         **tol(dtype))
        c = cmake(shape[:-2] + (shape[-2], 2), dtype, 21)
        for transpose in (False, True):
            assert_close(torch.ormqr(*got, z(c), True, transpose), torch.ormqr(*want, c, True, transpose),
                         **tol(dtype))
            assert_close(torch.ormqr(*got, z(c.mT), False, transpose),
                         torch.ormqr(*want, c.mT, False, transpose), **tol(dtype))
    x = torch.zeros(3, 2, dtype=dtype)
    x[:, 1] = torch.tensor([1j, 0, 0], dtype=dtype)  # (a zero column: tau 0; a lone imaginary alpha)
    assert_close(torch.geqrf(z(x)), torch.geqrf(x), **tol(dtype))


def _signs(got, want, axis):
    """The real signs (+-1) that turn ``got``'s vectors (along ``axis``) into ``want``'s, read
    at the entry LAPACK keeps real (first/last row of eigh's vectors, first row of V)."""
    pick = got.select(axis, 0) if axis in (-2, -1) else got
    return torch.sgn(pick.real) * torch.sgn(want.select(axis, 0).real)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, uplo):
    a = cmake((2, 5, 5), dtype, 22)  # (not Hermitian: only the UPLO triangle is read, as zheevd)
    values, vectors = (t.cpu() for t in torch.linalg.eigh(z(a), UPLO=uplo))
    want_values, want_vectors = torch.linalg.eigh(a, UPLO=uplo)
    torch.testing.assert_close(values, want_values, **tol(dtype))
    row = 0 if uplo == "L" else -1  # (zheevd's vectors are real there; the sign is its own)
    sign = torch.sgn(vectors[..., row, :].real) * torch.sgn(want_vectors[..., row, :].real)
    assert torch.all(vectors[..., row, :].imag.abs() < 1e-6)
    torch.testing.assert_close(vectors * sign.unsqueeze(-2), want_vectors, **tol(dtype))
    assert_close(torch.linalg.eigvalsh(z(a), UPLO=uplo), torch.linalg.eigvalsh(a, UPLO=uplo), **tol(dtype))
    assert_close(torch.linalg.eigh(z(a[:, :0, :0]))[0], torch.linalg.eigh(a[:, :0, :0])[0])


@pytest.mark.parametrize("dtype", COMPLEX)
def test_svd_vectors(dtype):
    """U and Vh equal LAPACK's up to one sign per singular triple (zgesdd's V has a real first
    row for m >= n, its U for m < n); full matrices of non-square A are unitary completions."""
    for shape in ((5, 3), (3, 5), (2, 4, 4)):
        a = cmake(shape, dtype, 23)
        for full in (False, True):
            u, s, vh = (t.cpu() for t in torch.linalg.svd(z(a), full_matrices=full))
            want_u, want_s, want_vh = torch.linalg.svd(a, full_matrices=full)
            k = s.shape[-1]
            torch.testing.assert_close(s, want_s, **tol(dtype))
            if shape[-2] >= shape[-1]:
                sign = torch.sgn(vh[..., :k, 0].real) * torch.sgn(want_vh[..., :k, 0].real)
            else:
                sign = torch.sgn(u[..., 0, :k].real) * torch.sgn(want_u[..., 0, :k].real)
            torch.testing.assert_close(u[..., :k] * sign.unsqueeze(-2), want_u[..., :k], **tol(dtype))
            torch.testing.assert_close(vh[..., :k, :] * sign.unsqueeze(-1), want_vh[..., :k, :], **tol(dtype))
            eye_u, eye_v = torch.eye(u.shape[-1], dtype=dtype), torch.eye(vh.shape[-2], dtype=dtype)
            torch.testing.assert_close(u.mH @ u, eye_u.expand(u.shape[:-2] + eye_u.shape), **tol(dtype))
            torch.testing.assert_close(vh @ vh.mH, eye_v.expand(vh.shape[:-2] + eye_v.shape), **tol(dtype))


def test_svd_clustered_values():
    """Singular values 1e-3 apart in complex64: the Jacobi rotations stay unitary (each pair's
    two rows share one phase), also once the kernels are upgraded after a few runs."""
    gen = torch.Generator().manual_seed(24)
    q1 = torch.linalg.qr(torch.randn(4, 4, dtype=torch.complex128, generator=gen))[0]
    q2 = torch.linalg.qr(torch.randn(4, 4, dtype=torch.complex128, generator=gen))[0]
    values = torch.diag(torch.tensor([1.002, 1.001, 1.0, 0.999], dtype=torch.complex128))
    a = (q1 @ values @ q2).to(torch.complex64)
    want = torch.linalg.svdvals(a.to(torch.complex128)).float()
    for _ in range(4):
        _, s, vh = (t.cpu() for t in torch.linalg.svd(z(a)))
        torch.testing.assert_close(s, want, rtol=0, atol=3e-6)
        torch.testing.assert_close(vh @ vh.mH, torch.eye(4, dtype=torch.complex64), rtol=0, atol=3e-6)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_pinv_lstsq_rank(dtype):
    a, sq = cmake((2, 4, 3), dtype, 25), cmake((3, 4, 4), dtype, 26)
    h = sq + sq.mH
    assert_close(torch.linalg.pinv(z(a)), torch.linalg.pinv(a), **tol(dtype))
    assert_close(torch.linalg.pinv(z(a.mT)), torch.linalg.pinv(a.mT), **tol(dtype))
    assert_close(torch.pinverse(z(a)), torch.pinverse(a), **tol(dtype))
    assert_close(torch.linalg.pinv(z(h), hermitian=True), torch.linalg.pinv(h, hermitian=True), **tol(dtype))
    low = h.clone()
    low[1] = a[0] @ a[0].mH  # (rank 3)
    for herm in (False, True):
        assert torch.equal(torch.linalg.matrix_rank(z(low), hermitian=herm).cpu(),
                           torch.linalg.matrix_rank(low, hermitian=herm))
    b, wide, b2 = cmake((2, 4, 2), dtype, 27), cmake((3, 5), dtype, 28), cmake((3, 2), dtype, 29)
    for driver in ("gels", "gelsy", "gelsd", "gelss"):
        assert_close(torch.linalg.lstsq(z(a), z(b), driver=driver), torch.linalg.lstsq(a, b, driver=driver),
                     **tol(dtype))
        assert_close(torch.linalg.lstsq(z(wide), z(b2), driver=driver),
                     torch.linalg.lstsq(wide, b2, driver=driver), **tol(dtype))
    assert_close(torch.linalg.lstsq(z(a[0]), z(b[0, :, 0]), driver="gelsd"),
                 torch.linalg.lstsq(a[0], b[0, :, 0], driver="gelsd"), **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_matrix_exp(dtype):
    a = cmake((3, 4, 4), dtype, 30)
    for scale in (0.1, 1.0, 5.0):
        want = torch.linalg.matrix_exp(a * scale)
        got = torch.linalg.matrix_exp(z(a * scale)).cpu()
        torch.testing.assert_close(got / want.abs().amax(), want / want.abs().amax(), **tol(dtype))
    assert_close(torch.linalg.matrix_exp(z(a[:0])), torch.linalg.matrix_exp(a[:0]))


def test_decomposition_gradients():
    """Autograd through the new lowerings (PyTorch's backward formulas run on zyx), losses that
    do not depend on the vectors' phases."""
    a, b = cmake((4, 3), torch.complex128, 31), cmake((4, 2), torch.complex128, 32)
    sq = cmake((3, 3), torch.complex128, 33)

    def losses(x, y, s):
        q, r = torch.linalg.qr(x)
        values, vectors = torch.linalg.eigh(s)
        u, sv, vh = torch.linalg.svd(x, full_matrices=False)
        return [(q @ r).abs().sum() + r.real.sum(),
                values.sum() + (values[0] * vectors.abs()).sum(),
                sv.sum() + (u @ vh).abs().sum(),
                torch.linalg.pinv(x).abs().sum(),
                torch.linalg.lstsq(x, y).solution.abs().sum(),
                torch.linalg.matrix_exp(s).abs().sum()]

    results = []
    for device in ("cpu", "zyx"):
        args = [t.to(device).detach().requires_grad_() for t in (a, b, sq)]
        grads = [[g.cpu() if g is not None else None
                  for g in torch.autograd.grad(loss, args, allow_unused=True)] for loss in losses(*args)]
        results.append(grads)
    for got, want in zip(results[1], results[0]):
        for g_, w in zip(got, want):
            assert (g_ is None) == (w is None)
            if w is not None:
                torch.testing.assert_close(g_, w)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("hermitian", [False, True])
def test_ldl(dtype, hermitian):
    """zsytrf / zhetrf (Bunch-Kaufman: 1x1 and 2x2 pivots as LAPACK picks them) and their
    solves; the zero corner forces an interchange and a 2x2 block."""
    r = cmake((3, 6, 6), dtype, 34)
    r[1, 0, 0] = 0
    r[2, 0, 0], r[2, 1, 1] = 0, 1e-3
    a = r + (r.mH if hermitian else r.mT)
    b = cmake((3, 6, 2), dtype, 35)
    ld, piv, info = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    zld, zpiv, zinfo = torch.linalg.ldl_factor_ex(z(a), hermitian=hermitian)
    assert torch.equal(zpiv.cpu(), piv) and torch.equal(zinfo.cpu(), info)
    assert_close(zld, ld, **tol(dtype))
    assert_close(torch.linalg.ldl_solve(zld, zpiv, z(b), hermitian=hermitian),
                 torch.linalg.ldl_solve(ld, piv, b, hermitian=hermitian), **tol(dtype))
    assert_close(torch.linalg.ldl_factor(z(a[:, :0, :0]), hermitian=hermitian),
                 torch.linalg.ldl_factor(a[:, :0, :0], hermitian=hermitian))


def _as_sets(values, vectors, want_values, want_vectors, dtype):
    """Compare eigenpairs whatever their order: each of LAPACK's eigenvalues with the nearest
    of ours and its eigenvector (both normalized as zgeev: unit norm, largest entry real)."""
    nearest = (values.unsqueeze(-1) - want_values.unsqueeze(-2)).abs().argmin(-2)
    torch.testing.assert_close(values.gather(-1, nearest), want_values, **tol(dtype))
    moved = vectors.gather(-1, nearest.unsqueeze(-2).expand(vectors.shape))
    torch.testing.assert_close(moved, want_vectors, **tol(dtype))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_eig(dtype):
    """linalg.eig of general complex matrices: eigenpairs equal to zgeev's (as sets: the order
    is the QR iteration's deflation order, LAPACK's on most matrices but not all), and special
    matrices (triangular, a permutation where Wilkinson shifts stall, identity, a Jordan block)."""
    a = cmake((3, 5, 5), dtype, 36)
    values, vectors = (t.cpu() for t in torch.linalg.eig(z(a)))
    _as_sets(values, vectors, *torch.linalg.eig(a), dtype)
    torch.testing.assert_close(a @ vectors, vectors * values.unsqueeze(-2), **tol(dtype))
    eye = torch.eye(4, dtype=dtype)
    special = [torch.roll(eye, 1, 0), cmake((4, 4), dtype, 37).triu(), eye,
               2 * eye + torch.diag(torch.ones(3, dtype=dtype), 1)]
    for m in special:
        values, vectors = (t.cpu() for t in torch.linalg.eig(z(m)))
        want = torch.linalg.eigvals(m)
        nearest = (values.unsqueeze(-1) - want.unsqueeze(-2)).abs().min(-2).values
        assert nearest.max() < 1e-4
        torch.testing.assert_close(m @ vectors, vectors * values.unsqueeze(-2), **tol(dtype))
    assert_close(torch.linalg.eigvals(z(a[:, :0, :0])), torch.linalg.eigvals(a[:, :0, :0]))
