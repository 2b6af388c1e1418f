"""Pooling lowerings (max, average, adaptive, fractional; 1d-3d; forward and backward), zyx style.

Fixed-size pools view the padded input as sliding windows (conv.windows: one strided view, no
copy) and reduce over the kernel axes; their backward scatter-adds per window position
(conv.unwindow). Adaptive and fractional pools have windows whose starts are not an affine
function of the output position, so no strided view exists: each spatial axis is read
separately (axis by axis) by a gather of the positions "window start + kernel offset", giving
the same (lead..., *out, *kernel) window tensor. Their backward adds the gradient at the flat
input positions the indices name (graph.scatter). Half types accumulate in float32.
"""

from __future__ import annotations

import math

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..math.scan import lowest
from ..registry import aten, register
from .conv import accumulate, ntuple, unwindow, windows

# ------------------------------------------------------------------------------- fixed windows


def _sizes(x) -> str:
    return str(list(x.shape))


def _check_pool_window(kernel, stride, padding, dilation) -> None:
    """ATen's checks of a window before its output size is computed (pooling_output_shape)."""
    for k, st, p, d in zip(kernel, stride, padding, dilation):
        if st == 0:
            raise RuntimeError("stride should not be zero")
        if p < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
        if p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")


def _check_pool_input(x, kernel, stride, dilation, out, nsp: int) -> None:
    """ATen's pool2d/pool3d shape checks: positive windows, the input's dimensions, and an
    output of at least one element per axis."""
    names = ("kT", "kH", "kW")[-nsp:]
    if any(k <= 0 for k in kernel):
        raise RuntimeError("kernel size should be greater than zero, but got " +
                           " ".join(f"{n}: {k}" for n, k in zip(names, kernel)))
    if any(st <= 0 for st in stride):
        raise RuntimeError("stride should be greater than zero, but got " +
                           " ".join(f"d{n[1]}: {st}" for n, st in zip(names, stride)))
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero, but got " +
                           " ".join(f"dilation{n[1]}: {d}" for n, d in zip(names, dilation)))
    shape = x.shape
    if nsp == 2:
        # A batch of 0 is allowed (4D), an empty channel or plane is not.
        if x.dim() not in (3, 4) or 0 in shape[x.dim() - 3:]:
            raise RuntimeError("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
                               f"input, but got:{_sizes(x)}")
    else:
        if x.dim() not in (4, 5):
            raise RuntimeError(f"Expected 4D or 5D tensor for input, but got: {_sizes(x)}")
        for i in range(1 if x.dim() == 5 else 0, x.dim()):
            if shape[i] <= 0:
                raise RuntimeError("Expected input's non-batch dimensions to have positive length, but "
                                   f"input has a shape of {_sizes(x)} and non-batch dimension {shape[i]} "
                                   "has length zero!")
    if any(o < 1 for o in out):
        planes = shape[-nsp - 1]
        given = "x".join(map(str, (planes, *shape[-nsp:])))
        calculated = "x".join(map(str, (planes, *out)))
        raise RuntimeError(f"Given input size: ({given}). Calculated output size: ({calculated}). "
                           "Output size is too small")


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nsp=2):
    kernel = ntuple(kernel_size, nsp)
    stride = ntuple(stride, nsp) if stride else kernel
    padding, dilation = ntuple(padding, nsp), ntuple(dilation, nsp)
    _check_pool_window(kernel, stride, padding, dilation)
    size = tuple(x.shape[-nsp:])
    out = []
    for s, k, st, p, d in zip(size, kernel, stride, padding, dilation):
        span = s + 2 * p - d * (k - 1) - 1
        o = (span + (st - 1 if ceil_mode else 0)) // st + 1
        if ceil_mode and (o - 1) * st >= s + p:
            o -= 1  # the last window must start inside the input or its left padding
        out.append(o)
    _check_pool_input(x, kernel, stride, dilation, out, nsp)
    # Right padding that makes exactly ``out`` windows (ceil mode can need more than ``padding``).
    after = tuple((o - 1) * st + d * (k - 1) + 1 - s - p
                  for o, st, d, k, s, p in zip(out, stride, dilation, kernel, size, padding))
    return kernel, stride, padding, dilation, tuple(out), after


