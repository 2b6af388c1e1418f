"""torch.fft as lazy zyx programs: lowerings of ``aten._fft_r2c``, ``_fft_c2r`` and ``_fft_c2c``.

Stage 1 of the flow (dispatch → **lowerings** → lazy graph). ``torch.fft.*``, ``torch.stft`` and
``torch.istft`` are composites that end in these three ops (``fftshift`` is ``roll``; ``hfft`` and
``ihfft`` add a conjugate bit), and autograd's formulas for them call the same three, so lowering
them gives the whole of ``torch.fft`` with gradients. Complex values are pairs of their part dtype
(record/complex.py); inside a transform they are kept *planar* (one real node for the real parts,
one for the imaginary parts), which is what lets a stage fuse into one kernel (below).

Algorithm: a mixed-radix decimation-in-frequency FFT in Stockham order (no bit reversal). A
length ``m = r * m'`` is viewed as ``(r, m')``; a stage computes for every ``j' < m'`` the DFT of
length ``r`` over the first axis as a dense contraction (one REDUCE of length ``r`` against the
``r x r`` DFT matrix, loaded from a small table) and multiplies the result by the twiddles
``w_m^(j' k)`` (elementwise after the reduce, same index), leaving ``r`` transforms of length
``m'``. The new output digit goes to the front of the digits produced so far, so after the last
stage the frequencies are in natural order, and the last stage writes interleaved pairs
directly (its contraction has the pair axis as an output axis): no transpose or copy kernels.
Why dense radix stages and not radix-2 butterflies written elementwise: the kernelizer fuses
elementwise work and movement into their consumers and recomputes cheap values, so butterfly
stages chained through reshapes would fuse into one kernel recomputing each earlier stage per
element; a REDUCE is a natural kernel boundary (its result is stored before the next stage
reads it permuted), and a contraction of length 8-16 per stage costs few passes over memory.
Radices are packed from the prime factors up to ``MAX_RADIX``; a length of at most
``MAX_DENSE`` is one dense stage (one kernel); a prime factor up to ``MAX_DENSE_PRIME`` is a
dense stage of its own; a length with a larger prime factor uses Bluestein's algorithm (a
chirp-z transform: two power-of-two FFTs of length >= 2n-1 and a product with the chirp's
transform, which is itself computed here on the device).

Twiddle and DFT tables are computed once per (device, dtype, length) with Python's math in
float64 (angles reduced exactly in integers) and uploaded as constant buffers, as an FFT
library's plan does; the transforms' values are computed on the device only.
"""

from __future__ import annotations

import math

import torch

from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, wrap
from ...record.transfer import ZYX_TO_TORCH, from_cpu
from ..complex.base import im, join, pairs, re, real_node, register_complex, wrap_pairs
from ..registry import aten, register, wrap_dim

MAX_RADIX = 16  # radices packed from prime factors (a stage's contraction length)
MAX_DENSE = 32  # a length up to this is one dense DFT (one kernel)
MAX_DENSE_PRIME = 128  # a larger prime factor takes Bluestein's algorithm


# ------------------------------------------------------------------------------ plans and tables


def radices(n: int) -> list[int] | None:
    """The stage radices of length ``n`` (product ``n``), or None when Bluestein is needed."""
    if n <= MAX_DENSE:
        return [n]
    primes, rest, p = [], n, 2
    while p * p <= rest:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    if rest > 1:
        primes.append(rest)
    if primes[-1] > MAX_DENSE_PRIME:
        return None
    # First-fit of the factors, largest first, into radices of at most MAX_RADIX.
    packed: list[int] = []
    for p in sorted(primes, reverse=True):
        for i, r in enumerate(packed):
            if r * p <= MAX_RADIX:
                packed[i] = r * p
                break
        else:
            packed.append(p)
    return sorted(packed, reverse=True)


_tables: dict[tuple, Node] = {}


def _unit(numerator: int, denominator: int, sign: int) -> tuple[float, float]:
    """exp(sign * 2 pi i numerator / denominator), the angle reduced exactly first."""
    t = numerator % denominator
    angle = 2.0 * math.pi * t / denominator
    return math.cos(angle), sign * math.sin(angle)


