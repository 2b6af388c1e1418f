"""Complex dense linear algebra: LU with partial pivoting and what is built on it (solve, inverse,
determinants, LU solves and unpacking), triangular solves, Cholesky and its solves, addbmm;
the ``Cz`` matrices that decompositions.py (QR, eigh, SVD) is written with too.

Lowerings of the complex table (ops/complex/base.py), the complex twins of ops/linalg/dense.py:
the same step loops (each step's number is data, so every step runs the same kernels), written
with ``Cz``, a complex matrix as two real ``Lz`` (lazymat.py) holding its real and imaginary
parts, whose operators are complex arithmetic. Conventions are LAPACK's complex ones: the pivot
is the first row of largest |re| + |im| (izamax), a Cholesky factor satisfies A = L L^H and
reads the real part of the diagonal, and an adjoint solve uses A^H.
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read, wrap
from ..linalg.dense import batch_info, permutation, pivots_int32, raise_errors
from ..linalg.lazymat import Lz, diagonal, index, mask, step, stored, where, zeros
from ..registry import aten, broadcast_shape
from .base import im, join, magnitude, pairs, re, register_complex, wrap_pairs
from .math import _product, _sgn


class Cz:
    """A complex lazy matrix: ``re`` and ``im`` ``Lz`` of one shape. ``+ - * / @`` are complex
    (a real ``Lz`` or number operand scales both parts); ``mT``/``mH`` transpose (conjugate)."""

    __slots__ = ("im", "re")

    def __init__(self, re_: Lz, im_: Lz):
        self.re, self.im = re_, im_

    @property
    def shape(self):
        return self.re.shape

    @property
    def dtype(self):
        return self.re.dtype

    def _map(self, fn) -> Cz:
        return Cz(fn(self.re), fn(self.im))

    def __add__(self, o):
        return Cz(self.re + o.re, self.im + o.im) if isinstance(o, Cz) else Cz(self.re + o, self.im)

    def __sub__(self, o):
        return Cz(self.re - o.re, self.im - o.im) if isinstance(o, Cz) else Cz(self.re - o, self.im)

    def __neg__(self):
        return Cz(-self.re, -self.im)

    def __mul__(self, o):
        if isinstance(o, Cz):
            return Cz(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
        return Cz(self.re * o, self.im * o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if not isinstance(o, Cz):
            return Cz(self.re / o, self.im / o)
        # Smith's scaled division (no overflow in c² + d²), as c10 divides
        a, b, c, d = self.re, self.im, o.re, o.im
        c_big = d.abs().le(c.abs())
        rat = where(c_big, d / c, c / d)
        den = where(c_big, c + d * rat, d + c * rat)
        real = where(c_big, a + b * rat, a * rat + b) / den
        imag = where(c_big, b - a * rat, b * rat - a) / den
        return Cz(real, imag)

    def __matmul__(self, o):
        if isinstance(o, Cz):
            return Cz(self.re @ o.re - self.im @ o.im, self.re @ o.im + self.im @ o.re)
        return Cz(self.re @ o, self.im @ o)

    def conj(self) -> Cz:
        return Cz(self.re, -self.im)

    @property
    def mT(self) -> Cz:
        return self._map(lambda x: x.mT)

    @property
    def mH(self) -> Cz:
        return Cz(self.re.mT, -self.im.mT)

    def row_at(self, j):
        return self._map(lambda x: x.row_at(j))

    def col_at(self, j):
        return self._map(lambda x: x.col_at(j))

    def rows(self, a, b):
        return self._map(lambda x: x.rows(a, b))

    def cols(self, a, b):
        return self._map(lambda x: x.cols(a, b))

    def sum(self, axes):
        return self._map(lambda x: x.sum(axes))

    def expand(self, shape):
        return self._map(lambda x: x.expand(shape))

    def reshape(self, shape):
        return self._map(lambda x: x.reshape(shape))

    def abs1(self) -> Lz:
        """|re| + |im|: LAPACK's pivot size (dcabs1)."""
        return self.re.abs() + self.im.abs()

    def is_zero(self) -> Lz:
        return self.re.eq(0) & self.im.eq(0)

    def pairs(self):
        return join(self.re.node, self.im.node)


