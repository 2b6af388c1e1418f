"""Complex orthogonal factorizations: Householder QR (zgeqrf / zungqr / zunmqr conventions),
Hermitian eigendecomposition and SVD by complex Jacobi rotations, as lazy zyx programs.

Lowerings of the complex table (ops/complex/base.py), the complex twins of the first half of
ops/linalg/spectral.py, written with ``Cz`` (linalg.py) in the same style: static loops of
vectorized lazy steps whose step number is data (``step``), so every step runs the same kernels.

Conventions, LAPACK's complex ones: a reflector is ``H = I - tau v v^H`` with ``v[j] = 1`` and a
complex ``tau`` chosen by zlarfg so that the new diagonal entry ``beta`` is real; ``Q = H_0 ...
H_{k-1}``, and ``A <- H^H A`` during the factorization. A Jacobi rotation of the pair (p, q) of a
Hermitian G is ``[[c, s w], [-s conj(w), c]]`` with ``w`` the phase of ``G[p, q]``: it is
``P R P^H`` for ``P = diag(1, conj(w))``, which makes the pair real symmetric, and the real
rotation ``R`` of spectral.py, so it zeroes ``G[p, q]`` in ``J^H G J`` with the same angles.
Eigenvectors and singular vectors are unique up to a phase per vector; zheevd's vectors (Q of
zhetrd times real tridiagonal vectors) have a real first component (UPLO 'L') or a real last one
('U'), and zgesdd's V (m >= n; else U) a real first row (P of zgebrd times real bidiagonal
vectors): those phases are kept here (made nonnegative), so vectors match LAPACK's up to the
sign that its own iterations give that entry, which follows no rule that could be reproduced.
"""

from __future__ import annotations

import math

from ...lazy import graph as g
from ..linalg.lazymat import Lz, diagonal, eye, index, mask, step, where, zeros
from ..linalg.spectral import _check_ormqr_shapes, _even, _order, check_householder_product, jacobi_sweeps
from ..registry import aten
from .base import register_complex
from .linalg import Cz, _matrix, _read, _square, cout, cstored, cwhere, czeros, rout

# ---------------------------------------------------------------- helpers


def _cplx(x: Lz) -> Cz:
    """A real ``Lz`` as a complex one (imaginary part a broadcast zero)."""
    return Cz(x, zeros((), x.dtype))


def _eye(m: int, k: int, batch: tuple, dtype) -> Cz:
    return Cz(eye(m, k, dtype).expand(batch + (m, k)), zeros(batch + (m, k), dtype))


def _abs2(x: Cz) -> Lz:
    return x.re * x.re + x.im * x.im


def _pad(x: Cz, axis: int, before: int, after: int) -> Cz:
    return x._map(lambda p: p.pad(axis, before, after))


def _modulus(x: Cz) -> tuple[Lz, Lz, Lz]:
    """(|x|, re / big, im / big) with ``big = max(|re|, |im|)`` (1 where x is 0): squares of the
    scaled parts neither underflow nor overflow. An off-diagonal entry that Jacobi has nearly
    zeroed has squares in float32's subnormal range, where their few bits would make the phase
    below miss modulus 1 by up to 1e-3 and the rotations stop being unitary."""
    big = x.re.abs().maximum(x.im.abs())
    safe = where(big.eq(0), 1, big)
    re_, im_ = x.re / safe, x.im / safe
    return big * (re_ * re_ + im_ * im_).sqrt(), re_, im_


def _phase(x: Cz) -> Cz:
    """``x / |x|``, 1 where x is 0."""
    _, re_, im_ = _modulus(x)
    size = (re_ * re_ + im_ * im_).sqrt()
    zero = size.eq(0)
    safe = where(zero, 1, size)
    return Cz(where(zero, 1, re_ / safe), im_ / safe)


# ---------------------------------------------------------------- Householder QR


