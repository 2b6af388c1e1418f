"""Convolution and batch norm lowerings (forward and backward), zyx style; the window views
that pooling (ops/nn/pooling.py) shares.

A convolution is a matmul over windows: the input is padded and viewed as sliding windows
(``windows``: one strided view of the padded value, no copy) of shape
(N, C, *out, *kernel), multiplied by the broadcast weight and reduced over
(C_in/groups, *kernel): one REDUCE node, so the kernelizer makes it one kernel with bias and
activation fused around it, as for matmul. The gradient of the input is a transposed
convolution, built the same way: the output gradient is dilated by the stride (pad trick),
padded, and convolved with the flipped, transposed weight. Gradients of weight and bias are
reduces. Pools reuse the window view; their backward scatter-adds per window position
(``unwindow``: the inverse view, a sum over kernel positions, no one-hot over the whole plane).
Any number of spatial dimensions works (1d, 2d, 3d); half types accumulate in float32.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap, write
from ...record.transfer import zdtype
from ..registry import aten, register


def accumulate(node: Node) -> Node:
    return g.cast(node, dtypes.float32) if node.dtype in (dtypes.float16, dtypes.bfloat16) else node


def ntuple(value, n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


# ------------------------------------------------------------------------------- window views


def windows(x: Node, kernel, stride, dilation, pad_before, pad_after, fill=None) -> Node:
    """Sliding windows of ``x`` (lead..., *spatial) as a view (lead..., *out, *kernel).

    Padding is a PAD node (zeros, or ``fill`` through a padded validity mask), then one
    STRIDED view of it: window position o and kernel offset k read o*stride + k*dilation.
    """
    nsp = len(kernel)
    lead = len(x.shape) - nsp
    padding = ((0, 0),) * lead + tuple(zip(pad_before, pad_after))
    xp = g.pad(x, padding)
    if fill is not None:
        valid = g.pad(g.const(True, dtypes.bool_, x.shape), padding)
        xp = g.where(valid, xp, g.const(fill, x.dtype, xp.shape))
    spatial = xp.shape[lead:]
    out = tuple((s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel, stride, dilation))
    strides = g.contiguous_strides(xp.shape)
    view_strides = (strides[:lead] + tuple(st * s for st, s in zip(stride, strides[lead:]))
                    + tuple(d * s for d, s in zip(dilation, strides[lead:])))
    flat = g.reshape(xp, (xp.numel,))
    return g.strided(flat, xp.shape[:lead] + out + tuple(kernel), view_strides, 0)


def dilate(x: Node, stride, nsp: int) -> Node:
    """Insert stride-1 zeros between positions along the last ``nsp`` axes (pad trick, no copy)."""
    lead = len(x.shape) - nsp
    if all(s == 1 for s in stride):
        return x
    shape = x.shape
    split = shape[:lead] + tuple(v for s in shape[lead:] for v in (s, 1))
    padded = g.pad(g.reshape(x, split),
                   ((0, 0),) * lead + tuple(p for st in stride for p in ((0, 0), (0, st - 1))))
    merged = g.reshape(padded, shape[:lead] + tuple(s * st for s, st in zip(shape[lead:], stride)))
    return g.shrink(merged, tuple((0, s) for s in shape[:lead])
                    + tuple((0, (s - 1) * st + 1) for s, st in zip(shape[lead:], stride)))


def unwindow(c: Node, kernel, stride, dilation, padding, size) -> Node:
    """Inverse of ``windows`` summed: (lead..., *out, *kernel) → (lead..., *size), each window
    element added to the input position it was read from (positions in the padding dropped)."""
    nsp = len(kernel)
    lead = len(c.shape) - 2 * nsp
    # Move kernel axes in front of the spatial ones so dilation acts on the spatial axes only.
    order = tuple(range(lead)) + tuple(range(lead + nsp, lead + 2 * nsp)) + tuple(range(lead, lead + nsp))
    ck = g.permute(c, order)
    dl = dilate(ck, stride, nsp)
    dl = g.flip(dl, tuple(range(lead, lead + nsp)))
    lo = tuple(d * (k - 1) - p for k, d, p in zip(kernel, dilation, padding))
    hi = tuple(s + d * (k - 1) - length - before for s, k, d, length, before in
               zip(size, kernel, dilation, dl.shape[lead + nsp:], lo))
    dp = g.pad(dl, ((0, 0),) * (lead + nsp) + tuple(zip(lo, hi)))
    strides = g.contiguous_strides(dp.shape)
    sp_strides = strides[lead + nsp:]
    k_strides = strides[lead:lead + nsp]
    # Output position h with flipped kernel index j reads dilated row h + j*dilation.
    view = g.strided(g.reshape(dp, (dp.numel,)), dp.shape[:lead] + tuple(size) + tuple(kernel),
                     strides[:lead] + sp_strides + tuple(d * s + ks for d, s, ks in
                                                         zip(dilation, sp_strides, k_strides)), 0)
    return g.reshape(g.reduce("sum", view, tuple(range(lead + nsp, lead + 2 * nsp))),
                     c.shape[:lead] + tuple(size))


# ------------------------------------------------------------------------------- convolution


def _grouped_windows(x: Node, out_channels: int, groups: int, kernel, stride, dilation, pad_before,
                     pad_after) -> Node:
    """Windows of ``x`` as (N, out_channels, C/groups, *out, *kernel): each output channel sees
    its group's input channels (an expand, no copy)."""
    n, c = x.shape[:2]
    win = windows(x, kernel, stride, dilation, pad_before, pad_after)
    rest = win.shape[2:]
    cg, og = c // groups, out_channels // groups
    win = g.expand(g.reshape(win, (n, groups, 1, cg) + rest), (n, groups, og, cg) + rest)
    return g.reshape(win, (n, out_channels, cg) + rest)


