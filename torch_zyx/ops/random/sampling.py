"""Random numbers: the RNG ops (uniform_, normal_, bernoulli, random_, multinomial, randperm),
dropout and rrelu's noise, and the random ``*_like`` factories.

Every op draws from the counter-based generator in ``torch_zyx.record.random``: each takes a fresh
counter range, so results are reproducible under ``manual_seed`` and fuse with their users.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...record import overlap, random
from ...record.checks import check_never
from ...record.tensor import read, wrap, write
from ...record.transfer import zdtype
from ..core.factory import empty_like
from ..registry import aten, operands, register


def uniform_node(shape, device, generator=None) -> g.Node:
    seed, offset = random.draw(device.index, math.prod(shape), generator)
    return g.random(seed, offset, tuple(shape))


def normal_node(shape, device, dtype, generator=None) -> g.Node:
    u1 = g.cast(uniform_node(shape, device, generator),
                dtypes.float64 if dtype == dtypes.float64 else dtypes.float32)
    u2 = g.cast(uniform_node(shape, device, generator), u1.dtype)
    one = g.const(1.0, u1.dtype, u1.shape)
    radius = g.unary("sqrt", g.binary("mul", g.const(-2.0, u1.dtype, u1.shape),
                                      g.unary("log", g.binary("sub", one, u1))))
    angle = g.binary("mul", g.const(2 * math.pi, u1.dtype, u1.shape), u2)
    return g.binary("mul", radius, g.unary("cos", angle))


@register(aten.uniform_.default)
def uniform_(x, from_=0.0, to=1.0, generator=None):
    overlap.check_internal(x)  # (ATen's TensorIterator refuses an expanded tensor)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_:g} > "
                           f"to={to:g}")
    u = g.cast(uniform_node(x.shape, x._storage.device, generator),
               zdtype(x.dtype) if x.dtype.is_floating_point else dtypes.float32)
    span = g.const(to - from_, u.dtype, u.shape)
    write(x, g.binary("add", g.const(from_, u.dtype, u.shape), g.binary("mul", u, span)))
    return x


@register(aten.normal_.default)
def normal_(x, mean=0.0, std=1.0, generator=None):
    overlap.check_internal(x)  # (ATen's TensorIterator refuses an expanded tensor)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    z = normal_node(x.shape, x._storage.device, zdtype(x.dtype), generator)
    write(x, g.binary("add", g.const(mean, z.dtype, z.shape),
                      g.binary("mul", z, g.const(std, z.dtype, z.shape))))
    return x


@register(aten.bernoulli_.float)
def bernoulli_float_(x, p=0.5, generator=None):
    overlap.check_internal(x)  # (ATen's TensorIterator refuses an expanded tensor)
    u = uniform_node(x.shape, x._storage.device, generator)
    write(x, g.binary("lt", u, g.const(p, dtypes.float32, u.shape)))
    return x


@register(aten.bernoulli_.Tensor)
def bernoulli_tensor_(x, p, generator=None):
    overlap.check_internal(x)  # (ATen's TensorIterator refuses an expanded tensor)
    u = g.cast(uniform_node(x.shape, x._storage.device, generator), dtypes.float64)
    pn = g.cast(read(p), dtypes.float64)
    pn = g.expand(g.reshape(pn, (1,) * (x.dim() - p.dim()) + pn.shape), tuple(x.shape))
    write(x, g.binary("lt", u, pn))
    return x


@register(aten.bernoulli.default)
def bernoulli(p, generator=None):
    out = empty_like(p)
    return bernoulli_tensor_(out, p, generator)


# The functional forms AOTAutograd's functionalization records (dropout's mask, torch.normal on a
# tensor's shape in a compiled graph): a fresh tensor filled as the in-place form fills one.
@register(aten.bernoulli.p)
def bernoulli_p(x, p=0.5, generator=None):
    return bernoulli_float_(empty_like(x), p, generator)


@register(aten.normal_functional.default)
def normal_functional(x, mean=0.0, std=1.0, generator=None):
    return normal_(empty_like(x), mean, std, generator)


@register(getattr(aten.random_, "from"), aten.random_.to, aten.random_.default)
def random_(x, from_=0, to=None, generator=None):
    overlap.check_internal(x)  # (ATen's TensorIterator refuses an expanded tensor)
    if to is None:
        if x.dtype.is_floating_point:
            to = 2 ** torch.finfo(x.dtype).nmant + 1
        elif x.dtype == torch.bool:
            to = 2
        else:
            to = torch.iinfo(x.dtype).max
            to = to + 1 if from_ == 0 and x.dtype != torch.int64 else to
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    u = g.cast(uniform_node(x.shape, x._storage.device, generator), dtypes.float64)
    span = g.const(float(to - from_), dtypes.float64, u.shape)
    value = g.binary("add", g.unary("floor", g.binary("mul", u, span)),
                     g.const(float(from_), dtypes.float64, u.shape))
    write(x, value)
    return x


@register(aten.native_dropout.default)
def native_dropout(x, p, train):
    if not train or p == 0:
        return wrap(read(x), x._storage.device), wrap(g.const(True, dtypes.bool_, tuple(x.shape)),
                                                       x._storage.device)
    u = uniform_node(x.shape, x._storage.device)
    keep = g.binary("le", g.const(p, dtypes.float32, u.shape), u)
    xn = read(x)
    scale = g.const(1.0 / (1.0 - p) if p < 1 else 0.0, xn.dtype, xn.shape)
    out = g.where(keep, g.binary("mul", xn, scale), g.const(0, xn.dtype, xn.shape))
    device = x._storage.device
    return wrap(out, device), wrap(keep, device)


def _rrelu(x, noise, lower, upper, training, generator):
    """(result, noise): negative inputs scaled by a uniform draw in [lower, upper] (training)
    or by the mean slope; the noise holds each element's factor (1 for non-negative ones)."""
    xn = read(x)
    dt = xn.dtype
    shape = xn.shape
    negative = g.binary("lt", xn, g.const(0, dt, shape))
    if training:
        u = g.cast(uniform_node(shape, x._storage.device, generator), dt)
        slope = g.binary("add", g.const(lower, dt, shape),
                         g.binary("mul", u, g.const(upper - lower, dt, shape)))
        factor = g.where(negative, slope, g.const(1, dt, shape))
        return g.binary("mul", xn, factor), factor
    slope = g.const((lower + upper) / 2, dt, shape)
    return g.where(negative, g.binary("mul", xn, slope), xn), read(noise)