def householder_vectors(a: Cz, device) -> tuple[Cz, Cz]:
    """zgeqr2: R in the upper triangle (a real diagonal), the reflectors' vectors below it, tau
    (..., 1, k). zlarfg for ``alpha = A[j, j]``, ``x = A[j+1:, j]``: ``beta = -sign(re alpha)
    * |(alpha, x)|``, ``tau = (beta - alpha) / beta``, ``v = x / (alpha - beta)``; ``tau = 0``
    when x is zero and alpha real. The rest of A gets ``H^H A = A - conj(tau) v (v^H A)``."""
    *batch, m, n = a.shape
    k = min(m, n)
    row, col = index(m, 0), index(n, 1)
    dtype = a.dtype
    taus = czeros(tuple(batch) + (1, k), dtype)
    for number in range(k):
        j = step(device, number)
        x = a.col_at(j)
        alpha = x.row_at(j)
        below = row.gt(j)
        xnorm = where(below, _abs2(x), 0).sum(-2).sqrt()
        skip = xnorm.eq(0) & alpha.im.eq(0)
        beta = -(_abs2(alpha) + xnorm * xnorm).sqrt().copysign(alpha.re)
        beta = where(skip, alpha.re, beta)
        tau = Cz(where(skip, 0, (beta - alpha.re) / beta), where(skip, 0, -alpha.im / beta))
        one = _cplx(mask(row.eq(j), dtype))
        v = cwhere(below, cwhere(skip, x, x / (alpha - beta)), one)
        w = (v.conj() * a).sum(-2)
        kept = cwhere(row.lt(j), x, cwhere(row.eq(j), _cplx(beta), v))
        a = cstored(cwhere(col.eq(j), kept, cwhere(col.gt(j), a - tau.conj() * v * w, a)))
        taus = cstored(taus + cwhere(index(k, 1).eq(j), tau, 0))
    return a, taus


def _reflector(vs: Cz, j: Lz) -> Cz:
    """Reflector j's vector (..., m, 1): 1 at j, the stored entries below."""
    row = index(vs.shape[-2], 0)
    return cwhere(row.gt(j), vs.col_at(j), _cplx(mask(row.eq(j), vs.dtype)))


def apply_q(vs: Cz, taus: Cz, c: Cz, device, left: bool = True, adjoint: bool = False) -> Cz:
    """``Q C``, ``Q^H C``, ``C Q`` or ``C Q^H`` for ``Q = H_0 ... H_{k-1}`` (zunmqr): one
    reflection per step, ``H^H`` being the reflection by ``conj(tau)``."""
    k = taus.shape[-1]
    order = range(k) if left == adjoint else range(k - 1, -1, -1)
    for number in order:
        j = step(device, number)
        v = _reflector(vs, j)
        tau = taus.col_at(j)
        if adjoint:
            tau = tau.conj()
        if left:
            c = cstored(c - tau * v * (v.conj() * c).sum(-2))
        else:
            c = cstored(c - tau * (c @ v) * v.mH)
    return c


def _taus(tau) -> Cz:
    t = _read(tau)
    return t.reshape(t.shape[:-1] + (1, t.shape[-1]))


@register_complex(aten.geqrf.default)
def geqrf(a):
    if a.dim() < 2:
        raise RuntimeError(f"torch.geqrf: input must have at least 2 dimensions. Got {a.dim()}")
    vs, taus = householder_vectors(_matrix(a, "torch.geqrf"), a._storage.device)
    return cout(vs, a), cout(taus.reshape(taus.shape[:-2] + taus.shape[-1:]), a)


@register_complex(aten.linalg_householder_product.default)
def householder_product(a, tau):
    api = "torch.linalg.householder_product"
    check_householder_product(api, a, tau)
    vs = _matrix(a, api)
    m, n = vs.shape[-2:]
    return cout(apply_q(vs, _taus(tau), _eye(m, n, vs.shape[:-2], vs.dtype), a._storage.device), a)


@register_complex(aten.ormqr.default)
def ormqr(a, tau, other, left=True, transpose=False):
    """``transpose`` is the conjugate transpose for complex Q (zunmqr's 'C')."""
    api = "torch.ormqr"
    if a.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError(f"{api}: other must have at least 2 dimensions.")
    if a.dtype != other.dtype or a.dtype != tau.dtype:
        raise RuntimeError(f"{api}: Expected input and other to have the same dtype, but got "
                           f"{a.dtype} and {other.dtype}")
    vs, c = _matrix(a, api), _matrix(other, api)
    _check_ormqr_shapes(tuple(a.shape), tuple(tau.shape), tuple(other.shape), left)
    return cout(apply_q(vs, _taus(tau), c, other._storage.device, left, transpose), other)


def qr(x: Cz, mode: str, device) -> tuple[Cz | None, Cz]:
    m, n = x.shape[-2:]
    k = min(m, n)
    batch = x.shape[:-2]
    vs, taus = householder_vectors(x, device)
    if mode == "complete":
        return apply_q(vs, taus, _eye(m, m, batch, x.dtype), device), _triu(vs)
    r = _triu(vs.rows(0, k))
    return (None if mode == "r" else apply_q(vs, taus, _eye(m, k, batch, x.dtype), device)), r


