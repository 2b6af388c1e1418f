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

The algorithms are written with ``Lz``, a node with arithmetic operators, so they read as the
formulas they implement. Linear algebra on the eigen/singular side lives in linalg_spectral.py.
"""

from __future__ import annotations

import torch

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import read, wrap
from .matmul import matmul_nodes
from .registry import aten, broadcast, broadcast_shape, register


class Lz:
    """A lazy node with operators: ``+ - * / @``, comparisons by name (``lt``, ``eq``, ...),
    ``&``/``|``/``~`` on bool nodes. Python numbers become constants of the node's dtype and
    shapes broadcast NumPy-style, so ``(v / d).where(...)`` reads like the math."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> dtypes.DType:
        return self.node.dtype

    def _pair(self, other, reverse=False) -> tuple[Node, Node]:
        b = other.node if isinstance(other, Lz) else g.const(other, self.node.dtype, ())
        a = self.node
        if reverse:
            a, b = b, a
        return tuple(broadcast(a, b))

    def _bin(self, op: str, other, reverse=False) -> Lz:
        return Lz(g.binary(op, *self._pair(other, reverse)))

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        return self._bin("mul", o)

    def __rmul__(self, o):
        return self._bin("mul", o, True)

    def __truediv__(self, o):
        return self._bin("div", o)

    def __rtruediv__(self, o):
        return self._bin("div", o, True)

    def __neg__(self):
        return Lz(g.unary("neg", self.node))

    def __and__(self, o):
        return self._bin("and", o)

    def __or__(self, o):
        return self._bin("or", o)

    def __invert__(self):
        return Lz(g.unary("not", self.node))

    def lt(self, o):
        return self._bin("lt", o)

    def le(self, o):
        return self._bin("le", o)

    def gt(self, o):
        return self._bin("lt", o, True)

    def ge(self, o):
        return self._bin("le", o, True)

    def eq(self, o):
        return self._bin("eq", o)

    def ne(self, o):
        return self._bin("ne", o)

    def maximum(self, o):
        return self._bin("max", o)

    def minimum(self, o):
        return self._bin("min", o)

    def copysign(self, o):
        return self._bin("copysign", o)

    def unary(self, op: str) -> Lz:
        return Lz(g.unary(op, self.node))

    def sqrt(self):
        return self.unary("sqrt")

    def abs(self):
        return self.unary("abs")

    def log(self):
        return self.unary("log")

    def isnan(self):
        return self.unary("isnan")

    def cast(self, dtype: dtypes.DType) -> Lz:
        return Lz(g.cast(self.node, dtype))

    def reduce(self, op: str, axes) -> Lz:
        """Keepdim reduce (an empty axis gives the op's identity)."""
        axes = tuple(a % len(self.shape) for a in ((axes,) if isinstance(axes, int) else axes))
        if any(self.shape[a] == 0 for a in axes):
            identity = {"sum": 0, "prod": 1, "max": -float("inf"), "min": float("inf")}[op]
            shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
            return Lz(g.const(identity, self.dtype, shape))
        return Lz(g.reduce(op, self.node, axes))

    def sum(self, axes):
        return self.reduce("sum", axes)

    def max(self, axes):
        return self.reduce("max", axes)

    def min(self, axes):
        return self.reduce("min", axes)

    def __matmul__(self, o: Lz) -> Lz:
        a, b = self.node, o.node
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
        a = g.broadcast_to(a, batch + a.shape[-2:])
        b = g.broadcast_to(b, batch + b.shape[-2:])
        return Lz(matmul_nodes(a, b))

    @property
    def mT(self) -> Lz:
        nd = len(self.shape)
        return Lz(g.permute(self.node, tuple(range(nd - 2)) + (nd - 1, nd - 2)))

    def rows(self, start: int, stop: int) -> Lz:
        """Rows ``start:stop`` of the matrices (axis -2)."""
        return self._window(-2, start, stop)

    def cols(self, start: int, stop: int) -> Lz:
        """Columns ``start:stop`` (axis -1)."""
        return self._window(-1, start, stop)

    def _window(self, axis: int, start: int, stop: int) -> Lz:
        axis %= len(self.shape)
        bounds = tuple((start, stop) if i == axis else (0, s) for i, s in enumerate(self.shape))
        return Lz(g.shrink(self.node, bounds))

    def pad(self, axis: int, before: int, after: int) -> Lz:
        axis %= len(self.shape)
        return Lz(g.pad(self.node, tuple((before, after) if i == axis else (0, 0)
                                         for i in range(len(self.shape)))))

    def expand(self, shape) -> Lz:
        return Lz(g.broadcast_to(self.node, tuple(shape)))

    def reshape(self, shape) -> Lz:
        return Lz(g.reshape(self.node, tuple(shape)))


