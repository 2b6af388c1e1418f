"""Dense linear algebra (torch.linalg and friends) as lazy zyx programs.

There are no LAPACK calls behind the graph: each factorization is a Python loop over the
(static) matrix size whose body is a few vectorized lazy ops over the whole (batched) matrix —
a column of Cholesky–Crout, a row of forward/back substitution, a step of LU with partial
pivoting (argmax + one-hot row swap), a Householder reflection, a round of parallel Jacobi
rotations. Data-dependent choices (pivots, rotation angles, failure flags) are values in the
graph selected with ``where``; nothing realizes until the caller reads a result. The graph grows
by O(n) steps for an n x n matrix, which is what these ops are used for (small matrices).

Results follow LAPACK's conventions wherever they are defined: pivots are 1-based int32 in
getrf's format, Householder vectors and ``tau`` are geqrf's (``beta = -sign(alpha) * norm``),
``info`` is the first failing pivot (1-based) or 0, a failed Cholesky stops like potf2.
Autograd needs nothing here: it runs above the dispatcher on the aten ops' own derivative
formulas, whose backward ops land on these lowerings again.

The algorithms are written with ``Lz`` (lazymat.py), a node with arithmetic operators, so they
read as the formulas they implement. QR and the eigen/singular side live in spectral.py,
LDL^T in ldl.py.
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read
from ..registry import aten, broadcast_shape, register
from .lazymat import (
    Lz,
    diagonal,
    empty,
    eye,
    float_input,
    index,
    mask,
    out,
    square,
    step,
    stored,
    tril,
    triu,
    type_name,
    where,
    zeros,
)


def batch_info(info: Lz) -> Lz:
    """A (..., 1, 1) info column as the (...) int32 tensor torch returns."""
    return info.reshape(info.shape[:-2]).cast(dtypes.int32)


def pivots_int32(piv: Lz) -> Lz:
    """Pivots kept as a (..., 1, k) row as torch's (..., k) int32."""
    return piv.reshape(piv.shape[:-2] + piv.shape[-1:]).cast(dtypes.int32)


# ---------------------------------------------------------------- Cholesky


def cholesky_lower(a: Lz, device) -> tuple[Lz, Lz]:
    """Left-looking Cholesky–Crout of the lower triangle of ``a``: (L, info (..., 1, 1) int64).

    Column j: ``v = A[:, j] - L @ L[j, :]^T`` (L's columns >= j are still zero), then the
    pivot ``d = v[j]`` is rooted and the rows below divided by it. A non-positive (or NaN)
    pivot stops the factorization like LAPACK's potf2: that column keeps ``d`` on the diagonal
    and the input below it, later columns keep the input, ``info`` is the pivot's 1-based number.
    The step number j is data (lazymat's ``step``): every step runs the same kernels.
    """
    *batch, n, _ = a.shape
    row, col = index(n, 0), index(n, 1)
    low = tril(a)
    L = zeros(a.shape, a.dtype)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    failed = info.ne(0)
    for j in range(n):
        at = step(device, j)
        given = low.col_at(at)
        v = given - L @ L.row_at(at).mT
        d = v.row_at(at)
        ok = d.gt(0)
        root = d.sqrt()
        column = where(row.gt(at), v / root, where(row.eq(at), root, 0))
        stopped = where(row.eq(at) & ~failed, v, given)
        column = where(failed | ~ok, stopped, column)
        info = stored(where(failed | ok, info, at + 1))
        failed = stored(failed | ~ok)
        L = stored(L + where(col.eq(at), column, 0))
    return L, info


@register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    x = square(a, "linalg.cholesky")
    L, info = cholesky_lower(x.mT if upper else x, a._storage.device)
    info = out(batch_info(info), a)
    if check_errors:
        raise_errors(info, "linalg.cholesky", a.dim() == 2)
    return out(L.mT if upper else L, a), info


