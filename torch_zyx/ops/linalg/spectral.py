"""Orthogonal factorizations and spectral linear algebra as lazy zyx programs: Householder QR
(geqrf / orgqr / ormqr conventions), symmetric eigendecomposition and SVD by parallel Jacobi
rotations, and what is built on them (pinv, lstsq, matrix_exp). Written with the ``Lz`` helper
of lazymat.py, in the same style: static loops of vectorized lazy steps.

Jacobi: each round rotates n/2 disjoint index pairs at once (round-robin "circle" schedule:
index n-1 stays, the others turn), so a sweep over all pairs is n-1 rounds of a few matmuls.
Cyclic Jacobi converges quadratically once off-diagonal mass is small; ``jacobi_sweeps`` is a
fixed count measured to reach rounding level for the sizes these ops meet (tests/test_linalg.py
checks it), as a lazy graph cannot stop on a data-dependent test. Eigenvectors and singular
vectors are unique only up to sign: LAPACK's signs come out of its own (tridiagonal /
bidiagonal) iteration and follow no rule that could be reproduced here, so the vectors match
LAPACK's up to sign; everything built from them (projectors, pinv, gradients of values) matches.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import ZyxTensor, read, wrap
from ..registry import aten, register
from .lazymat import (
    Lz,
    diagonal,
    eye,
    float_input,
    index,
    mask,
    out,
    square,
    step,
    stored,
    triu,
    type_name,
    where,
    zeros,
)

# ---------------------------------------------------------------- Householder QR


def householder_vectors(a: Lz, device) -> tuple[Lz, Lz]:
    """geqrf: R in the upper triangle, the Householder vectors (unit first entry implied)
    below it, and tau (..., 1, k). Reflection j: ``alpha = A[j, j]``, ``x = A[j+1:, j]``,
    ``beta = -sign(alpha) * hypot(alpha, |x|)``, ``tau = (beta - alpha) / beta``,
    ``v = x / (alpha - beta)`` (LAPACK's dlarfg); ``tau = 0`` (identity) when x is zero.
    The step number j is data (``step``): every step runs the same kernels."""
    *batch, m, n = a.shape
    k = min(m, n)
    row, col = index(m, 0), index(n, 1)
    taus = zeros(tuple(batch) + (1, k), a.dtype)
    for number in range(k):
        j = step(device, number)
        x = a.col_at(j)
        alpha = x.row_at(j)
        below = row.gt(j)
        xnorm = where(below, x * x, 0).sum(-2).sqrt()
        skip = xnorm.eq(0)
        beta = -(alpha * alpha + xnorm * xnorm).sqrt().copysign(alpha)
        beta = where(skip, alpha, beta)
        tau = where(skip, 0, (beta - alpha) / beta)
        v = where(below, where(skip, x, x / (alpha - beta)), mask(row.eq(j), a.dtype))
        w = (v * a).sum(-2)
        kept = where(row.lt(j), x, where(row.eq(j), beta, v))
        a = stored(where(col.eq(j), kept, where(col.gt(j), a - tau * v * w, a)))
        taus = stored(taus + where(index(k, 1).eq(j), tau, 0))
    return a, taus


def _reflector(vs: Lz, j: Lz) -> Lz:
    """Householder vector j (..., m, 1) from geqrf's storage: 1 at j, stored entries below."""
    row = index(vs.shape[-2], 0)
    return where(row.gt(j), vs.col_at(j), mask(row.eq(j), vs.dtype))


def apply_q(vs: Lz, taus: Lz, c: Lz, device, left: bool = True, transpose: bool = False) -> Lz:
    """``Q C``, ``Q^T C``, ``C Q`` or ``C Q^T`` for ``Q = H_0 H_1 ... H_{k-1}`` given by geqrf's
    vectors and taus (..., 1, k), one reflection ``C -= tau v (v^T C)`` per step (the step
    number is data: every step runs the same kernels)."""
    k = taus.shape[-1]
    order = range(k) if left == transpose else range(k - 1, -1, -1)
    for number in order:
        j = step(device, number)
        v = _reflector(vs, j)
        tau = taus.col_at(j)
        if left:
            c = stored(c - tau * v * (v * c).sum(-2))
        else:
            c = stored(c - tau * (c @ v) * v.mT)
    return c


def _taus(tau) -> Lz:
    t = Lz(read(tau))
    return t.reshape(t.shape[:-1] + (1, t.shape[-1]))


@register(aten.geqrf.default)
def geqrf(a):
    if a.dim() < 2:
        raise RuntimeError(f"torch.geqrf: input must have at least 2 dimensions. Got {a.dim()}")
    vs, taus = householder_vectors(float_input(a, "torch.geqrf"), a._storage.device)
    return out(vs, a), out(taus.reshape(taus.shape[:-2] + taus.shape[-1:]), a)


@register(aten.linalg_householder_product.default)
def householder_product(a, tau):
    api = "torch.linalg.householder_product"
    check_householder_product(api, a, tau)
    vs = float_input(a, api)
    m, n = vs.shape[-2:]
    return out(apply_q(vs, _taus(tau), eye(m, n, vs.dtype).expand(vs.shape), a._storage.device), a)


@register(aten.ormqr.default)
def ormqr(a, tau, other, left=True, transpose=False):
    api = "torch.ormqr"
    if a.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError(f"{api}: other must have at least 2 dimensions.")
    vs, c = float_input(a, api), float_input(other, api)
    if a.dtype != other.dtype or a.dtype != tau.dtype:
        raise RuntimeError(f"{api}: Expected input and other to have the same dtype, but got "
                           f"{type_name(a.dtype)} and {type_name(other.dtype)}")
    _check_ormqr_shapes(tuple(a.shape), tuple(tau.shape), tuple(other.shape), left)
    return out(apply_q(vs, _taus(tau), c, other._storage.device, left, transpose), other)


def check_householder_product(api: str, a, tau) -> None:
    """ATen's checks of linalg.householder_product, in its order and with its messages (real and
    complex inputs alike)."""
    if a.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if a.shape[-2] < a.shape[-1]:
        raise RuntimeError(f"{api}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if tau.shape[-1] > a.shape[-1]:
        raise RuntimeError(f"{api}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.dim() != a.dim() - 1:
        raise RuntimeError(f"{api}: Expected tau to have one dimension less than input, but got "
                           f"tau.ndim equal to {tau.dim()} and input.ndim is equal to {a.dim()}")
    if a.dtype != tau.dtype:
        raise RuntimeError(f"{api}: tau dtype {tau.dtype} does not match input dtype {a.dtype}")


def _check_ormqr_shapes(a: tuple, tau: tuple, other: tuple, left: bool) -> None:
    """ATen's shape checks of ormqr, in its order and with its messages."""
    api = "torch.ormqr"
    side = -2 if left else -1  # the axis of ``other`` that Q multiplies
    if other[side] != a[-2]:
        raise RuntimeError(f"{api}: other.shape[{side}] must be equal to input.shape[-2]")
    if not tau:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    if tau[-1] != min(other[side], a[-1]):
        raise RuntimeError(f"{api}: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    if len(a) - len(tau) != 1:
        raise RuntimeError(f"{api}: Expected tau to have one dimension less than input, but got tau.ndim "
                           f"equal to {len(tau)} and input.ndim is equal to {len(a)}")
    if len(a) != len(other):
        raise RuntimeError(f"{api}: Expected other to have the same number of dimensions as input, but got "
                           f"other.ndim equal to {len(other)} and input.ndim is equal to {len(a)}")
    for name, batch in (("tau", tau[:-1]), ("other", other[:-2])):
        if batch != a[:-2]:
            raise RuntimeError(f"{api}: Expected batch dimensions of {name} to be equal to input.shape[:-2], "
                               f"but got {list(batch)}")


def qr(x: Lz, mode: str, device) -> tuple[Lz | None, Lz]:
    m, n = x.shape[-2:]
    k = min(m, n)
    vs, taus = householder_vectors(x, device)
    if mode == "complete":
        r = triu(vs)
        q = apply_q(vs, taus, eye(m, m, x.dtype).expand(x.shape[:-2] + (m, m)), device)
    else:
        r = triu(vs.rows(0, k))
        q = (None if mode == "r"
             else apply_q(vs, taus, eye(m, k, x.dtype).expand(x.shape[:-2] + (m, k)), device))
    return q, r


@register(aten.linalg_qr.default)
def linalg_qr(a, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' "
                           "(default), 'r', or 'complete'")
    if a.dim() < 2:
        raise RuntimeError("linalg.qr: The input tensor A must have at least 2 dimensions.")
    q, r = qr(float_input(a, "linalg.qr"), mode, a._storage.device)
    q_t = out(q, a) if q is not None else out(zeros((0,), r.dtype), a)
    return q_t, out(r, a)


# ---------------------------------------------------------------- Jacobi rotations


def jacobi_sweeps(n: int) -> int:
    """Sweeps that take a symmetric n x n matrix to rounding level. Cyclic Jacobi converges
    quadratically (the off-diagonal norm roughly squares each sweep once small); measured on
    random matrices of n <= 10 the values reach rounding level after 5 sweeps (float32 and
    float64); 6 for n <= 8 and one more per doubling of n keeps a margin."""
    return 6 + max(0, math.ceil(math.log2(max(n, 2))) - 3)


def _round_rotation(gram: Lz, r: Lz) -> Lz:
    """The orthogonal J (..., N, N) of round ``r`` for the symmetric ``gram``: the N/2 disjoint
    pairs (p, q) of the circle schedule (index N-1 meets r; i meets (2r - i) mod (N-1)) each get
    the rotation ``[[c, s], [-s, c]]`` that zeroes ``gram[p, q]`` in ``J^T gram J``
    (Golub & Van Loan's symmetric Schur: ``t = sign(θ) / (|θ| + sqrt(1 + θ²))``,
    ``θ = (g_qq - g_pp) / (2 g_pq)``; ``t = 0`` when ``g_pq`` is 0). The round number is data
    (``step``): every round runs the same kernels."""
    n = gram.shape[-1]
    i = index(n, 0)
    turned = (2 * r + (n - 1) - i)._bin("mod", n - 1)
    partner = where(i.eq(n - 1), r, where(i.eq(r), n - 1, turned))  # (N, 1)
    meets = mask(index(n, 1).eq(partner), gram.dtype)  # (N, N): row i's partner column
    diag = diagonal(gram)  # (..., N, 1)
    other = (meets * diag.mT).sum(-1)  # the partner's diagonal entry
    off = (meets * gram).sum(-1)
    first = i.lt(partner)
    app, aqq = where(first, diag, other), where(first, other, diag)
    theta = (aqq - app) / (2 * off)
    t = Lz(g.const(1, gram.dtype, ())).copysign(theta) / (theta.abs() + (theta * theta + 1).sqrt())
    t = where(off.eq(0), 0, t)
    c = 1 / (t * t + 1).sqrt()
    s = t * c
    return mask(index(n, 0).eq(index(n, 1)), gram.dtype) * c + meets * where(first, s, -s)


def _even(n: int) -> int:
    return n + n % 2


def jacobi_eigh(a: Lz, device) -> tuple[Lz, Lz]:
    """Eigenvalues (..., n, 1) (unsorted) and eigenvectors (columns) of symmetric ``a``:
    ``A <- J^T A J``, ``V <- V J`` for every round of every sweep. An odd n gets a zero
    row and column that every rotation leaves alone (its pairs have g_pq = 0), dropped at the end."""
    n = a.shape[-1]
    big = _even(n)
    if big != n:
        a = a.pad(-1, 0, 1).pad(-2, 0, 1)
    v = eye(big, big, a.dtype).expand(a.shape)
    for _ in range(jacobi_sweeps(n)):
        for r in range(big - 1):
            j = _round_rotation(a, step(device, r))
            a = j.mT @ a @ j
            v = v @ j
    return diagonal(a).rows(0, n), v.rows(0, n).cols(0, n)


def jacobi_svd(a: Lz, device) -> tuple[Lz, Lz, Lz]:
    """One-sided (Hestenes) Jacobi on ``a`` (..., m, n), m >= n: rotate column pairs of
    ``U = A V`` until they are orthogonal, each round's angles from the Gram matrix ``U^T U``
    recomputed from U (the accurate variant: no squared condition number accumulates).
    Returns (U with columns of norm sigma, sigma (..., 1, n), V), unsorted."""
    n = a.shape[-1]
    big = _even(n)
    u = a.pad(-1, 0, big - n)
    v = eye(big, big, a.dtype).expand(a.shape[:-2] + (big, big))
    for _ in range(jacobi_sweeps(n)):
        for r in range(big - 1):
            j = _round_rotation(u.mT @ u, step(device, r))
            u = u @ j
            v = v @ j
    u = u.cols(0, n)
    sigma = (u * u).sum(-2).sqrt()
    return u, sigma, v.rows(0, n).cols(0, n)


def _order(values: Lz, descending: bool) -> Lz:
    """The permutation matrix S (..., n, n) that sorts ``values`` (..., n, 1) stably:
    ``S^T values`` is sorted, ``M S`` orders M's columns the same way. Rank of i = number of
    values before it in the order (smaller, or equal at a smaller index)."""
    n = values.shape[-2]
    row, col = index(n, 0), index(n, 1)
    other = values.mT
    before = other.gt(values) if descending else other.lt(values)
    rank = mask(before | (other.eq(values) & col.lt(row)), dtypes.int64).sum(-1)
    return mask(rank.eq(col), values.dtype)


def eigh(x: Lz, upper: bool, device) -> tuple[Lz, Lz]:
    """(ascending eigenvalues (..., n, 1), eigenvectors) of the symmetric matrix whose lower
    (or ``upper``) triangle ``x`` holds."""
    tri = triu(x if upper else x.mT)  # the triangle LAPACK reads, as an upper one
    values, vectors = jacobi_eigh(tri + triu(tri, 1).mT, device)
    order = _order(values, descending=False)
    return order.mT @ values, vectors @ order


@register(aten._linalg_eigh.default)
def linalg_eigh(a, UPLO="L", compute_v=True):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    x = square(a, "linalg.eigh")
    n = x.shape[-1]
    if n == 0 or math.prod(x.shape) == 0:
        values = zeros(x.shape[:-1], x.dtype)
        vectors = zeros(x.shape if compute_v else (0,), x.dtype)
        return out(values, a), out(vectors, a)
    values, vectors = eigh(x, UPLO == "U", a._storage.device)
    vals = out(values.reshape(values.shape[:-1]), a)
    return vals, out(vectors if compute_v else zeros((0,), x.dtype), a)


def svd(x: Lz, full: bool, device) -> tuple[Lz, Lz, Lz]:
    """(U, descending sigma (..., k), Vh) of ``x`` (..., m, n); ``full`` completes U (or V) to
    a square orthogonal matrix through a Householder QR of the normalized columns."""
    m, n = x.shape[-2:]
    if m < n:
        v, s, uh = svd(x.mT, full, device)
        return uh.mT, s, v.mT
    u, sigma, v = jacobi_svd(x, device)
    order = _order(sigma.mT, descending=True)
    sigma = (order.mT @ sigma.mT).mT
    u, v = u @ order, v @ order
    u = u / where(sigma.gt(0), sigma, 1)
    # Columns of zero singular values are zero here: completing always keeps U orthonormal.
    u = _complete(u, m if full else n, device)
    return u, sigma.reshape(sigma.shape[:-2] + sigma.shape[-1:]), v.mT


def _complete(u: Lz, cols: int, device) -> Lz:
    """Orthonormal columns extending ``u``'s (..., m, n) orthonormal-or-zero columns to
    ``cols``: Householder QR of u, Q's columns signed like R's diagonal (a nonzero column of u
    comes back as itself; a zero column or a new one gets a unit vector orthogonal to the
    others)."""
    m, n = u.shape[-2:]
    vs, taus = householder_vectors(u, device)
    q = apply_q(vs, taus, eye(m, cols, u.dtype).expand(u.shape[:-2] + (m, cols)), device)
    signs = (1 - 2 * mask(diagonal(vs).lt(0), u.dtype)).mT  # (..., 1, n)
    signs = signs.pad(-1, 0, cols - n) + mask(index(cols, 1).ge(n), u.dtype)
    return q * signs


@register(aten._linalg_svd.default)
def linalg_svd(a, full_matrices=False, compute_uv=True, *, driver=None):
    if a.dim() < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    x = float_input(a, "linalg.svd")
    m, n = x.shape[-2:]
    k = min(m, n)
    batch = x.shape[:-2]
    if math.prod(x.shape) == 0:
        s = zeros(batch + (k,), x.dtype)
        if not compute_uv:
            return out(zeros((0,), x.dtype), a), out(s, a), out(zeros((0,), x.dtype), a)
        ucols, vrows = (m, n) if full_matrices else (k, k)
        return (out(eye(m, ucols, x.dtype).expand(batch + (m, ucols)), a), out(s, a),
                out(eye(vrows, n, x.dtype).expand(batch + (vrows, n)), a))
    u, s, vh = svd(x, full_matrices and compute_uv, a._storage.device)
    if not compute_uv:
        return out(zeros((0,), x.dtype), a), out(s, a), out(zeros((0,), x.dtype), a)
    return out(u, a), out(s, a), out(vh, a)


# ---------------------------------------------------------------- built on SVD / eigh


def _tolerance(t, x: Lz) -> Lz | None:
    if t is None:
        return None
    if isinstance(t, ZyxTensor):
        node = Lz(g.cast(read(t), x.dtype))
    else:
        node = Lz(g.const(float(t), x.dtype, ()))
    return node.reshape(node.shape + (1,))  # broadcasts against (..., k) values


@register(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(a, *, atol=None, rtol=None, hermitian=False):
    """torch's formula: values below ``max(atol, rtol * largest)`` count as zero; rtol defaults
    to eps * max(m, n) (0 when a positive atol is given)."""
    x = float_input(a, "linalg.pinv")
    m, n = x.shape[-2:]
    batch = x.shape[:-2]
    if math.prod(x.shape) == 0:
        return out(zeros(batch + (n, m), x.dtype), a)
    atol_n, rtol_n = _tolerance(atol, x), _tolerance(rtol, x)
    if rtol_n is None:
        eps = torch.finfo(a.dtype).eps * max(m, n)
        default = Lz(g.const(eps, x.dtype, ()))
        rtol_n = default if atol_n is None else where(atol_n.gt(0), 0, default)
    if atol_n is None:
        atol_n = Lz(g.const(0, x.dtype, ()))
    if hermitian:
        values, vectors = eigh(x, False, a._storage.device)
        values = values.mT  # (..., 1, n)
        size = values.abs()
        tol = atol_n.maximum(rtol_n * size.max(-1))
        inv = where(size.gt(tol), 1 / values, 0)
        return out((vectors * inv) @ vectors.mT, a)
    u, s, vh = svd(x, False, a._storage.device)
    s = s.reshape(s.shape[:-1] + (1, s.shape[-1]))
    tol = atol_n.maximum(rtol_n * s.cols(0, 1))
    inv = where(s.gt(tol), 1 / s, 0)
    return out((vh.mT * inv) @ u.mT, a)


def _host_int(x: Lz, device) -> int:
    """Read a one-element node on the host (a realization): for torch's own data-dependent
    decisions (lstsq's residuals) and for sizing matrix_exp's squarings."""
    return wrap(x.node, device).item()


@register(aten.linalg_lstsq.default)
def linalg_lstsq(a, b, rcond=None, *, driver=None):
    """Least squares / minimum norm solution through the SVD: ``X = V S^+ U^T B`` with singular
    values under ``rcond * largest`` dropped (the rank). Outputs follow the driver's contract:
    rank for gelsy/gelsd/gelss, singular values for gelsd/gelss, residuals when m > n (not gelsy;
    for gelsd/gelss only when every matrix has full rank, a host check like torch's)."""
    api = "torch.linalg.lstsq"
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if a.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    x, y = float_input(a, api), float_input(b, api)
    vector = b.dim() == a.dim() - 1
    if vector:
        y = y.reshape(y.shape + (1,))
    m, n = x.shape[-2:]
    if y.shape[-2] != m:
        raise RuntimeError(f"{api}: input.size(-2) should match other.size(-2)")
    batch = tuple(torch.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    x, y = x.expand(batch + (m, n)), y.expand(batch + y.shape[-2:])
    k = min(m, n)
    device = a._storage.device
    if math.prod(x.shape) == 0 or math.prod(y.shape) == 0:
        sol = zeros(batch + (n, y.shape[-1]), x.dtype)
        s = zeros(batch + (k,), x.dtype)
        rank = zeros(batch, dtypes.int64)
    else:
        u, s, vh = svd(x, False, device)
        srow = s.reshape(s.shape[:-1] + (1, k))
        cutoff = (torch.finfo(a.dtype).eps * max(m, n) if rcond is None or rcond < 0 else rcond)
        keep = srow.gt(srow.cols(0, 1) * cutoff)
        inv = where(keep, 1 / srow, 0)
        sol = (vh.mT * inv) @ (u.mT @ y)
        rank = mask(keep, dtypes.int64).sum(-1).reshape(batch)
    residuals = zeros((0,), x.dtype)
    if m > n and driver != "gelsy" and math.prod(x.shape) and math.prod(y.shape):
        full = True
        if driver in ("gelsd", "gelss"):
            full = _host_int(mask(rank.ne(n), dtypes.int64).sum(tuple(range(len(batch)))).reshape(()) if batch
                             else mask(rank.ne(n), dtypes.int64), device) == 0
        if full:
            residuals = ((x @ sol - y) * (x @ sol - y)).sum(-2)
            residuals = residuals.reshape(residuals.shape[:-2] + residuals.shape[-1:])
            if vector:
                residuals = residuals.reshape(residuals.shape[:-1])
    if vector:
        sol = sol.reshape(sol.shape[:-1])
    rank_t = out(rank, a) if driver != "gels" else out(zeros((0,), dtypes.int64), a)
    s_t = out(s, a) if driver in ("gelsd", "gelss") else out(zeros((0,), x.dtype), a)
    return out(sol, a), out(residuals, a), rank_t, s_t


@register(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(a):
    """Scaling and squaring: ``exp(A) = exp(A / 2^s)^(2^s)`` with s chosen per matrix so that
    ``|A / 2^s|_1 <= 1/2``, the exponential of the scaled matrix by its Taylor polynomial
    (degree 13: the truncation error 0.5^14/14! is below float64's epsilon) in Horner form,
    computed in float64 whatever the input dtype. The number of squaring steps is the largest s of the batch,
    read on the host (a realization); each matrix squares only while its own s lasts."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError("linalg.matrix_exp: A must be batches of square matrices, "
                           f"but they are {a.shape[-2] if a.dim() > 1 else 1} by {a.shape[-1]} matrices")
    node = read(a)
    # float64 inside for every float dtype: the squarings amplify rounding (each doubles the
    # relative error), and in float32 that alone drifts past LAPACK-level agreement.
    work = dtypes.float64
    if not node.dtype.is_float:
        raise RuntimeError(f"linalg.matrix_exp: Expected a floating point or complex tensor as input. Got "
                           f"{type_name(a.dtype)}")
    x = Lz(g.cast(node, work))
    n = x.shape[-1]
    if math.prod(x.shape) == 0:
        return out(Lz(g.cast(x.node, node.dtype)), a)
    norm = x.abs().sum(-2).max(-1)  # (..., 1, 1) operator 1-norm
    steps = Lz(g.unary("ceil", g.unary("log2", (norm / 0.5).maximum(1).node))).cast(dtypes.int64)
    most = _host_int(steps.max(tuple(range(len(steps.shape)))).reshape(()), a._storage.device)
    scaled = x / Lz(g.unary("exp2", steps.cast(work).node))
    ident = eye(n, n, work).expand(x.shape)
    result = ident
    device = a._storage.device
    # The term number and the squaring number are data (``step``): one kernel set for all.
    for d in range(13, 0, -1):
        result = stored(ident + (scaled @ result) / step(device, d).cast(work))
    for i in range(most):
        result = stored(where(steps.gt(step(device, i)), result @ result, result))
    return out(Lz(g.cast(result.node, node.dtype)), a)
