"""Orthogonal polynomials of ``torch.special``: Chebyshev T/U/V/W (and shifted), Hermite H/He,
Laguerre L and Legendre P, each evaluated at (x, n) elementwise.

ATen runs each polynomial's three-term recurrence up to the element's own degree n (with
closed trigonometric forms for Chebyshev at |x| < 1 and large n, and special values at the
interval ends); these lowerings reproduce those rules exactly. A lazy graph cannot loop a
data-dependent number of times, so the degree bound is read once: the largest finite n (a
sync, one small reduction; a Python-number n needs none), and the recurrence is unrolled up
to it with every step masked by ``step < n`` per element. Degrees past ``CHUNK`` steps are
run ``CHUNK`` steps per graph, realizing the recurrence state between chunks (the step counter
is a buffer, so every full chunk is the same kernel) and stopping early once no element is
still running, as ATen's per-element loops stop at NaN.
"""

from __future__ import annotations

import math

import torch

from ...lazy import graph as g
from ...record.tensor import read, wrap
from ...record.transfer import from_cpu, zdtype
from ..expr import Ex, where
from ..registry import PROMOTE_INT_TO_FLOAT, aten, broadcast, operand, register, result_dtype
from .special import _opmath

CHUNK = 64
# Hermite degrees past these give NaN in ATen (its getHermitianLimit).
HERMITE_LIMIT = {torch.float32: 128, torch.float64: 512}


class Recurrence:
    """P_0 = 1, P_1 = ``first(x)``, P_{m+1} = ``step(x, m, P_m, P_{m-1})`` for m >= 1."""

    def __init__(self, first, step):
        self.first = first
        self.step = step


def _chebyshev_step(x, m, q, p):
    return (x + x) * q - p


def _shift(x: Ex) -> Ex:
    return x + x - 1.0


RECURRENCES = {
    "t": Recurrence(lambda x: x, _chebyshev_step),
    "u": Recurrence(lambda x: x + x, _chebyshev_step),
    "v": Recurrence(lambda x: x + x - 1.0, _chebyshev_step),
    "w": Recurrence(lambda x: x + x + 1.0, _chebyshev_step),
    "h": Recurrence(lambda x: x + x, lambda x, m, q, p: (x + x) * q - (m + m) * p),
    "he": Recurrence(lambda x: x, lambda x, m, q, p: x * q - m * p),
    "l": Recurrence(lambda x: 1.0 - x, lambda x, m, q, p: (((m + m) + (1.0 - x)) * q - m * p) / (m + 1.0)),
    "p": Recurrence(lambda x: x, lambda x, m, q, p: ((m + m + 1.0) * x * q - m * p) / (m + 1.0)),
}


def _max_degree(n: Ex, needs: Ex, device) -> int:
    """The largest degree among elements that ``needs`` the recurrence (a sync: one reduction
    read back). ``n`` is already truncated, with NaN and infinities mapped to -1."""
    safe = where(needs, n, -1.0)
    flat = g.reshape(safe.node, (safe.node.numel,))
    top = g.reshape(g.reduce("max", flat, (0,)), ())
    return int(wrap(top, device).item())


def _realize_pair(p, q, device):
    """``p`` and ``q`` as buffers, realized in one schedule."""
    tp, tq = wrap(p, device), wrap(q, device)
    tp._storage.realize()  # realizes every pending storage of the device, tq's too
    return read(tp), read(tq)


def _recurrence(rec: Recurrence, x: Ex, n: Ex, top: int, device) -> Ex:
    """P_n(x) per element for 1 <= n <= top (other elements: anything)."""
    p, q = x.full(1.0), rec.first(x)
    m = 1
    while m < top:
        count = min(CHUNK, top - m)
        if count == CHUNK and top - m > CHUNK:
            # A full chunk of a longer run: the step counter comes from a buffer so that every
            # full chunk is the same graph (one compiled kernel).
            base = from_cpu(torch.tensor([float(m)], dtype=torch.float64), device)
            base = Ex(g.broadcast_to(g.reshape(g.cast(base, x.node.dtype), ()), x.node.shape))
            steps = [base + float(j) for j in range(count)]
        else:
            steps = [float(m + j) for j in range(count)]
        for k in steps:
            active = n > k
            r = rec.step(x, k, q, p)
            p, q = where(active, q, p), where(active, r, q)
        m += count
        if m < top:
            p, q = (Ex(node) for node in _realize_pair(p.node, q.node, device))
            running = (n > float(m)) & ~Ex(g.unary("isnan", q.node))
            flat = g.reshape(g.cast(running.node, q.node.dtype), (q.node.numel,))
            if float(wrap(g.reshape(g.reduce("max", flat, (0,)), ()), device).item()) == 0.0:
                break
    return q


def _parity_sign(n: Ex) -> Ex:
    """+1 for even n, -1 for odd n (n integral)."""
    half = n * 0.5
    return where(half.f("floor").eq(half), n.full(1.0), -1.0)


def _trig_u(t: Ex, nn: Ex, y: Ex) -> Ex:
    """U_n(y) = sin((n + 1) t) / sin(t) with t = acos(y); at sin(t) == 0 ATen's fallback."""
    s = t.f("sin")
    return where(s.ne(0.0), ((nn + 1.0) * t).f("sin") / s, (nn + 1.0) * ((nn + 1.0) * t).f("cos") / y)