@register(aten.cholesky.default)
def cholesky(a, upper=False):
    x = square(a, "cholesky")
    L, info = cholesky_lower(x.mT if upper else x, a._storage.device)
    raise_errors(out(batch_info(info), a), "cholesky", a.dim() == 2)
    return out(L.mT if upper else L, a)


def _broadcast_batch(a: Lz, b: Lz) -> tuple[Lz, Lz]:
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])


@register(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def cholesky_solve(b, L, upper=False):
    """``A X = B`` with ``A = L L^T`` (or ``U^T U``): two triangular solves."""
    if b.dim() < 2 or L.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {b.dim()} dimensions instead")
    x, f = _broadcast_batch(float_input(b, "cholesky_solve"), float_input(L, "cholesky_solve"))
    lower = f.mT if upper else f
    device = b._storage.device
    y = solve_triangular(lower, x, False, device)
    return out(solve_triangular(lower.mT, y, True, device), b)


@register(aten.cholesky_inverse.default)
def cholesky_inverse(L, upper=False):
    f = square(L, "cholesky_inverse")
    n = f.shape[-1]
    lower = f.mT if upper else f
    inv_lower = solve_triangular(lower, eye(n, n, f.dtype).expand(f.shape), False, L._storage.device)
    return out(inv_lower.mT @ inv_lower, L)


# ---------------------------------------------------------------- triangular solves


def solve_triangular(t: Lz, b: Lz, upper: bool, device, unit: bool = False) -> Lz:
    """``T X = B`` for triangular ``T`` (..., n, n) by substitution, one row of X per step:
    ``X[i] = (B[i] - T[i, :] @ X) / T[i, i]`` while X's unsolved rows are still zero. Only
    the ``upper`` or lower triangle of T is read; ``unit`` takes its diagonal as ones. The
    row number i is data (``step``): every step runs the same kernels."""
    t, b = _broadcast_batch(t, b)
    n = t.shape[-1]
    t = triu(t, 1 if unit else 0) if upper else tril(t, -1 if unit else 0)
    row = index(n, 0)
    x = zeros(b.shape, b.dtype)
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        at = step(device, i)
        t_row = t.row_at(at)
        r = b.row_at(at) - t_row @ x
        if not unit:
            r = r / t_row.col_at(at)
        x = stored(x + where(row.eq(at), r, 0))
    return x


def _solve_tri(a: Lz, b: Lz, upper: bool, left: bool, unit: bool, device) -> Lz:
    if left:
        return solve_triangular(a, b, upper, device, unit)
    # X A = B  <=>  A^T X^T = B^T (A^T is triangular the other way)
    return solve_triangular(a.mT, b.mT, not upper, device, unit).mT


@register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    api = "linalg.solve_triangular"
    if a.dim() < 2 or b.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor {'A' if a.dim() < 2 else 'B'} must have at "
                           "least 2 dimensions.")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{api}: Expected A and B to have the same dtype, but found A of type "
                           f"{type_name(a.dtype)} and B of type {type_name(b.dtype)} instead")
    x, y = square(a, api), float_input(b, api)
    k = y.shape[-2] if left else y.shape[-1]
    if k != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    x, y = _broadcast_batch(x, y)
    return out(_solve_tri(x, y, upper, left, unitriangular, a._storage.device), a)


@register(aten.triangular_solve.default)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    x, y = _broadcast_batch(square(a, "triangular_solve"), float_input(b, "triangular_solve"))
    device = a._storage.device
    if transpose:
        sol = solve_triangular(x.mT, y, not upper, device, unitriangular)
    else:
        sol = solve_triangular(x, y, upper, device, unitriangular)
    return out(sol, b), out(x, a)


# ---------------------------------------------------------------- LU with partial pivoting