def where(cond: Lz, a, b) -> Lz:
    """``where`` with NumPy broadcasting; ``a``/``b`` may be Python numbers."""
    like = a if isinstance(a, Lz) else b
    a = a.node if isinstance(a, Lz) else g.const(a, like.dtype, ())
    b = b.node if isinstance(b, Lz) else g.const(b, like.dtype, ())
    c, a, b = broadcast(cond.node, a, b)
    return Lz(g.where(c, a, b))


def mask(cond: Lz, dtype: dtypes.DType) -> Lz:
    """1 where ``cond`` holds, else 0, as ``dtype``."""
    return Lz(g.cast(cond.node, dtype))


def zeros(shape, dtype: dtypes.DType) -> Lz:
    return Lz(g.const(0, dtype, tuple(shape)))


def index(n: int, axis: int) -> Lz:
    """0..n-1 (int64) along ``axis`` of a 2-d (n, 1) or (1, n) node: row and column numbers."""
    return Lz(g.iota((n, 1) if axis == 0 else (1, n)))


def eye(n: int, m: int, dtype: dtypes.DType) -> Lz:
    return mask(index(n, 0).eq(index(m, 1)), dtype)


def tril(a: Lz, k: int = 0) -> Lz:
    m, n = a.shape[-2:]
    return where(index(n, 1).le(index(m, 0) + k), a, 0)


def triu(a: Lz, k: int = 0) -> Lz:
    m, n = a.shape[-2:]
    return where(index(n, 1).ge(index(m, 0) + k), a, 0)


def diagonal(a: Lz) -> Lz:
    """The diagonal as a (..., k, 1) column (k = min(m, n))."""
    m, n = a.shape[-2:]
    k = min(m, n)
    sq = a.rows(0, k).cols(0, k)
    return where(index(k, 0).eq(index(k, 1)), sq, 0).sum(-1)


# ---------------------------------------------------------------- arguments and results


def _float_input(t, api: str) -> Lz:
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"{api}: Expected a floating point or complex tensor as input. Got "
                           f"{_type_name(t.dtype)}")
    if t.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f"{api}: Low precision dtypes not supported. Got {_type_name(t.dtype)}")
    return Lz(read(t))


def _square(t, api: str) -> Lz:
    if t.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if t.shape[-1] != t.shape[-2]:
        raise RuntimeError(f"{api}: A must be batches of square matrices, but they are "
                           f"{t.shape[-2]} by {t.shape[-1]} matrices")
    return _float_input(t, api)


def _type_name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
            torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte"}.get(dtype, str(dtype))


def _out(x: Lz, like) -> torch.Tensor:
    return wrap(x.node, like._storage.device)


def _batch_info(info: Lz) -> Lz:
    """A (..., 1, 1) info column as the (...) int32 tensor torch returns."""
    return info.reshape(info.shape[:-2]).cast(dtypes.int32)


def _pivots(piv: Lz) -> Lz:
    """Pivots kept as a (..., 1, k) row as torch's (..., k) int32."""
    return piv.reshape(piv.shape[:-2] + piv.shape[-1:]).cast(dtypes.int32)


def _empty(shape, dtype, like) -> torch.Tensor:
    return wrap(g.const(0, dtype, tuple(shape)), like._storage.device)


# ---------------------------------------------------------------- Cholesky


def cholesky_lower(a: Lz) -> tuple[Lz, Lz]:
    """Left-looking Cholesky–Crout of the lower triangle of ``a``: (L, info (..., 1, 1) int64).

    Column j: ``v = A[:, j] - L @ L[j, :]^T`` (L's columns >= j are still zero), then the
    pivot ``d = v[j]`` is rooted and the rows below divided by it. A non-positive (or NaN)
    pivot stops the factorization like LAPACK's potf2: that column keeps ``d`` on the diagonal
    and the input below it, later columns keep the input, ``info`` is the pivot's 1-based number.
    """
    *batch, n, _ = a.shape
    row = index(n, 0)
    low = tril(a)
    L = zeros(a.shape, a.dtype)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    failed = info.ne(0)
    for j in range(n):
        v = low.cols(j, j + 1) - L @ L.rows(j, j + 1).mT
        d = v.rows(j, j + 1)
        ok = d.gt(0)
        root = d.sqrt()
        col = where(row.gt(j), v / root, where(row.eq(j), root, 0))
        stopped = where(row.eq(j) & ~failed, v, low.cols(j, j + 1))
        col = where(failed | ~ok, stopped, col)
        info = where(failed | ok, info, j + 1)
        failed = failed | ~ok
        L = L + col.pad(-1, j, n - j - 1)
    return L, info


