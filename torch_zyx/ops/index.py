"""Indexing lowerings: index_select, gather, scatter(_add), masked_fill, index, index_put.

Data-dependent reads are one-hot selections: ``out[i] = sum_j x[j] * (idx[i] == j)`` built
from IOTA, compare and a reduce, so they fuse like everything else (zyx's approach; the cost
is O(len(idx) * len(dim)) arithmetic, no host round trip).
"""

from __future__ import annotations

import torch

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..tensor import ZyxTensor, read, wrap
from .registry import aten, register


def _onehot_take(x: Node, dim: int, index: Node) -> Node:
    """``x`` with axis ``dim`` replaced by the entries of 1-D ``index`` (int64, may be negative)."""
    n = x.shape[dim]
    m = index.shape[0]
    index = g.where(g.binary("lt", index, g.const(0, dtypes.int64, index.shape)),
                    g.binary("add", index, g.const(n, dtypes.int64, index.shape)), index)
    nd = len(x.shape)
    # wide shape: x's shape with dim → m, plus a trailing axis of length n to reduce over.
    wide = x.shape[:dim] + (m,) + x.shape[dim + 1:] + (n,)
    src = g.permute(g.reshape(x, x.shape + (1,)), tuple(range(dim)) + (nd,) + tuple(range(dim + 1, nd)) + (dim,))
    src = g.expand(src, wide)
    idx = g.expand(g.reshape(index, (1,) * dim + (m,) + (1,) * (nd - dim - 1) + (1,)), wide)
    pos = g.expand(g.reshape(g.iota((n,)), (1,) * nd + (n,)), wide)
    hit = g.binary("eq", idx, pos)
    if x.dtype == dtypes.bool_:
        picked = g.binary("and", hit, src)
        return g.reshape(g.reduce("max", picked, (nd,)), wide[:-1])
    picked = g.where(hit, src, g.const(0, x.dtype, wide))
    return g.reshape(g.reduce("sum", picked, (nd,)), wide[:-1])


@register(aten.index_select.default)
def index_select(x, dim, index):
    node = read(x)
    if not node.shape:
        node = g.reshape(node, (1,))
    dim = dim % max(x.dim(), 1)
    idx = g.cast(g.reshape(read(index), (index.numel(),)), dtypes.int64)
    out = _onehot_take(node, dim, idx)
    if x.dim() == 0:
        out = g.reshape(out, ())
    return wrap(out, x._storage.device)


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    flat = g.cast(g.reshape(read(indices), (indices.numel(),)), dtypes.int64)
    out = _onehot_take(read(weight), 0, flat)
    return wrap(g.reshape(out, tuple(indices.shape) + (weight.shape[1],)), weight._storage.device)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    node = read(x)
    m = read(mask)
    shape = tuple(torch.broadcast_shapes(node.shape, m.shape))
    if shape != node.shape:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, and the mask must be broadcastable to the "
                           f"input ({list(node.shape)} vs {list(m.shape)})")
    m = g.expand(g.reshape(m, (1,) * (len(shape) - len(m.shape)) + m.shape), shape)
    v = read(value) if isinstance(value, ZyxTensor) else g.const(value.item() if isinstance(value, torch.Tensor)
                                                                  else value, node.dtype)
    v = g.expand(g.reshape(g.cast(v, node.dtype), (1,) * len(shape)), shape)
    return wrap(g.where(g.cast(m, dtypes.bool_), v, node), x._storage.device)


def _gather_node(x: Node, dim: int, index: Node) -> Node:
    """out[i0.., ik, ..] = x[i0.., index[i0.., ik, ..], ..] for index of x's rank."""
    n = x.shape[dim]
    nd = len(x.shape)
    wide = index.shape + (n,)
    idx = g.expand(g.reshape(index, index.shape + (1,)), wide)
    idx = g.where(g.binary("lt", idx, g.const(0, dtypes.int64, wide)), g.binary("add", idx, g.const(n, dtypes.int64,
                                                                                                   wide)), idx)
    bounds = tuple((0, s) if i != dim else (0, n) for i, s in enumerate(index.shape))
    src = g.shrink(x, tuple((0, b[1]) if i != dim else (0, n) for i, b in enumerate(bounds)))
    src = g.permute(g.reshape(src, src.shape + (1,)), tuple(range(dim)) + (nd,) + tuple(range(dim + 1, nd)) + (dim,))
    src = g.expand(src, index.shape[:dim] + (1,) + index.shape[dim + 1:] + (n,))
    src = g.expand(src, wide)
    pos = g.expand(g.reshape(g.iota((n,)), (1,) * nd + (n,)), wide)
    hit = g.binary("eq", idx, pos)
    if x.dtype == dtypes.bool_:
        return g.reshape(g.reduce("max", g.binary("and", hit, src), (nd,)), index.shape)
    return g.reshape(g.reduce("sum", g.where(hit, src, g.const(0, x.dtype, wide)), (nd,)), index.shape)