def cwhere(cond: Lz, a, b) -> Cz:
    """``where`` of complex (or 0) operands."""
    a_re, a_im = (a.re, a.im) if isinstance(a, Cz) else (a, 0)
    b_re, b_im = (b.re, b.im) if isinstance(b, Cz) else (b, 0)
    like = a if isinstance(a, Cz) else b
    if not isinstance(a_im, Lz) and not isinstance(b_im, Lz):
        a_im = zeros((), like.dtype)
    return Cz(where(cond, a_re, b_re), where(cond, a_im, b_im))


def cstored(x: Cz) -> Cz:
    return Cz(stored(x.re), stored(x.im))


def czeros(shape, dtype) -> Cz:
    return Cz(zeros(shape, dtype), zeros(shape, dtype))


def ceye(n: int, like: Cz) -> Cz:
    one = mask(index(n, 0).eq(index(n, 1)), like.dtype)
    return Cz(one, zeros((n, n), like.dtype)).expand(like.shape[:-2] + (n, n))


def ctril(a: Cz, k: int = 0) -> Cz:
    m, n = a.shape[-2:]
    return cwhere(index(n, 1).le(index(m, 0) + k), a, 0)


def ctriu(a: Cz, k: int = 0) -> Cz:
    m, n = a.shape[-2:]
    return cwhere(index(n, 1).ge(index(m, 0) + k), a, 0)


# ------------------------------------------------------------------ arguments and results


def _read(t) -> Cz:
    p = pairs(t)
    return Cz(Lz(re(p)), Lz(im(p)))


def _matrix(t, api: str) -> Cz:
    if not t.is_complex():
        raise NotImplementedError  # (a real operand beside a complex one: the real checks)
    if t.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    return _read(t)


def _square(t, api: str) -> Cz:
    x = _matrix(t, api)
    if t.shape[-1] != t.shape[-2]:
        raise RuntimeError(f"{api}: A must be batches of square matrices, but they are "
                           f"{t.shape[-2]} by {t.shape[-1]} matrices")
    return x


def _same_dtype(a, b, api: str) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(f"{api}: Expected A and B to have the same dtype, but found A of type "
                           f"{a.dtype} and B of type {b.dtype} instead")


def cout(x: Cz, like) -> torch.Tensor:
    return wrap_pairs(x.pairs(), like._storage.device)


def rout(x: Lz, like) -> torch.Tensor:
    return wrap(x.node, like._storage.device)


def _batch(a: Cz, b: Cz) -> tuple[Cz, Cz]:
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])


# ------------------------------------------------------------------ LU


def lu_factor(a: Cz, device) -> tuple[Cz, Lz, Lz]:
    """zgetrf: (LU, pivots (..., 1, k) int64 1-based, info (..., 1, 1) int64); dense.lu_factor
    with the complex pivot size |re| + |im|."""
    *batch, m, n = a.shape
    k = min(m, n)
    row, col, piv_col = index(m, 0), index(n, 1), index(k, 1)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    pivots = zeros(tuple(batch) + (1, k), dtypes.int64)
    for j in range(k):
        at = step(device, j)
        size = where(row.ge(at), a.col_at(at).abs1(), -1)
        best = size.max(-2)
        p = where(size.eq(best), row, m).min(-2)
        swap = mask(row.eq(at), a.dtype) - mask(row.eq(p), a.dtype)
        a = a - (a * swap).sum(-2) * swap
        pivots = stored(pivots + where(piv_col.eq(at), p + 1, 0))
        column = a.col_at(at)
        u = column.row_at(at)
        zero = u.is_zero()
        info = stored(where(info.eq(0) & zero, at + 1, info))
        below = row.gt(at)
        lower = cwhere(below, cwhere(zero, column, column / u), 0)
        urow = cwhere(col.gt(at), a.row_at(at), 0)
        a = cstored(cwhere(col.eq(at) & below, lower, a - lower * urow))
    return a, pivots, info


