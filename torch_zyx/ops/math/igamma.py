"""Regularized incomplete gamma functions igamma (P) and igammac (Q), as ATen computes them
(SciPy's gammainc/gammaincc: Cephes' series and continued fraction, Boost's Lanczos prefactor).

ATen's series and continued fraction loop until each element converges (at most 2000 steps). A
lazy graph cannot loop on data, so both run ``CHUNK`` masked steps per graph: the state is
realized and one sync asks whether any element still runs; if so another chunk follows (the same
graph, one compiled kernel). Elements that have converged stop changing, as ATen's break does.

One deliberate difference: for large a close to x (a > 20 and |x - a| / a < 0.3, or a > 200
and |x - a| / a < 4.5 / sqrt(a)) ATen switches to Temme's uniform asymptotic expansion (a
625-coefficient table); here those elements stay on the series / continued fraction, which
converge there too (in more steps), so results agree to rounding, not bit for bit.
"""

from __future__ import annotations

import math

import torch

from ...lazy import graph as g
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..expr import Ex, where
from ..registry import PROMOTE_INT_TO_FLOAT, aten, broadcast, operand, register, result_dtype
from .cephes import polevl
from .special import _opmath, prims

CHUNK = 32
MAX_STEPS = 2000
IGAMC_SERIES_TERMS = 30  # x <= 1.1 there: x^n / n! is below double epsilon long before
MACHEP = {torch.float64: 1.11022302462515654042E-16, torch.float32: 5.9604644775390625E-8}
BIG = {torch.float64: 4.503599627370496e15, torch.float32: 16777216.0}
BIGINV = {torch.float64: 2.22044604925031308085e-16, torch.float32: 5.9604644775390625E-8}
MAXLOG = {torch.float64: 7.09782712893383996843E2, torch.float32: 88.72283905206835}
LANCZOS_G = 6.024680040776729583740234375
LANCZOS_NUM = (0.006061842346248906525783753964555936883222, 0.5098416655656676188125178644804694509993,
               19.51992788247617482847860966235652136208, 449.9445569063168119446858607650988409623,
               6955.999602515376140356310115515198987526, 75999.29304014542649875303443598909137092,
               601859.6171681098786670226533699352302507, 3481712.15498064590882071018964774556468,
               14605578.08768506808414169982791359218571, 43338889.32467613834773723740590533316085,
               86363131.28813859145546927288977868422342, 103794043.1163445451906271053616070238554,
               56906521.91347156388090791033559122686859)
LANCZOS_DEN = (1.0, 66.0, 1925.0, 32670.0, 357423.0, 2637558.0, 13339535.0, 45995730.0, 105258076.0,
               150917976.0, 120543840.0, 39916800.0, 0.0)


def _isnan(x: Ex) -> Ex:
    return Ex(g.unary("isnan", x.node))


def _lanczos_sum_expg_scaled(a: Ex) -> Ex:
    """Boost's Lanczos sum (ratevl: in 1/a with the coefficients reversed when |a| > 1)."""
    big = a.f("abs") > 1.0
    y = where(big, 1.0 / a, a)
    num = where(big, polevl(y, LANCZOS_NUM[::-1]), polevl(y, LANCZOS_NUM))
    den = where(big, polevl(y, LANCZOS_DEN[::-1]), polevl(y, LANCZOS_DEN))
    return num / den


def _prefactor(a: Ex, x: Ex, dtype) -> Ex:
    """x^a e^-x / Gamma(a) (ATen's _igam_helper_fac)."""
    ax = a * x.f("log") - x - a.f("lgamma")
    direct = where(ax < -MAXLOG[dtype], 0.0, ax.f("exp"))
    fac = a + (LANCZOS_G - 0.5)
    res = (fac / math.e).f("sqrt") / _lanczos_sum_expg_scaled(a)
    moderate = res * (a - x).f("exp") * Ex(g.binary("pow", (x / fac).node, a.node))
    num = x - a - LANCZOS_G + 0.5
    ratio = num / fac
    large = res * (a * (ratio.f("log1p") - ratio) + x * (0.5 - LANCZOS_G) / fac).f("exp")
    lanczos = where((a < 200.0) & (x < 200.0), moderate, large)
    return where((a - x).f("abs") > 0.4 * a.f("abs"), direct, lanczos)


def _realized(nodes: list, device) -> list:
    """``nodes`` as buffers, realized together (one schedule: shared work is done once)."""
    tensors = [wrap(node, device) for node in nodes]
    tensors[0]._storage.realize()  # realizes every pending storage of the device
    return [read(t) for t in tensors]


def _iterate(state: dict, step, running, device) -> dict:
    """Run ``step`` (state -> state) in chunks of CHUNK steps until ``running(state)`` (a bool node:
    elements not yet converged) is false everywhere, or MAX_STEPS have run. The check is one
    sync; the state is realized only when another chunk follows."""
    for start in range(0, MAX_STEPS, CHUNK):
        for _ in range(CHUNK):
            state = step(state)
        if start + CHUNK >= MAX_STEPS:
            break
        live = running(state).node
        flat = g.reshape(g.cast(live, state["ans"].node.dtype), (live.numel,))
        if float(wrap(g.reshape(g.reduce("max", flat, (0,)), ()), device).item()) == 0.0:
            break
        nodes = _realized([v.node for v in state.values()], device)
        state = {k: Ex(node) for k, node in zip(state, nodes)}
    return state


