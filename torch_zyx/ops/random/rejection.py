"""Rejection samplers: gamma (``_standard_gamma``), Dirichlet (``_sample_dirichlet``), Poisson and
binomial (their reparameterized gradients are in reparam.py).

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

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..expr import Ex, where
from ..registry import aten, register
from .sampling import normal_node, uniform_node

_F64 = dtypes.float64
# Attempts recorded per element before the read-back asks whether any element accepted none.
# Gamma accepts at least ~95% of attempts, so four leave about 1e-5 of the elements waiting.
_ATTEMPTS = 4
# Uniforms multiplied per element and round in the product method (Poisson rates below 10).
_PRODUCT_TERMS = 16


def _uniform(shape, device, generator) -> Ex:
    """Uniform in (0, 1]: 1 - u of the generator's [0, 1) draws (never 0, for logs)."""
    return 1.0 - Ex(g.cast(uniform_node(shape, device, generator), _F64))


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
    state = (where(Ex(nan), math.nan, Ex(state[0])).node, *state[1:])
    pending = g.unary("not", nan)
    while True:
        state, pending = attempt(state, pending)
        flags = g.cast(pending, dtypes.int32)
        if invalid is not None:
            bad, message = invalid
            flags = g.binary("max", flags, where(Ex(bad), 2, Ex(flags).full(0)).node)
        largest = _largest(flags, device)
        if largest >= 2:
            raise RuntimeError(message)
        if not largest:
            return state
        invalid = None


def _gamma(alpha_node: Node, device, generator) -> Node:
    """float64 standard gamma draws of shape parameters ``alpha_node`` (float64), before the clamp."""
    shape = alpha_node.shape
    alpha = Ex(alpha_node)
    small = alpha < 1.0
    scale = where(small, _uniform(shape, device, generator) ** alpha.f("recip"), 1.0)
    d = where(small, alpha + 1.0, alpha) - 1.0 / 3.0
    c = (d * 9.0).f("sqrt").f("recip")

    def attempt(state, pending):
        value = Ex(state[0])
        chosen, accepted = value, Ex(g.const(False, dtypes.bool_, shape))
        for _ in range(_ATTEMPTS):
            x = Ex(normal_node(shape, device, _F64, generator))
            u = _uniform(shape, device, generator)
            y = c * x + 1.0
            v = y * y * y
            xx = x * x
            squeeze = u < 1.0 - xx * xx * 0.0331
            positive = y > 0.0
            bound = xx * 0.5 + d * ((1.0 - v) + where(positive, v, 1.0).f("log"))
            ok = positive & (squeeze | (u.f("log") < bound))
            chosen = where(ok & ~accepted, d * v, chosen)
            accepted = accepted | ok
        return (where(Ex(pending), chosen, value).node,), (Ex(pending) & ~accepted).node

    (value,) = _until_accepted(attempt, (g.const(0.0, _F64, shape),), alpha_node, device)
    return where(alpha.eq(0.0), 0.0, scale * Ex(value)).node


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


def _poisson(rate_node: Node, device, generator) -> Node:
    """float64 Poisson draws of rates ``rate_node`` (float64)."""
    shape = rate_node.shape
    rate = Ex(rate_node)
    large = rate >= 10.0
    # Hoermann's transformed rejection (PTRS), for rates of 10 and more (others get 10 to stay finite).
    lam = where(large, rate, 10.0)
    log_lam = lam.f("log")
    b = lam.f("sqrt") * 2.53 + 0.931
    a = b * 0.02483 + -0.059
    log_inv_alpha = (1.1328 / (b - 3.4) + 1.1239).f("log")
    vr = 0.9277 - 3.6224 / (b - 2.0)
    # The product method below 10: count the running products of uniforms above exp(-rate).
    floor = (-rate).f("exp")

    def attempt(state, pending):
        value, product = Ex(state[0]), Ex(state[1])
        chosen, accepted = value, Ex(g.const(False, dtypes.bool_, shape))
        for _ in range(_ATTEMPTS):
            u = Ex(g.cast(uniform_node(shape, device, generator), _F64)) - 0.5
            v = Ex(g.cast(uniform_node(shape, device, generator), _F64))
            us = 0.5 - u.f("abs")
            k = ((a * 2.0 / us + b) * u + lam + 0.43).f("floor")
            quick = (us >= 0.07) & (v <= vr)
            hopeless = (k < 0.0) | ((us < 0.013) & (us < v))
            lhs = where(v > 0.0, v, 1.0).f("log") + log_inv_alpha - (a / (us * us) + b).f("log")
            rhs = -lam + k * log_lam - (k + 1.0).f("lgamma")
            ok = quick | (~hopeless & (lhs <= rhs))
            chosen = where(ok & ~accepted, k, chosen)
            accepted = accepted | ok
        count = value
        for _ in range(_PRODUCT_TERMS):
            product = product * Ex(g.cast(uniform_node(shape, device, generator), _F64))
            count = where(floor < product, count + 1.0, count)
        done = where(large, accepted, ~(floor < product))
        value = where(Ex(pending), where(large, chosen, count), value)
        return (value.node, product.node), (Ex(pending) & ~done).node

    state = (g.const(0.0, _F64, shape), g.const(1.0, _F64, shape))
    invalid = (rate < 0.0) | Ex(g.unary("isnan", rate_node))
    value, _ = _until_accepted(attempt, state, rate_node, device,
                               (invalid.node, "invalid Poisson rate, expected rate to be non-negative"))
    return where(rate.eq(0.0), 0.0, Ex(value)).node