def _triu(x: Cz) -> Cz:
    m, n = x.shape[-2:]
    return cwhere(index(n, 1).ge(index(m, 0)), x, 0)


@register_complex(aten.linalg_qr.default)
def linalg_qr(a, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' "
                           "(default), 'r', or 'complete'")
    if a.dim() < 2:
        raise RuntimeError("linalg.qr: The input tensor A must have at least 2 dimensions.")
    x = _matrix(a, "linalg.qr")
    q, r = qr(x, mode, a._storage.device)
    return cout(q if q is not None else czeros((0,), x.dtype), a), cout(r, a)


# ---------------------------------------------------------------- Jacobi rotations


def _round_rotation(gram: Cz, r: Lz) -> Cz:
    """The unitary J (..., N, N) of round ``r`` (spectral._round_rotation's circle schedule) for
    the Hermitian ``gram``: pair (p, q) gets ``[[c, s w], [-s conj(w), c]]``, w the phase of
    ``gram[p, q]`` and (c, s) the real rotation of ``[[g_pp, |g_pq|], [|g_pq|, g_qq]]`` (module
    docstring); row q's ``conj(gram[p, q])`` has phase conj(w)."""
    n = gram.shape[-1]
    dtype = gram.dtype
    i = index(n, 0)
    turned = (2 * r + (n - 1) - i)._bin("mod", n - 1)
    partner = where(i.eq(n - 1), r, where(i.eq(r), n - 1, turned))
    meets = mask(index(n, 1).eq(partner), dtype)
    diag = diagonal(gram.re)
    other = (meets * diag.mT).sum(-1)
    first = i.lt(partner)
    # Both rows of a pair take G[p, q] (row q its conjugate), not the computed G[q, p]: the two
    # differ by rounding (a matmul's sums need not be symmetric), which for a nearly zeroed entry
    # is a large relative error, and J is unitary only if both rows use one phase.
    upper = (gram * meets).sum(-1)
    off = cwhere(first, upper, (gram.mT * meets).sum(-1).conj())
    size = _modulus(off)[0]
    app, aqq = where(first, diag, other), where(first, other, diag)
    theta = (aqq - app) / (2 * size)
    t = Lz(g.const(1, dtype, ())).copysign(theta) / (theta.abs() + (theta * theta + 1).sqrt())
    t = where(size.eq(0), 0, t)
    c = 1 / (t * t + 1).sqrt()
    s = t * c
    ident = mask(index(n, 0).eq(index(n, 1)), dtype)
    return _cplx(ident * c) + _phase(off) * (meets * where(first, s, -s))


def jacobi_eigh(a: Cz, device) -> tuple[Lz, Cz]:
    """Eigenvalues (..., n, 1) (real, unsorted) and eigenvectors of Hermitian ``a``:
    ``A <- J^H A J``, ``V <- V J`` for every round of every sweep; an odd n gets a zero row and
    column that no rotation touches, dropped at the end."""
    n = a.shape[-1]
    big = _even(n)
    if big != n:
        a = _pad(_pad(a, -1, 0, 1), -2, 0, 1)
    v = _eye(big, big, a.shape[:-2], a.dtype)
    for _ in range(jacobi_sweeps(n)):
        for r in range(big - 1):
            j = _round_rotation(a, step(device, r))
            a = j.mH @ a @ j
            v = v @ j
    return diagonal(a.re).rows(0, n), v.rows(0, n).cols(0, n)


def hermitian(x: Cz, upper: bool) -> Cz:
    """The Hermitian matrix whose lower (or ``upper``) triangle ``x`` holds; the diagonal's
    imaginary parts are ignored, as zheevd does."""
    n = x.shape[-1]
    tri = _triu(x if upper else x.mH)
    full = tri + cwhere(index(n, 1).gt(index(n, 0)), tri, 0).mH
    return Cz(full.re, where(index(n, 0).eq(index(n, 1)), 0, full.im))


def eigh(x: Cz, upper: bool, device) -> tuple[Lz, Cz]:
    """(ascending eigenvalues (..., n, 1), eigenvectors with the first (or ``upper``: last)
    component real and nonnegative, as zheevd's are real there)."""
    values, vectors = jacobi_eigh(hermitian(x, upper), device)
    order = _order(values, descending=False)
    vectors = vectors @ order
    n = x.shape[-1]
    at = n - 1 if upper else 0
    vectors = vectors * _phase(vectors.rows(at, at + 1)).conj()
    return order.mT @ values, vectors