@register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    x = _square(a, "linalg.cholesky")
    L, info = cholesky_lower(x.mT if upper else x)
    info = _out(_batch_info(info), a)
    if check_errors:
        _check_errors(info, "linalg.cholesky", a.dim() == 2)
    return _out(L.mT if upper else L, a), info


@register(aten.cholesky.default)
def cholesky(a, upper=False):
    x = _square(a, "cholesky")
    L, info = cholesky_lower(x.mT if upper else x)
    _check_errors(_out(_batch_info(info), a), "cholesky", a.dim() == 2)
    return _out(L.mT if upper else L, a)


def _broadcast_batch(a: Lz, b: Lz) -> tuple[Lz, Lz]:
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])


@register(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def cholesky_solve(b, L, upper=False):
    """``A X = B`` with ``A = L L^T`` (or ``U^T U``): two triangular solves."""
    if b.dim() < 2 or L.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {b.dim()} dimensions instead")
    x, f = _broadcast_batch(_float_input(b, "cholesky_solve"), _float_input(L, "cholesky_solve"))
    lower = f.mT if upper else f
    y = solve_triangular(lower, x, upper=False)
    return _out(solve_triangular(lower.mT, y, upper=True), b)


@register(aten.cholesky_inverse.default)
def cholesky_inverse(L, upper=False):
    f = _square(L, "cholesky_inverse")
    n = f.shape[-1]
    lower = f.mT if upper else f
    inv_lower = solve_triangular(lower, eye(n, n, f.dtype).expand(f.shape), upper=False)
    return _out(inv_lower.mT @ inv_lower, L)


# ---------------------------------------------------------------- triangular solves


def solve_triangular(t: Lz, b: Lz, upper: bool, unit: bool = False) -> Lz:
    """``T X = B`` for triangular ``T`` (..., n, n) by substitution, one row of X per step:
    ``X[i] = (B[i] - T[i, :] @ X) / T[i, i]`` while X's unsolved rows are still zero. Only
    the ``upper`` or lower triangle of T is read; ``unit`` takes its diagonal as ones."""
    t, b = _broadcast_batch(t, b)
    n = t.shape[-1]
    t = triu(t, 1 if unit else 0) if upper else tril(t, -1 if unit else 0)
    x = zeros(b.shape, b.dtype)
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        r = b.rows(i, i + 1) - t.rows(i, i + 1) @ x
        if not unit:
            r = r / t.rows(i, i + 1).cols(i, i + 1)
        x = x + r.pad(-2, i, n - i - 1)
    return x


def _solve_tri(a: Lz, b: Lz, upper: bool, left: bool, unit: bool) -> Lz:
    if left:
        return solve_triangular(a, b, upper, unit)
    # X A = B  <=>  A^T X^T = B^T (A^T is triangular the other way)
    return solve_triangular(a.mT, b.mT, not upper, unit).mT


@register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    api = "linalg.solve_triangular"
    if a.dim() < 2 or b.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor {'A' if a.dim() < 2 else 'B'} must have at "
                           "least 2 dimensions.")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{api}: Expected A and B to have the same dtype, but found A of type "
                           f"{_type_name(a.dtype)} and B of type {_type_name(b.dtype)} instead")
    x, y = _square(a, api), _float_input(b, api)
    k = y.shape[-2] if left else y.shape[-1]
    if k != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    x, y = _broadcast_batch(x, y)
    return _out(_solve_tri(x, y, upper, left, unitriangular), a)


@register(aten.triangular_solve.default)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    x, y = _broadcast_batch(_square(a, "triangular_solve"), _float_input(b, "triangular_solve"))
    if transpose:
        sol = solve_triangular(x.mT, y, not upper, unitriangular)
    else:
        sol = solve_triangular(x, y, upper, unitriangular)
    return _out(sol, b), _out(x, a)


# ---------------------------------------------------------------- LU with partial pivoting