def _window_positions(size, out, kernel, stride, padding, dilation) -> Node:
    """Flat input-plane position (int64) read by each (window, kernel offset): (*out, *kernel)."""
    nsp = len(kernel)
    shape = tuple(out) + tuple(kernel)
    inner = g.contiguous_strides(tuple(size))
    total = None
    for i in range(nsp):
        o_axis = tuple(out[i] if j == i else 1 for j in range(nsp)) + (1,) * nsp
        k_axis = (1,) * nsp + tuple(kernel[i] if j == i else 1 for j in range(nsp))
        o = g.reshape(g.iota((out[i],)), o_axis)
        k = g.reshape(g.iota((kernel[i],)), k_axis)
        o = g.expand(g.binary("mul", o, g.const(stride[i] * inner[i], dtypes.int64, o.shape)), shape)
        k = g.expand(g.binary("mul", k, g.const(dilation[i] * inner[i], dtypes.int64, k.shape)), shape)
        term = g.binary("add", g.binary("add", o, k), g.const(-padding[i] * inner[i], dtypes.int64, shape))
        total = term if total is None else g.binary("add", total, term)
    return total




def _argmax_of_windows(win: Node, best: Node, valid: Node, pos: Node, plane: int, nsp: int) -> Node:
    """Per window, the smallest flat input position holding its maximum (NaN counts as maximum).
    ``win``/``valid``/``pos`` are (lead..., *out, *kernel); ``best`` keeps the kernel axes as 1."""
    axes = tuple(range(len(win.shape) - nsp, len(win.shape)))
    hit = g.binary("eq", win, g.expand(best, win.shape))
    if win.dtype.is_float:
        hit = g.binary("or", hit, g.unary("isnan", win))
    hit = g.binary("and", hit, valid)
    big = g.const(plane, dtypes.int64, win.shape)
    return g.reduce("min", g.where(hit, pos, big), axes)


def _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, nsp):
    kernel, stride, padding, dilation, out, after = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                   ceil_mode, nsp)
    node = read(x)
    lead = node.shape[:-nsp]
    win = windows(node, kernel, stride, dilation, padding, after, fill=lowest(node.dtype))
    axes = tuple(range(len(lead) + nsp, len(lead) + 2 * nsp))
    best = g.reduce("max", win, axes)
    valid = windows(g.const(True, dtypes.bool_, node.shape), kernel, stride, dilation, padding, after)
    pos = g.expand(g.reshape(_window_positions(node.shape[-nsp:], out, kernel, stride, padding, dilation),
                             (1,) * len(lead) + tuple(out) + kernel), win.shape)
    index = _argmax_of_windows(win, best, valid, pos, math.prod(node.shape[-nsp:]), nsp)
    dev = x._storage.device
    return wrap(g.reshape(best, lead + out), dev), wrap(g.reshape(index, lead + out), dev)


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 2)


@register(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 3)


def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices, nsp):
    kernel, stride, padding, dilation, out, _after = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                    ceil_mode, nsp)
    gy, idx = read(grad), read(indices)
    lead = gy.shape[:-nsp]
    shape = lead + out + kernel
    pos = g.expand(g.reshape(_window_positions(x.shape[-nsp:], out, kernel, stride, padding, dilation),
                             (1,) * len(lead) + out + kernel), shape)
    tail = (1,) * len(kernel)
    hit = g.binary("eq", g.expand(g.reshape(idx, idx.shape + tail), shape), pos)
    gb = g.expand(g.reshape(accumulate(gy), gy.shape + tail), shape)
    c = g.where(hit, gb, g.const(0, gb.dtype, shape))
    node = unwindow(c, kernel, stride, dilation, padding, tuple(x.shape[-nsp:]))
    return wrap(g.cast(node, zdtype(grad.dtype)), grad._storage.device)


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices, 2)


@register(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices, 3)


def _avg_divisor(size, out, kernel, stride, padding, count_include_pad) -> Node:
    """Per window: how many elements the average divides by (PyTorch's rule), as int64 (*out)."""
    nsp = len(kernel)
    total = None
    for i in range(nsp):
        o = g.iota((out[i],))
        start = g.binary("sub", g.binary("mul", o, g.const(stride[i], dtypes.int64, o.shape)),
                         g.const(padding[i], dtypes.int64, o.shape))
        end = g.binary("min", g.binary("add", start, g.const(kernel[i], dtypes.int64, o.shape)),
                       g.const(size[i] + padding[i], dtypes.int64, o.shape))
        if not count_include_pad:
            start = g.binary("max", start, g.const(0, dtypes.int64, o.shape))
            end = g.binary("min", end, g.const(size[i], dtypes.int64, o.shape))
        count = g.reshape(g.binary("sub", end, start), tuple(out[i] if j == i else 1 for j in range(nsp)))
        count = g.expand(count, tuple(out))
        total = count if total is None else g.binary("mul", total, count)
    return total