@register(aten.poisson.default)
def poisson(rates, generator=None):
    if not rates.dtype.is_floating_point:
        raise NotImplementedError
    node = g.cast(read(rates), _F64)
    device = rates._storage.device
    return wrap(g.cast(_poisson(node, device, generator), zdtype(rates.dtype)), device)


# log(k!) - Stirling's approximation of it, for k = 0..9 (ATen's stirling_approx_tail table).
_STIRLING_TAILS = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                   0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                   0.00925546218271273, 0.00833056343336287)


def _stirling_tail(k: Ex) -> Ex:
    kp1sq = (k + 1.0) * (k + 1.0)
    tail = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1.0)
    for value, table in enumerate(_STIRLING_TAILS):
        tail = where(k.eq(float(value)), table, tail)
    return tail


def _binomial(count: Node, prob: Node, device, generator) -> Node:
    """float64 binomial draws (ATen's sample_binomial): Hormann's BTRS where count * p >= 10
    (p the smaller of prob and 1 - prob), geometric jumps (inversion) below."""
    shape = count.shape
    n, p = Ex(count), Ex(prob)
    flip = p > 0.5
    q = where(flip, 1.0 - p, p)
    btrs = n * q >= 10.0
    # BTRS's constants (computed for every element; those below 10 get a stand-in q).
    qb = where(btrs, q, 0.25)
    nb = where(btrs, n, 40.0)
    stddev = (nb * qb * (1.0 - qb)).f("sqrt")
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * qb
    c = nb * qb + 0.5
    v_r = 0.92 - 4.2 / b
    r = qb / (1.0 - qb)
    alpha = (2.83 + 5.1 / b) * stddev
    m = ((nb + 1.0) * qb).f("floor")
    log_q = (-q).f("log1p")

    def attempt(state, pending):
        value, geom_sum = state
        chosen, accepted = Ex(value), Ex(g.const(False, dtypes.bool_, shape))
        for _ in range(_ATTEMPTS):
            u = Ex(g.cast(uniform_node(shape, device, generator), _F64)) - 0.5
            v = Ex(g.cast(uniform_node(shape, device, generator), _F64))
            us = 0.5 - Ex(g.unary("abs", u.node))
            k = ((2.0 * a / us + b) * u + c).f("floor")
            sensible = (k >= 0.0) & (k <= nb)
            quick = (us >= 0.07) & (v <= v_r)
            log_v = (v * alpha / (a / (us * us) + b)).f("log")
            bound = ((m + 0.5) * ((m + 1.0) / (r * (nb - m + 1.0))).f("log")
                     + (nb + 1.0) * ((nb - m + 1.0) / (nb - k + 1.0)).f("log")
                     + (k + 0.5) * (r * (nb - k + 1.0) / (k + 1.0)).f("log")
                     + _stirling_tail(m) + _stirling_tail(nb - m)
                     - _stirling_tail(k) - _stirling_tail(nb - k))
            ok = sensible & (quick | (log_v <= bound))
            chosen = where(ok & ~accepted, k, chosen)
            accepted = accepted | ok
        count_so_far, total = Ex(value), Ex(geom_sum)
        stopped = total > n
        for _ in range(_PRODUCT_TERMS):
            u = Ex(g.cast(uniform_node(shape, device, generator), _F64))
            total = where(stopped, total, total + (u.f("log") / log_q).f("ceil"))
            newly = ~stopped & ~(total > n)
            count_so_far = where(newly, count_so_far + 1.0, count_so_far)
            stopped = stopped | (total > n)
        done = where(btrs, accepted, stopped)
        value = where(Ex(pending), where(btrs, chosen, count_so_far), Ex(value))
        geom_sum = where(Ex(pending), total, Ex(geom_sum))
        return (value.node, geom_sum.node), g.binary("and", pending, g.unary("not", done.node))

    state = (g.const(0.0, _F64, shape), g.const(0.0, _F64, shape))
    # Elements with a sure outcome never wait (a NaN parameter is never pending): their draws
    # are replaced below, and the loops would not end for them (p = 0: no jump ever lands).
    trivial = (n <= 0.0) | (p <= 0.0) | (p >= 1.0)
    draws, _ = _until_accepted(attempt, state, where(trivial, math.nan, p).node, device)
    draws = where(flip, n - Ex(draws), Ex(draws))
    return where((n <= 0.0) | (p <= 0.0), 0.0, where(p >= 1.0, n, draws)).node


@register(aten.binomial.default)
def binomial(count, prob, generator=None):
    if not count.dtype.is_floating_point:
        raise NotImplementedError
    shape = torch.broadcast_shapes(tuple(count.shape), tuple(prob.shape))
    n = g.cast(read(count.expand(shape)), _F64)
    p = g.cast(read(prob.expand(shape)), _F64)
    device = count._storage.device
    return wrap(g.cast(_binomial(n, p, device, generator), zdtype(count.dtype)), device)
