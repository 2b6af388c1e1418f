"""Complex LDL factorization with Bunch-Kaufman pivoting and its solve
(``linalg.ldl_factor_ex``, ``linalg.ldl_solve``) for complex symmetric (``hermitian=False``:
LAPACK's zsytf2 / zsytrs, ``A = L D L^T``) and Hermitian matrices (``hermitian=True``: zhetf2 /
zhetrs, ``A = L D L^H`` with D's diagonal real), as lazy zyx programs.

The complex twin of ops/linalg/ldl.py (read its docstrings for the step structure: a static
loop whose step number is data, both the 1x1 and the 2x2 candidate computed and one selected,
the full matrix kept so that interchanges are plain row-and-column swaps, mirrored from the
lower triangle after each step). What changes with complex values, as LAPACK has it: sizes
are |re| + |im| (izamax's cabs1) except a Hermitian diagonal entry's, which is |re|; the
mirror, the rank-1 and rank-2 updates and the backward solve take the conjugate transpose for a
Hermitian matrix (the plain transpose for a symmetric one); a Hermitian matrix's diagonal stays
real (its imaginary parts are ignored on input and zeroed after each update, as zhetf2 does).
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read
from ..linalg.dense import batch_info, pivots_int32, raise_errors
from ..linalg.lazymat import Lz, index, mask, step, stored, where, zeros
from ..linalg.ldl import _BK_ALPHA
from ..registry import aten, broadcast_shape
from .base import register_complex
from .linalg import Cz, _matrix, _same_dtype, _square, cout, cstored, ctril, cwhere, rout


def _real(x: Lz) -> Cz:
    return Cz(x, zeros((), x.dtype))


def _swap_rows(x: Cz, e: Lz) -> Cz:
    """Rows i and j of x exchanged for the real ``e = onehot(i) - onehot(j)`` (0: none)."""
    return x - (x * e).sum(-2) * e


def _t(x: Cz, herm: bool) -> Cz:
    return x.mH if herm else x.mT


def _realdiag(x: Cz) -> Cz:
    """``x`` with the imaginary parts of its diagonal zeroed (a Hermitian matrix's)."""
    n = x.shape[-1]
    return Cz(x.re, where(index(n, 0).eq(index(n, 1)), 0, x.im))


def ldl_factor(a: Cz, herm: bool, device) -> tuple[Cz, Lz, Lz]:
    """zsytf2 / zhetf2 (lower): (LD in the lower triangle, pivots (..., 1, n) int64 in LAPACK's
    format, info (..., 1, 1)), as ldl.ldl_factor."""
    *batch, n, _ = a.shape
    low = ctril(a)
    s = low + _t(ctril(low, -1), herm)
    if herm:
        s = _realdiag(s)
    row, col = index(n, 0), index(n, 1)
    ints = dtypes.int64
    dt = a.dtype
    info = zeros(tuple(batch) + (1, 1), ints)
    pivots = zeros(tuple(batch) + (1, n), ints)
    skip = info.ne(0)
    for number in range(n):
        k = step(device, number)
        active = ~skip
        akk = s.row_at(k).col_at(k)
        absakk = akk.re.abs() if herm else akk.abs1()
        column = where(row.gt(k), s.col_at(k).abs1(), -1)
        colmax = column.max(-2).maximum(0)
        imax = where(column.eq(colmax) & row.gt(k), row, n).min(-2)
        at_imax = mask(row.eq(imax), dt)
        imax_row = (s * at_imax).sum(-2)  # (..., 1, n): row imax
        rowmax = where(col.ge(k) & col.ne(imax), imax_row.abs1(), 0).max(-1)
        aii = cwhere(col.eq(imax), imax_row, 0).sum(-1)
        absaii = aii.re.abs() if herm else aii.abs1()
        zero = absakk.maximum(colmax).eq(0)
        no_swap = absakk.ge(_BK_ALPHA * colmax) | absakk.ge(_BK_ALPHA * colmax * (colmax / rowmax))
        two = ~zero & ~no_swap & absaii.lt(_BK_ALPHA * rowmax) & k.lt(n - 1)
        kp = where(zero | no_swap, k, imax)
        kk = where(two, k + 1, k)
        # interchange kk <-> kp inside the trailing block: on the full (symmetric or Hermitian)
        # matrix a plain symmetric permutation, which is what LAPACK's swaps with conjugations
        # of the lower triangle amount to
        e = where(active & kp.ne(kk), mask(row.eq(kk), dt) - mask(row.eq(kp), dt), 0)
        trailing = row.ge(k) & col.ge(k)
        s = cwhere(trailing, _swap_rows(s, e), s)
        s = cwhere(trailing, _swap_rows(s.mT, e).mT, s)
        x = s.col_at(k)
        d = x.row_at(k)
        if herm:
            d = _real(d.re)
        below = row.gt(k)
        x1 = cwhere(below, x, 0)
        one = cwhere(below & col.gt(k), s - x1 * _t(x1, herm) / d, s)
        one = cwhere(col.eq(k) & below, x / d, one)
        chosen = cwhere(zero, s, one)
        xk1 = s.col_at(k + 1)
        a21 = x.row_at(k + 1)
        rest = row.gt(k + 1)
        if herm:  # zhetf2's 2x2 step: |a21| scales, the block's diagonal is real
            size = (a21.re * a21.re + a21.im * a21.im).sqrt()
            d11 = xk1.row_at(k + 1).re / size
            d22 = d.re / size
            tt = 1 / (d11 * d22 - 1)
            d21 = a21 / size
            dd = tt / size
            wk = cwhere(rest, (x * d11 - xk1 * d21) * dd, 0)
            wk1 = cwhere(rest, (xk1 * d22 - x * d21.conj()) * dd, 0)
        else:  # zsytf2's
            d11 = xk1.row_at(k + 1) / a21
            d22 = d / a21
            t = _real(Lz(g.const(1, dt, ()))) / (d11 * d22 - 1)
            d21 = t / a21
            wk = cwhere(rest, d21 * (d11 * x - xk1), 0)
            wk1 = cwhere(rest, d21 * (d22 * xk1 - x), 0)
        update = cwhere(rest, x, 0) * _t(wk, herm) + cwhere(rest, xk1, 0) * _t(wk1, herm)
        block = cwhere(rest & col.gt(k + 1), s - update, s)
        block = cwhere(col.eq(k) & rest, wk, cwhere(col.eq(k + 1) & rest, wk1, block))
        chosen = cwhere(two, block, chosen)
        s = cwhere(active, chosen, s)
        # the lower triangle is LAPACK's: mirror it so the full matrix stays symmetric/Hermitian
        s = cwhere(row.ge(col), s, _t(s, herm))
        s = cstored(_realdiag(s) if herm else s)
        info = stored(where(active & zero & info.eq(0), k + 1, info))
        code = where(two, -(kp + 1), kp + 1)
        pivots = where(active & index(n, 1).eq(k), code, pivots)
        pivots = stored(where(active & two & index(n, 1).eq(k + 1), code, pivots))
        skip = stored(active & two)
    return ctril(s), pivots, info


@register_complex(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(a, *, hermitian=False, check_errors=False):
    x = _square(a, "torch.linalg.ldl_factor_ex")
    ld, piv, info = ldl_factor(x, hermitian, a._storage.device)
    info = rout(batch_info(info), a)
    if check_errors:
        raise_errors(info, "torch.linalg.ldl_factor_ex", a.dim() == 2)
    return cout(ld, a), rout(pivots_int32(piv), a), info


def ldl_solve(ld: Cz, piv: Lz, b: Cz, herm: bool, device) -> Cz:
    """zsytrs / zhetrs (lower): ``A X = B`` from the factors, as ldl.ldl_solve; zhetrs divides
    by D's real diagonal, conjugates ``a21`` on one side of a 2x2 block, and the backward
    substitution uses L^H."""
    n = ld.shape[-1]
    row = index(n, 0)
    dt = b.dtype

    def one_hot(i):
        return mask(row.eq(i), dt)

    def lcol(j, rows):
        column = cwhere(rows, ld.col_at(j), 0)
        return column.conj() if herm else column

    skip = piv.cols(0, 1).ne(piv.cols(0, 1))
    for number in range(n):
        k = step(device, number)
        p = piv.col_at(k)
        active = ~skip
        two = active & p.lt(0) & k.lt(n - 1)
        kp = where(p.lt(0), -p - 1, p - 1)
        e = where(active & kp.ne(where(two, k + 1, k)), one_hot(where(two, k + 1, k)) - one_hot(kp), 0)
        b = _swap_rows(b, e)
        bk = b.row_at(k)
        dkk = ld.row_at(k).col_at(k)
        if herm:
            dkk = _real(dkk.re)
        single = b - cwhere(row.gt(k), ld.col_at(k), 0) * bk
        single = cwhere(row.eq(k), bk / dkk, single)
        bk1 = b.row_at(k + 1)
        rest = row.gt(k + 1)
        blk = b - cwhere(rest, ld.col_at(k), 0) * bk - cwhere(rest, ld.col_at(k + 1), 0) * bk1
        akm1k = ld.row_at(k + 1).col_at(k)
        lower_k = akm1k.conj() if herm else akm1k
        ak1 = ld.row_at(k + 1).col_at(k + 1)
        akm1 = (_real(dkk.re) if herm else dkk) / lower_k
        ak = (_real(ak1.re) if herm else ak1) / akm1k
        denom = akm1 * ak - 1
        bkm1, bkk = bk / lower_k, bk1 / akm1k
        blk = cwhere(row.eq(k + 1), (akm1 * bkk - bkm1) / denom, blk)
        blk = cwhere(row.eq(k), (ak * bkm1 - bkk) / denom, blk)
        b = cstored(cwhere(active, cwhere(two, blk, single), b))
        skip = stored(two)
    skip = piv.cols(0, 1).ne(piv.cols(0, 1))
    for number in range(n - 1, -1, -1):
        k = step(device, number)
        p = piv.col_at(k)
        active = ~skip
        two = active & p.lt(0) & k.gt(0)
        below = row.gt(k)
        new_k = b.row_at(k) - (lcol(k, below) * b).sum(-2)
        b2 = cwhere(row.eq(k), new_k, b)
        new_km1 = b.row_at(k - 1) - (lcol(k - 1, below) * b).sum(-2)
        b2 = cwhere(two & row.eq(k - 1), new_km1, b2)
        kp = where(p.lt(0), -p - 1, p - 1)
        e = where(active & kp.ne(k), one_hot(k) - one_hot(kp), 0)
        b = cstored(cwhere(active, _swap_rows(b2, e), b))
        skip = stored(two)
    return b


@register_complex(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    api = "torch.linalg.ldl_solve"
    _same_dtype(LD, B, api)
    x, y = _square(LD, api), _matrix(B, api)
    piv = Lz(g.cast(read(pivots), dtypes.int64))
    piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2], piv.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    return cout(ldl_solve(x, piv.expand(batch + piv.shape[-2:]), y, hermitian, B._storage.device), B)