def solve_triangular(t: Cz, b: Cz, upper: bool, device, unit: bool = False) -> Cz:
    """``T X = B`` by substitution, one row of X per step (dense.solve_triangular)."""
    t, b = _batch(t, b)
    n = t.shape[-1]
    t = ctriu(t, 1 if unit else 0) if upper else ctril(t, -1 if unit else 0)
    row = index(n, 0)
    x = czeros(b.shape, b.dtype)
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        at = step(device, i)
        t_row = t.row_at(at)
        r = b.row_at(at) - t_row @ x
        if not unit:
            r = r / t_row.col_at(at)
        x = cstored(x + cwhere(row.eq(at), r, 0))
    return x


def lu_solve(lu: Cz, piv: Lz, b: Cz, device, left: bool = True, adjoint: bool = False) -> Cz:
    """X with ``A X = B`` (``left``; else ``X A = B``; ``adjoint``: A^H) for A = P L U."""
    if not left:  # X A = B <=> A^T X^T = B^T; X A^H = B <=> A X^H = B^H
        if adjoint:
            return lu_solve(lu, piv, b.mH, device).mH
        return _solve_transposed(lu, piv, b.mT, device).mT
    n = lu.shape[-1]
    P = permutation(piv, n, device).cast(lu.dtype)
    if adjoint:  # U^H L^H P^T X = B
        y = solve_triangular(lu.mH, b, False, device)
        y = solve_triangular(lu.mH, y, True, device, unit=True)
        return _permuted(P, y)
    y = solve_triangular(lu, _permuted(P.mT, b), False, device, unit=True)
    return solve_triangular(lu, y, True, device)


def _permuted(P: Lz, x: Cz) -> Cz:
    """The real permutation matrix ``P`` times complex ``x``."""
    return Cz(P @ x.re, P @ x.im)


def _solve_transposed(lu: Cz, piv: Lz, b: Cz, device) -> Cz:
    """X with A^T X = B: U^T L^T P^T X = B."""
    n = lu.shape[-1]
    P = permutation(piv, n, device).cast(lu.dtype)
    y = solve_triangular(lu.mT, b, False, device)
    y = solve_triangular(lu.mT, y, True, device, unit=True)
    return _permuted(P, y)


def _unpack(lu: Cz) -> tuple[Cz, Cz]:
    m, n = lu.shape[-2:]
    k = min(m, n)
    one = Cz(mask(index(k, 1).eq(index(m, 0)), lu.dtype), zeros((), lu.dtype))
    return cwhere(index(k, 1).lt(index(m, 0)), lu.cols(0, k), one), ctriu(lu.rows(0, k))


def _as_complex(x: Lz) -> Cz:
    return Cz(x, zeros(x.shape, x.dtype))


@register_complex(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a, *, pivot=True, check_errors=False):
    x = _matrix(a, "torch.linalg.lu_factor_ex")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, piv, info = lu_factor(x, a._storage.device)
    info = rout(batch_info(info), a)
    if check_errors:
        raise_errors(info, "torch.linalg.lu_factor_ex", a.dim() == 2)
    return cout(lu, a), rout(pivots_int32(piv), a), info


@register_complex(aten.linalg_lu.default)
def linalg_lu(a, *, pivot=True):
    x = _matrix(a, "linalg.lu")
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    lu, piv, _ = lu_factor(x, a._storage.device)
    L, U = _unpack(lu)
    P = permutation(piv, x.shape[-2], a._storage.device).cast(x.dtype)
    return cout(_as_complex(P), a), cout(L, a), cout(U, a)


@register_complex(aten.lu_unpack.default)
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    x = _matrix(lu, "lu_unpack")
    m, n = x.shape[-2:]
    empty = czeros((0,), x.dtype)
    L, U = _unpack(x) if unpack_data else (empty, empty)
    if unpack_pivots:
        piv = _pivots(pivots)
        if piv.shape[-1] != min(m, n):
            raise RuntimeError("lu_unpack: LU_pivots.size(-1) must be equal to min(LU.size(-2), LU.size(-1))")
        P = _as_complex(permutation(piv, m, lu._storage.device).cast(x.dtype)).expand(x.shape[:-2] + (m, m))
    else:
        P = empty
    return cout(P, lu), cout(L, lu), cout(U, lu)