def chebyshev(kind: str, x: Ex, n: Ex, value: Ex, shifted: bool) -> Ex:
    """ATen's end-point values and trigonometric forms on top of the recurrence's ``value``."""
    y = _shift(x) if shifted else x
    sign = _parity_sign(n)
    two_n1 = n + n + 1.0
    t = y.f("acos")
    if kind == "t":
        trig, trig_from = (n * t).f("cos"), 6
    elif kind == "u":
        trig, trig_from = _trig_u(t, n, y), 6 if shifted else 8
    elif kind == "v":
        half = t * 0.5
        trig = where(half.f("sin").ne(1.0), ((n + 0.5) * t).f("cos") / half.f("cos"), sign * two_n1)
        trig_from = 6 if shifted else 8
    else:
        half = t * 0.5
        at_end = where(y > 0.0, two_n1, sign) if not shifted else sign
        trig = where(half.f("cos").ne(1.0), ((n + 0.5) * t).f("sin") / half.f("sin"), at_end)
        trig_from = 4 if shifted else 8
    out = where((n > float(trig_from)) & (y.f("abs") < 1.0), trig, value)
    # Values at the interval's ends (x = +-1, or x = 1 and 0 when shifted).
    plus = {"t": 1.0, "u": n + 1.0, "v": 1.0, "w": two_n1}[kind]
    minus = {"t": sign, "u": sign * (n + 1.0), "v": sign * two_n1, "w": sign}[kind]
    if shifted:
        out = where(x.eq(0.0), minus, where(x.eq(1.0), plus, out))
    else:
        out = where(y.f("abs").eq(1.0), where(y > 0.0, plus, minus), out)
    return out


def _needs_recurrence(kind: str, x: Ex, n: Ex, shifted: bool) -> Ex:
    """Elements whose value comes from the recurrence: not an interval end, not a Chebyshev
    trigonometric form (|x| < 1 with a large degree), degree at least 2."""
    needs = n >= 2.0
    if kind in ("t", "u", "v", "w"):
        y = _shift(x) if shifted else x
        trig_from = {"t": 6, "u": 6 if shifted else 8, "v": 6 if shifted else 8,
                     "w": 4 if shifted else 8}[kind]
        ends = (x.eq(0.0) | x.eq(1.0)) if shifted else y.f("abs").eq(1.0)
        needs = needs & ~ends & ~((n > float(trig_from)) & (y.f("abs") < 1.0))
    elif kind == "l":
        needs = needs & x.ne(0.0)
    elif kind == "p":
        needs = needs & x.f("abs").ne(1.0)
    return needs


def _evaluate(name: str, x: Ex, n: Ex, device, result: torch.dtype, python_n) -> Ex:
    shifted = name.startswith("s")
    kind = name[1:] if shifted else name
    rec = RECURRENCES[kind]
    # NaN or infinite degrees count as negative: ATen's cast to int64 gives INT64_MIN on x86
    # (and Hermite maps them to -1 explicitly).
    n = where(Ex(g.unary("isnan", n.node)) | n.f("abs").eq(math.inf), -1.0, n)
    n = n.f("trunc")
    if python_n is not None:
        top = int(python_n) if math.isfinite(python_n) else -1
    else:
        top = _max_degree(n, _needs_recurrence(kind, x, n, shifted), device)
    limit = HERMITE_LIMIT.get(result, 1024) if name in ("h", "he") else None
    if limit is not None:
        top = min(top, limit)
    xr = _shift(x) if shifted else x
    value = _recurrence(rec, xr, n, top, device) if top >= 2 else rec.first(xr)
    value = where(n.eq(1.0), rec.first(xr), value)
    if kind in ("t", "u", "v", "w"):
        value = chebyshev(kind, x, n, value, shifted)
    elif kind == "l":
        value = where(x.f("abs").eq(0.0), 1.0, value)
    elif kind == "p":
        value = where(x.f("abs").eq(1.0), where(x > 0.0, 1.0, _parity_sign(n)), value)
    if limit is not None:
        value = where(n > float(limit), math.nan, value)
    value = where(n.eq(0.0), 1.0, value)
    return where(n < 0.0, 0.0, value)


def _register(name: str, *packets) -> None:
    def lowering(x, n):
        compute, result = result_dtype(x, n, kind=PROMOTE_INT_TO_FLOAT)
        xn, nn = broadcast(operand(x, _opmath(compute)), operand(n, _opmath(compute)))
        device = x._storage.device if isinstance(x, torch.Tensor) else n._storage.device
        if xn.numel == 0:
            return wrap(g.const(0.0, zdtype(result), xn.shape), device)
        python_n = float(n) if isinstance(n, (int, float, bool)) else None
        if isinstance(n, torch.Tensor) and not hasattr(n, "_storage"):
            python_n = float(n.item())  # a CPU scalar tensor
        out = _evaluate(name, Ex(xn), Ex(nn), device, _opmath(compute), python_n)
        return wrap(g.cast(out.node, zdtype(result)), device)

    register(*packets)(lowering)


_register("t", aten.special_chebyshev_polynomial_t)
_register("u", aten.special_chebyshev_polynomial_u)
_register("v", aten.special_chebyshev_polynomial_v)
_register("w", aten.special_chebyshev_polynomial_w)
_register("st", aten.special_shifted_chebyshev_polynomial_t)
_register("su", aten.special_shifted_chebyshev_polynomial_u)
_register("sv", aten.special_shifted_chebyshev_polynomial_v)
_register("sw", aten.special_shifted_chebyshev_polynomial_w)
_register("h", aten.special_hermite_polynomial_h)
_register("he", aten.special_hermite_polynomial_he)
_register("l", aten.special_laguerre_polynomial_l)
_register("p", aten.special_legendre_polynomial_p)
