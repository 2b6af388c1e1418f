"""Neural-network lowerings: softmax/log_softmax (+ backward, safe softmax), mse loss, nll loss
(+ backward), the embedding's backward and embedding bag (layer norm: layer_norm.py). Each stays
within a few kernels: reductions store, elementwise work fuses around them. Activations that
PyTorch decomposes get CPU torch's argument checks here (the end of this module).
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import composite
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.checks import check_index
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..argument_checks import check_float_kernel, check_hardtanh, check_not_bool, kernel_error
from ..registry import aten, register, wrap_dim


def _acc_dtype(dtype: dtypes.DType) -> dtypes.DType:
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _bcast(node: Node, shape) -> Node:
    return g.expand(node, tuple(shape))


def softmax_node(x: Node, dim: int, log: bool) -> Node:
    """Softmax (log-softmax) of ``x`` along ``dim``, in ``x``'s dtype: one composite node
    (lazy/composite.py), a constant for a 0-d ``x``."""
    if not x.shape:
        return g.const(0.0 if log else 1.0, x.dtype, ())
    return composite.softmax(x, dim, log)


def _softmax(x, dim, half_to_float, log):
    dim = wrap_dim(dim, x.dim())  # (checked first, as ATen's meta function does)
    if not x.dtype.is_floating_point:  # (CPU torch's kernel names: its last-dim kernel or the general one)
        rank = max(x.dim(), 1)
        kernel = ("log_" if log else "") + ("softmax_lastdim_kernel_impl" if dim % rank == rank - 1
                                            else "softmax_kernel_impl")
        raise kernel_error(kernel, x.dtype)
    node = read(x)
    out_dtype = dtypes.float32 if half_to_float else node.dtype
    node = g.cast(node, _acc_dtype(node.dtype))
    if node.numel == 0:
        return wrap(g.cast(node, out_dtype), x._storage.device)
    return wrap(g.cast(softmax_node(node, dim, log), out_dtype), x._storage.device)


@register(aten._softmax.default)
def softmax(x, dim, half_to_float=False):
    return _softmax(x, dim, half_to_float, log=False)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float=False):
    return _softmax(x, dim, half_to_float, log=True)


@register(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    """Softmax whose rows of only -inf are zeros instead of nan (what scaled_dot_product_attention
    uses under a mask): PyTorch's decomposition records six dispatched ops, this one op."""
    node = read(x)
    out_dtype = zdtype(dtype) if dtype is not None else node.dtype
    if not node.shape or not out_dtype.is_float:
        raise NotImplementedError  # (0-d, or an error to raise: the decomposition's)
    dim = wrap_dim(dim, x.dim())
    device = x._storage.device
    # As torch.softmax(x, dim, dtype): the input cast to ``dtype`` first.
    source = g.cast(g.cast(node, out_dtype), _acc_dtype(out_dtype))
    if node.numel == 0:
        return wrap(g.cast(source, out_dtype), device)
    out = softmax_node(source, dim, log=False)
    masked = g.binary("eq", node, g.const(float("-inf"), node.dtype, node.shape))
    masked_rows = _bcast(g.reduce("min", masked, (dim,)), node.shape)
    out = g.where(masked_rows, g.const(0.0, out.dtype, node.shape), out)
    return wrap(g.cast(out, out_dtype), device)


@register(aten._softmax_backward_data.default)
def softmax_backward(grad, out, dim, input_dtype):
    gn, on = read(grad), read(out)
    dim = dim % max(grad.dim(), 1)
    if not gn.shape:
        return wrap(g.binary("mul", gn, g.const(0, gn.dtype, ())), grad._storage.device)
    prod = g.binary("mul", gn, on)
    s = g.reduce("sum", prod, (dim,))
    res = g.binary("sub", prod, g.binary("mul", on, _bcast(s, on.shape)))
    return wrap(g.cast(res, zdtype(input_dtype)), grad._storage.device)


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(grad, out, dim, input_dtype):
    gn, on = read(grad), read(out)
    dim = dim % max(grad.dim(), 1)
    if not gn.shape:
        return wrap(g.binary("mul", gn, g.const(0, gn.dtype, ())), grad._storage.device)
    s = g.reduce("sum", gn, (dim,))
    res = g.binary("sub", gn, g.binary("mul", g.unary("exp", on), _bcast(s, on.shape)))
    return wrap(g.cast(res, zdtype(input_dtype)), grad._storage.device)


