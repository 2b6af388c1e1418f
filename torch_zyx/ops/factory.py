"""Creation, copies and random numbers: empty/fill/copy/_to_copy/arange/eye, RNG ops, item.

Random ops draw from the counter-based generator in ``torch_zyx.random``: each op takes a
fresh counter range, so results are reproducible under ``manual_seed`` and fuse with users.
"""

from __future__ import annotations

import math

import torch

from .. import dtypes, random
from ..lazy import graph as g
from ..tensor import Storage, ZyxTensor, from_cpu, read, restride, to_cpu, wrap, write, zdtype
from ..tensor import meta as meta_of
from .registry import aten, device_of, operands, register


def _device(index):
    from ..realize import devices

    all_devices = devices()
    index = 0 if index is None else index
    if index >= len(all_devices):
        raise RuntimeError(f"zyx: invalid device index {index} ({len(all_devices)} zyx devices)")
    return all_devices[index]


def empty_storage(shape, strides, dtype: torch.dtype, device_index) -> ZyxTensor:
    """A tensor with fresh (zero-valued) storage large enough for ``shape``/``strides``."""
    shape = tuple(int(s) for s in shape)
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
    storage = Storage(g.const(0, zdtype(dtype), (extent,)), _device(device_index))
    return ZyxTensor(storage, shape, strides, 0)


def _contiguous_for(shape, memory_format) -> tuple[int, ...]:
    if memory_format == torch.channels_last and len(shape) == 4:
        _, c, h, w = shape
        return (h * w * c, 1, w * c, c)
    return g.contiguous_strides(tuple(shape))


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    index = device.index if isinstance(device, torch.device) else None
    return empty_storage(size, _contiguous_for(size, memory_format), dtype, index)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    index = device.index if isinstance(device, torch.device) else None
    return empty_storage(size, tuple(stride), dtype, index)


_KEEPS_CONTIGUOUS = (None, torch.preserve_format, torch.contiguous_format)


@register(aten.empty_like.default)
def empty_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = device.index if isinstance(device, torch.device) and device.type == "zyx" else x.device.index
    shape, strides, _, _ = meta_of(x)
    if strides == g.contiguous_strides(shape) and memory_format in _KEEPS_CONTIGUOUS:
        # A contiguous input stays contiguous (the common case, without the meta round trip).
        return empty_storage(shape, strides, dtype or x.dtype, index)
    meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    meta = torch.empty_like(meta, dtype=dtype, memory_format=memory_format or torch.preserve_format)
    return empty_storage(meta.shape, meta.stride(), meta.dtype, index)


@register(aten.empty_strided.default)
def empty_strided_lowering(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return empty_strided(size, stride, dtype, layout, device, pin_memory)


@register(aten.empty.memory_format)
def empty_lowering(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return empty_memory_format(size, dtype, layout, device, pin_memory, memory_format)


@register(aten.fill_.Scalar, aten.fill_.Tensor)
def fill_(x, value):
    if isinstance(value, ZyxTensor):
        if value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.dim()} dimensions.")
        node = read(value)
    elif isinstance(value, torch.Tensor):
        node = g.const(value.item(), zdtype(x.dtype))
    else:
        node = g.const(value, zdtype(x.dtype))
    write(x, node)
    return x


@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    out = empty_like(x)
    return fill_(out, value)


@register(aten.zero_.default)
def zero_(x):
    write(x, g.const(0, zdtype(x.dtype)))
    return x


def _source_node(src, device):
    if isinstance(src, ZyxTensor):
        if src._storage.device is not device:
            # Cross-device: through the host (devices only share host memory).
            return from_cpu(to_cpu(src), device)
        return read(src)
    return from_cpu(src, device)


@register(aten.copy_.default)
def copy_(dst, src, non_blocking=False):
    if not isinstance(dst, ZyxTensor):
        dst.copy_(to_cpu(src))
        return dst
    node = _source_node(src, dst._storage.device)
    try:
        torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape))
    except RuntimeError:
        raise RuntimeError(f"The size of tensor a ({dst.shape[-1] if dst.dim() else 1}) "
                           f"must match the size of tensor b ({src.shape[-1] if src.dim() else 1}) "
                           "at non-singleton dimension") from None
    write(dst, node)
    return dst