def lu_factor(a: Lz, device, pivot: bool = True) -> tuple[Lz, Lz, Lz]:
    """getrf: (LU, pivots (..., 1, k) int64 1-based, info (..., 1, 1) int64) of ``a`` (..., m, n).

    Step j picks the first row >= j of largest |A[i, j]| (LAPACK's idamax), swaps it with row j
    across the whole matrix as a rank-one update ``A += (e_j - e_p)(A[p] - A[j])``, divides the
    column below the pivot by it (not when it is zero: ``info`` records the first such j) and
    updates the trailing block. The swaps are recorded as getrf's 1-based pivots. The step
    number j is data (``step``): every step runs the same kernels.
    """
    *batch, m, n = a.shape
    k = min(m, n)
    row, col, piv_col = index(m, 0), index(n, 1), index(k, 1)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    pivots = zeros(tuple(batch) + (1, k), dtypes.int64)
    for j in range(k):
        at = step(device, j)
        if pivot:
            size = where(row.ge(at), a.col_at(at).abs(), -1)
            best = size.max(-2)
            p = where(size.eq(best), row, m).min(-2)  # first row of the largest |value|
            swap = mask(row.eq(at), a.dtype) - mask(row.eq(p), a.dtype)
            a = a - swap * (swap * a).sum(-2)
            pivots = stored(pivots + where(piv_col.eq(at), p + 1, 0))
        else:
            pivots = stored(pivots + where(piv_col.eq(at), at + 1, 0))
        column = a.col_at(at)
        u = column.row_at(at)
        zero = u.eq(0)
        info = stored(where(info.eq(0) & zero, at + 1, info))
        below = row.gt(at)
        lower = where(below, where(zero, column, column / u), 0)
        urow = where(col.gt(at), a.row_at(at), 0)
        a = stored(where(col.eq(at) & below, lower, a - lower * urow))
    return a, pivots, info


def _lu_check(a, api: str) -> Lz:
    if a.dim() < 2:
        raise RuntimeError(f"{api}: Expected tensor with 2 or more dimensions. Got size: "
                           f"{list(a.shape)} instead")
    return float_input(a, api)


@register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a, *, pivot=True, check_errors=False):
    x = _lu_check(a, "torch.linalg.lu_factor_ex")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, piv, info = lu_factor(x, a._storage.device, pivot)
    info = out(batch_info(info), a)
    if check_errors:
        raise_errors(info, "torch.linalg.lu_factor_ex", a.dim() == 2)
    return out(lu, a), out(pivots_int32(piv), a), info


def permutation(pivots: Lz, m: int, device) -> Lz:
    """The permutation matrix P (..., m, m) with ``A = P L U`` from getrf pivots (..., 1, k):
    the row order ``perm`` starts as 0..m-1 and takes each swap ``j <-> pivots[j] - 1`` in
    turn (one-hot selects); ``P[r, c] = (r == perm[c])``."""
    k = pivots.shape[-1]
    perm = index(m, 1).expand(pivots.shape[:-2] + (1, m))
    at = index(m, 1)
    for j in range(k):
        number = step(device, j)
        p = pivots.col_at(number) - 1
        at_j = perm.col_at(number)
        at_p = where(at.eq(p), perm, 0).sum(-1)
        perm = stored(where(at.eq(number), at_p, where(at.eq(p), at_j, perm)))
    return mask(index(m, 0).eq(perm), dtypes.int64)


def _unpack(lu: Lz) -> tuple[Lz, Lz]:
    m, n = lu.shape[-2:]
    k = min(m, n)
    L = where(index(k, 1).lt(index(m, 0)), lu.cols(0, k), mask(index(k, 1).eq(index(m, 0)), lu.dtype))
    return L, triu(lu.rows(0, k))


@register(aten.linalg_lu.default)
def linalg_lu(a, *, pivot=True):
    x = _lu_check(a, "linalg.lu")
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    lu, piv, _ = lu_factor(x, a._storage.device, pivot)
    L, U = _unpack(lu)
    P = permutation(piv, x.shape[-2], a._storage.device).cast(x.dtype)
    return out(P, a), out(L, a), out(U, a)