@register(aten.mse_loss.default)
def mse_loss(x, target, reduction=1):
    a, b = read(x), g.cast(read(target), zdtype(x.dtype))
    shape = tuple(__import__("torch").broadcast_shapes(a.shape, b.shape))
    a, b = g.expand(g.reshape(a, (1,) * (len(shape) - len(a.shape)) + a.shape), shape), \
        g.expand(g.reshape(b, (1,) * (len(shape) - len(b.shape)) + b.shape), shape)
    d = g.binary("sub", a, b)
    sq = g.binary("mul", d, d)
    if reduction == 0:
        return wrap(sq, x._storage.device)
    if not shape:
        return wrap(sq, x._storage.device)
    total = g.reshape(g.reduce("sum", sq, tuple(range(len(shape)))), ())
    if reduction == 1:
        total = g.binary("div", total, g.const(float(math.prod(shape)), total.dtype, ()))
    return wrap(total, x._storage.device)


# ------------------------------------------------------------------------------------ nll loss
# Direct lowerings instead of PyTorch's decomposition (a dozen dispatched ops each way): the
# target's class is picked by comparing it with an iota over classes, so the forward is one
# reduce over the class axis and the backward one elementwise kernel.


def _nll_rows(node: Node, target: Node, weight, ignore_index) -> tuple[Node, Node, Node, Node]:
    """(``node``, the input as (N, C) or (C,), as (N, C) in the accumulation dtype, the one-hot
    of the int64 ``target`` (N, C), each row's weight (N,) — zero where the target is
    ``ignore_index`` — and the rows' count N)."""
    node = g.cast(node, _acc_dtype(node.dtype))
    classes = node.shape[-1]
    rows = 1 if len(node.shape) == 1 else node.shape[0]
    node = g.reshape(node, (rows, classes))
    tgt = g.reshape(target, (rows,))
    wide = (rows, classes)
    valid = g.binary("ne", tgt, g.const(ignore_index, dtypes.int64, (rows,)))
    # An ignored row picks nothing, as ATen skips it: its loss and gradient are 0 even where
    # its input is -inf or the mean's total weight is 0 (0 * inf and 0 / 0 are NaN).
    hot = g.binary("and", g.binary("eq", g.expand(g.reshape(g.iota((classes,)), (1, classes)), wide),
                                   g.expand(g.reshape(tgt, (rows, 1)), wide)),
                   g.expand(g.reshape(valid, (rows, 1)), wide))
    zero = g.const(0.0, node.dtype, (rows,))
    if weight is None:
        row_weight = g.where(valid, g.const(1.0, node.dtype, (rows,)), zero)
    else:
        w = g.expand(g.reshape(g.cast(read(weight), node.dtype), (1, classes)), wide)
        picked = g.reduce("sum", g.where(hot, w, g.const(0.0, node.dtype, wide)), (1,))
        row_weight = g.where(valid, g.reshape(picked, (rows,)), zero)
    return node, hot, row_weight, rows


def _nll_forward(x, node: Node, target: Node, weight, reduction, ignore_index, none_shape: tuple):
    """nll_loss's (output, total_weight) for the input rows ``node`` and their ``target``; the
    unreduced losses take ``none_shape``. The targets are checked on the device (record/checks.py)."""
    node, hot, row_weight, rows = _nll_rows(node, target, weight, ignore_index)
    check_index(target, 0, node.shape[1], x._storage.device, IndexError, "Target {index} is out of bounds.",
                ignore=ignore_index)
    wide = node.shape
    picked = g.reshape(g.reduce("sum", g.where(hot, node, g.const(0.0, node.dtype, wide)), (1,)), (rows,))
    losses = g.unary("neg", g.binary("mul", picked, row_weight))
    total_weight = g.reshape(g.reduce("sum", row_weight, (0,)), ())
    out_dtype, dev = zdtype(x.dtype), x._storage.device
    if reduction == 0:  # none: one loss per row
        losses = g.cast(g.reshape(losses, none_shape), out_dtype)
        return wrap(losses, dev), wrap(g.const(0.0, out_dtype, ()), dev)
    total = g.reshape(g.reduce("sum", losses, (0,)), ())
    if reduction == 1:
        total = g.binary("div", total, total_weight)
    return wrap(g.cast(total, out_dtype), dev), wrap(g.cast(total_weight, out_dtype), dev)