@register_complex(aten._linalg_eigh.default)
def linalg_eigh(a, UPLO="L", compute_v=True):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    x = _square(a, "linalg.eigh")
    if math.prod(x.shape) == 0:
        return (rout(zeros(x.shape[:-1], x.dtype), a),
                cout(czeros(x.shape if compute_v else (0,), x.dtype), a))
    values, vectors = eigh(x, UPLO == "U", a._storage.device)
    vals = rout(values.reshape(values.shape[:-1]), a)
    return vals, cout(vectors if compute_v else czeros((0,), x.dtype), a)


# ---------------------------------------------------------------- SVD


def jacobi_svd(a: Cz, device) -> tuple[Cz, Lz, Cz]:
    """One-sided Jacobi on ``a`` (..., m, n), m >= n (spectral.jacobi_svd): rotate column pairs
    of ``U = A V`` until they are orthogonal, each round's rotation from the Gram matrix
    ``U^H U``. Returns (U with columns of norm sigma, sigma (..., 1, n), V), unsorted."""
    n = a.shape[-1]
    big = _even(n)
    u = _pad(a, -1, 0, big - n)
    v = _eye(big, big, a.shape[:-2], a.dtype)
    for _ in range(jacobi_sweeps(n)):
        for r in range(big - 1):
            j = _round_rotation(u.mH @ u, step(device, r))
            u = u @ j
            v = v @ j
    u = u.cols(0, n)
    return u, _abs2(u).sum(-2).sqrt(), v.rows(0, n).cols(0, n)


def svd(x: Cz, full: bool, device) -> tuple[Cz, Lz, Cz]:
    """(U, descending sigma (..., k), Vh) of ``x`` (..., m, n); ``full`` completes U (or V)."""
    m, n = x.shape[-2:]
    if m < n:  # A^H = U' S V'^H  =>  A = V' S U'^H
        v, s, uh = svd(x.mH, full, device)
        return uh.mH, s, v.mH
    u, sigma, v = jacobi_svd(x, device)
    order = _order(sigma.mT, descending=True)
    sigma = (order.mT @ sigma.mT).mT
    u, v = u @ order, v @ order
    # zgesdd's V = P V' with P from zgebrd (its first row e_0) and V' real: V's first row is
    # real there, so that phase is the one chosen here (A v = s u: u turns with v).
    phase = _phase(v.rows(0, 1)).conj()
    u, v = u * phase, v * phase
    u = u / where(sigma.gt(0), sigma, 1)
    u = _complete(u, m if full else n, device)
    return u, sigma.reshape(sigma.shape[:-2] + sigma.shape[-1:]), v.mH


def _complete(u: Cz, cols: int, device) -> Cz:
    """Orthonormal columns extending ``u``'s orthonormal-or-zero columns to ``cols``: the
    Householder QR of u, whose R has a real diagonal of ±1 for u's orthonormal columns (so Q's
    column times that sign is u's) and 0 for a zero column (which gets Q's column)."""
    m, n = u.shape[-2:]
    vs, taus = householder_vectors(u, device)
    q = apply_q(vs, taus, _eye(m, cols, u.shape[:-2], u.dtype), device)
    signs = (1 - 2 * mask(diagonal(vs.re).lt(0), u.dtype)).mT
    signs = signs.pad(-1, 0, cols - n) + mask(index(cols, 1).ge(n), u.dtype)
    return q * signs


@register_complex(aten._linalg_svd.default)
def linalg_svd(a, full_matrices=False, compute_uv=True, *, driver=None):
    if a.dim() < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    x = _matrix(a, "linalg.svd")
    m, n = x.shape[-2:]
    k = min(m, n)
    batch = x.shape[:-2]
    empty = czeros((0,), x.dtype)
    if math.prod(x.shape) == 0:
        s = zeros(batch + (k,), x.dtype)
        if not compute_uv:
            return cout(empty, a), rout(s, a), cout(empty, a)
        ucols, vrows = (m, n) if full_matrices else (k, k)
        return cout(_eye(m, ucols, batch, x.dtype), a), rout(s, a), cout(_eye(vrows, n, batch, x.dtype), a)
    u, s, vh = svd(x, full_matrices and compute_uv, a._storage.device)
    if not compute_uv:
        return cout(empty, a), rout(s, a), cout(empty, a)
    return cout(u, a), rout(s, a), cout(vh, a)