def _avg_scale(x, out, kernel, stride, padding, count_include_pad, divisor_override, dtype, lead) -> Node:
    shape = lead + tuple(out)
    if divisor_override:
        return g.const(divisor_override, dtype, shape)
    nsp = len(kernel)
    div = g.cast(_avg_divisor(tuple(x.shape[-nsp:]), out, kernel, stride, padding, count_include_pad), dtype)
    return g.expand(g.reshape(div, (1,) * len(lead) + tuple(out)), shape)


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp):
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    kernel, stride, padding, dilation, out, after = _pool_geometry(x, kernel_size, stride, padding, 1,
                                                                   ceil_mode, nsp)
    node = accumulate(read(x))
    lead = node.shape[:-nsp]
    win = windows(node, kernel, stride, dilation, padding, after)
    total = g.reshape(g.reduce("sum", win, tuple(range(len(lead) + nsp, len(lead) + 2 * nsp))), lead + out)
    scale = _avg_scale(x, out, kernel, stride, padding, count_include_pad, divisor_override, node.dtype, lead)
    # Integer inputs divide as integers (truncating, like ATen's scalar_t arithmetic).
    return wrap(g.cast(g.binary("div", total, scale), zdtype(x.dtype)), x._storage.device)


@register(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


@register(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                       nsp):
    kernel, stride, padding, dilation, out, _after = _pool_geometry(x, kernel_size, stride, padding, 1,
                                                                    ceil_mode, nsp)
    gy = accumulate(read(grad))
    lead = gy.shape[:-nsp]
    scale = _avg_scale(x, out, kernel, stride, padding, count_include_pad, divisor_override, gy.dtype, lead)
    share = g.binary("div", gy, scale)
    tail = (1,) * len(kernel)
    c = g.expand(g.reshape(share, share.shape + tail), share.shape + kernel)
    node = unwindow(c, kernel, stride, dilation, padding, tuple(x.shape[-nsp:]))
    return wrap(g.cast(node, zdtype(grad.dtype)), grad._storage.device)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 2)


@register(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 3)


# ------------------------------------------------------------------------------- gathered windows