@register(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    node = read(x)
    idx = g.cast(read(index), dtypes.int64)
    if not node.shape:
        node = g.reshape(node, (1,))
        idx = g.reshape(idx, (1,) * max(1, len(idx.shape))) if idx.shape else g.reshape(idx, (1,))
        out = _gather_node(node, 0, idx)
        return wrap(g.reshape(out, tuple(index.shape)), x._storage.device)
    if index.numel() == 0:
        return wrap(g.const(0, node.dtype, tuple(index.shape)), x._storage.device)
    dim = dim % x.dim()
    return wrap(_gather_node(node, dim, idx), x._storage.device)


def _scatter_node(x: Node, dim: int, index: Node, src: Node, reduce_add: bool) -> Node:
    """x with x[.., index[i], ..] (+)= src[i] along ``dim`` (one-hot over index's entries)."""
    n = x.shape[dim]
    nd = len(x.shape)
    m = index.shape[dim]
    # wide: x's shape with an extra trailing axis over index positions along dim.
    idx = g.where(g.binary("lt", index, g.const(0, dtypes.int64, index.shape)),
                  g.binary("add", index, g.const(n, dtypes.int64, index.shape)), index)
    src = g.shrink(src, tuple((0, s) for s in index.shape))
    pad_to_x = tuple((0, (x.shape[i] - index.shape[i]) if i != dim else 0) for i in range(nd))
    idx = g.pad(g.binary("add", idx, g.const(1, dtypes.int64, idx.shape)), pad_to_x)  # 0 marks "no entry"
    src = g.pad(src, pad_to_x)
    full = tuple(x.shape[i] if i != dim else 1 for i in range(nd)) + (m,)
    perm = tuple(range(dim)) + (nd,) + tuple(range(dim + 1, nd)) + (dim,)
    idx_w = g.expand(g.permute(g.reshape(idx, idx.shape + (1,)), perm), full)
    src_w = g.expand(g.permute(g.reshape(src, src.shape + (1,)), perm), full)
    wide = x.shape + (m,)
    idx_w = g.expand(idx_w, wide)
    src_w = g.expand(src_w, wide)
    pos = g.expand(g.reshape(g.binary("add", g.iota((n,)), g.const(1, dtypes.int64, (n,))),
                             (1,) * dim + (n,) + (1,) * (nd - dim - 1) + (1,)), wide)
    hit = g.binary("eq", idx_w, pos)
    if x.dtype == dtypes.bool_:
        picked = g.reduce("max", g.binary("and", hit, src_w), (nd,))
        any_hit = g.reduce("max", hit, (nd,))
    else:
        picked = g.reduce("sum", g.where(hit, src_w, g.const(0, x.dtype, wide)), (nd,))
        any_hit = g.reduce("max", hit, (nd,))
    picked = g.reshape(picked, x.shape)
    any_hit = g.reshape(any_hit, x.shape)
    if reduce_add:
        if x.dtype == dtypes.bool_:
            return g.binary("or", x, picked)
        return g.binary("add", x, picked)
    return g.where(any_hit, picked, x)


def _scatter(x, dim, index, src, reduce_add):
    node = read(x)
    idx = g.cast(read(index), dtypes.int64)
    if isinstance(src, ZyxTensor):
        s = g.cast(read(src), node.dtype)
    else:
        s = g.const(src, node.dtype, tuple(index.shape))
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    scalar = not node.shape
    if scalar:
        node, idx = g.reshape(node, (1,)), g.reshape(idx, (1,))
        s = g.reshape(s, (1,))
    dim = dim % max(x.dim(), 1)
    out = _scatter_node(node, dim, idx, s, reduce_add)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


@register(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    return _scatter(x, dim, index, src, reduce_add=False)


@register(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, reduce_add=True)


@register(aten.index_put.default)
def index_put(x, indices, values, accumulate=False):
    node = read(x)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == torch.bool \
            and tuple(indices[0].shape) == tuple(x.shape):
        mask = g.cast(read(indices[0]), dtypes.bool_)
        if values.numel() == 1:
            v = g.expand(g.reshape(g.cast(read(values), node.dtype), (1,) * len(node.shape)), node.shape)
            if accumulate:
                return wrap(g.where(mask, g.binary("add", node, v), node), x._storage.device)
            return wrap(g.where(mask, v, node), x._storage.device)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype in (torch.int64, torch.int32) \
            and indices[0].dim() == 1:
        idx = g.cast(read(indices[0]), dtypes.int64)
        m = idx.shape[0]
        vals = g.cast(read(values), node.dtype)
        target = (m,) + node.shape[1:]
        vals = g.expand(g.reshape(vals, (1,) * (len(target) - len(vals.shape)) + vals.shape), target)
        index_full = g.expand(g.reshape(idx, (m,) + (1,) * (len(node.shape) - 1)), target)
        return wrap(_scatter_node(node, 0, index_full, vals, accumulate), x._storage.device)
    raise NotImplementedError("index_put with this index pattern")


@register(aten.index.Tensor)
def index(x, indices):
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype in (torch.int64, torch.int32):
        idx = indices[0]
        out = index_select(x, 0, idx.reshape(-1))
        return wrap(g.reshape(read(out), tuple(idx.shape) + tuple(x.shape[1:])), x._storage.device)
    raise NotImplementedError("index with this index pattern")