def lu_factor(a: Lz, pivot: bool = True) -> tuple[Lz, Lz, Lz]:
    """getrf: (LU, pivots (..., 1, k) int64 1-based, info (..., 1, 1) int64) of ``a`` (..., m, n).

    Step j picks the first row >= j of largest |A[i, j]| (LAPACK's idamax), swaps it with row j
    across the whole matrix as a rank-one update ``A += (e_j - e_p)(A[p] - A[j])``, divides the
    column below the pivot by it (not when it is zero: ``info`` records the first such j) and
    updates the trailing block. The swaps are recorded as getrf's 1-based pivots.
    """
    *batch, m, n = a.shape
    k = min(m, n)
    row, col = index(m, 0), index(n, 1)
    info = zeros(tuple(batch) + (1, 1), dtypes.int64)
    pivots = zeros(tuple(batch) + (1, k), dtypes.int64)
    for j in range(k):
        column = a.cols(j, j + 1)
        if pivot:
            size = where(row.ge(j), column.abs(), -1)
            best = size.max(-2)
            p = where(size.eq(best), row, m).min(-2)  # first row of the largest |value|
            swap = mask(row.eq(j), a.dtype) - mask(row.eq(p), a.dtype)
            a = a - swap * (swap * a).sum(-2)
            pivots = pivots + where(index(k, 1).eq(j), p + 1, 0)
        else:
            pivots = pivots + where(index(k, 1).eq(j), j + 1, 0)
        column = a.cols(j, j + 1)
        u = column.rows(j, j + 1)
        zero = u.eq(0)
        info = where(info.eq(0) & zero, j + 1, info)
        below = row.gt(j)
        lower = where(below, where(zero, column, column / u), 0)
        urow = where(col.gt(j), a.rows(j, j + 1), 0)
        a = where(col.eq(j) & below, lower, a - lower * urow)
    return a, pivots, info


def _lu_check(a, api: str) -> Lz:
    if a.dim() < 2:
        raise RuntimeError(f"{api}: Expected tensor with 2 or more dimensions. Got size: "
                           f"{list(a.shape)} instead")
    return _float_input(a, api)


@register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a, *, pivot=True, check_errors=False):
    x = _lu_check(a, "torch.linalg.lu_factor_ex")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, piv, info = lu_factor(x, pivot)
    info = _out(_batch_info(info), a)
    if check_errors:
        _check_errors(info, "torch.linalg.lu_factor_ex", a.dim() == 2)
    return _out(lu, a), _out(_pivots(piv), a), info


def permutation(pivots: Lz, m: int) -> Lz:
    """The permutation matrix P (..., m, m) with ``A = P L U`` from getrf pivots (..., 1, k):
    the row order ``perm`` starts as 0..m-1 and takes each swap ``j <-> pivots[j] - 1`` in
    turn (one-hot selects); ``P[r, c] = (r == perm[c])``."""
    k = pivots.shape[-1]
    perm = index(m, 1).expand(pivots.shape[:-2] + (1, m))
    at = index(m, 1)
    for j in range(k):
        p = pivots.cols(j, j + 1) - 1
        at_j = perm.cols(j, j + 1)
        at_p = where(at.eq(p), perm, 0).sum(-1)
        perm = where(at.eq(j), at_p, where(at.eq(p), at_j, perm))
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
    lu, piv, _ = lu_factor(x, pivot)
    L, U = _unpack(lu)
    P = permutation(piv, x.shape[-2]).cast(x.dtype)
    return _out(P, a), _out(L, a), _out(U, a)


@register(aten.lu_unpack.default)
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    x = Lz(read(lu))
    m, n = x.shape[-2:]
    k = min(m, n)
    if unpack_data:
        L, U = _unpack(x)
        L_t, U_t = _out(L, lu), _out(U, lu)
    else:
        L_t, U_t = _empty((0,), x.dtype, lu), _empty((0,), x.dtype, lu)
    if unpack_pivots:
        piv = Lz(g.cast(read(pivots), dtypes.int64))
        piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
        if piv.shape[-1] != k:
            raise RuntimeError("lu_unpack: LU_pivots.size(-1) must be equal to min(LU.size(-2), LU.size(-1))")
        P = _out(permutation(piv, m).cast(x.dtype).expand(x.shape[:-2] + (m, m)), lu)
    else:
        P = _empty((0,), x.dtype, lu)
    return P, L_t, U_t


