"""Rejection samplers: gamma (``_standard_gamma``), Dirichlet (``_sample_dirichlet``) and Poisson;
the reparameterized gradients of gamma and Dirichlet draws (``_standard_gamma_grad``,
``_dirichlet_grad``).

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
from .nn import _acc_dtype
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


# The reparameterized gradient of Dirichlet (and Beta) draws, ``_dirichlet_grad``: ATen's
# dirichlet_grad_one, a scaled Beta(alpha, total - alpha) gradient. Its Taylor branches for draws
# near 0 or 1 run in the input's dtype and the others in float64, as on the CPU.
_DIRICHLET_GRAD_COEFFICIENTS = (
    (((1.003668233, -0.01061107488, -0.0657888334, 0.01201642863),
      (0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033),
      (-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013)),
     ((0.221950385, -0.3187676331, 0.01799915743, 0.01074823814),
      (-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057),
      (0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05)),
     ((-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565),
      (0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181),
      (0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05))),
    (((1, -0.02924021934, -0.04438342661, 0.007285809825),
      (0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521),
      (-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149)),
     ((0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273),
      (0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956),
      (-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05)),
     ((0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05),
      (0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05),
      (-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06))),
)


def _nan_to_zero(value: Ex) -> Ex:
    return where(Ex(g.unary("isnan", value.node)), 0.0, value)


def _digamma(x: Ex) -> Ex:
    return Ex(digamma(x.node))


def _beta_grad_alpha_small(x: Ex, alpha: Ex, beta: Ex) -> Ex:
    """d/dalpha of a Beta(alpha, beta) draw ``x`` near 0 (a Taylor expansion)."""
    factor = _digamma(alpha) - _digamma(alpha + beta) - x.f("log")
    numer = alpha.full(1.0)
    series = numer / alpha * (factor + 1.0 / alpha)
    for i in range(1, 11):
        numer = numer * ((float(i) - beta) * x / float(i))
        denom = alpha + float(i)
        series = series + numer / denom * (factor + 1.0 / denom)
    return _nan_to_zero(x * _pow(1.0 - x, -beta) * series)


def _beta_grad_beta_small(x: Ex, alpha: Ex, beta: Ex) -> Ex:
    """d/dbeta of a Beta(alpha, beta) draw ``x`` near 0 (a Taylor expansion)."""
    factor = _digamma(alpha + beta) - _digamma(beta)
    numer, betas, dbetas = alpha.full(1.0), alpha.full(1.0), alpha.full(0.0)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * (-x / float(i))
        dbetas = dbetas * (beta - float(i)) + betas
        betas = betas * (beta - float(i))
        series = series + numer / (alpha + float(i)) * (dbetas + factor * betas)
    return _nan_to_zero(-_pow(1.0 - x, 1.0 - beta) * series)


def _beta_grad_alpha_mid(x: Ex, alpha: Ex, beta: Ex) -> Ex:
    """d/dalpha of a Beta draw for large alpha and beta (Rice's saddle point expansion)."""
    total = alpha + beta
    mean = alpha / total
    std = (alpha * beta / (total + 1.0)).f("sqrt") / total
    poly = 47.0 * x * (beta * beta) * (beta * beta) + alpha * (
        (43.0 + 20.0 * (16.0 + 27.0 * beta) * x) * (beta * beta) * beta + alpha * (
            3.0 * (59.0 + 180.0 * beta - 90.0 * x) * (beta * beta) + alpha * (
                (453.0 + 1620.0 * beta * (1.0 - x) - 455.0 * x) * beta + alpha * (
                    8.0 * (1.0 - x) * (135.0 * beta - 11.0)))))
    prefactor_num = (1.0 + 12.0 * alpha) * (1.0 + 12.0 * beta) / (total * total)
    prefactor_den = 12960.0 * alpha * alpha * alpha * beta * beta * (1.0 + 12.0 * total)
    near = prefactor_num / (1.0 - x) * poly / prefactor_den
    prefactor = -x / (2.0 * alpha * beta / total).f("sqrt")
    stirling = ((1.0 + 1.0 / (12.0 * alpha) + 1.0 / (288.0 * alpha * alpha))
                * (1.0 + 1.0 / (12.0 * beta) + 1.0 / (288.0 * beta * beta))
                / (1.0 + 1.0 / (12.0 * total) + 1.0 / (288.0 * total * total)))
    term1_num = 2.0 * (alpha * alpha) * (x - 1.0) + alpha * beta * (x - 1.0) - x * (beta * beta)
    axbx = alpha * (x - 1.0) + beta * x
    term1 = term1_num / ((2.0 * alpha / beta).f("sqrt") * _pow(total, 1.5) * axbx * axbx)
    term2 = 0.5 * (alpha / (total * x)).f("log")
    term3 = (8.0 * alpha * beta / total).f("sqrt") / (beta * x + alpha * (x - 1.0))
    term4 = _pow(beta * (beta / (total * (1.0 - x))).f("log") + alpha * (alpha / (total * x)).f("log"), -1.5)
    far = stirling * prefactor * (term1 + term2 * (term3 + where(x < mean, term4, -term4)))
    return where((mean - 0.1 * std <= x) & (x <= mean + 0.1 * std), near, far)


def _dirichlet_rational(x: Ex, alpha: Ex, total: Ex) -> Ex:
    """A rational correction to the analytic approximation x (psi(total) - psi(alpha)) / beta."""
    u = x.f("log")
    a = alpha.f("log") - u
    b = total.f("log") - a
    powers_u, powers_a = (None, u, u * u), (None, a, a * a)
    sums = []
    for table in _DIRICHLET_GRAD_COEFFICIENTS:
        total_sum = None
        for i in range(3):
            for j in range(3):
                c0, c1, c2, c3 = table[i][j]
                term = b * (b * (b * c3 + c2) + c1) + c0
                for power in (powers_u[i], powers_a[j]):
                    if power is not None:
                        term = term * power
                total_sum = term if total_sum is None else total_sum + term
        sums.append(total_sum)
    approx = x * (_digamma(total) - _digamma(alpha)) / (total - alpha)
    return sums[0] / sums[1] * approx


@register(aten._dirichlet_grad.default)
def dirichlet_grad(x, alpha, total):
    if not x.dtype.is_floating_point or not (tuple(x.shape) == tuple(alpha.shape) == tuple(total.shape)):
        raise NotImplementedError  # (ATen's errors)
    compute = _acc_dtype(zdtype(x.dtype))
    xs, alphas, totals = (Ex(g.cast(read(t), compute)) for t in (x, alpha, total))
    xw, alphaw, totalw = (Ex(g.cast(read(t), _F64)) for t in (x, alpha, total))
    betas = totals - alphas
    boundary = totals * xs * (1.0 - xs)
    near_zero = _beta_grad_alpha_small(xs, alphas, betas)
    near_one = -_beta_grad_beta_small(1.0 - xs, betas, alphas)
    wide = where((alphaw > 6.0) & (totalw - alphaw > 6.0), _beta_grad_alpha_mid(xw, alphaw, totalw - alphaw),
                 _dirichlet_rational(xw, alphaw, totalw))
    grad = where((xs <= 0.5) & (boundary < 2.5), near_zero,
                 where((xs >= 0.5) & (boundary < 0.75), near_one, Ex(g.cast(wide.node, compute))))
    return wrap(g.cast(grad.node, zdtype(x.dtype)), x._storage.device)
