"""Reparameterized gradients of gamma and Dirichlet draws: ``_standard_gamma_grad`` and
``_dirichlet_grad``, what ``rsample().backward()`` of Gamma, Beta and Dirichlet runs.

Each is ATen's per-element approximation (Distributions.h: standard_gamma_grad_one,
dirichlet_grad_one) written with ``Ex`` formulas: every regime is computed and a ``where``
picks the one ATen's branches take, so the gradient is one fused elementwise expression. The
arithmetic is in float64 where ATen's CPU kernel uses double, in the input's dtype where it
uses the scalar type.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..expr import Ex, where
from ..math.special import digamma
from ..nn.functional import _acc_dtype
from ..registry import aten, register

_F64 = dtypes.float64


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


def _gamma_grad(alpha: Ex, x: Ex) -> Ex:
    numer, denom = alpha.full(1.0), alpha
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / float(i))
        denom = denom + 1.0
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = x ** alpha
    pdf = x ** (alpha - 1.0) * (-x).f("exp")
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
    term3 = (x - alpha - alpha * (x / alpha).f("log")) ** -1.5
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
    return _nan_to_zero(x * (1.0 - x) ** -beta * series)


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
    return _nan_to_zero(-((1.0 - x) ** (1.0 - beta)) * series)


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
    term1 = term1_num / ((2.0 * alpha / beta).f("sqrt") * total ** 1.5 * axbx * axbx)
    term2 = 0.5 * (alpha / (total * x)).f("log")
    term3 = (8.0 * alpha * beta / total).f("sqrt") / (beta * x + alpha * (x - 1.0))
    term4 = (beta * (beta / (total * (1.0 - x))).f("log") + alpha * (alpha / (total * x)).f("log")) ** -1.5
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
