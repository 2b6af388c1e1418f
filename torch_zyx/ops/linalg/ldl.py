"""LDL^T factorization with Bunch-Kaufman pivoting and its solve (``linalg.ldl_factor_ex``,
``linalg.ldl_solve``) as lazy zyx programs, written as dense.py's factorizations are (a Python
loop over the static size, vectorized lazy steps, pivots and failures as graph values), in
LAPACK's sytrf/sytrs conventions.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read
from ..registry import aten, broadcast_shape, register
from .dense import batch_info, pivots_int32, raise_errors
from .lazymat import Lz, float_input, index, mask, out, square, step, stored, tril, where, zeros

_BK_ALPHA = (1 + 17 ** 0.5) / 8  # Bunch-Kaufman's growth bound


def _swap_rows(x: Lz, e: Lz) -> Lz:
    """Rows i and j of x exchanged for ``e = onehot(i) - onehot(j)`` (..., m, 1) (0: none)."""
    return x - e * (e * x).sum(-2)


def ldl_factor(a: Lz, device) -> tuple[Lz, Lz, Lz]:
    """sytf2 (lower): ``P A P^T = L D L^T`` with 1x1 and 2x2 pivots chosen by Bunch-Kaufman.
    Returns (LD: L's multipliers below D's blocks, lower triangle), pivots (..., 1, n) int64 in
    LAPACK's format (k+1 for a 1x1 step exchanging k with k; -(p+1) twice for a 2x2 block),
    info (..., 1, 1)). Step k is a data-dependent 1x1 or 2x2 step: both are computed and one is
    selected; after a 2x2 step the next column is part of the block and its step does nothing.
    The matrix is kept symmetric (full) so that the interchanges of the trailing block are plain
    row-and-column swaps; rows of L already computed are not exchanged (LAPACK's product form).
    The step number k is data (``step``): every step runs the same kernels (at the last step
    the 2x2 candidate reads beyond the matrix, as zeros, and is never selected)."""
    *batch, n, _ = a.shape
    low = tril(a)
    s = low + tril(low, -1).mT
    row, col = index(n, 0), index(n, 1)
    ints = dtypes.int64
    info = zeros(tuple(batch) + (1, 1), ints)
    pivots = zeros(tuple(batch) + (1, n), ints)
    skip = info.ne(0)  # this column is the second half of the previous 2x2 block
    for number in range(n):
        k = step(device, number)
        active = ~skip
        akk = s.row_at(k).col_at(k)
        column = where(row.gt(k), s.col_at(k).abs(), -1)
        colmax = column.max(-2).maximum(0)
        imax = where(column.eq(colmax) & row.gt(k), row, n).min(-2)
        at_imax = mask(row.eq(imax), s.dtype)  # (..., n, 1)
        imax_row = (at_imax * s).sum(-2)  # (..., 1, n): row imax
        rowmax = where(col.ge(k) & col.ne(imax), imax_row.abs(), 0).max(-1)
        aii = where(col.eq(imax), imax_row, 0).sum(-1)
        zero = akk.abs().maximum(colmax).eq(0)
        no_swap = akk.abs().ge(_BK_ALPHA * colmax) | akk.abs().ge(_BK_ALPHA * colmax * (colmax / rowmax))
        two = ~zero & ~no_swap & aii.abs().lt(_BK_ALPHA * rowmax) & k.lt(n - 1)
        kp = where(zero | no_swap, k, imax)
        kk = where(two, k + 1, k)
        # interchange kk <-> kp inside the trailing block (rows and columns >= k)
        e = where(active & kp.ne(kk), mask(row.eq(kk), s.dtype) - mask(row.eq(kp), s.dtype), 0)
        trailing = row.ge(k) & col.ge(k)
        s = where(trailing, _swap_rows(s, e), s)
        s = where(trailing, _swap_rows(s.mT, e).mT, s)
        x = s.col_at(k)
        d = x.row_at(k)
        below = row.gt(k)
        x1 = where(below, x, 0)
        one = where(below & col.gt(k), s - x1 * x1.mT / d, s)
        one = where(col.eq(k) & below, x * (1 / d), one)
        chosen = where(zero, s, one)
        xk1 = s.col_at(k + 1)
        d21 = x.row_at(k + 1)
        d11 = xk1.row_at(k + 1) / d21
        d22 = d / d21
        t = 1 / (d11 * d22 - 1)
        d21 = t / d21
        rest = row.gt(k + 1)
        wk = where(rest, d21 * (d11 * x - xk1), 0)
        wk1 = where(rest, d21 * (d22 * xk1 - x), 0)
        update = where(rest, x, 0) * wk.mT + where(rest, xk1, 0) * wk1.mT
        block = where(rest & col.gt(k + 1), s - update, s)
        block = where(col.eq(k) & rest, wk, where(col.eq(k + 1) & rest, wk1, block))
        chosen = where(two, block, chosen)
        s = where(active, chosen, s)
        # LAPACK updates the lower triangle only: mirror it so the full matrix stays symmetric
        s = stored(where(row.ge(col), s, s.mT))
        info = stored(where(active & zero & info.eq(0), k + 1, info))
        code = where(two, -(kp + 1), kp + 1)
        pivots = where(active & index(n, 1).eq(k), code, pivots)
        pivots = stored(where(active & two & index(n, 1).eq(k + 1), code, pivots))
        skip = stored(active & two)
    return tril(s), pivots, info


@register(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(a, *, hermitian=False, check_errors=False):
    x = square(a, "torch.linalg.ldl_factor_ex")
    ld, piv, info = ldl_factor(x, a._storage.device)
    info = out(batch_info(info), a)
    if check_errors:
        raise_errors(info, "torch.linalg.ldl_factor_ex", a.dim() == 2)
    return out(ld, a), out(pivots_int32(piv), a), info


def ldl_solve(ld: Lz, piv: Lz, b: Lz, device) -> Lz:
    """sytrs (lower): ``A X = B`` from sytf2's factors. Forward: apply each step's interchange
    and solve with L's column and D's block; backward: L^T's columns, then the interchanges in
    reverse. Blocks are found from the (data) pivots as in the factorization: a negative pivot
    not already consumed starts (going forward) or ends (going backward) a 2x2 block. The step
    number is data (``step``); a 2x2 candidate beyond the matrix reads zeros and is not taken."""
    n = ld.shape[-1]
    row = index(n, 0)
    dt = b.dtype
    one_hot = lambda i: mask(row.eq(i), dt)
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
        lk = where(row.gt(k), ld.col_at(k), 0)
        dkk = ld.row_at(k).col_at(k)
        single = b - lk * bk
        single = where(row.eq(k), bk / dkk, single)
        bk1 = b.row_at(k + 1)
        rest = row.gt(k + 1)
        blk = b - where(rest, ld.col_at(k), 0) * bk - where(rest, ld.col_at(k + 1), 0) * bk1
        akm1k = ld.row_at(k + 1).col_at(k)
        akm1 = dkk / akm1k
        ak = ld.row_at(k + 1).col_at(k + 1) / akm1k
        denom = akm1 * ak - 1
        bkm1, bkk = bk / akm1k, bk1 / akm1k
        blk = where(row.eq(k + 1), (akm1 * bkk - bkm1) / denom, blk)
        blk = where(row.eq(k), (ak * bkm1 - bkk) / denom, blk)
        b = stored(where(active, where(two, blk, single), b))
        skip = stored(two)
    skip = piv.cols(0, 1).ne(piv.cols(0, 1))
    for number in range(n - 1, -1, -1):
        k = step(device, number)
        p = piv.col_at(k)
        active = ~skip
        two = active & p.lt(0) & k.gt(0)
        below = row.gt(k)
        new_k = b.row_at(k) - (where(below, ld.col_at(k), 0) * b).sum(-2)
        b2 = where(row.eq(k), new_k, b)
        new_km1 = b.row_at(k - 1) - (where(below, ld.col_at(k - 1), 0) * b).sum(-2)
        b2 = where(two & row.eq(k - 1), new_km1, b2)
        kp = where(p.lt(0), -p - 1, p - 1)
        e = where(active & kp.ne(k), one_hot(k) - one_hot(kp), 0)
        b = stored(where(active, _swap_rows(b2, e), b))
        skip = stored(two)
    return b


@register(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    api = "torch.linalg.ldl_solve"
    x, y = square(LD, api), float_input(B, api)
    piv = Lz(g.cast(read(pivots), dtypes.int64))
    piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2], piv.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    return out(ldl_solve(x, piv.expand(batch + piv.shape[-2:]), y, B._storage.device), B)
