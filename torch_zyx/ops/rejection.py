"""Rejection samplers: gamma (``_standard_gamma``), Dirichlet (``_sample_dirichlet``) and Poisson;
the reparameterized gradient of gamma draws (``_standard_gamma_grad``).

torch.distributions' Gamma, Chi2, StudentT, Beta, Dirichlet and Poisson sample through these ops,
which ATen computes per element with a loop that draws until a candidate is accepted. Here each
element runs a few attempts side by side as lazy nodes (fresh counter-based draws per attempt,
the first accepted one kept), and one read-back asks whether any element accepted none; only
then a few more attempts are recorded for those, and so on. A sampler ends with every element
accepted, as ATen's loop does, and its values follow the same distribution; they differ from
CPU torch's, whose generator is another (as for every random op on zyx).

The algorithms are ATen's (Distributions.h): Marsaglia and Tsang's for gamma with the boost
u^(1/alpha) below alpha = 1, gamma draws normalized for Dirichlet (clamped into
[tiny, nextafter(1, 0)]), Hoermann's transformed rejection for Poisson rates of 10 and more and
products of uniforms below. All arithmetic is in float64, as ATen's CPU kernels do it.
"""

from __future__ import annotations

import math

import torch

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import read, wrap, zdtype
from .registry import aten, register
from .sampling import normal_node, uniform_node

# isort: off
from .special import digamma  # (before cephes: special imports cephes, which imports special)
from .cephes import Ex, where
# isort: on

_F64 = dtypes.float64
# Attempts recorded per element before the read-back asks whether any element accepted none.
# Gamma accepts at least ~95% of attempts, so four leave about 1e-5 of the elements waiting.
_ATTEMPTS = 4
# Uniforms multiplied per element and round in the product method (Poisson rates below 10).
_PRODUCT_TERMS = 16