@register(aten.copy.default)
def copy(dst, src, non_blocking=False):
    """Functional copy: ``src`` broadcast to ``dst``'s shape in ``dst``'s dtype (a new tensor)."""
    node = _source_node(src, dst._storage.device)
    shape = tuple(torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape)))
    if shape != tuple(dst.shape):
        raise RuntimeError(f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
                           f"{list(shape)}")
    return wrap(g.cast(g.broadcast_to(node, shape), zdtype(dst.dtype)), dst._storage.device)


@register(aten._copy_from.default)
def _copy_from(src, dst, non_blocking=False):
    return copy_(dst, src)


@register(aten._to_copy.default)
def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    dtype = dtype or x.dtype
    if device is not None and torch.device(device).type == "cpu":
        return to_cpu(x).to(dtype)
    target = _device(torch.device(device).index) if device is not None else x._storage.device
    node = _source_node(x, target)
    return wrap(g.cast(node, zdtype(dtype)), target)


@register(torch.ops.prims.device_put.default)
def device_put(x, device, non_blocking=False):
    """A copy of ``x`` on ``device`` (PyTorch's reference decompositions, e.g. of shrink and
    padding backwards, move their scalar operands with it)."""
    return _to_copy(x, device=device, non_blocking=non_blocking)


@register(aten.clone.default)
def clone(x, memory_format=None):
    meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    meta = meta.clone(memory_format=memory_format or torch.preserve_format)
    node = read(x)
    if tuple(meta.stride()) == g.contiguous_strides(tuple(x.shape)):
        return wrap(node, x._storage.device)
    out = empty_storage(meta.shape, meta.stride(), x.dtype, x.device.index)
    write(out, node)
    return out