def lu_solve(lu: Lz, piv: Lz, b: Lz, left: bool = True, adjoint: bool = False) -> Lz:
    """X with ``A X = B`` (``left``; else ``X A = B``; ``adjoint`` uses A^T) for A = P L U."""
    if not left:  # X A = B <=> A^T X^T = B^T
        return lu_solve(lu, piv, b.mT, True, not adjoint).mT
    n = lu.shape[-1]
    P = permutation(piv, n).cast(lu.dtype)
    if adjoint:  # U^T L^T P^T X = B
        y = solve_triangular(lu.mT, b, upper=False)
        y = solve_triangular(lu.mT, y, upper=True, unit=True)
        return P @ y
    y = solve_triangular(lu, P.mT @ b, upper=False, unit=True)
    return solve_triangular(lu, y, upper=True)


@register(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    api = "linalg.lu_solve"
    x, y = _square(LU, api), _float_input(B, api)
    if (y.shape[-2] if left else y.shape[-1]) != x.shape[-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    piv = Lz(g.cast(read(pivots), dtypes.int64))
    piv = piv.reshape(piv.shape[:-1] + (1, piv.shape[-1]))
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2], piv.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    piv = piv.expand(batch + piv.shape[-2:])
    return _out(lu_solve(x, piv, y, left, adjoint), B)


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
                           f"{_type_name(a.dtype)} and B of type {_type_name(b.dtype)} instead")
    x, y = _square(a, api), _float_input(b, api)
    vector = _vector_rhs(a, b)
    if vector:
        y = y.reshape(y.shape + (1,)) if left else y.reshape(y.shape[:-1] + (1, y.shape[-1]))
    n = x.shape[-1]
    if (y.shape[-2] if left else y.shape[-1]) != n:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {y.shape[-2]}x{y.shape[-1]})")
    lu, piv, info = lu_factor(x)
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    xs = lu_solve(lu.expand(batch + (n, n)), piv.expand(batch + piv.shape[-2:]),
                  y.expand(batch + y.shape[-2:]), left)
    if vector:
        xs = xs.reshape(xs.shape[:-1] if left else xs.shape[:-2] + xs.shape[-1:])
    info = _out(_batch_info(info), a)
    if check_errors:
        _check_errors(info, api, a.dim() == 2)
    return _out(xs, a), _out(lu, a), _out(_pivots(piv), a), info


@register(aten.linalg_inv_ex.default)
def linalg_inv_ex(a, *, check_errors=False):
    x = _square(a, "linalg.inv")
    n = x.shape[-1]
    lu, piv, info = lu_factor(x)
    inv = lu_solve(lu, piv, eye(n, n, x.dtype).expand(x.shape))
    info = _out(_batch_info(info), a)
    if check_errors:
        _check_errors(info, "linalg.inv_ex", a.dim() == 2)
    return _out(inv, a), info


def _det_parts(x: Lz, contiguous: bool) -> tuple[Lz, Lz, Lz, Lz]:
    """(LU, pivots (..., 1, n), diagonal of U (..., n, 1), permutation sign (..., 1, 1)).
    Like ATen, a contiguous A is factored as A^T (det(A^T) = det(A)): the LU output is what
    the backward formulas of det/slogdet solve with, so it must be the same factorization."""
    lu, piv, _ = lu_factor(x.mT if contiguous else x)
    n = x.shape[-1]
    swaps = mask(piv.ne(index(n, 1) + 1), dtypes.int64).sum(-1)
    sign = 1 - 2 * swaps._bin("mod", 2)
    return lu, piv, diagonal(lu), sign.cast(x.dtype)


@register(aten._linalg_det.default)
def linalg_det(a):
    x = _square(a, "linalg.det")
    lu, piv, diag, sign = _det_parts(x, a.is_contiguous())
    det = (diag.reduce("prod", -2) * sign)
    det = det.reshape(det.shape[:-2])
    return _out(det, a), _out(lu, a), _out(_pivots(piv), a)


@register(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    x = _square(a, "linalg.slogdet")
    lu, piv, diag, sign = _det_parts(x, a.is_contiguous())
    signs = (mask(diag.gt(0), x.dtype) - mask(diag.lt(0), x.dtype)).reduce("prod", -2) * sign
    logabs = diag.abs().log().sum(-2)
    batch = x.shape[:-2]
    return _out(signs.reshape(batch), a), _out(logabs.reshape(batch), a), _out(lu, a), _out(_pivots(piv), a)


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


def _check_errors(info, api: str, is_matrix: bool) -> None:
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
    _check_errors(info, api_name, is_matrix)