def conv_nodes(x: Node, w: Node, stride, padding, dilation, groups: int, pad_after=None) -> Node:
    """(N, C, *sp) * (O, C/groups, *k) → (N, O, *out), one fused reduce."""
    kernel = w.shape[2:]
    nsp = len(kernel)
    out_channels = w.shape[0]
    win = _grouped_windows(x, out_channels, groups, kernel, stride, dilation, padding,
                           padding if pad_after is None else pad_after)
    full = win.shape
    wb = g.expand(g.reshape(w, (1,) + w.shape[:2] + (1,) * nsp + kernel), full)
    prod = g.binary("mul", accumulate(win), accumulate(wb))
    axes = (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
    return g.reshape(g.reduce("sum", prod, axes), full[:2] + full[3:3 + nsp])


def conv_transpose_nodes(y: Node, w: Node, stride, padding, dilation, groups: int, size) -> Node:
    """Transposed convolution of ``y`` (N, Ci, *sp) with ``w`` (Ci, Co/groups, *k) to spatial ``size``:
    dilate by the stride, pad, convolve with the flipped transposed weight (stride 1)."""
    kernel = w.shape[2:]
    nsp = len(kernel)
    ci, cog = w.shape[:2]
    cig = ci // groups
    wt = g.permute(g.reshape(w, (groups, cig, cog) + kernel), (0, 2, 1) + tuple(range(3, 3 + nsp)))
    wt = g.flip(g.reshape(wt, (groups * cog, cig) + kernel), tuple(range(2, 2 + nsp)))
    dl = dilate(y, stride, nsp)
    lo = tuple(d * (k - 1) - p for k, d, p in zip(kernel, dilation, padding))
    hi = tuple(s + d * (k - 1) - length - before for s, k, d, length, before in
               zip(size, kernel, dilation, dl.shape[2:], lo))
    return conv_nodes(dl, wt, (1,) * nsp, lo, dilation, groups, pad_after=hi)


def _weight_grad(x: Node, gy: Node, kernel, stride, padding, dilation, groups: int) -> Node:
    """d(conv)/d(weight): windows of ``x`` times ``gy`` reduced over batch and output positions."""
    nsp = len(kernel)
    out_channels = gy.shape[1]
    win = _grouped_windows(x, out_channels, groups, kernel, stride, dilation, padding, padding)
    # Windows past gy's extent (transposed convs with output_padding) are cut off.
    win = g.shrink(win, tuple((0, s) for s in win.shape[:3]) + tuple((0, s) for s in gy.shape[2:])
                   + tuple((0, k) for k in kernel))
    full = win.shape
    gb = g.expand(g.reshape(gy, gy.shape[:2] + (1,) + gy.shape[2:] + (1,) * nsp), full)
    prod = g.binary("mul", accumulate(win), accumulate(gb))
    red = g.reduce("sum", prod, (0,) + tuple(range(3, 3 + nsp)))
    return g.reshape(red, full[1:3] + tuple(kernel))


def _conv_out(size, kernel, stride, padding, dilation):
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, st, p, d in zip(size, kernel, stride, padding, dilation))


def _params(x, weight, stride, padding, dilation):
    nsp = weight.dim() - 2
    return nsp, ntuple(stride, nsp), ntuple(padding, nsp), ntuple(dilation, nsp)