def _adaptive_bins(n_in: int, n_out: int) -> tuple[Node, Node, int]:
    """Adaptive pooling's windows along one axis: start (n_out,) and length (n_out,) as int64
    (start = floor(o*in/out), end = ceil((o+1)*in/out)) and the longest window length."""
    o = g.iota((n_out,))

    def scaled(v: Node, bias: int) -> Node:
        num = g.binary("add", g.binary("mul", v, g.const(n_in, dtypes.int64, v.shape)),
                       g.const(bias, dtypes.int64, v.shape))
        return g.binary("idiv", num, g.const(n_out, dtypes.int64, v.shape))

    start = scaled(o, 0)
    end = scaled(g.binary("add", o, g.const(1, dtypes.int64, o.shape)), n_out - 1)
    longest = max(-(-((i + 1) * n_in) // n_out) - (i * n_in) // n_out for i in range(n_out)) if n_out else 0
    return start, g.binary("sub", end, start), longest


def _gather_windows(x: Node, starts: list[Node], kernel: list[int], fill) -> Node:
    """Windows of ``x`` (lead..., *spatial) whose starts come from tables: axis i of window o
    reads positions starts[i][..., o] + k for k < kernel[i]. ``starts[i]`` is (*lead', n_out)
    with lead' either empty or ``x``'s lead shape (per-plane starts). Positions past the input
    read ``fill``. Result: (lead..., *out, *kernel)."""
    nsp = len(starts)
    lead = x.shape[:-nsp]
    nl = len(lead)
    # Axis by axis: move the spatial axis last, replace it by (out, kernel) through a gather of
    # the input positions, and keep the new axes at the end.
    for i in range(nsp):
        n_in = x.shape[nl]
        n_out, k = starts[i].shape[-1], kernel[i]
        rest = x.shape[nl + 1:]
        moved = g.permute(x, tuple(range(nl)) + tuple(range(nl + 1, len(x.shape))) + (nl,))
        out_shape = lead + rest + (n_out, k)
        table = starts[i]
        table = g.reshape(table, (table.shape[:-1] if table.shape[:-1] else (1,) * nl) + (1,) * len(rest)
                          + (n_out, 1))
        offsets = g.reshape(g.iota((k,)), (1,) * (nl + len(rest)) + (1, k))
        pos_shape = table.shape[:-1] + (k,)
        want = g.expand(g.binary("add", g.expand(table, pos_shape), g.expand(offsets, pos_shape)), out_shape)
        rows = g.expand(g.reshape(moved, lead + rest + (1, n_in)), lead + rest + (n_out, n_in))
        picked = g.gather(rows, want, len(out_shape) - 1)  # (past the input: clamped, then masked)
        inside = g.binary("lt", want, g.const(n_in, dtypes.int64, out_shape))
        x = g.where(inside, picked, g.const(fill, x.dtype, out_shape))
    # Layout now: lead, o0, k0, o1, k1, ...: bring all window axes in front of the kernel axes.
    order = (tuple(range(nl)) + tuple(nl + 2 * i for i in range(nsp))
             + tuple(nl + 2 * i + 1 for i in range(nsp)))
    return g.permute(x, order)


def _gathered_positions(starts: list[Node], kernel: list[int], size, lead) -> Node:
    """Flat input-plane position of each gathered window element: (lead..., *out, *kernel)."""
    nsp = len(starts)
    nl = len(lead)
    outs = tuple(s.shape[-1] for s in starts)
    shape = lead + outs + tuple(kernel)
    inner = g.contiguous_strides(tuple(size))
    total = None
    for i in range(nsp):
        table = starts[i]
        table_lead = table.shape[:-1] if table.shape[:-1] else (1,) * nl
        o = g.reshape(table, table_lead + tuple(outs[i] if j == i else 1 for j in range(nsp)) + (1,) * nsp)
        k = g.reshape(g.iota((kernel[i],)), (1,) * (nl + nsp) + tuple(kernel[i] if j == i else 1
                                                                      for j in range(nsp)))
        term = g.binary("add", g.expand(o, shape), g.expand(k, shape))
        term = g.binary("mul", term, g.const(inner[i], dtypes.int64, shape))
        total = term if total is None else g.binary("add", total, term)
    return total


def _scatter_to_plane(grad: Node, index: Node, size, dtype) -> Node:
    """Gradient of a pool with indices: each output's gradient added at the flat input-plane
    position ``index`` names (graph.scatter). grad/index: (lead..., *out)."""
    nsp = len(size)
    lead = grad.shape[:len(grad.shape) - nsp]
    nout = math.prod(grad.shape[len(lead):])
    gy = g.reshape(accumulate(grad), lead + (nout,))
    idx = g.reshape(g.cast(index, dtypes.int64), lead + (nout,))
    total = g.scatter(g.const(0, gy.dtype, lead + (math.prod(size),)), idx, gy, len(lead), "add")
    return g.cast(g.reshape(total, lead + tuple(size)), dtype)


def _window_max(x, starts, kernel, valid_lengths=None):
    """(max values, flat argmax indices) of gathered windows; ``valid_lengths[i]`` (n_out,)
    masks kernel offsets past a shorter window (adaptive pools)."""
    node = read(x)
    nsp = len(starts)
    lead = node.shape[:-nsp]
    size = node.shape[-nsp:]
    win = _gather_windows(node, starts, kernel, lowest(node.dtype))
    outs = tuple(s.shape[-1] for s in starts)
    valid = g.const(True, dtypes.bool_, win.shape)
    if valid_lengths is not None:
        for i, length in enumerate(valid_lengths):
            o = g.reshape(length, (1,) * len(lead) + tuple(outs[i] if j == i else 1 for j in range(nsp))
                          + (1,) * nsp)
            k = g.reshape(g.iota((kernel[i],)), (1,) * (len(lead) + nsp)
                          + tuple(kernel[i] if j == i else 1 for j in range(nsp)))
            inside = g.binary("lt", g.expand(k, win.shape), g.expand(o, win.shape))
            valid = g.binary("and", valid, inside)
        win = g.where(valid, win, g.const(lowest(node.dtype), node.dtype, win.shape))
    axes = tuple(range(len(lead) + nsp, len(lead) + 2 * nsp))
    best = g.reduce("max", win, axes)
    pos = _gathered_positions(starts, kernel, size, lead)
    index = _argmax_of_windows(win, best, valid, pos, math.prod(size), nsp)
    dev = x._storage.device
    return wrap(g.reshape(best, lead + outs), dev), wrap(g.reshape(index, lead + outs), dev)


# ------------------------------------------------------------------------------- adaptive pools


def _check_adaptive(x, output_size, nsp: int, name: str) -> tuple[int, ...]:
    if x.dim() not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got {x.dim()}D")
    for i in range(1, x.dim()):
        if x.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, "
                               f"but input has sizes {list(x.shape)} with dimension {i} being empty")
    if not isinstance(output_size, int) and len(output_size) != nsp:
        raise RuntimeError(f"{name}(): internal error: output_size.size() must be {nsp}")
    out = tuple(x.shape[-nsp + i] if o is None else int(o) for i, o in enumerate(ntuple(output_size, nsp)))
    if any(o < 0 for o in out):
        size = [*x.shape[:-nsp], *out]
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: {size}")
    return out


def _adaptive_max(x, output_size, nsp: int, name: str):
    out = _check_adaptive(x, output_size, nsp, name)
    bins = [_adaptive_bins(x.shape[-nsp + i], out[i]) for i in range(nsp)]
    return _window_max(x, [b[0] for b in bins], [b[2] for b in bins], [b[1] for b in bins])


@register(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max(x, output_size, 2, "adaptive_max_pool2d")


@register(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max(x, output_size, 3, "adaptive_max_pool3d")


def _indexed_backward(grad, x, indices, nsp: int):
    node = _scatter_to_plane(read(grad), read(indices), tuple(x.shape[-nsp:]), zdtype(grad.dtype))
    return wrap(node, grad._storage.device)


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    return _indexed_backward(grad, x, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad, x, indices):
    return _indexed_backward(grad, x, indices, 3)


def _adaptive_avg_axis(x: Node, axis: int, n_in: int, n_out: int, transpose: bool) -> Node:
    """Average along ``axis`` over adaptive windows (n_in → n_out); ``transpose`` spreads an
    (n_out) gradient back over the n_in positions each window covers (each share 1/length)."""
    start, length, _ = _adaptive_bins(n_in, n_out)
    end = g.binary("add", start, length)
    pos = g.expand(g.reshape(g.iota((n_in,)), (1, n_in)), (n_out, n_in))
    inside = g.binary("and", g.binary("le", g.expand(g.reshape(start, (n_out, 1)), (n_out, n_in)), pos),
                      g.binary("lt", pos, g.expand(g.reshape(end, (n_out, 1)), (n_out, n_in))))
    nd = len(x.shape)
    moved = g.permute(x, tuple(i for i in range(nd) if i != axis) + (axis,))
    lead = moved.shape[:-1]
    inv = g.binary("div", g.const(1, x.dtype, (n_out,)), g.cast(length, x.dtype))
    if transpose:  # x's axis has n_out entries: out[i] = sum_o x[o] / len[o] * inside[o, i]
        share = g.binary("mul", moved, g.expand(g.reshape(inv, (1,) * len(lead) + (n_out,)), moved.shape))
        wide = lead + (n_in, n_out)
        src = g.expand(g.reshape(share, lead + (1, n_out)), wide)
        mask = g.expand(g.reshape(g.permute(inside, (1, 0)), (1,) * len(lead) + (n_in, n_out)), wide)
        res = g.reshape(g.reduce("sum", g.where(mask, src, g.const(0, x.dtype, wide)), (len(wide) - 1,)),
                        lead + (n_in,))
    else:  # out[o] = sum_i x[i] * inside[o, i] / len[o]
        wide = lead + (n_out, n_in)
        src = g.expand(g.reshape(moved, lead + (1, n_in)), wide)
        mask = g.expand(g.reshape(inside, (1,) * len(lead) + (n_out, n_in)), wide)
        total = g.reshape(g.reduce("sum", g.where(mask, src, g.const(0, x.dtype, wide)), (len(wide) - 1,)),
                          lead + (n_out,))
        res = g.binary("mul", total, g.expand(g.reshape(inv, (1,) * len(lead) + (n_out,)), total.shape))
    back = list(range(nd - 1))
    back.insert(axis, nd - 1)
    return g.permute(res, tuple(back))


def _adaptive_avg(x, output_size, nsp: int, name: str):
    out = _check_adaptive(x, output_size, nsp, name)
    node = accumulate(read(x))
    nd = len(node.shape)
    for i in range(nsp):
        axis = nd - nsp + i
        if node.shape[axis] != out[i]:
            node = _adaptive_avg_axis(node, axis, node.shape[axis], out[i], transpose=False)
    return wrap(g.cast(node, zdtype(x.dtype)), x._storage.device)


@register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg(x, output_size, 2, "adaptive_avg_pool2d")


@register(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg(x, output_size, 3, "adaptive_avg_pool3d")


def _adaptive_avg_backward(grad, x, nsp: int):
    node = accumulate(read(grad))
    nd = len(node.shape)
    for i in range(nsp):
        axis = nd - nsp + i
        if node.shape[axis] != x.shape[axis]:
            node = _adaptive_avg_axis(node, axis, x.shape[axis], node.shape[axis], transpose=True)
    return wrap(g.cast(node, zdtype(grad.dtype)), grad._storage.device)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    return _adaptive_avg_backward(grad, x, 2)


@register(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    return _adaptive_avg_backward(grad, x, 3)


# ------------------------------------------------------------------------------- fractional pools


def _fractional_starts(samples: Node, n_in: int, n_out: int, k: int, dtype: dtypes.DType) -> Node:
    """Window starts (*lead, n_out) int64 from per-plane samples u (*lead,): ATen's sequence
    int((i + u) * alpha) - int(u * alpha), alpha = (n_in - k) / (n_out - 1), the last window
    ending at the input's end. Computed in the input's dtype, as ATen does."""
    lead = samples.shape
    shape = lead + (n_out,)
    if n_out == 1:
        return g.const(n_in - k, dtypes.int64, shape)
    u = g.expand(g.reshape(g.cast(samples, dtype), lead + (1,)), shape)
    alpha = g.const((n_in - k) / (n_out - 1), dtype, shape)
    i = g.cast(g.expand(g.reshape(g.iota((n_out,)), (1,) * len(lead) + (n_out,)), shape), dtype)
    first = g.cast(g.binary("mul", g.binary("add", i, u), alpha), dtypes.int64)
    offset = g.cast(g.binary("mul", u, alpha), dtypes.int64)
    seq = g.binary("sub", first, offset)
    is_last = g.binary("eq", g.expand(g.reshape(g.iota((n_out,)), (1,) * len(lead) + (n_out,)), shape),
                       g.const(n_out - 1, dtypes.int64, shape))
    return g.where(is_last, g.const(n_in - k, dtypes.int64, shape), seq)


def _fractional(x, kernel_size, output_size, samples, nsp: int):
    kernel = ntuple(kernel_size, nsp)
    out = ntuple(output_size, nsp)
    size = tuple(x.shape[-nsp:])
    for o, k, s in zip(out, kernel, size):
        if o + k - 1 > s:
            raise RuntimeError(f"fractional_max_pool{nsp}d(): pool size {k} too large relative to input "
                               f"size {s} for output size {o}")
    lead = tuple(x.shape[:-nsp])
    if samples.dtype != x.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if x.dim() == nsp + 2 and samples.shape[0] < x.shape[0]:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    # ATen reads plane p of batch b at flat offset (b * planes + p) * nsp of the samples,
    # whatever their shape: an input without a batch axis takes the first batch's.
    needed = math.prod(lead) * nsp
    if samples.numel() < needed:
        raise RuntimeError(f"Expect _random_samples to hold {needed} values for an input of shape "
                           f"{list(x.shape)}, got shape {list(samples.shape)}")
    flat = g.reshape(read(samples), (samples.numel(),))
    u = g.reshape(g.shrink(flat, ((0, needed),)), lead + (nsp,))
    dtype = zdtype(x.dtype)
    starts = []
    for axis in range(nsp):
        # ATen's samples: 2d (width, height); 3d (time, height, width).
        which = nsp - 1 - axis if nsp == 2 else axis
        sample = g.reshape(g.shrink(u, tuple((0, s) for s in lead) + ((which, which + 1),)), lead)
        starts.append(_fractional_starts(sample, size[axis], out[axis], kernel[axis], dtype))
    return _window_max(x, starts, list(kernel))


@register(aten.fractional_max_pool2d.default)
def fractional_max_pool2d(x, kernel_size, output_size, random_samples):
    return _fractional(x, kernel_size, output_size, random_samples, 2)


@register(aten.fractional_max_pool3d.default)
def fractional_max_pool3d(x, kernel_size, output_size, random_samples):
    return _fractional(x, kernel_size, output_size, random_samples, 3)


@register(aten.fractional_max_pool2d_backward.default)
def fractional_max_pool2d_backward(grad, x, kernel_size, output_size, indices):
    return _indexed_backward(grad, x, indices, 2)


@register(aten.fractional_max_pool3d_backward.default)
def fractional_max_pool3d_backward(grad, x, kernel_size, output_size, indices):
    return _indexed_backward(grad, x, indices, 3)