def _pivots(pivots) -> Lz:
    """getrf pivots (..., k) as the (..., 1, k) int64 row the loops take."""
    piv = Lz(g.cast(read(pivots), dtypes.int64))
    return piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))


@register_complex(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    api = "linalg.lu_solve"
    _same_dtype(LU, B, api)
    x, y = _square(LU, api), _matrix(B, api)
    if (y.shape[-2] if left else y.shape[-1]) != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    piv = _pivots(pivots)
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2], piv.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    return cout(lu_solve(x, piv.expand(batch + piv.shape[-2:]), y, B._storage.device, left, adjoint), B)


def _vector_rhs(a, b) -> bool:
    return b.dim() == 1 or (b.dim() == a.dim() - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


@register_complex(aten._linalg_solve_ex.default)
def linalg_solve_ex(a, b, *, left=True, check_errors=False):
    api = "torch.linalg.solve"
    _same_dtype(a, b, api)
    x = _square(a, api)
    if not b.is_complex():
        raise NotImplementedError
    y = _read(b)
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
    info = rout(batch_info(info), a)
    if check_errors:
        raise_errors(info, api, a.dim() == 2)
    return cout(xs, a), cout(lu, a), rout(pivots_int32(piv), a), info


@register_complex(aten.linalg_inv_ex.default)
def linalg_inv_ex(a, *, check_errors=False):
    x = _square(a, "linalg.inv")
    lu, piv, info = lu_factor(x, a._storage.device)
    inv = lu_solve(lu, piv, ceye(x.shape[-1], x), a._storage.device)
    info = rout(batch_info(info), a)
    if check_errors:
        raise_errors(info, "linalg.inv_ex", a.dim() == 2)
    return cout(inv, a), info


def _det_parts(x: Cz, device):
    """(LU, pivots, diagonal of U as pairs (..., n, 1, 2), permutation sign (..., 1, 1, 1)). ATen
    factors a contiguous real A as A^T but a complex A as it is: the LU output is what the
    backward formulas solve with, so it must be that factorization."""
    lu, piv, _ = lu_factor(x, device)
    n = x.shape[-1]
    swaps = mask(piv.ne(index(n, 1) + 1), dtypes.int64).sum(-1)
    sign = (1 - 2 * swaps._bin("mod", 2)).cast(x.dtype)
    diag = join(diagonal(lu.re).node, diagonal(lu.im).node)
    return lu, piv, diag, g.reshape(sign.node, sign.shape + (1,))


def _batch_product(diag, sign):
    nd = len(diag.shape) - 1
    total = g.binary("mul", _product(diag, (nd - 2,)), g.broadcast_to(sign, diag.shape[:-3] + (1, 1, 2)))
    return g.reshape(total, diag.shape[:-3] + (2,))


@register_complex(aten._linalg_det.default)
def linalg_det(a):
    x = _square(a, "linalg.det")
    lu, piv, diag, sign = _det_parts(x, a._storage.device)
    return (wrap_pairs(_batch_product(diag, sign), a._storage.device), cout(lu, a),
            rout(pivots_int32(piv), a))


@register_complex(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    """sign = prod(sgn(diag U)) * sign(P), logabsdet = sum(log |diag U|), as ATen."""
    x = _square(a, "linalg.slogdet")
    lu, piv, diag, sign = _det_parts(x, a._storage.device)
    device = a._storage.device
    logabs = g.reduce("sum", g.unary("log", magnitude(diag)), (len(diag.shape) - 3,))
    logabs = g.reshape(logabs, x.shape[:-2])
    return (wrap_pairs(_batch_product(_sgn(diag), sign), device), wrap(logabs, device), cout(lu, a),
            rout(pivots_int32(piv), a))


# ------------------------------------------------------------------ triangular and Cholesky


@register_complex(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    api = "linalg.solve_triangular"
    _same_dtype(a, b, api)
    x, y = _square(a, api), _matrix(b, api)
    if (y.shape[-2] if left else y.shape[-1]) != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    device = a._storage.device
    if left:
        return cout(solve_triangular(x, y, upper, device, unitriangular), a)
    # X A = B <=> A^T X^T = B^T (A^T is triangular the other way)
    return cout(solve_triangular(x.mT, y.mT, not upper, device, unitriangular).mT, a)


@register_complex(aten.triangular_solve.default)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    x, y = _batch(_square(a, "triangular_solve"), _matrix(b, "triangular_solve"))
    device = a._storage.device
    t = x.mT if transpose else x  # (LAPACK's trtrs 'T': the plain transpose, no conjugate)
    return cout(solve_triangular(t, y, upper != transpose, device, unitriangular), b), cout(x, a)


def cholesky_lower(a: Cz, device) -> tuple[Cz, Lz]:
    """zpotf2 as dense.cholesky_lower: A = L L^H from the lower triangle, the pivot the real
    part of ``A[j, j] - L[j, :] L[j, :]^H``; a failed pivot is stored real and stops."""
    *batch, n, _ = a.shape
    row, col = index(n, 0), index(n, 1)
    low = ctril(a)
    L = czeros(a.shape, a.dtype)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    failed = info.ne(0)
    nothing = zeros((), a.dtype)
    for j in range(n):
        at = step(device, j)
        given = low.col_at(at)
        v = given - L @ L.row_at(at).mH
        d = v.row_at(at).re
        ok = d.gt(0)
        root = d.sqrt()
        column = cwhere(row.gt(at), v / root, cwhere(row.eq(at), Cz(root, nothing), 0))
        stopped = cwhere(row.eq(at) & ~failed, Cz(v.re, nothing), given)
        column = cwhere(failed | ~ok, stopped, column)
        info = stored(where(failed | ok, info, at + 1))
        failed = stored(failed | ~ok)
        L = cstored(L + cwhere(col.eq(at), column, 0))
    return L, info


@register_complex(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    x = _square(a, "linalg.cholesky")
    L, info = cholesky_lower(x.mH if upper else x, a._storage.device)
    info = rout(batch_info(info), a)
    if check_errors:
        raise_errors(info, "linalg.cholesky", a.dim() == 2)
    return cout(L.mH if upper else L, a), info


@register_complex(aten.cholesky.default)
def cholesky(a, upper=False):
    x = _square(a, "cholesky")
    L, info = cholesky_lower(x.mH if upper else x, a._storage.device)
    raise_errors(rout(batch_info(info), a), "cholesky", a.dim() == 2)
    return cout(L.mH if upper else L, a)


@register_complex(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def cholesky_solve(b, L, upper=False):
    """``A X = B`` with ``A = L L^H`` (or ``U^H U``): two triangular solves."""
    x, f = _batch(_matrix(b, "cholesky_solve"), _matrix(L, "cholesky_solve"))
    lower = f.mH if upper else f
    device = b._storage.device
    return cout(solve_triangular(lower.mH, solve_triangular(lower, x, False, device), True, device), b)


@register_complex(aten.cholesky_inverse.default)
def cholesky_inverse(L, upper=False):
    f = _square(L, "cholesky_inverse")
    lower = f.mH if upper else f
    inv_lower = solve_triangular(lower, ceye(f.shape[-1], f), False, L._storage.device)
    return cout(inv_lower.mH @ inv_lower, L)


@register_complex(aten.addbmm.default)
def addbmm(bias, a, b, beta=1, alpha=1):
    """beta bias + alpha sum_i a_i b_i, through the complex bmm and sum."""
    total = aten.sum.dim_IntList(aten.bmm.default(a, b), [0])
    if alpha != 1:
        total = aten.mul.Scalar(total, alpha)
    if beta == 0:  # (bias ignored, NaNs and all, as ATen)
        return total
    return aten.add.Tensor(aten.mul.Scalar(bias, beta) if beta != 1 else bias, total)