def _table(key: tuple, values, shape, device, dtype) -> Node:
    """The constant table ``key`` of ``device`` and ``dtype`` (``values()``: its entries, made
    only the first time)."""
    full = (device.index, dtype, *key)
    node = _tables.get(full)
    if node is None:
        if len(_tables) > 256:
            _tables.clear()
        cpu = torch.tensor(values(), dtype=torch.float64).to(ZYX_TO_TORCH[dtype])
        node = _tables[full] = from_cpu(cpu, device)
    return g.reshape(node, shape)


def _dft_matrix(r: int, sign: int, device, dtype) -> tuple[Node, Node]:
    """(real, imaginary) parts of the DFT matrix W[k, j] = w_r^(jk), shape (r, r)."""
    def part(which: int):
        return lambda: [_unit(j * k, r, sign)[which] for k in range(r) for j in range(r)]

    return (_table(("dft", r, sign, 0), part(0), (r, r), device, dtype),
            _table(("dft", r, sign, 1), part(1), (r, r), device, dtype))


def _twiddles(m: int, r: int, sign: int, device, dtype) -> tuple[Node, Node]:
    """(real, imaginary) parts of T[j', k] = w_m^(j' k) for j' < m / r, k < r."""
    rest = m // r

    def part(which: int):
        return lambda: [_unit(j * k, m, sign)[which] for j in range(rest) for k in range(r)]

    return (_table(("tw", m, r, sign, 0), part(0), (rest, r), device, dtype),
            _table(("tw", m, r, sign, 1), part(1), (rest, r), device, dtype))


def _dft_stacked(r: int, sign: int, which: int, parts: int, device, dtype) -> Node:
    """The factor of the real (``which`` 0) or imaginary (1) input parts in the last stage's
    contraction, shape (r, parts, r): [Re W, Im W] for real parts, [-Im W, Re W] for imaginary
    ones (``parts`` 1: the first alone)."""
    def values():
        vals = [_unit(j * k, r, sign) for k in range(r) for j in range(r)]
        rows = [[v[0] for v in vals], [v[1] for v in vals]] if which == 0 else \
            [[-v[1] for v in vals], [v[0] for v in vals]]
        flat = []
        for k in range(r):
            for c in range(parts):
                flat.extend(rows[c][k * r:(k + 1) * r])
        return flat

    return _table(("dft2", r, sign, which, parts), values, (r, parts, r), device, dtype)


# ------------------------------------------------------------------------------ planar arithmetic


def _b(op: str, x: Node, y: Node) -> Node:
    return g.binary(op, x, y)


def _bc(x: Node, shape) -> Node:
    return x if x.shape == tuple(shape) else g.broadcast_to(x, tuple(shape))


def _cmul(ar: Node, ai: Node | None, br: Node, bi: Node) -> tuple[Node, Node]:
    """(ar + i ai)(br + i bi), ``b`` broadcast to ``a``'s shape; ``ai`` None: a real ``a``."""
    br, bi = _bc(br, ar.shape), _bc(bi, ar.shape)
    if ai is None:
        return _b("mul", ar, br), _b("mul", ar, bi)
    return (_b("sub", _b("mul", ar, br), _b("mul", ai, bi)),
            _b("add", _b("mul", ar, bi), _b("mul", ai, br)))


# ------------------------------------------------------------------------------ one stage


def _last_stage(xr: Node, xi: Node | None, sign: int, device, out: str, keep: int | None):
    """The last stage (m == r) of ``_stage``: frequency k K + k_prev. Pairs come out of the
    contraction on an axis of their own (tables stacked per output part), so no join of
    computed values follows the reduce. The contraction is (rows, parts, r): every output
    but the pair axis is a row (see ``_stage``)."""
    P, r, K, Q = xr.shape
    n = r * K
    keep = n if keep is None else keep
    dtype = xr.dtype
    parts = 1 if out == "real" else 2
    full = (P, r, K, Q, parts, r)  # (P, k, k_prev, Q, part, j)
    rows = P * keep * Q
    total = None
    for x, which in ((xr, 0), (xi, 1)):
        if x is None:
            continue
        table = g.broadcast_to(g.reshape(_dft_stacked(r, sign, which, parts, device, dtype),
                                         (1, r, 1, 1, parts, r)), full)
        x = g.permute(x, (0, 2, 3, 1))  # (P, K, Q, j)
        term = _b("mul", g.expand(g.reshape(x, (P, 1, K, Q, 1, r)), full), table)
        total = term if total is None else _b("add", total, term)
    total = g.reshape(total, (P, n, Q, parts, r))
    if keep != n:
        total = g.shrink(total, ((0, P), (0, keep), (0, Q), (0, parts), (0, r)))
    summed = g.reduce("sum", g.reshape(total, (rows, parts, r)), (2,))
    return g.reshape(summed, (P, keep, Q) if out == "real" else (P, keep, Q, 2))