def _loops(a: Ex, x: Ex, dtype, series_used: Ex, fraction_used: Ex, device) -> tuple[Ex, Ex]:
    """(P by the power series, Q by the continued fraction), both times the prefactor.

    Steps are not masked per element: past convergence the series only adds terms below
    epsilon and the fraction's convergents stay put, so running on changes nothing beyond
    rounding (and keeps the unrolled graph free of select chains, which LLVM optimizes very
    slowly). The fraction's terms are renormalized every step (ATen rescales by 2^-52 past 2^52)."""
    eps = MACHEP[dtype]
    one = x.full(1.0)
    y0 = 1.0 - a
    z0 = x + y0 + 1.0
    state = {"r": a, "c": one, "ans": one, "k": x.full(0.0), "y": y0, "z": z0, "pkm2": one,
             "qkm2": x, "pkm1": x + 1.0, "qkm1": z0 * x, "cf": (x + 1.0) / (z0 * x), "cf_prev": one}

    def step(s):
        r = s["r"] + 1.0
        c = s["c"] * x / r
        k, yv, zv = s["k"] + 1.0, s["y"] + 1.0, s["z"] + 2.0
        yc = yv * k
        pk = s["pkm1"] * zv - s["pkm2"] * yc
        qk = s["qkm1"] * zv - s["qkm2"] * yc
        nonzero = qk.ne(0.0)
        scale = 1.0 / where(nonzero, qk, 1.0)
        return {"r": r, "c": c, "ans": s["ans"] + c, "k": k, "y": yv, "z": zv,
                "pkm2": s["pkm1"] * scale, "pkm1": pk * scale, "qkm2": s["qkm1"] * scale,
                "qkm1": qk * scale, "cf": where(nonzero, pk * scale, s["cf"]), "cf_prev": s["cf"]}

    def running(s):
        series = series_used & ~((s["c"] <= eps * s["ans"]) | _isnan(s["ans"]))
        change = ((s["cf_prev"] - s["cf"]) / s["cf"]).f("abs")
        fraction = fraction_used & ~((change <= eps) | _isnan(s["cf"]))
        return series | fraction

    state = _iterate(state, step, running, device)
    ax = _prefactor(a, x, dtype)
    return state["ans"] * ax / a, state["cf"] * ax


def _igamc_series(a: Ex, x: Ex) -> Ex:
    """Q for small x (DLMF 8.7.3), written to avoid cancellation."""
    fac, total = x.full(1.0), x.full(0.0)
    for n in range(1, IGAMC_SERIES_TERMS + 1):
        fac = fac * (-x) / float(n)
        total = total + fac / (a + float(n))
    logx = x.f("log")
    first = -(a * logx - (a + 1.0).f("lgamma")).f("expm1")
    return first - (a * logx - a.f("lgamma")).f("exp") * total


def _boundaries(a: Ex, x: Ex, out: Ex, lower: bool) -> Ex:
    """ATen's values outside the loops' domain (checked in this order, first wins)."""
    inf_a, inf_x = a.f("abs").eq(math.inf), x.f("abs").eq(math.inf)
    out = where(inf_x, 1.0 if lower else 0.0, out)
    out = where(inf_a, where(inf_x, x.full(math.nan), 0.0 if lower else 1.0), out)
    out = where(x.eq(0.0), 0.0 if lower else 1.0, out)
    out = where(a.eq(0.0), where(x > 0.0, x.full(1.0 if lower else 0.0), math.nan), out)
    out = where((x < 0.0) | (a < 0.0), math.nan, out)
    return where(_isnan(a) | _isnan(x), math.nan, out)


def igamma_pair(a: Ex, x: Ex, dtype, lower: bool, device) -> Ex:
    # Which method each element uses (ATen's branch rules, asymptotic region aside).
    from_q = (x > 1.0) & (x > a)  # P = 1 - Q
    q_fraction = (x > 1.1) & ~(x < a)
    small_x = x <= 0.5
    q_by_series_p = where(x > 1.1, x < a, where(small_x, -0.4 / x.f("log") < a, x * 1.1 < a))
    if lower:
        series_used = ~from_q | (from_q & q_by_series_p)
        fraction_used = from_q & q_fraction
    else:
        series_used = q_by_series_p
        fraction_used = q_fraction
    # Elements on the boundaries (zero, negative, infinite or NaN arguments) take fixed values:
    # they must not keep the loops running.
    inside = (a > 0.0) & (x > 0.0) & (a < math.inf) & (x < math.inf)
    p_series, q_fraction_value = _loops(a, x, dtype, series_used & inside, fraction_used & inside, device)
    q = where(q_fraction, q_fraction_value, where(q_by_series_p, 1.0 - p_series, _igamc_series(a, x)))
    out = where(from_q, 1.0 - q, p_series) if lower else q
    return _boundaries(a, x, out, lower)


def _register(lower: bool, *ops) -> None:
    def lowering(a, x):
        compute, result = result_dtype(a, x, kind=PROMOTE_INT_TO_FLOAT)
        opmath = _opmath(compute)
        an, xn = broadcast(operand(a, opmath), operand(x, opmath))
        device = a._storage.device if isinstance(a, torch.Tensor) else x._storage.device
        if an.numel == 0:
            return wrap(g.const(0.0, zdtype(result), an.shape), device)
        out = igamma_pair(Ex(an), Ex(xn), opmath, lower, device)
        return wrap(g.cast(out.node, zdtype(result)), device)

    register(*ops)(lowering)


_register(True, aten.igamma.default, aten.special_gammainc.default, prims.igamma.default)
_register(False, aten.igammac.default, aten.special_gammaincc.default, prims.igammac.default)