def _nll_backward(grad_output, x, node: Node, target: Node, weight, reduction, ignore_index,
                  total_weight) -> Node:
    """The gradient of nll_loss for the input rows ``node``, as (N, C) rows."""
    node, hot, row_weight, rows = _nll_rows(node, target, weight, ignore_index)
    grad = g.cast(read(grad_output), node.dtype)
    if reduction == 0:
        grad = g.reshape(grad, (rows,))
    else:
        grad = g.expand(g.reshape(grad, (1,)), (rows,))
        if reduction == 1:
            tw = g.expand(g.reshape(g.cast(read(total_weight), node.dtype), (1,)), (rows,))
            grad = g.binary("div", grad, tw)
    scaled = g.unary("neg", g.binary("mul", grad, row_weight))
    wide = node.shape
    out = g.where(hot, g.expand(g.reshape(scaled, (rows, 1)), wide), g.const(0.0, node.dtype, wide))
    return g.cast(out, zdtype(x.dtype))


@register(aten.nll_loss_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    if target.dim() > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    target_node = g.cast(read(target), dtypes.int64)
    return _nll_forward(x, read(x), target_node, weight, reduction, ignore_index, tuple(x.shape[:-1]))


@register(aten.nll_loss_backward.default)
def nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    out = _nll_backward(grad_output, x, read(x), g.cast(read(target), dtypes.int64), weight, reduction,
                        ignore_index, total_weight)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


def _spatial_rows(x, target) -> tuple[Node, Node]:
    """nll_loss2d's input (N, C, H, W) as rows (N*H*W, C) and its target (N, H, W) as (N*H*W,),
    after ATen's checks."""
    if target.dim() != 3:
        raise RuntimeError("only batches of spatial targets supported (3D tensors) but got targets of "
                           f"dimension: {target.dim()}")
    if x.dim() != 4:
        raise RuntimeError("only batches of spatial inputs supported (4D tensors), but got input of "
                           f"dimension: {x.dim()}")
    n, _, h, w = x.shape
    if tuple(target.shape) != (n, h, w):
        raise RuntimeError(f"size mismatch (got input: {list(x.shape)} , target: {list(target.shape)}")
    rows = g.reshape(g.permute(read(x), (0, 2, 3, 1)), (n * h * w, x.shape[1]))
    return rows, g.reshape(g.cast(read(target), dtypes.int64), (n * h * w,))


@register(aten.nll_loss2d_forward.default)
def nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    rows, target_rows = _spatial_rows(x, target)
    return _nll_forward(x, rows, target_rows, weight, reduction, ignore_index, tuple(target.shape))


@register(aten.nll_loss2d_backward.default)
def nll_loss2d_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    rows, target_rows = _spatial_rows(x, target)
    out = _nll_backward(grad_output, x, rows, target_rows, weight, reduction, ignore_index, total_weight)
    n, c, h, w = x.shape
    return wrap(g.permute(g.reshape(out, (n, h, w, c)), (0, 3, 1, 2)), x._storage.device)


# ------------------------------------------------------------------------------- embedding


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding's weight gradient: each row of ``grad_output`` added to the row its index
    names (in index order, as CPU torch), indices out of range or equal to ``padding_idx``
    skipped, in the accumulation dtype (PyTorch's decomposition). Recorded as one scatter-add
    (graph.scatter: tokens x width additions) instead of the decomposition's ~15 dispatched
    ops (~0.6 ms of recording on the 2-core box, every step of a model with an embedding)."""
    if scale_grad_by_freq or indices.dtype not in (torch.int64, torch.int32):
        raise NotImplementedError  # (the decomposition: counts per index, or its error)
    node = read(grad_output)
    result = node.dtype
    compute = _acc_dtype(result)
    count = indices.numel()
    rest = tuple(grad_output.shape[indices.dim():])
    if not compute.is_float or count == 0 or num_weights == 0 or len(rest) != 1:
        raise NotImplementedError
    flat = g.reshape(g.cast(read(indices), dtypes.int64), (count,))
    kept = g.binary("and", g.binary("le", g.const(0, dtypes.int64, (count,)), flat),
                    g.binary("lt", flat, g.const(num_weights, dtypes.int64, (count,))))
    if padding_idx >= 0:
        kept = g.binary("and", kept, g.binary("ne", flat, g.const(padding_idx, dtypes.int64, (count,))))
    shape = (count,) + rest
    rows = g.where(g.expand(g.reshape(kept, (count, 1)), shape), g.reshape(g.cast(node, compute), shape),
                   g.const(0, compute, shape))
    index = g.expand(g.reshape(g.where(kept, flat, g.const(0, dtypes.int64, (count,))), (count, 1)), shape)
    out = g.scatter(g.const(0, compute, (num_weights,) + rest), index, rows, 0, "add")
    return wrap(g.cast(out, result), grad_output._storage.device)


@register(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm, norm_type):
    """``F.embedding(..., max_norm=)``'s functional renormalization (what a compiled graph
    records for the in-place ``embedding_renorm_``): each row ``indices`` name whose
    ``norm_type``-norm exceeds ``max_norm`` scaled by ``max_norm / (norm + 1e-7)``, norms read
    from the rows before any is scaled (a repeated index writes the same row twice)."""
    if weight.dim() != 2 or indices.dtype not in (torch.int64, torch.int32):
        raise NotImplementedError
    from ..indexing.index import index_take  # the shared row gather

    dev = weight._storage.device
    w = read(weight)
    n, dim = w.shape
    count = indices.numel()
    idx = g.reshape(g.cast(read(indices), dtypes.int64), (count,))
    check_index(idx, 0, n, dev, IndexError, "index out of range in self")
    if count == 0:
        return wrap(w, dev)
    acc = _acc_dtype(w.dtype)
    rows = g.cast(index_take(w, 0, idx), acc)  # (count, dim)
    size = (count, dim)
    magnitude = g.unary("abs", rows)
    if math.isinf(norm_type):
        norm = g.reduce("max", magnitude, (1,))
    else:
        p = g.const(float(norm_type), acc, size)
        total = g.reduce("sum", g.binary("pow", magnitude, p), (1,))
        norm = g.binary("pow", total, g.const(1.0 / norm_type, acc, total.shape))
    norm = g.expand(norm, size)
    cap = g.const(float(max_norm), acc, size)
    scale = g.where(g.binary("lt", cap, norm),
                    g.binary("div", cap, g.binary("add", norm, g.const(1e-7, acc, size))),
                    g.const(1.0, acc, size))
    scaled = g.cast(g.binary("mul", rows, scale), w.dtype)
    index = g.expand(g.reshape(idx, (count, 1)), size)
    return wrap(g.scatter(w, index, scaled, 0, "set"), dev)


# ------------------------------------------------------------------------------- embedding bag


def _bag_of(indices: Node, offsets: Node, bags: int) -> Node:
    """offset2bag: the bag of each index position (number of bag starts at or before it, - 1)."""
    n, m = indices.shape[0], offsets.shape[0]
    wide = (n, m)
    starts = g.expand(g.reshape(offsets, (1, m)), wide)
    pos = g.expand(g.reshape(g.iota((n,)), (n, 1)), wide)
    started = g.cast(g.binary("le", starts, pos), dtypes.int64)
    bag = g.binary("sub", g.reshape(g.reduce("sum", started, (1,)), (n,)), g.const(1, dtypes.int64, (n,)))
    # Positions past the last counted bag (include_last_offset) belong to no bag.
    return g.where(g.binary("lt", bag, g.const(bags, dtypes.int64, (n,))), bag,
                   g.const(-1, dtypes.int64, (n,)))


def _embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx):
    from ..indexing.index import index_take  # the shared row gather

    if indices.dim() != 1 or offsets.dim() != 1:
        raise NotImplementedError("zyx: embedding_bag expects 1-D indices and offsets")
    if per_sample_weights is not None and mode != 0:
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is "
                                  "only supported for mode='sum'")
    dev = weight._storage.device
    w = read(weight)
    dim = w.shape[1]
    n = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    idx = g.cast(read(indices), dtypes.int64)
    check_index(idx, 0, w.shape[0], dev, RuntimeError,
                f"Index {{position}} of input takes value {{index}} which is not in the valid range "
                f"[0, {w.shape[0]})")
    off = g.cast(read(offsets), dtypes.int64)
    bag = _bag_of(idx, off, bags) if n else g.const(0, dtypes.int64, (0,))
    keep = g.const(True, dtypes.bool_, (n,))
    if padding_idx is not None and padding_idx >= 0:
        keep = g.binary("ne", idx, g.const(padding_idx, dtypes.int64, (n,)))
    acc = _acc_dtype(w.dtype)
    picked = g.cast(index_take(w, 0, idx), acc)  # (n, dim)
    if per_sample_weights is not None:
        psw = g.cast(read(per_sample_weights), acc)
        picked = g.binary("mul", picked, g.expand(g.reshape(psw, (n, 1)), (n, dim)))
    wide = (bags, n, dim)
    member = g.binary("and", g.binary("eq", g.expand(g.reshape(bag, (1, n)), (bags, n)),
                                      g.expand(g.reshape(g.iota((bags,)), (bags, 1)), (bags, n))),
                      g.expand(g.reshape(keep, (1, n)), (bags, n)))
    size = g.reshape(g.reduce("sum", g.cast(member, dtypes.int64), (1,)), (bags,))
    member_w = g.expand(g.reshape(member, (bags, n, 1)), wide)
    src = g.expand(g.reshape(picked, (1, n, dim)), wide)
    if mode == 2:
        low = g.const(float("-inf"), acc, wide)
        best = g.reduce("max", g.where(member_w, src, low), (1,))
        hit = g.binary("and", member_w, g.binary("eq", src, g.expand(best, wide)))
        which = g.expand(g.reshape(idx, (1, n, 1)), wide)
        # The first index position holding the maximum (ATen scans in order, strict >).
        posn = g.expand(g.reshape(g.iota((n,)), (1, n, 1)), wide)
        first = g.reduce("min", g.where(hit, posn, g.const(n, dtypes.int64, wide)), (1,))
        chosen = g.binary("and", hit, g.binary("eq", posn, g.expand(first, wide)))
        max_idx = g.reshape(g.reduce("sum", g.where(chosen, which, g.const(0, dtypes.int64, wide)), (1,)),
                            (bags, dim))
        empty = g.expand(g.reshape(g.binary("eq", size, g.const(0, dtypes.int64, (bags,))), (bags, 1)),
                         (bags, dim))
        out = g.where(empty, g.const(0, acc, (bags, dim)), g.reshape(best, (bags, dim)))
        max_idx = g.where(empty, g.const(-1, dtypes.int64, (bags, dim)), max_idx)
    else:
        out = g.reshape(g.reduce("sum", g.where(member_w, src, g.const(0, acc, wide)), (1,)), (bags, dim))
        if mode == 1:
            count = g.cast(g.binary("max", size, g.const(1, dtypes.int64, (bags,))), acc)
            out = g.binary("div", out, g.expand(g.reshape(count, (bags, 1)), (bags, dim)))
        max_idx = g.const(0, dtypes.int64, (bags,))
    bag_size = size if mode != 0 else g.const(0, dtypes.int64, (bags,))
    return (wrap(g.cast(out, w.dtype), dev), wrap(bag, dev), wrap(bag_size, dev), wrap(max_idx, dev))


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    return _embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                          padding_idx)


@register(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    if sparse:
        raise NotImplementedError("zyx: sparse gradients")
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights,
                                        scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@register(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights,
                                 scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):
    """Gradient of the weight: each bag's gradient row goes back to the rows its indices named
    (scaled by 1/bag size for mean, by the per-sample weight for sum); for max, to the row
    that held each maximum."""
    dev = grad._storage.device
    gy = read(grad)
    acc = _acc_dtype(gy.dtype)
    gy = g.cast(gy, acc)
    bags, dim = gy.shape
    idx = g.cast(read(indices), dtypes.int64)
    n = idx.shape[0]
    rows = g.expand(g.reshape(g.iota((num_weights,)), (num_weights, 1)), (num_weights, n))
    hit = g.binary("eq", g.expand(g.reshape(idx, (1, n)), (num_weights, n)), rows)
    if padding_idx is not None and padding_idx >= 0:
        hit = g.binary("and", hit, g.binary("ne", rows, g.const(padding_idx, dtypes.int64, rows.shape)))
    if mode == 2:
        mi = g.cast(read(max_indices), dtypes.int64)
        wide = (num_weights, bags, dim)
        r = g.expand(g.reshape(g.iota((num_weights,)), (num_weights, 1, 1)), wide)
        take = g.binary("eq", g.expand(g.reshape(mi, (1, bags, dim)), wide), r)
        src = g.expand(g.reshape(gy, (1, bags, dim)), wide)
        out = g.reduce("sum", g.where(take, src, g.const(0, acc, wide)), (1,))
        return wrap(g.cast(g.reshape(out, (num_weights, dim)), zdtype(grad.dtype)), dev)
    from ..indexing.index import index_take

    bag = g.cast(read(offset2bag), dtypes.int64)
    valid = g.binary("le", g.const(0, dtypes.int64, (n,)), bag)
    per_pos = index_take(gy, 0, bag)  # (n, dim): the gradient of each position's bag
    if mode == 1:
        size = g.cast(index_take(g.reshape(g.cast(read(bag_size), acc), (bags, 1)), 0, bag), acc)
        per_pos = g.binary("div", per_pos, g.expand(g.binary("max", size, g.const(1, acc, (n, 1))), (n, dim)))
    if per_sample_weights is not None:
        psw = g.cast(read(per_sample_weights), acc)
        per_pos = g.binary("mul", per_pos, g.expand(g.reshape(psw, (n, 1)), (n, dim)))
    hit = g.binary("and", hit, g.expand(g.reshape(valid, (1, n)), (num_weights, n)))
    wide = (num_weights, n, dim)
    src = g.expand(g.reshape(per_pos, (1, n, dim)), wide)
    out = g.reshape(g.reduce("sum", g.where(g.expand(g.reshape(hit, (num_weights, n, 1)), wide), src,
                                            g.const(0, acc, wide)), (1,)), (num_weights, dim))
    if scale_grad_by_freq:
        freq = g.reduce("sum", g.cast(hit, acc), (1,))
        out = g.binary("div", out, g.expand(g.binary("max", freq, g.const(1, acc, freq.shape)), out.shape))
    return wrap(g.cast(out, zdtype(grad.dtype)), dev)


@register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                              padding_idx=-1):
    """d/d(per-sample weight p) = <gradient of p's bag, weight row p names> (0 for padding)."""
    from ..indexing.index import index_take

    if mode != 0:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    gy = read(grad)
    acc = _acc_dtype(gy.dtype)
    idx = g.cast(read(indices), dtypes.int64)
    bag = g.cast(read(offset2bag), dtypes.int64)
    n = idx.shape[0]
    rows = g.cast(index_take(read(weight), 0, idx), acc)
    per_pos = index_take(g.cast(gy, acc), 0, bag)
    dot = g.reshape(g.reduce("sum", g.binary("mul", rows, per_pos), (1,)), (n,))
    keep = g.binary("le", g.const(0, dtypes.int64, (n,)), bag)
    if padding_idx is not None and padding_idx >= 0:
        keep = g.binary("and", keep, g.binary("ne", idx, g.const(padding_idx, dtypes.int64, (n,))))
    dot = g.where(keep, dot, g.const(0, acc, (n,)))
    return wrap(g.cast(dot, zdtype(grad.dtype)), grad._storage.device)


# ------------------------------------------------------------ activations PyTorch decomposes
# zyx records these through PyTorch's decompositions, which compute any dtype and make few of
# ATen's checks: these lowerings make CPU torch's checks, then decline (dispatch goes on to the
# decomposition). In-place forms and out= forms compute these functional ops, so they check too.


def _checked(check):
    """A lowering that runs ``check`` on the op's arguments, then declines."""

    def lowering(*args, **kwargs):
        check(*args, **kwargs)
        raise NotImplementedError  # (declined: PyTorch's decomposition records the op)

    return lowering


def _float_kernel(op: str):
    return lambda x, *rest, **kwargs: check_float_kernel(op, x)


for _op in ("mish", "hardswish", "hardsigmoid", "elu", "celu", "softplus", "softshrink", "hardshrink",
            "leaky_relu", "log_sigmoid_forward"):
    register(getattr(aten, _op).default)(_checked(_float_kernel(_op)))
register(aten.hardtanh.default)(_checked(check_hardtanh))
register(aten.threshold.default)(_checked(lambda x, *rest, **kw: check_not_bool("threshold_cpu", x.dtype)))