def _stage(xr: Node, xi: Node | None, r: int, sign: int, device, out: str, keep: int | None):
    """One radix-``r`` stage on planar values of shape (P, m, K, Q): returns (P, m / r, r K, Q)
    planar (``out`` "planar"), or after the last stage (m == r) the result (P, r K, Q) as pairs
    (P, keep, Q, 2) ("pairs", the first ``keep`` frequencies) or real parts ("real").

    The contraction is written as (rows, r, r): every output axis but the new digit merged into
    one leading axis of rows, the new digit after it (stored in that order; the next stage
    reads it permuted, for free). Loop lowerings parallelize a reduce's leading axis, so this
    gives every device all the rows to spread over its threads."""
    P, m, K, Q = xr.shape
    if out != "planar":
        return _last_stage(xr, xi, sign, device, out, keep)
    rest = m // r
    dtype = xr.dtype
    rows = P * rest * K * Q
    body = (rows, r, r)  # (row, output digit k, contracted digit j)

    def operand(x: Node) -> Node:
        x = g.permute(g.reshape(x, (P, r, rest, K, Q)), (0, 2, 3, 4, 1))  # (P, rest, K, Q, j)
        return g.expand(g.reshape(x, (rows, 1, r)), body)

    wr, wi = (g.broadcast_to(g.reshape(w, (1, r, r)), body) for w in _dft_matrix(r, sign, device, dtype))
    pr, pi = _cmul(operand(xr), None if xi is None else operand(xi), wr, wi)
    yr = g.reshape(g.reduce("sum", pr, (2,)), (rows, r))
    yi = g.reshape(g.reduce("sum", pi, (2,)), (rows, r))
    if rest > 1:
        # T[j', k] per row: the table broadcast over (P, rest, K, Q, k), then merged as the rows
        # are (a view of a loaded table: the twiddles multiply in the stage's own kernel).
        tr, ti = (g.reshape(g.broadcast_to(g.reshape(t, (1, rest, 1, 1, r)), (P, rest, K, Q, r)), (rows, r))
                  for t in _twiddles(m, r, sign, device, dtype))
        yr, yi = _cmul(yr, yi, tr, ti)

    def state(y: Node) -> Node:  # stored (P, rest, K, Q, k) -> (P, rest, k K, Q)
        y = g.permute(g.reshape(y, (P, rest, K, Q, r)), (0, 1, 4, 2, 3))
        return g.reshape(y, (P, rest, r * K, Q))

    return state(yr), state(yi)


# ------------------------------------------------------------------------------ one axis


def _reshaped_result(node: Node, shape, dim: int, size: int, pair: bool) -> Node:
    out = list(shape)
    out[dim] = size
    return g.reshape(node, (*out, 2) if pair else tuple(out))


def transform(xr: Node, xi: Node | None, dim: int, sign: int, device, out: str = "planar",
              keep: int | None = None):
    """The DFT (``sign`` -1) or its unscaled inverse (+1) along ``dim`` of planar values ``xr``,
    ``xi`` (``xi`` None: real input), keeping the first ``keep`` frequencies: planar nodes of
    the input's shape ("planar"), one node of pairs ("pairs") or the real parts ("real")."""
    shape = xr.shape
    n = shape[dim]
    keep = n if keep is None else keep
    plan = radices(n)
    if plan is None:
        return _bluestein(xr, xi, dim, sign, device, out, keep)
    P, Q = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    xr = g.reshape(xr, (P, n, 1, Q))
    xi = None if xi is None else g.reshape(xi, (P, n, 1, Q))
    for i, r in enumerate(plan):
        if i == len(plan) - 1 and out != "planar":
            return _reshaped_result(_stage(xr, xi, r, sign, device, out, keep), shape, dim, keep,
                                    out == "pairs")
        xr, xi = _stage(xr, xi, r, sign, device, "planar", None)
    yr, yi = (_reshaped_result(y, shape, dim, n, False) for y in (xr, xi))
    return (yr, yi) if keep == n else (_narrow(yr, dim, 0, keep), _narrow(yi, dim, 0, keep))