def _c(value: float, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def _b(op: str, x: Node, y) -> Node:
    return g.binary(op, x, y if isinstance(y, Node) else _c(y, x))


def _uniform(shape, device, generator) -> Node:
    """Uniform in (0, 1]: 1 - u of the generator's [0, 1) draws (never 0, for logs)."""
    return _b("sub", g.const(1.0, _F64, shape), g.cast(uniform_node(shape, device, generator), _F64))


def _largest(node: Node, device) -> int:
    """The largest element of the int32 ``node`` (a read-back: the samples so far realize)."""
    axes = tuple(range(len(node.shape)))
    return int(wrap(g.reduce("max", node, axes) if axes else node, device).item())


def _until_accepted(attempt, state: tuple, parameter: Node, device, invalid=None) -> tuple:
    """Run ``attempt(state, pending) -> (state, pending)`` (``state``: nodes of the samples'
    shape, the first the values) until no element is pending; one read-back per round. An
    element whose distribution ``parameter`` is NaN is never pending: its value is NaN.
    ``invalid``: (bool node, message): the first read-back raises RuntimeError(message) when the
    node is true anywhere (ATen's check of the parameters)."""
    if not math.prod(state[0].shape):
        return state
    nan = g.unary("isnan", parameter)
    state = (g.where(nan, _c(math.nan, state[0]), state[0]), *state[1:])
    pending = g.unary("not", nan)
    while True:
        state, pending = attempt(state, pending)
        flags = g.cast(pending, dtypes.int32)
        if invalid is not None:
            bad, message = invalid
            flags = g.binary("max", flags, g.where(bad, _c(2, flags), _c(0, flags)))
        largest = _largest(flags, device)
        if largest >= 2:
            raise RuntimeError(message)
        if not largest:
            return state
        invalid = None


def _gamma(alpha: Node, device, generator) -> Node:
    """float64 standard gamma draws of shape parameters ``alpha`` (float64), before the clamp."""
    shape = alpha.shape
    small = _b("lt", alpha, 1.0)
    boost = g.binary("pow", _uniform(shape, device, generator), g.unary("recip", alpha))
    scale = g.where(small, boost, _c(1.0, alpha))
    boosted = g.where(small, _b("add", alpha, 1.0), alpha)
    d = _b("sub", boosted, 1.0 / 3.0)
    c = g.unary("recip", g.unary("sqrt", _b("mul", d, 9.0)))

    def attempt(state, pending):
        (value,) = state
        chosen, accepted = value, g.const(False, dtypes.bool_, shape)
        for _ in range(_ATTEMPTS):
            x = normal_node(shape, device, _F64, generator)
            u = _uniform(shape, device, generator)
            y = _b("add", _b("mul", c, x), 1.0)
            v = _b("mul", _b("mul", y, y), y)
            xx = _b("mul", x, x)
            squeeze = _b("lt", u, _b("sub", _c(1.0, u), _b("mul", _b("mul", xx, xx), 0.0331)))
            log_v = g.unary("log", g.where(_b("lt", _c(0.0, y), y), v, _c(1.0, v)))
            bound = _b("add", _b("mul", xx, 0.5), _b("mul", d, _b("add", _b("sub", _c(1.0, v), v), log_v)))
            ok = g.binary("and", _b("lt", _c(0.0, y), y),
                          g.binary("or", squeeze, _b("lt", g.unary("log", u), bound)))
            take = g.binary("and", ok, g.unary("not", accepted))
            chosen = g.where(take, _b("mul", d, v), chosen)
            accepted = g.binary("or", accepted, ok)
        value = g.where(pending, chosen, value)
        return (value,), g.binary("and", pending, g.unary("not", accepted))

    (value,) = _until_accepted(attempt, (g.const(0.0, _F64, shape),), alpha, device)
    return g.where(_b("eq", alpha, 0.0), _c(0.0, alpha), _b("mul", scale, value))


def _at_least_tiny(sample: Node, dtype: torch.dtype) -> Node:
    """ATen's std::max(smallest normal, sample): the smallest positive normal number at least,
    and it for a NaN sample too (the comparison with NaN is false)."""
    tiny = g.const(torch.finfo(dtype).tiny, sample.dtype, sample.shape)
    return g.where(g.binary("lt", tiny, sample), sample, tiny)


@register(aten._standard_gamma.default)
def standard_gamma(alpha, generator=None):
    if not alpha.dtype.is_floating_point:
        raise NotImplementedError  # (ATen's dtype error)
    node = g.cast(read(alpha), _F64)
    device = alpha._storage.device
    sample = _gamma(node, device, generator)
    return wrap(_at_least_tiny(g.cast(sample, zdtype(alpha.dtype)), alpha.dtype), device)


@register(aten._sample_dirichlet.default)
def sample_dirichlet(alpha, generator=None):
    if not alpha.dtype.is_floating_point or alpha.dim() == 0:
        raise NotImplementedError
    node = g.cast(read(alpha), _F64)
    device = alpha._storage.device
    gamma = _at_least_tiny(_gamma(node, device, generator), torch.float64)
    last = len(node.shape) - 1
    total = g.expand(g.reduce("sum", gamma, (last,)), node.shape)
    out = g.cast(g.binary("div", gamma, total), zdtype(alpha.dtype))
    highest = math.nextafter(1.0, 0.0) if alpha.dtype == torch.float64 else float(
        torch.nextafter(torch.tensor(1.0, dtype=alpha.dtype), torch.tensor(0.0, dtype=alpha.dtype)))
    out = g.binary("min", _at_least_tiny(out, alpha.dtype), g.const(highest, out.dtype, out.shape))
    return wrap(out, device)


def _poisson(rate: Node, device, generator) -> Node:
    """float64 Poisson draws of rates ``rate`` (float64)."""
    shape = rate.shape
    large = _b("le", _c(10.0, rate), rate)
    # Hoermann's transformed rejection (PTRS), for rates of 10 and more (others get 1 to stay finite).
    lam = g.where(large, rate, _c(10.0, rate))
    slam = g.unary("sqrt", lam)
    log_lam = g.unary("log", lam)
    b = _b("add", _b("mul", slam, 2.53), 0.931)
    a = _b("add", _b("mul", b, 0.02483), -0.059)
    log_inv_alpha = g.unary("log", _b("add", g.binary("div", _c(1.1328, b), _b("sub", b, 3.4)), 1.1239))
    vr = _b("sub", _c(0.9277, b), g.binary("div", _c(3.6224, b), _b("sub", b, 2.0)))
    # The product method below 10: count the running products of uniforms above exp(-rate).
    floor = g.unary("exp", g.unary("neg", rate))

    def attempt(state, pending):
        value, product = state
        chosen, accepted = value, g.const(False, dtypes.bool_, shape)
        for _ in range(_ATTEMPTS):
            u = _b("sub", g.cast(uniform_node(shape, device, generator), _F64), 0.5)
            v = g.cast(uniform_node(shape, device, generator), _F64)
            us = _b("sub", _c(0.5, u), g.unary("abs", u))
            k = g.unary("floor", _b("add", _b("add", _b("mul", _b("add", g.binary(
                "div", _b("mul", a, 2.0), us), b), u), lam), 0.43))
            quick = g.binary("and", _b("le", _c(0.07, us), us), _b("le", v, vr))
            hopeless = g.binary("or", _b("lt", k, 0.0), g.binary("and", _b("lt", us, 0.013), _b("lt", us, v)))
            lhs = _b("sub", _b("add", g.unary("log", g.where(_b("lt", _c(0.0, v), v), v, _c(1.0, v))),
                                log_inv_alpha),
                     g.unary("log", _b("add", g.binary("div", a, _b("mul", us, us)), b)))
            rhs = _b("sub", _b("add", g.unary("neg", lam), _b("mul", k, log_lam)),
                     g.unary("lgamma", _b("add", k, 1.0)))
            ok = g.binary("or", quick, g.binary("and", g.unary("not", hopeless), _b("le", lhs, rhs)))
            chosen = g.where(g.binary("and", ok, g.unary("not", accepted)), k, chosen)
            accepted = g.binary("or", accepted, ok)
        count = value
        for _ in range(_PRODUCT_TERMS):
            product = _b("mul", product, g.cast(uniform_node(shape, device, generator), _F64))
            count = g.where(_b("lt", floor, product), _b("add", count, 1.0), count)
        small_done = g.unary("not", _b("lt", floor, product))
        done = g.where(large, accepted, small_done)
        value = g.where(pending, g.where(large, chosen, count), value)
        return (value, product), g.binary("and", pending, g.unary("not", done))

    state = (g.const(0.0, _F64, shape), g.const(1.0, _F64, shape))
    invalid = g.binary("or", _b("lt", rate, 0.0), g.unary("isnan", rate))
    value, _ = _until_accepted(attempt, state, rate, device,
                               (invalid, "invalid Poisson rate, expected rate to be non-negative"))
    return g.where(_b("eq", rate, 0.0), _c(0.0, rate), value)


@register(aten.poisson.default)
def poisson(rates, generator=None):
    if not rates.dtype.is_floating_point:
        raise NotImplementedError
    node = g.cast(read(rates), _F64)
    device = rates._storage.device
    return wrap(g.cast(_poisson(node, device, generator), zdtype(rates.dtype)), device)


# The reparameterized gradient d(sample)/d(alpha) of a gamma draw (Gamma/Beta/Dirichlet
# ``rsample().backward()``): ATen's standard_gamma_grad_one, in float64 as its CPU kernel.
# Three regimes, each the value of a ``where``: a Taylor series of the CDF for small draws, Rice's
# saddle point expansion for large alpha, a bivariate rational approximation otherwise.
_GAMMA_GRAD_COEFFICIENTS = (
    (0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084),
    (0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915,
     -0.00058392623),
    (0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
     0.00085092367, -1.5247877e-07),
)


def _pow(base: Ex, exponent) -> Ex:
    exponent = exponent if isinstance(exponent, Ex) else base.full(exponent)
    return Ex(g.binary("pow", base.node, exponent.node))


def _gamma_grad(alpha: Ex, x: Ex) -> Ex:
    numer, denom = alpha.full(1.0), alpha
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / float(i))
        denom = denom + 1.0
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = _pow(x, alpha)
    pdf = _pow(x, alpha - 1.0) * (-x).f("exp")
    cdf = pow_x_alpha * series1
    cdf_alpha = (x.f("log") - Ex(digamma(alpha.node))) * cdf - pow_x_alpha * series2
    taylor = -cdf_alpha / pdf
    taylor = where(Ex(g.unary("isnan", taylor.node)), 0.0, taylor)

    saddle_numer = (1.0 + 24.0 * alpha * (1.0 + 12.0 * alpha)) * (
        1440.0 * (alpha * alpha) + 6.0 * x * (53.0 - 120.0 * x) - 65.0 * x * x / alpha
        + alpha * (107.0 + 3600.0 * x))
    saddle_near = saddle_numer / (1244160.0 * (alpha * alpha) * (alpha * alpha))
    root = (8.0 * alpha).f("sqrt")
    term2 = root / (alpha - x)
    term3 = _pow(x - alpha - alpha * (x / alpha).f("log"), -1.5)
    term23 = where(x < alpha, term2 - term3, term2 + term3)
    spread = (2.0 / alpha).f("sqrt") * (alpha + x) / ((alpha - x) * (alpha - x))
    term1 = (x / alpha).f("log") * term23 - spread
    stirling = 1.0 + 1.0 / (12.0 * alpha) * (1.0 + 1.0 / (24.0 * alpha))
    saddle_far = -stirling * (x * term1) / root
    saddle = where((alpha * 0.9 <= x) & (x <= alpha * 1.1), saddle_near, saddle_far)

    u, v = (x / alpha).f("log"), alpha.f("log")
    coefficients = [u * (u * c2 + c1) + c0 for c0, c1, c2 in zip(*_GAMMA_GRAD_COEFFICIENTS)]
    p = coefficients[0] + v * (coefficients[1] + v * (coefficients[2] + v * coefficients[3]))
    q = coefficients[4] + v * (coefficients[5] + v * (coefficients[6] + v * coefficients[7]))
    rational = (p / q).f("exp")
    return where(x < 0.8, taylor, where(alpha > 8.0, saddle, rational))


@register(aten._standard_gamma_grad.default)
def standard_gamma_grad(alpha, output):
    if not alpha.dtype.is_floating_point or tuple(alpha.shape) != tuple(output.shape):
        raise NotImplementedError  # (ATen's errors)
    grad = _gamma_grad(Ex(g.cast(read(alpha), _F64)), Ex(g.cast(read(output), _F64)))
    return wrap(g.cast(grad.node, zdtype(alpha.dtype)), alpha._storage.device)