@register(aten.lu_unpack.default)
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    x = Lz(read(lu))
    m, n = x.shape[-2:]
    k = min(m, n)
    if unpack_data:
        L, U = _unpack(x)
        L_t, U_t = out(L, lu), out(U, lu)
    else:
        L_t, U_t = empty((0,), x.dtype, lu), empty((0,), x.dtype, lu)
    if unpack_pivots:
        piv = Lz(g.cast(read(pivots), dtypes.int64))
        piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
        if piv.shape[-1] != k:
            raise RuntimeError("lu_unpack: LU_pivots.size(-1) must be equal to min(LU.size(-2), LU.size(-1))")
        P = out(permutation(piv, m, lu._storage.device).cast(x.dtype).expand(x.shape[:-2] + (m, m)), lu)
    else:
        P = empty((0,), x.dtype, lu)
    return P, L_t, U_t


def lu_solve(lu: Lz, piv: Lz, b: Lz, device, left: bool = True, adjoint: bool = False) -> Lz:
    """X with ``A X = B`` (``left``; else ``X A = B``; ``adjoint`` uses A^T) for A = P L U."""
    if not left:  # X A = B <=> A^T X^T = B^T
        return lu_solve(lu, piv, b.mT, device, True, not adjoint).mT
    n = lu.shape[-1]
    P = permutation(piv, n, device).cast(lu.dtype)
    if adjoint:  # U^T L^T P^T X = B
        y = solve_triangular(lu.mT, b, False, device)
        y = solve_triangular(lu.mT, y, True, device, unit=True)
        return P @ y
    y = solve_triangular(lu, P.mT @ b, False, device, unit=True)
    return solve_triangular(lu, y, True, device)


@register(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    api = "linalg.lu_solve"
    x, y = square(LU, api), float_input(B, api)
    if (y.shape[-2] if left else y.shape[-1]) != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    piv = Lz(g.cast(read(pivots), dtypes.int64))
    piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2], piv.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    piv = piv.expand(batch + piv.shape[-2:])
    return out(lu_solve(x, piv, y, B._storage.device, left, adjoint), B)


# ---------------------------------------------------------------- solve, inverse, determinants


def _vector_rhs(a, b) -> bool:
    """torch.linalg.solve's rule: B is a (batch of) vector(s) when it is 1-d or has A's shape
    without the last dimension."""
    return b.dim() == 1 or (b.dim() == a.dim() - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


@register(aten._linalg_solve_ex.default)
def linalg_solve_ex(a, b, *, left=True, check_errors=False):
    api = "torch.linalg.solve"
    if a.dtype != b.dtype:
        raise RuntimeError(f"{api}: Expected A and B to have the same dtype, but found A of type "
                           f"{type_name(a.dtype)} and B of type {type_name(b.dtype)} instead")
    x, y = square(a, api), float_input(b, api)
    vector = _vector_rhs(a, b)
    if vector:
        y = y.reshape(y.shape + (1,)) if left else y.reshape(y.shape[:-1] + (1, y.shape[-1]))
    n = x.shape[-1]
    if (y.shape[-2] if left else y.shape[-1]) != n:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {y.shape[-2]}x{y.shape[-1]})")
    device = a._storage.device
    lu, piv, info = lu_factor(x, device)
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    xs = lu_solve(lu.expand(batch + (n, n)), piv.expand(batch + piv.shape[-2:]),
                  y.expand(batch + y.shape[-2:]), device, left)
    if vector:
        xs = xs.reshape(xs.shape[:-1] if left else xs.shape[:-2] + xs.shape[-1:])
    info = out(batch_info(info), a)
    if check_errors:
        raise_errors(info, api, a.dim() == 2)
    return out(xs, a), out(lu, a), out(pivots_int32(piv), a), info


@register(aten.linalg_inv_ex.default)
def linalg_inv_ex(a, *, check_errors=False):
    x = square(a, "linalg.inv")
    n = x.shape[-1]
    lu, piv, info = lu_factor(x, a._storage.device)
    inv = lu_solve(lu, piv, eye(n, n, x.dtype).expand(x.shape), a._storage.device)
    info = out(batch_info(info), a)
    if check_errors:
        raise_errors(info, "linalg.inv_ex", a.dim() == 2)
    return out(inv, a), info