def _narrow(x: Node, dim: int, start: int, length: int) -> Node:
    return g.shrink(x, tuple((start, start + length) if i == dim else (0, s) for i, s in enumerate(x.shape)))


def _along(table: Node, shape, dim: int) -> Node:
    """A table of one axis, broadcast along ``dim`` of ``shape``."""
    view = tuple(s if i == dim else 1 for i, s in enumerate(shape))
    return g.broadcast_to(g.reshape(table, view), tuple(shape))


def _bluestein(xr: Node, xi: Node | None, dim: int, sign: int, device, out: str, keep: int):
    """Bluestein's chirp-z transform: with c_t = exp(sign pi i t^2 / n), X_k = c_k sum_j (x_j
    c_j) conj(c_(k-j)), a circular convolution of length M >= 2n - 1 (a power of two) computed
    by two FFTs and the transform of the chirp (a third, on a single row)."""
    shape = xr.shape
    n = shape[dim]
    big = 1 << (2 * n - 2).bit_length()
    dtype = xr.dtype

    def chirp(count: int, which: int, scale: float = 1.0):
        return lambda: [_unit(t * t, 2 * n, sign)[which] * scale for t in range(count)]

    cr = _table(("chirp", n, sign, 0), chirp(n, 0), (n,), device, dtype)
    ci = _table(("chirp", n, sign, 1), chirp(n, 1), (n,), device, dtype)
    ar, ai = _cmul(xr, xi, _along(cr, shape, dim), _along(ci, shape, dim))
    grow = tuple((0, big - n) if i == dim else (0, 0) for i in range(len(shape)))
    ar, ai = g.pad(ar, grow), g.pad(ai, grow)
    # conj(c_t) at t and at M - t, zero between: the kernel of the convolution, and its FFT.
    def kernel(which: int):
        def values():
            out = [0.0] * big
            for t in range(n):
                out[t] = out[(big - t) % big] = _unit(t * t, 2 * n, -sign)[which]
            return out

        return values

    br = _table(("kernel", n, sign, 0), kernel(0), (1, big), device, dtype)
    bi = _table(("kernel", n, sign, 1), kernel(1), (1, big), device, dtype)
    fr, fi = transform(br, bi, 1, -1, device)
    big_shape = g.pad(xr, grow).shape
    fr = _along(g.reshape(fr, (big,)), big_shape, dim)
    fi = _along(g.reshape(fi, (big,)), big_shape, dim)
    ar, ai = transform(ar, ai, dim, -1, device)
    ar, ai = _cmul(ar, ai, fr, fi)
    ar, ai = transform(ar, ai, dim, 1, device)
    # X_k = c_k conv_k / M (the inverse above is unscaled)
    pr = _table(("post", n, keep, sign, 0), chirp(keep, 0, 1 / big), (keep,), device, dtype)
    pi = _table(("post", n, keep, sign, 1), chirp(keep, 1, 1 / big), (keep,), device, dtype)
    ar, ai = _narrow(ar, dim, 0, keep), _narrow(ai, dim, 0, keep)
    kept = ar.shape
    yr, yi = _cmul(ar, ai, _along(pr, kept, dim), _along(pi, kept, dim))
    if out == "real":
        return yr
    return join(yr, yi) if out == "pairs" else (yr, yi)


# ------------------------------------------------------------------------------ the aten ops

_UNSUPPORTED = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.complex32: "ComplexHalf"}


def _checked(x) -> None:
    if not isinstance(x, ZyxTensor):
        raise NotImplementedError
    if x.dtype in _UNSUPPORTED:
        raise RuntimeError(f"Unsupported dtype {_UNSUPPORTED[x.dtype]}")
    if x.dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        raise NotImplementedError


def _scale(node: Node, normalization: int, n: int) -> Node:
    """aten's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n."""
    if normalization == 0 or n <= 1:
        return node
    factor = 1.0 / math.sqrt(n) if normalization == 1 else 1.0 / n
    return g.binary("mul", node, g.const(factor, node.dtype, node.shape))