@register(aten.rrelu_with_noise.default)
def rrelu_with_noise(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    out, factor = _rrelu(x, noise, lower, upper, training, generator)
    if training:
        write(noise, g.cast(factor, zdtype(noise.dtype)))  # the schema's noise is mutated (b!)
    return wrap(out, x._storage.device)


@register(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise_functional(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    out, factor = _rrelu(x, noise, lower, upper, training, generator)
    dev = x._storage.device
    return wrap(out, dev), wrap(g.cast(factor, zdtype(noise.dtype)), dev)


@register(aten.multinomial.default)
def multinomial(probs, num_samples, replacement=False, generator=None):
    """Categorical draws per row of (unnormalized) ``probs``. With replacement: each draw is
    the number of cumulative-probability bounds below a uniform number (inverse CDF). Without:
    the Gumbel top-k trick (keys log(u)/p, k largest), one draw per category at most."""
    if probs.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not probs.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {probs.dtype}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n_cat = probs.shape[-1]
    if not replacement and num_samples > n_cat:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    dev = probs._storage.device
    p = g.cast(read(probs), dtypes.float64)
    rows = 1 if probs.dim() == 1 else probs.shape[0]
    p = g.reshape(p, (rows, n_cat))
    # ATen's checks of the values, raised at the next realization (record/checks.py).
    negative = g.binary("lt", p, g.const(0.0, dtypes.float64, p.shape))
    infinite = g.binary("eq", g.unary("abs", p), g.const(math.inf, dtypes.float64, p.shape))
    invalid = g.binary("or", g.unary("isnan", p), g.binary("or", negative, infinite))
    check_never(invalid, dev, RuntimeError, "probability tensor contains either `inf`, `nan` or element < 0",
                p)
    total = g.reduce("sum", p, (1,))
    check_never(g.binary("le", total, g.const(0.0, dtypes.float64, total.shape)), dev, RuntimeError,
                "invalid multinomial distribution (sum of probabilities <= 0)", p)
    if replacement:
        wide = (rows, n_cat, n_cat)
        upto = g.binary("le", g.expand(g.reshape(g.iota((n_cat,)), (1, 1, n_cat)), wide),
                        g.expand(g.reshape(g.iota((n_cat,)), (1, n_cat, 1)), wide))
        cdf = g.reduce("sum", g.where(upto, g.expand(g.reshape(p, (rows, 1, n_cat)), wide),
                                      g.const(0.0, dtypes.float64, wide)), (2,))
        cdf = g.binary("div", g.reshape(cdf, (rows, n_cat)), g.expand(total, (rows, n_cat)))
        u = g.cast(uniform_node((rows, num_samples), dev, generator), dtypes.float64)
        draws = (rows, num_samples, n_cat)
        below = g.binary("le", g.expand(g.reshape(cdf, (rows, 1, n_cat)), draws),
                         g.expand(g.reshape(u, (rows, num_samples, 1)), draws))
        # Zero-probability categories past the last positive one are never drawn.
        idx = g.reduce("sum", g.cast(below, dtypes.int64), (2,))
        idx = g.binary("min", g.reshape(idx, (rows, num_samples)), g.const(n_cat - 1, dtypes.int64,
                                                                          (rows, num_samples)))
    else:
        u = g.cast(uniform_node((rows, n_cat), dev, generator), dtypes.float64)
        keys = g.binary("div", g.unary("log", u), p)  # -inf where p = 0: never chosen first
        key_t = wrap(keys, dev)
        idx = read(torch.topk(key_t, num_samples, dim=-1).indices)
    out_shape = (num_samples,) if probs.dim() == 1 else (rows, num_samples)
    return wrap(g.reshape(idx, out_shape), dev)


@register(aten.randperm.generator_out, aten.randperm.out)
def randperm_out(n, generator=None, *, out):
    # The rank of each of n random keys is a uniform random permutation: rank i = how many keys
    # sort before key i (ties broken by position), one comparison-counting reduce.
    u = uniform_node((n,), out._storage.device, generator)
    col, row = g.expand(g.reshape(u, (1, n)), (n, n)), g.expand(g.reshape(u, (n, 1)), (n, n))
    pos = g.iota((n,))
    before = g.binary("lt", g.expand(g.reshape(pos, (1, n)), (n, n)),
                      g.expand(g.reshape(pos, (n, 1)), (n, n)))
    less = g.binary("or", g.binary("lt", col, row), g.binary("and", g.binary("eq", col, row), before))
    rank = g.reduce("sum", g.cast(less, dtypes.int64), (1,)) if n else g.const(0, dtypes.int64, (0, 1))
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    write(out, g.reshape(rank, (n,)))
    return out


@register(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    # grad * mask * scale with PyTorch's promotion (an integer or bool grad gives a float result).
    (gn, sn), _compute, result, dev = operands((grad, scale))
    m = g.cast(read(mask), gn.dtype)
    out = g.binary("mul", g.binary("mul", gn, m), g.broadcast_to(sn, gn.shape))
    return wrap(g.cast(out, zdtype(result)), dev)


@register(aten.rand_like.default, aten.rand_like.generator)
def rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, generator=None):
    out = empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
    return uniform_(out, generator=generator)


@register(aten.randn_like.default, aten.randn_like.generator)
def randn_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, generator=None):
    out = empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
    return normal_(out, generator=generator)


@register(aten.randint_like.default, aten.randint_like.low_dtype)
def randint_like(x, low, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    if high is None:  # randint_like(x, high)
        low, high = 0, low
    return random_(empty_like(x, dtype=dtype, device=device, memory_format=memory_format), low, high)