@register(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def lift_fresh(x):
    return x if isinstance(x, ZyxTensor) else wrap(from_cpu(x, device_of(x) or _device(0)), _device(0))


@register(aten._local_scalar_dense.default)
def local_scalar_dense(x):
    return to_cpu(x).item()


@register(aten.arange.start_step)
def arange(start, end=None, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    cpu_meta = torch.arange(start, end, step, dtype=dtype, device="meta")
    n = cpu_meta.numel()
    out_dtype = zdtype(cpu_meta.dtype)
    index = torch.device(device).index if device is not None else None
    compute = dtypes.float64 if out_dtype.is_float else dtypes.int64
    values = g.binary("add", g.const(start, compute, (n,)),
                      g.binary("mul", g.cast(g.iota((n,)), compute), g.const(step, compute, (n,))))
    return wrap(g.cast(values, out_dtype), _device(index))


@register(aten.arange.start_out)
def arange_out(start, end, step=1, out=None):
    result = arange(start, end, step, dtype=out.dtype, device=out.device)
    out.resize_(result.shape)
    write(out, read(result))
    return out


def _end_point(value, dtype: torch.dtype) -> g.Node:
    """A linspace end (Python scalar or 0-d tensor) as a float64 0-d node; integer results
    convert the ends to the integer type first, as ATen does."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("linspace only supports 0-dimensional start and end tensors, but got "
                               f"start with {value.dim()} dimension(s) and end with 0 dimension(s).")
        node = read(value) if isinstance(value, ZyxTensor) else g.const(value.item(), zdtype(value.dtype))
    else:
        node = g.const(value, dtypes.float64 if isinstance(value, float) else dtypes.int64)
    if not dtype.is_floating_point and dtype != torch.bool:
        node = g.cast(node, dtypes.int64)
    return g.cast(node, dtypes.float64)


@register(aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
          aten.linspace.Scalar_Tensor)
def linspace(start, end, steps, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    index = torch.device(device).index if device is not None else None
    f64 = dtypes.float64
    first, last = _end_point(start, dtype), _end_point(end, dtype)
    shape = (steps,)
    first, last = g.broadcast_to(first, shape), g.broadcast_to(last, shape)
    step = g.binary("div", g.binary("sub", last, first), g.const(max(steps - 1, 1), f64, shape))
    i = g.cast(g.iota(shape), f64)
    # PyTorch fills the first half from start and the second half from end (symmetry).
    low = g.binary("add", first, g.binary("mul", i, step))
    high = g.binary("sub", last, g.binary("mul", g.binary("sub", g.const(steps - 1, f64, shape), i), step))
    if steps <= 1:
        values = low  # just ``start``
    else:
        values = g.where(g.binary("lt", g.iota(shape), g.const(steps // 2, dtypes.int64, shape)), low, high)
    return wrap(g.cast(values, zdtype(dtype)), _device(index))


@register(aten.linspace.out)
def linspace_out(start, end, steps, out=None):
    result = linspace(start, end, steps, dtype=out.dtype, device=out.device)
    out.resize_(result.shape)
    write(out, read(result))
    return out


@register(aten.eye.default, aten.eye.m)
def eye(n, m=None, dtype=None, layout=None, device=None, pin_memory=None):
    m = n if m is None else m
    for name, size in (("n", n), ("m", m)):
        if size < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {size}")
    dtype = dtype or torch.get_default_dtype()
    index = torch.device(device).index if device is not None else None
    rows = g.expand(g.reshape(g.iota((n,)), (n, 1)), (n, m))
    cols = g.expand(g.reshape(g.iota((m,)), (1, m)), (n, m))
    return wrap(g.cast(g.binary("eq", rows, cols), zdtype(dtype)), _device(index))


@register(aten.eye.out, aten.eye.m_out)
def eye_out(n, m=None, out=None):
    result = eye(n, m, dtype=out.dtype, device=out.device)
    out.resize_(result.shape)
    write(out, read(result))
    return out


# ------------------------------------------------------------------------------- triangle indices
# tril_indices / triu_indices list the (row, col) pairs of a triangle in row-major order. Entry k
# is found in closed form: the rows of a triangle's sloped part grow (tril) or shrink (triu) by
# one element per row, so the row holding entry k solves a quadratic (float64 sqrt, then one
# exact int64 correction each way); its full-width part is a plain k // col.


def _i64(value, shape) -> g.Node:
    return g.const(value, dtypes.int64, shape)


def _sloped_row(k: g.Node, first: int, step: int) -> tuple[g.Node, g.Node]:
    """(t, k - S(t)) for the row t holding entry k of rows of ``first``, ``first + step``, ...
    elements (S(t): entries before row t, t * first + step * t (t - 1) / 2)."""
    shape = k.shape

    def before(t):
        tri = g.binary("idiv", g.binary("mul", t, g.binary("sub", t, _i64(1, shape))), _i64(2, shape))
        return g.binary("add", g.binary("mul", t, _i64(first, shape)),
                        g.binary("mul", tri, _i64(step, shape)))

    # S(t) = k: step t^2 + b t - 2k = 0 with b = 2 first - step; the root wanted is the first
    # one reached as t grows from 0, (sqrt(b^2 + 8 step k) - b) / (2 step) for both signs of step.
    b = float(2 * first - step)
    kf = g.cast(k, dtypes.float64)
    disc = g.binary("add", g.const(b * b, dtypes.float64, shape),
                    g.binary("mul", kf, g.const(8.0 * step, dtypes.float64, shape)))
    root = g.unary("sqrt", g.binary("max", disc, g.const(0.0, dtypes.float64, shape)))
    t = g.binary("div", g.binary("sub", root, g.const(b, dtypes.float64, shape)),
                 g.const(2.0 * step, dtypes.float64, shape))
    t = g.cast(g.unary("floor", t), dtypes.int64)
    one = _i64(1, shape)
    t = g.where(g.binary("lt", k, before(t)), g.binary("sub", t, one), t)
    t_next = g.binary("add", t, one)
    t = g.where(g.binary("le", before(t_next), k), t_next, t)
    return t, g.binary("sub", k, before(t))


def _triangle(row: int, col: int, offset: int, lower: bool, dtype, device):
    dtype = dtype or torch.int64
    if dtype not in (torch.int32, torch.int64):
        name = "tril_indices" if lower else "triu_indices"
        kind = {torch.float32: "Float", torch.float64: "Double", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16"}
        raise NotImplementedError(f"\"{name}\" not implemented for '{kind.get(dtype, str(dtype))}'")
    counts = [min(max(r + offset + 1, 0), col) if lower else col - min(max(r + offset, 0), col)
              for r in range(row)]
    n = sum(counts)
    index = torch.device(device).index if device is not None else None
    k = g.iota((n,))
    if lower:
        # Empty rows, then sloped rows (count r + offset + 1 < col), then full rows.
        start = min(max(-offset, 0), row)
        sloped = min(max(col - offset - 1 - start, 0), row - start)
        first = start + offset + 1
        split = sum(counts[:start + sloped])
        t, c_slope = _sloped_row(k, first, 1)
        r_slope = g.binary("add", t, _i64(start, k.shape))
        rest = g.binary("sub", k, _i64(split, k.shape))
        col_n = _i64(max(col, 1), k.shape)
        r_full = g.binary("add", g.binary("idiv", rest, col_n), _i64(start + sloped, k.shape))
        c_full = g.binary("mod", rest, col_n)
        in_slope = g.binary("lt", k, _i64(split, k.shape))
    else:
        # Full rows (r + offset <= 0), then sloped rows shrinking by one per row.
        full = min(max(1 - offset, 0), row) if col > 0 else 0
        first = col - (full + offset)
        split = full * col
        col_n = _i64(max(col, 1), k.shape)
        r_full, c_full = g.binary("idiv", k, col_n), g.binary("mod", k, col_n)
        t, within = _sloped_row(g.binary("sub", k, _i64(split, k.shape)), first, -1)
        r_slope = g.binary("add", t, _i64(full, k.shape))
        c_slope = g.binary("add", within, g.binary("add", r_slope, _i64(offset, k.shape)))
        in_slope = g.binary("le", _i64(split, k.shape), k)
    rows = g.where(in_slope, r_slope, r_full)
    cols = g.where(in_slope, c_slope, c_full)
    both = g.binary("add", g.pad(g.reshape(rows, (1, n)), ((0, 1), (0, 0))),
                    g.pad(g.reshape(cols, (1, n)), ((1, 0), (0, 0))))
    return wrap(g.cast(both, zdtype(dtype)), _device(index))


def tril_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle(row, col, offset, True, dtype, device)


def triu_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle(row, col, offset, False, dtype, device)


# ------------------------------------------------------------------------------- random


def uniform_node(shape, device) -> g.Node:
    seed, offset = random.take(device.index, math.prod(shape))
    return g.random(seed, offset, tuple(shape))


def normal_node(shape, device, dtype) -> g.Node:
    u1 = g.cast(uniform_node(shape, device), dtypes.float64 if dtype == dtypes.float64 else dtypes.float32)
    u2 = g.cast(uniform_node(shape, device), u1.dtype)
    one = g.const(1.0, u1.dtype, u1.shape)
    radius = g.unary("sqrt", g.binary("mul", g.const(-2.0, u1.dtype, u1.shape),
                                      g.unary("log", g.binary("sub", one, u1))))
    angle = g.binary("mul", g.const(2 * math.pi, u1.dtype, u1.shape), u2)
    return g.binary("mul", radius, g.unary("cos", angle))


@register(aten.uniform_.default)
def uniform_(x, from_=0.0, to=1.0, generator=None):
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_:g} > "
                           f"to={to:g}")
    u = g.cast(uniform_node(x.shape, x._storage.device), zdtype(x.dtype) if x.dtype.is_floating_point
               else dtypes.float32)
    span = g.const(to - from_, u.dtype, u.shape)
    write(x, g.binary("add", g.const(from_, u.dtype, u.shape), g.binary("mul", u, span)))
    return x


@register(aten.normal_.default)
def normal_(x, mean=0.0, std=1.0, generator=None):
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    z = normal_node(x.shape, x._storage.device, zdtype(x.dtype))
    write(x, g.binary("add", g.const(mean, z.dtype, z.shape),
                      g.binary("mul", z, g.const(std, z.dtype, z.shape))))
    return x


@register(aten.bernoulli_.float)
def bernoulli_float_(x, p=0.5, generator=None):
    u = uniform_node(x.shape, x._storage.device)
    write(x, g.binary("lt", u, g.const(p, dtypes.float32, u.shape)))
    return x


@register(aten.bernoulli_.Tensor)
def bernoulli_tensor_(x, p, generator=None):
    u = g.cast(uniform_node(x.shape, x._storage.device), dtypes.float64)
    pn = g.cast(read(p), dtypes.float64)
    pn = g.expand(g.reshape(pn, (1,) * (x.dim() - p.dim()) + pn.shape), tuple(x.shape))
    write(x, g.binary("lt", u, pn))
    return x


@register(aten.bernoulli.default)
def bernoulli(p, generator=None):
    out = empty_like(p)
    return bernoulli_tensor_(out, p)


@register(getattr(aten.random_, "from"), aten.random_.to, aten.random_.default)
def random_(x, from_=0, to=None, generator=None):
    if to is None:
        if x.dtype.is_floating_point:
            to = 2 ** torch.finfo(x.dtype).nmant + 1
        elif x.dtype == torch.bool:
            to = 2
        else:
            to = torch.iinfo(x.dtype).max
            to = to + 1 if from_ == 0 and x.dtype != torch.int64 else to
    u = g.cast(uniform_node(x.shape, x._storage.device), dtypes.float64)
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


def _rrelu(x, noise, lower, upper, training):
    """(result, noise): negative inputs scaled by a uniform draw in [lower, upper] (training)
    or by the mean slope; the noise holds each element's factor (1 for non-negative ones)."""
    xn = read(x)
    dt = xn.dtype
    shape = xn.shape
    negative = g.binary("lt", xn, g.const(0, dt, shape))
    if training:
        u = g.cast(uniform_node(shape, x._storage.device), dt)
        slope = g.binary("add", g.const(lower, dt, shape),
                         g.binary("mul", u, g.const(upper - lower, dt, shape)))
        factor = g.where(negative, slope, g.const(1, dt, shape))
        return g.binary("mul", xn, factor), factor
    slope = g.const((lower + upper) / 2, dt, shape)
    return g.where(negative, g.binary("mul", xn, slope), xn), read(noise)


@register(aten.rrelu_with_noise.default)
def rrelu_with_noise(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    out, factor = _rrelu(x, noise, lower, upper, training)
    if training:
        write(noise, g.cast(factor, zdtype(noise.dtype)))  # the schema's noise is mutated (b!)
    return wrap(out, x._storage.device)


@register(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise_functional(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    out, factor = _rrelu(x, noise, lower, upper, training)
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
    if replacement:
        total = g.reduce("sum", p, (1,))
        wide = (rows, n_cat, n_cat)
        upto = g.binary("le", g.expand(g.reshape(g.iota((n_cat,)), (1, 1, n_cat)), wide),
                        g.expand(g.reshape(g.iota((n_cat,)), (1, n_cat, 1)), wide))
        cdf = g.reduce("sum", g.where(upto, g.expand(g.reshape(p, (rows, 1, n_cat)), wide),
                                      g.const(0.0, dtypes.float64, wide)), (2,))
        cdf = g.binary("div", g.reshape(cdf, (rows, n_cat)), g.expand(total, (rows, n_cat)))
        u = g.cast(uniform_node((rows, num_samples), dev), dtypes.float64)
        draws = (rows, num_samples, n_cat)
        below = g.binary("le", g.expand(g.reshape(cdf, (rows, 1, n_cat)), draws),
                         g.expand(g.reshape(u, (rows, num_samples, 1)), draws))
        # Zero-probability categories past the last positive one are never drawn.
        idx = g.reduce("sum", g.cast(below, dtypes.int64), (2,))
        idx = g.binary("min", g.reshape(idx, (rows, num_samples)), g.const(n_cat - 1, dtypes.int64,
                                                                          (rows, num_samples)))
    else:
        u = g.cast(uniform_node((rows, n_cat), dev), dtypes.float64)
        keys = g.binary("div", g.unary("log", u), p)  # -inf where p = 0: never chosen first
        key_t = wrap(keys, dev)
        idx = read(torch.topk(key_t, num_samples, dim=-1).indices)
    out_shape = (num_samples,) if probs.dim() == 1 else (rows, num_samples)
    return wrap(g.reshape(idx, out_shape), dev)


@register(aten.randperm.generator_out, aten.randperm.out)
def randperm_out(n, generator=None, *, out):
    # The rank of each of n random keys is a uniform random permutation: rank i = how many keys
    # sort before key i (ties broken by position), one comparison-counting reduce.
    u = uniform_node((n,), out._storage.device)
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


# ------------------------------------------------------------------------------- storage ops


@register(aten.resize_.default)
def resize_(x, size, memory_format=None):
    size = tuple(int(s) for s in size)
    storage = x._storage
    strides = _contiguous_for(size, memory_format)
    needed = x.storage_offset() + (1 + sum((s - 1) * st for s, st in zip(size, strides)) if all(size) else 0)
    if needed > storage.numel:
        # Grow: the old contents stay in front, new elements are zero (PyTorch leaves them undefined).
        storage.value = g.pad(storage.value, ((0, needed - storage.numel),))
        storage.numel = needed
    restride(x, storage, size, strides, x.storage_offset())
    return x


@register(aten.resize_as_.default)
def resize_as_(x, other, memory_format=None):
    return resize_(x, tuple(other.shape), memory_format)


@register(aten.resize.default)
def resize(x, size, memory_format=None):
    """Functional resize: a new tensor of ``size`` holding ``x``'s elements in order (new ones 0)."""
    size = tuple(int(s) for s in size)
    n = x.numel()
    want = math.prod(size)
    flat = g.reshape(read(x), (n,))
    flat = g.pad(flat, ((0, want - n),)) if want > n else g.shrink(flat, ((0, want),))
    return wrap(g.reshape(flat, size), x._storage.device)


@register(aten.as_strided_.default)
def as_strided_(x, size, stride, storage_offset=None):
    offset = x.storage_offset() if storage_offset is None else storage_offset
    restride(x, x._storage, tuple(size), tuple(stride), offset)
    return x


@register(aten.set_.source_Tensor)
def set_tensor_(x, source):
    restride(x, source._storage, tuple(source.shape), tuple(source.stride()), source.storage_offset())
    return x


@register(aten.set_.default)
def set_empty_(x):
    storage = Storage(g.const(0, zdtype(x.dtype), (0,)), x._storage.device)
    restride(x, storage, (0,), (1,), 0)
    return x


@register(aten.full_like.default)
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    out = empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
    return fill_(out, fill_value)


@register(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = torch.bool if isinstance(fill_value, bool) else (
            torch.int64 if isinstance(fill_value, int) else torch.get_default_dtype())
    out = empty_memory_format(size, dtype=dtype, device=device)
    return fill_(out, fill_value)


# ------------------------------------------------------------------------------- random *_like


@register(aten.rand_like.default, aten.rand_like.generator)
def rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, generator=None):
    return uniform_(empty_like(x, dtype=dtype, device=device, memory_format=memory_format))


@register(aten.randn_like.default, aten.randn_like.generator)
def randn_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, generator=None):
    return normal_(empty_like(x, dtype=dtype, device=device, memory_format=memory_format))


@register(aten.randint_like.default, aten.randint_like.low_dtype)
def randint_like(x, low, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    if high is None:  # randint_like(x, high)
        low, high = 0, low
    return random_(empty_like(x, dtype=dtype, device=device, memory_format=memory_format), low, high)