def _check_shapes(x, weight, padding, dilation, transposed: bool, groups: int) -> None:
    """ATen's shape checks of a convolution's input and weight, in its words."""
    w, shape = list(weight.shape), list(x.shape)
    if w[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at dimension "
                           f"0, but got weight of size {w} instead")
    if w[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                           f"dimension 0, but got weight of size [{w}] instead")
    if transposed:
        if shape[1] != w[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {w}, expected input{shape} to have "
                               f"{w[0]} channels, but got {shape[1]} channels instead")
        return
    if shape[1] != w[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {w}, expected input{shape} to have "
                           f"{w[1] * groups} channels, but got {shape[1]} channels instead")
    padded = [size + 2 * p for size, p in zip(shape[2:], padding)]
    kernel = [d * (k - 1) + 1 for k, d in zip(w[2:], dilation)]
    if any(k > size for k, size in zip(kernel, padded)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                           f"Kernel size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater "
                           "than actual input size")


@register(aten.convolution.default, aten.convolution_overrideable.default)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    nsp, stride, padding, dilation = _params(x, weight, stride, padding, dilation)
    if x.dim() != nsp + 2:
        raise NotImplementedError("zyx: unbatched convolution input")  # decomposes to the batched form
    _check_shapes(x, weight, padding, dilation, transposed, groups)
    dtype = zdtype(x.dtype)
    xn, wn = read(x), read(weight)
    if transposed:
        output_padding = ntuple(output_padding, nsp)
        size = tuple((s - 1) * st - 2 * p + d * (k - 1) + op + 1 for s, st, p, d, k, op in
                     zip(x.shape[2:], stride, padding, dilation, weight.shape[2:], output_padding))
        out = conv_transpose_nodes(xn, wn, stride, padding, dilation, groups, size)
    else:
        out = conv_nodes(xn, wn, stride, padding, dilation, groups)
    if bias is not None:
        bn = g.reshape(accumulate(g.cast(read(bias), dtype)), (1, bias.shape[0]) + (1,) * nsp)
        out = g.binary("add", out, g.expand(bn, out.shape))
    return wrap(g.cast(out, dtype), x._storage.device)


@register(aten.convolution_backward.default)
def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    nsp, stride, padding, dilation = _params(x, weight, stride, padding, dilation)
    if x.dim() != nsp + 2:
        raise NotImplementedError("zyx: unbatched convolution input")
    dtype = zdtype(x.dtype)
    dev = x._storage.device
    gy, xn, wn = read(grad), read(x), read(weight)
    kernel = tuple(weight.shape[2:])
    gi = gw = gb = None
    if output_mask[0]:
        if transposed:
            node = conv_nodes(gy, wn, stride, padding, dilation, groups)
            # output_padding added positions past the last full window: their windows fall
            # outside the input, so the extra gradient positions are cut off.
            node = g.shrink(node, tuple((0, s) for s in x.shape))
        else:
            node = conv_transpose_nodes(gy, wn, stride, padding, dilation, groups, tuple(x.shape[2:]))
        gi = wrap(g.cast(node, dtype), dev)
    if output_mask[1]:
        if transposed:  # roles swap: windows of the output gradient against the input
            node = _weight_grad(gy, xn, kernel, stride, padding, dilation, groups)
        else:
            node = _weight_grad(xn, gy, kernel, stride, padding, dilation, groups)
        gw = wrap(g.cast(node, zdtype(weight.dtype)), dev)
    if output_mask[2]:
        node = g.reduce("sum", accumulate(gy), (0,) + tuple(range(2, 2 + nsp)))
        gb = wrap(g.cast(g.reshape(node, (grad.shape[1],)), zdtype(grad.dtype)), dev)
    return gi, gw, gb


# ------------------------------------------------------------------------------- batch norm


def _channel(node: Node, shape) -> Node:
    """A per-channel (C,) value broadcast to ``shape`` (N, C, ...)."""
    return g.expand(g.reshape(node, (1, shape[1]) + (1,) * (len(shape) - 2)), tuple(shape))


def _per_channel(t, dtype) -> Node | None:
    return None if t is None else g.cast(read(t), dtype)


def _stats(node: Node) -> tuple[Node, Node, int]:
    """Batch mean and biased variance per channel (C,), and the count per channel."""
    axes = (0,) + tuple(range(2, len(node.shape)))
    count = node.numel // node.shape[1]
    c = node.shape[1]
    inv = g.const(1.0 / count, node.dtype, tuple(1 if i in axes else s for i, s in enumerate(node.shape)))
    mean = g.binary("mul", g.reduce("sum", node, axes), inv)
    diff = g.binary("sub", node, g.expand(mean, node.shape))
    var = g.binary("mul", g.reduce("sum", g.binary("mul", diff, diff), axes), inv)
    return g.reshape(mean, (c,)), g.reshape(var, (c,)), count


def _rstd(var: Node, eps: float) -> Node:
    return g.unary("recip", g.unary("sqrt", g.binary("add", var, g.const(eps, var.dtype, var.shape))))


