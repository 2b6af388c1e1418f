"""Complex linear algebra built on the complex eigh and SVD (decompositions.py): pseudoinverse
(``linalg.pinv``, Hermitian too, and so ``pinverse`` and ``matrix_rank``), least squares
(``linalg.lstsq``), and the matrix exponential, as lazy zyx programs.

The complex twins of the second half of ops/linalg/spectral.py, with the same formulas and
tolerances; a transpose there is a conjugate transpose here. Everything here is invariant under
the singular vectors' and eigenvectors' phases, so it matches LAPACK's results, not just up to
a phase.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ..linalg.lazymat import Lz, eye, mask, step, where, zeros
from ..linalg.spectral import _host_int, _tolerance
from ..registry import aten
from .base import register_complex
from .decompositions import eigh, svd
from .linalg import Cz, _matrix, _read, cout, cstored, cwhere, czeros, rout


def _abs(x: Cz) -> Lz:
    return (x.re * x.re + x.im * x.im).sqrt()


@register_complex(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(a, *, atol=None, rtol=None, hermitian=False):
    """torch's formula (spectral.linalg_pinv): values below ``max(atol, rtol * largest)`` count
    as zero; ``V S^+ U^H``, or ``V Λ^+ V^H`` from eigh (lower triangle) when ``hermitian``."""
    x = _matrix(a, "linalg.pinv")
    m, n = x.shape[-2:]
    batch = x.shape[:-2]
    if math.prod(x.shape) == 0:
        return cout(czeros(batch + (n, m), x.dtype), a)
    atol_n, rtol_n = _tolerance(atol, x.re), _tolerance(rtol, x.re)
    if rtol_n is None:
        eps = torch.finfo(a.dtype).eps * max(m, n)
        default = Lz(g.const(eps, x.dtype, ()))
        rtol_n = default if atol_n is None else where(atol_n.gt(0), 0, default)
    if atol_n is None:
        atol_n = Lz(g.const(0, x.dtype, ()))
    device = a._storage.device
    if hermitian:
        values, vectors = eigh(x, False, device)
        values = values.mT  # (..., 1, n)
        size = values.abs()
        tol = atol_n.maximum(rtol_n * size.max(-1))
        inv = where(size.gt(tol), 1 / values, 0)
        return cout((vectors * inv) @ vectors.mH, a)
    u, s, vh = svd(x, False, device)
    s = s.reshape(s.shape[:-1] + (1, s.shape[-1]))
    tol = atol_n.maximum(rtol_n * s.cols(0, 1))
    inv = where(s.gt(tol), 1 / s, 0)
    return cout((vh.mH * inv) @ u.mH, a)


@register_complex(aten.linalg_lstsq.default)
def linalg_lstsq(a, b, rcond=None, *, driver=None):
    """Least squares / minimum norm solution through the SVD, ``X = V S^+ U^H B`` (see
    spectral.linalg_lstsq for the drivers' output contract, the same here); residuals are the
    squared moduli of B - A X summed over rows, real."""
    api = "torch.linalg.lstsq"
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if a.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{api}: Expected input and other to have the same dtype, but got input's "
                           f"dtype {a.dtype} and other's dtype {b.dtype}")
    x, y = _matrix(a, api), _matrix(b, api) if b.dim() >= 2 else _read(b)  # (b: a vector beside a 2-d A)
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
    empty = math.prod(x.shape) == 0 or math.prod(y.shape) == 0
    if empty:
        sol = czeros(batch + (n, y.shape[-1]), x.dtype)
        s = zeros(batch + (k,), x.dtype)
        rank = zeros(batch, dtypes.int64)
    else:
        u, s, vh = svd(x, False, device)
        srow = s.reshape(s.shape[:-1] + (1, k))
        cutoff = torch.finfo(a.dtype).eps * max(m, n) if rcond is None or rcond < 0 else rcond
        keep = srow.gt(srow.cols(0, 1) * cutoff)
        inv = where(keep, 1 / srow, 0)
        sol = (vh.mH * inv) @ (u.mH @ y)
        rank = mask(keep, dtypes.int64).sum(-1).reshape(batch)
    residuals = zeros((0,), x.dtype)
    if m > n and driver != "gelsy" and not empty:
        full = True
        if driver in ("gelsd", "gelss"):  # (torch's host check: residuals only at full rank)
            short = mask(rank.ne(n), dtypes.int64)
            full = _host_int(short.sum(tuple(range(len(batch)))).reshape(()) if batch else short, device) == 0
        if full:
            r = x @ sol - y
            residuals = (r.re * r.re + r.im * r.im).sum(-2)
            # (a vector B keeps its column of residuals: shape (..., 1), as torch gives)
            residuals = residuals.reshape(residuals.shape[:-2] + residuals.shape[-1:])
    if vector:
        sol = sol.reshape(sol.shape[:-1])
    rank_t = rout(rank, a) if driver != "gels" else rout(zeros((0,), dtypes.int64), a)
    s_t = rout(s, a) if driver in ("gelsd", "gelss") else rout(zeros((0,), x.dtype), a)
    return cout(sol, a), rout(residuals, a), rank_t, s_t


def _cast(x: Cz, dtype) -> Cz:
    return Cz(x.re.cast(dtype), x.im.cast(dtype))


@register_complex(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(a):
    """Scaling and squaring as spectral.linalg_matrix_exp: s per matrix with ``|A / 2^s|_1 <=
    1/2`` (the 1-norm of complex entries' moduli), the degree-13 Taylor polynomial in Horner
    form, in complex128 whatever the input (each squaring doubles the relative error), the
    number of squarings the batch's largest s, read on the host."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError("linalg.matrix_exp: A must be batches of square matrices, "
                           f"but they are {a.shape[-2] if a.dim() > 1 else 1} by {a.shape[-1]} matrices")
    given = _matrix(a, "linalg.matrix_exp")
    work = dtypes.float64
    x = _cast(given, work)
    n = x.shape[-1]
    if math.prod(x.shape) == 0:
        return cout(given, a)
    norm = _abs(x).sum(-2).max(-1)  # (..., 1, 1) operator 1-norm
    steps = Lz(g.unary("ceil", g.unary("log2", (norm / 0.5).maximum(1).node))).cast(dtypes.int64)
    device = a._storage.device
    most = _host_int(steps.max(tuple(range(len(steps.shape)))).reshape(()), device)
    scaled = x / Lz(g.unary("exp2", steps.cast(work).node))
    ident = Cz(eye(n, n, work).expand(x.shape), zeros(x.shape, work))
    result = ident
    # The term number and the squaring number are data (``step``): one kernel set for all.
    for d in range(13, 0, -1):
        result = cstored(ident + (scaled @ result) / step(device, d).cast(work))
    for i in range(most):
        result = cstored(cwhere(steps.gt(step(device, i)), result @ result, result))
    return cout(_cast(result, given.dtype), a)