def _dims(x, dim) -> list[int]:
    return [wrap_dim(d, x.dim()) for d in dim]


def _empty_pairs(shape, dtype, device) -> ZyxTensor:
    return wrap_pairs(g.const(0, dtype, (*shape, 2)), device)


def _c2c_dims(xr: Node, xi: Node | None, dims, sign: int, device, last_out: str):
    """``transform`` over each of ``dims`` in turn, the last one giving ``last_out``."""
    for i, d in enumerate(dims):
        if i == len(dims) - 1:
            return transform(xr, xi, d, sign, device, last_out)
        xr, xi = transform(xr, xi, d, sign, device)
    return join(xr, xi) if last_out == "pairs" else xr


@register(aten._fft_r2c.default)
@register_complex(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    _checked(x)
    if x.is_complex():
        raise NotImplementedError
    dims = _dims(x, dim)
    device = x._storage.device
    node = real_node(x)
    shape = list(node.shape)
    last = dims[-1]
    n_total = math.prod(shape[d] for d in dims)
    if onesided:
        shape[last] = shape[last] // 2 + 1
    if n_total == 0 or math.prod(shape) == 0:
        return _empty_pairs(shape, node.dtype, device)
    keep = shape[last]
    if len(dims) == 1:
        result = transform(node, None, last, -1, device, "pairs", keep)
    else:
        xr, xi = transform(node, None, last, -1, device, "planar", keep)
        result = _c2c_dims(xr, xi, dims[:-1], -1, device, "pairs")
    return wrap_pairs(_scale(result, normalization, n_total), device)


@register(aten._fft_c2c.default)
@register_complex(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    _checked(x)
    if not x.is_complex():
        raise NotImplementedError
    dims = _dims(x, dim)
    device = x._storage.device
    p = pairs(x)
    n_total = math.prod(x.shape[d] for d in dims)
    if x.numel() == 0:
        return _empty_pairs(tuple(x.shape), p.dtype, device)
    if not dims:
        return wrap_pairs(p, device)
    result = _c2c_dims(re(p), im(p), dims, -1 if forward else 1, device, "pairs")
    return wrap_pairs(_scale(result, normalization, n_total), device)


def _hermitian(xr: Node, xi: Node, dim: int, n: int) -> tuple[Node, Node]:
    """The full spectrum of length ``n`` along ``dim`` from its first n // 2 + 1 entries:
    X_(n-k) = conj(X_k)."""
    half = n // 2 + 1
    have = xr.shape[dim]
    if have < half:
        grow = tuple((0, half - have) if i == dim else (0, 0) for i in range(len(xr.shape)))
        xr, xi = g.pad(xr, grow), g.pad(xi, grow)
    xr, xi = _narrow(xr, dim, 0, half), _narrow(xi, dim, 0, half)
    tail = n - half
    if tail == 0:
        return xr, xi
    rank = len(xr.shape)
    head_pad = tuple((0, tail) if i == dim else (0, 0) for i in range(rank))
    tail_pad = tuple((half, 0) if i == dim else (0, 0) for i in range(rank))
    tr = g.flip(_narrow(xr, dim, 1, tail), (dim,))
    ti = g.unary("neg", g.flip(_narrow(xi, dim, 1, tail), (dim,)))
    return (g.binary("add", g.pad(xr, head_pad), g.pad(tr, tail_pad)),
            g.binary("add", g.pad(xi, head_pad), g.pad(ti, tail_pad)))


@register(aten._fft_c2r.default)
@register_complex(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    _checked(x)
    if not x.is_complex():
        raise NotImplementedError
    dims = _dims(x, dim)
    device = x._storage.device
    p = pairs(x)
    n = int(last_dim_size)
    last = dims[-1]
    shape = list(x.shape)
    shape[last] = n
    n_total = math.prod(shape[d] for d in dims)
    if n_total == 0 or math.prod(shape) == 0:
        return wrap(g.const(0, p.dtype, tuple(shape)), device)
    xr, xi = re(p), im(p)
    for d in dims[:-1]:
        xr, xi = transform(xr, xi, d, 1, device)
    xr, xi = _hermitian(xr, xi, last, n)
    result = transform(xr, xi, last, 1, device, "real")
    return wrap(_scale(result, normalization, n_total), device)