def _det_parts(x: Lz, contiguous: bool, device) -> tuple[Lz, Lz, Lz, Lz]:
    """(LU, pivots (..., 1, n), diagonal of U (..., n, 1), permutation sign (..., 1, 1)).
    Like ATen, a contiguous A is factored as A^T (det(A^T) = det(A)): the LU output is what
    the backward formulas of det/slogdet solve with, so it must be the same factorization."""
    lu, piv, _ = lu_factor(x.mT if contiguous else x, device)
    n = x.shape[-1]
    swaps = mask(piv.ne(index(n, 1) + 1), dtypes.int64).sum(-1)
    sign = 1 - 2 * swaps._bin("mod", 2)
    return lu, piv, diagonal(lu), sign.cast(x.dtype)


@register(aten._linalg_det.default)
def linalg_det(a):
    x = square(a, "linalg.det")
    lu, piv, diag, sign = _det_parts(x, a.is_contiguous(), a._storage.device)
    det = (diag.reduce("prod", -2) * sign)
    det = det.reshape(det.shape[:-2])
    return out(det, a), out(lu, a), out(pivots_int32(piv), a)


@register(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    x = square(a, "linalg.slogdet")
    lu, piv, diag, sign = _det_parts(x, a.is_contiguous(), a._storage.device)
    signs = (mask(diag.gt(0), x.dtype) - mask(diag.lt(0), x.dtype)).reduce("prod", -2) * sign
    logabs = diag.abs().log().sum(-2)
    batch = x.shape[:-2]
    return out(signs.reshape(batch), a), out(logabs.reshape(batch), a), out(lu, a), out(pivots_int32(piv), a)


# ---------------------------------------------------------------- errors


_MESSAGES = (  # ATen's _linalg_check_errors, by the first key found in the api name
    ("inv", ("The diagonal element {info} is zero, the inversion could not be completed because "
             "the input matrix is singular.")),
    ("solve", "The solver failed because the input matrix is singular."),
    ("cholesky", ("The factorization could not be completed because the input is not "
                  "positive-definite (the leading minor of order {info} is not positive-definite).")),
    ("svd", ("The algorithm failed to converge because the input matrix is ill-conditioned or has "
             "too many repeated singular values (error code: {info}).")),
    ("eig", ("The algorithm failed to converge because the input matrix is ill-conditioned or has "
             "too many repeated eigenvalues (error code: {info}).")),
    ("lstsq", ("The least squares solution could not be computed because the input matrix does not "
               "have full rank (error code: {info}).")),
    ("lu_factor", ("U[{info},{info}] is zero and using it on lu_solve would result in a division by "
                   "zero. If you still want to perform the factorization, consider calling "
                   "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")),
)


def raise_errors(info, api: str, is_matrix: bool) -> None:
    """Raise torch's error for the first nonzero ``info`` (reads it: a realization)."""
    if info.numel() == 0:
        return
    values = info.cpu().reshape(-1)
    bad = torch.nonzero(values)
    if bad.numel() == 0:
        return
    first = int(bad[0, 0])
    code = int(values[first])
    where_ = "" if is_matrix else f": (Batch element {first})"
    if code < 0:
        raise RuntimeError(f"{api}{where_}: Argument {-code} has illegal value. Most certainly there is a "
                           "bug in the implementation calling the backend library.")
    for key, message in _MESSAGES:
        if key in api:
            error = RuntimeError if key == "lu_factor" else torch.linalg.LinAlgError
            raise error(f"{api}{where_}: " + message.format(info=code))
    raise RuntimeError(f"{api}: Unknown error code: {code}.")


@register(aten._linalg_check_errors.default)
def linalg_check_errors(info, api_name, *, is_matrix):
    raise_errors(info, api_name, is_matrix)
