"""The eigendecomposition of a general complex matrix (``linalg.eig``, and so ``linalg.eigvals``)
as a lazy zyx program: Householder reduction to Hessenberg form, the implicit single-shift QR
algorithm to the Schur form ``A = Z T Z^H``, then the eigenvectors of triangular T by back
substitution (ztrevc), mapped back with Z and normalized as zgeev does.

QR iterations (zlahqr's scheme): the active window is rows and columns ``[lo, m)``; ``m``
shrinks when ``T[m-1, m-2]`` is negligible (deflation), ``lo`` is the last negligible
subdiagonal above it (a split: a bulge started above it would die there). Each iteration takes
the Wilkinson shift of the window's trailing 2x2 (every tenth an exceptional one, against
cycling), and chases the bulge with one Givens rotation per step, applied to the whole matrix
(the full Schur form) and to Z. Window bounds, shifts and rotations are data, so every
iteration runs the same kernels; the number of iterations cannot depend on data inside a graph,
so the host reads after every few iterations whether every matrix has converged (a
realization, as matrix_exp reads its number of squarings).

Conventions: eigenvectors have unit 2-norm and their largest component real and positive (zgeev).
The eigenvalues come in the order this iteration deflates them, which need not be LAPACK's (zgeev
balances first, and zlahqr's deflation order follows its own shifts and splits): the
eigenvalues and eigenvectors match LAPACK's as sets of pairs, not position by position.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read, wrap
from ..linalg.dense import raise_errors
from ..linalg.lazymat import Lz, diagonal, index, mask, step, stored, where, zeros
from ..linalg.spectral import _host_int
from ..registry import aten
from .base import register_complex, wrap_pairs
from .decompositions import _eye, _modulus, _phase
from .linalg import Cz, _read, _square, cout, cstored, cwhere, czeros, rout


def _entry(x: Cz, i: Lz, j: Lz) -> Cz:
    """``x[..., i, j]`` for data indices, shape (..., 1, 1)."""
    return x.row_at(i).col_at(j)


def _sqrt(z: Cz) -> Cz:
    """The principal square root (base.sqrt's formula, on Lz parts)."""
    size = _modulus(z)[0]
    t = ((z.re.abs() + size) * 0.5).sqrt()
    other = where(t.eq(0), 0, z.im.abs() / (t * 2))
    nonneg = z.re.ge(0)
    return Cz(where(nonneg, t, other), where(nonneg, other, t).copysign(z.im))


def hessenberg(a: Cz, device) -> tuple[Cz, Cz]:
    """zgehd2: ``H = Q^H A Q`` upper Hessenberg and ``Q`` (zlarfg's reflectors, as geqrf's,
    on the entries below the subdiagonal of column j)."""
    *batch, n, _ = a.shape
    row, col = index(n, 0), index(n, 1)
    z = _eye(n, n, tuple(batch), a.dtype)
    for number in range(max(n - 2, 0)):
        j = step(device, number)
        x = a.col_at(j)
        alpha = x.row_at(j + 1)
        below = row.gt(j + 1)
        xnorm = where(below, x.re * x.re + x.im * x.im, 0).sum(-2).sqrt()
        skip = xnorm.eq(0) & alpha.im.eq(0)
        beta = -(alpha.re * alpha.re + alpha.im * alpha.im + xnorm * xnorm).sqrt().copysign(alpha.re)
        beta = where(skip, alpha.re, beta)
        tau = Cz(where(skip, 0, (beta - alpha.re) / beta), where(skip, 0, -alpha.im / beta))
        one = Cz(mask(row.eq(j + 1), a.dtype), zeros((), a.dtype))
        v = cwhere(below, cwhere(skip, x, x / (alpha - beta)), one)
        a = a - tau.conj() * v * (v.conj() * a).sum(-2)  # H^H A
        a = a - tau * (a @ v) * v.mH  # (H^H A) H
        # the reflected column exactly: beta on the subdiagonal, zeros below
        a = cstored(cwhere(col.eq(j) & below, 0, cwhere(col.eq(j) & row.eq(j + 1),
                                                          Cz(beta, zeros((), a.dtype)), a)))
        z = cstored(z - tau * (z @ v) * v.mH)
    return a, z


def _sub(h: Cz, offset: int) -> Cz:
    """The diagonal ``offset`` below (1) or above (-1) the main one, as an (..., n-1, 1) column:
    entry k is ``h[k+1, k]`` (1) or ``h[k, k+1]`` (-1)."""
    n = h.shape[-1]
    x = h.rows(1, n) if offset > 0 else h.cols(1, n)
    return Cz(diagonal(x.re), diagonal(x.im))


def _down(x: Lz) -> Lz:
    """Column ``x`` (..., n-1, 1) moved down one row (row 0 zero / false): indexed by the row k
    of ``h[k, k-1]``."""
    nd = len(x.shape)
    return Lz(g.pad(x.node, ((0, 0),) * (nd - 2) + ((1, 0), (0, 0))))


def _negligible(h: Cz, n: int) -> Lz:
    """(..., n, 1): whether ``h[k, k-1]`` is negligible, zlahqr's test: below smlnum, or below
    ulp (|h[k-1, k-1]| + |h[k, k]|) and Ahues & Tisseur's ``ba (ab / s) <= ulp bb (aa / s)``
    (|.| of a diagonal entry |re| + |im|, of a subdiagonal one its modulus: zlahqr keeps those
    real); row 0 never. The swept bulge's leftovers are zeroed exactly (``_rotate``), else a
    converged entry sits at the rounding level of the whole matrix and this never holds."""
    fin = torch.finfo(torch.float32 if h.dtype is dtypes.float32 else torch.float64)
    ulp, smlnum = fin.eps, fin.tiny * (n / fin.eps)
    sub = _modulus(_sub(h, 1))[0]  # |h[k+1, k]|, (..., n-1, 1)
    sup = _sub(h, -1).abs1()  # |h[k, k+1]|
    d = Cz(diagonal(h.re), diagonal(h.im))
    upper, lower = d.rows(0, n - 1), d.rows(1, n)  # h[k, k], h[k+1, k+1]
    tst = upper.abs1() + lower.abs1()
    # (a zero pair of diagonal entries: the neighbouring subdiagonal entries instead)
    around = _down(sub).rows(0, n - 1) + sub.pad(-2, 0, 1).rows(1, n)
    tst = where(tst.eq(0), around, tst)
    ab, ba = sub.maximum(sup), sub.minimum(sup)
    diff = (upper - lower).abs1()
    aa, bb = lower.abs1().maximum(diff), lower.abs1().minimum(diff)
    total = aa + ab
    total = where(total.eq(0), 1, total)
    tiny = sub.le(smlnum) | (sub.le(tst * ulp) & (ba * (ab / total)).le((bb * (aa / total) * ulp).maximum(smlnum)))
    return _down(tiny)


def _deflate(h: Cz, m: Lz) -> tuple[Cz, Lz, Lz]:
    """Zero the negligible subdiagonal entries, shrink ``m`` past an isolated bottom row and
    find the window's top ``lo`` (the last split above m-1)."""
    n = h.shape[-1]
    row, col = index(n, 0), index(n, 1)
    small = _negligible(h, n)  # (..., n, 1)
    h = cwhere(small & col.eq(row - 1), 0, h)
    # m drops by one when its bottom row is split off (one per iteration: the next finds more)
    bottom = where(row.eq(m - 1), mask(small, dtypes.int64), 0).sum(-2)  # (..., 1, 1)
    m = where(m.gt(1) & bottom.gt(0), m - 1, m)
    m = stored(where(m.le(1), 0, m))  # a 1x1 window is converged
    lo = stored(where(small & row.lt(m), row, 0).max(-2))
    return cstored(h), m, lo


def _shift(h: Cz, lo: Lz, m: Lz, kdefl: Lz) -> Cz:
    """zlahqr's shift: the eigenvalue of the window's trailing 2x2 nearer its last diagonal
    entry (Wilkinson), or after 10 (20) iterations without a deflation the exceptional
    ``h[lo, lo] + 3/4 |h[lo+1, lo]|`` (``h[m-1, m-1] + 3/4 |h[m-1, m-2]|``)."""
    i, k = m - 1, m - 2
    d = _entry(h, i, i)
    c = _entry(h, i, k)
    a, b = _entry(h, k, k), _entry(h, k, i)
    half = (a - d) * 0.5
    root = _sqrt(half * half + b * c)
    # the root with the sign that makes half + root larger: the eigenvalue d - bc / (half + root)
    flip = (half.re * root.re + half.im * root.im).lt(0)
    root = cwhere(flip, -root, root)
    den = half + root
    zero = den.is_zero()
    wilkinson = cwhere(zero, d, d - b * c / cwhere(zero, Cz(den.re + 1, den.im), den))
    bottom = d + _modulus(c)[0] * 0.75
    top = _entry(h, lo, lo) + _modulus(_entry(h, lo + 1, lo))[0] * 0.75
    tenth = kdefl._bin("mod", 10).eq(0)
    twentieth = kdefl._bin("mod", 20).eq(0)
    return cwhere(twentieth, bottom, cwhere(tenth, top, wilkinson))


def _rotate(h: Cz, z: Cz, k: Lz, c: Lz, s: Cz) -> tuple[Cz, Cz]:
    """``G H G^H`` and ``Z G^H`` for G the rotation ``[[c, s], [-conj(s), c]]`` of rows (and
    columns) k and k+1."""
    n = h.shape[-1]
    row, col = index(n, 0), index(n, 1)
    rk, rk1 = h.row_at(k), h.row_at(k + 1)
    h = cwhere(row.eq(k), rk * c + s * rk1, cwhere(row.eq(k + 1), rk1 * c - s.conj() * rk, h))

    def columns(x: Cz) -> Cz:
        ck, ck1 = x.col_at(k), x.col_at(k + 1)
        return cwhere(col.eq(k), ck * c + s.conj() * ck1, cwhere(col.eq(k + 1), ck1 * c - s * ck, x))

    # Below the subdiagonal only the new bulge h[k+2, k] may be nonzero: the one just chased
    # (h[k+1, k-1]) is zero exactly, as zlahqr stores it, not the rounding a rotation leaves.
    stale = row.ge(col + 2) & ~(row.eq(k + 2) & col.eq(k))
    return cstored(cwhere(stale, 0, columns(h))), cstored(columns(z))


def _givens(x: Cz, y: Cz) -> tuple[Lz, Cz]:
    """(c, s) with ``[[c, s], [-conj(s), c]] [x; y] = [r x / |x|; 0]`` (c real)."""
    ax, ay = _modulus(x)[0], _modulus(y)[0]
    big = ax.maximum(ay)
    safe = where(big.eq(0), 1, big)
    r = big * ((ax / safe) * (ax / safe) + (ay / safe) * (ay / safe)).sqrt()
    rsafe = where(r.eq(0), 1, r)
    c = where(r.eq(0), 1, ax / rsafe)
    s = _phase(x) * y.conj() / rsafe
    return c, cwhere(r.eq(0), 0, s)


def schur(h: Cz, z: Cz, device) -> tuple[Cz, Cz, Lz]:
    """The implicit single-shift QR iteration on Hessenberg ``h`` (module docstring). Returns
    (T, Z, m): m (..., 1, 1) is 0 where the iteration converged, else the unconverged window's
    size (zlahqr's info)."""
    *batch, n, _ = h.shape
    m = Lz(g.const(n, dtypes.int64, tuple(batch) + (1, 1)))
    kdefl = zeros(tuple(batch) + (1, 1), dtypes.int64)  # iterations since the last deflation
    check = max(4, n)  # iterations between the host's convergence checks
    for iteration in range(30 * max(10, n) + 1):
        if iteration and iteration % check == 0:
            # Wrapped first, so the realization that reads m computes h and z too (it realizes
            # every pending storage of the device): the loop goes on from their buffers instead
            # of recomputing every iteration so far at the end.
            held = (wrap_pairs(h.pairs(), device), wrap_pairs(z.pairs(), device), wrap(m.node, device),
                    wrap(kdefl.node, device))
            most = Lz(g.reduce("max", m.node, tuple(range(len(m.shape))))).reshape(())
            h, z, m, kdefl = _read(held[0]), _read(held[1]), Lz(read(held[2])), Lz(read(held[3]))
            if _host_int(most, device) == 0:
                break
        before = m
        h, m, lo = _deflate(h, m)
        sweeping = lo.lt(m - 1)
        kdefl = stored(where(sweeping, where(m.lt(before), 0, kdefl) + 1, where(m.lt(before), 0, kdefl)))
        mu = _shift(h, lo, m, kdefl)
        for number in range(n - 1):
            k = step(device, number)
            first = k.eq(lo)
            x = cwhere(first, _entry(h, k, k) - mu, _entry(h, k, k - 1))
            y = cwhere(first, _entry(h, k + 1, k), _entry(h, k + 1, k - 1))
            c, s = _givens(x, y)
            active = k.ge(lo) & (k + 1).lt(m)
            c, s = where(active, c, 1), cwhere(active, s, 0)
            h, z = _rotate(h, z, k, c, s)
    return h, z, m


def triangular_vectors(t: Cz, device) -> Cz:
    """ztrevc: the eigenvectors of upper triangular ``t`` as the columns of a unit upper
    triangular X, by back substitution one row at a time (all columns at once); a difference of
    eigenvalues below ``smin`` is replaced by smin, as ztrevc does."""
    *batch, n, _ = t.shape
    row, col = index(n, 0), index(n, 1)
    t = cwhere(col.ge(row), t, 0)
    diag = Cz(diagonal(t.re), diagonal(t.im)).mT  # (..., 1, n)
    eps = torch.finfo(torch.float32 if t.dtype is dtypes.float32 else torch.float64).eps
    smin = (diag.abs1() * eps).maximum(1e-300 if t.dtype is dtypes.float64 else 1e-37)
    x = _eye(n, n, tuple(batch), t.dtype)
    for number in range(n - 1, -1, -1):
        i = step(device, number)
        ti = cwhere(col.gt(i), t.row_at(i), 0)
        num = ti @ x  # (..., 1, n)
        den = _entry(t, i, i) - diag
        den = cwhere(den.abs1().lt(smin), Cz(smin, zeros((), t.dtype)), den)
        x = cstored(cwhere(row.eq(i) & col.gt(i), -num / den, x))
    return x


def _normalize(v: Cz) -> Cz:
    """zgeev's normalization: unit 2-norm, the (first) largest component real and positive."""
    n = v.shape[-2]
    size = (v.re * v.re + v.im * v.im).sum(-2).sqrt()
    v = v / where(size.eq(0), 1, size)
    power = v.re * v.re + v.im * v.im
    top = power.max(-2)
    first = where(power.eq(top), index(n, 0), n).min(-2)  # (..., 1, n)
    pick = cwhere(index(n, 0).eq(first), v, 0).sum(-2)
    return v * _phase(pick).conj()


@register_complex(aten.linalg_eig.default)
def linalg_eig(a):
    x = _square(a, "linalg.eig")
    if math.prod(x.shape) == 0:
        return cout(czeros(x.shape[:-1], x.dtype), a), cout(czeros(x.shape, x.dtype), a)
    device = a._storage.device
    h, z = hessenberg(x, device)
    t, z, m = schur(h, z, device)
    raise_errors(rout(m.reshape(m.shape[:-2]), a), "linalg.eig", a.dim() == 2)
    values = Cz(diagonal(t.re), diagonal(t.im))
    vectors = _normalize(z @ triangular_vectors(t, device))
    return cout(values.reshape(values.shape[:-1]), a), cout(vectors, a)