def _normalize(node, mean, rstd, weight, bias):
    out = g.binary("mul", g.binary("sub", node, _channel(mean, node.shape)), _channel(rstd, node.shape))
    if weight is not None:
        out = g.binary("mul", out, _channel(weight, node.shape))
    if bias is not None:
        out = g.binary("add", out, _channel(bias, node.shape))
    return out


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    dtype = zdtype(x.dtype)
    node = accumulate(read(x))
    acc = node.dtype
    dev = x._storage.device
    w, b = _per_channel(weight, acc), _per_channel(bias, acc)
    if training:
        mean, var, count = _stats(node)
        rstd = _rstd(var, eps)
        out = _normalize(node, mean, rstd, w, b)
        # Running statistics update in place, as on CPU (unbiased variance).
        if running_mean is not None:
            rm = g.cast(read(running_mean), acc)
            m = g.const(momentum, acc, rm.shape)
            keep = g.const(1.0 - momentum, acc, rm.shape)
            write(running_mean, g.binary("add", g.binary("mul", keep, rm), g.binary("mul", m, mean)))
        if running_var is not None:
            rv = g.cast(read(running_var), acc)
            unbiased = g.binary("mul", var, g.const(count / max(count - 1, 1), acc, var.shape))
            write(running_var, g.binary("add", g.binary("mul", g.const(1.0 - momentum, acc, rv.shape), rv),
                                        g.binary("mul", g.const(momentum, acc, rv.shape), unbiased)))
        stat = _stat_dtype(x, weight, bias, running_mean, running_var)
        return wrap(g.cast(out, dtype), dev), wrap(g.cast(mean, stat), dev), wrap(g.cast(rstd, stat), dev)
    mean = g.cast(read(running_mean), acc)
    rstd = _rstd(g.cast(read(running_var), acc), eps)
    out = _normalize(node, mean, rstd, w, b)
    empty = g.const(0, _stat_dtype(x, weight, bias, running_mean, running_var), (0,))
    return wrap(g.cast(out, dtype), dev), wrap(empty, dev), wrap(empty, dev)


def _stat_dtype(x, *params) -> dtypes.DType:
    """dtype of the saved mean/rstd: the input's, or float32 when a half input comes with float32
    parameters (ATen's "mixed type" batch norm)."""
    dtype = zdtype(x.dtype)
    if dtype in (dtypes.float16, dtypes.bfloat16) and any(p is not None and zdtype(p.dtype) == dtypes.float32
                                                          for p in params):
        return dtypes.float32
    return dtype


@register(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


@register(aten._batch_norm_with_update.default)
def batch_norm_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, rstd = _batch_norm(x, weight, bias, running_mean, running_var, True, momentum, eps)
    reserve = wrap(g.const(0, dtypes.uint8, (0,)), x._storage.device)  # ATen's CPU reserve is empty
    return out, mean, rstd, reserve


@register(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    return _batch_norm(x, weight, bias, None, None, True, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)


@register(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                               output_mask):
    dtype = zdtype(x.dtype)
    node = accumulate(read(x))
    acc = node.dtype
    gy = g.cast(read(grad), acc)
    dev = x._storage.device
    axes = (0,) + tuple(range(2, len(node.shape)))
    c = node.shape[1]
    if train:
        mean, rstd = g.cast(read(save_mean), acc), g.cast(read(save_invstd), acc)
    else:
        mean, rstd = g.cast(read(running_mean), acc), _rstd(g.cast(read(running_var), acc), eps)
    xhat = g.binary("mul", g.binary("sub", node, _channel(mean, node.shape)), _channel(rstd, node.shape))
    sum_gy = g.reshape(g.reduce("sum", gy, axes), (c,))
    sum_gy_xhat = g.reshape(g.reduce("sum", g.binary("mul", gy, xhat), axes), (c,))
    w = _per_channel(weight, acc)
    scale = rstd if w is None else g.binary("mul", rstd, w)
    gi = gw = gb = None
    if output_mask[0]:
        if train:
            # dx = w*rstd * (gy - mean(gy) - xhat * mean(gy*xhat))
            count = node.numel // c
            inv = g.const(1.0 / count, acc, (c,))
            centered = g.binary("sub", gy, _channel(g.binary("mul", sum_gy, inv), node.shape))
            proj = g.binary("mul", xhat, _channel(g.binary("mul", sum_gy_xhat, inv), node.shape))
            node_gi = g.binary("mul", g.binary("sub", centered, proj), _channel(scale, node.shape))
        else:
            node_gi = g.binary("mul", gy, _channel(scale, node.shape))
        gi = wrap(g.cast(node_gi, dtype), dev)
    pdtype = zdtype(x.dtype if weight is None else weight.dtype)
    if output_mask[1]:
        gw = wrap(g.cast(sum_gy_xhat, pdtype), dev)
    if output_mask[2]:
        gb = wrap(g.cast(sum_gy, pdtype), dev)
    return gi, gw, gb
