"""Indexing lowerings: index_select, gather, scatter(_add), masked_fill, index, index_put.

Data-dependent reads are gathers (graph.gather): each output element is read from the
position its index entry names, in the kernel that uses it, work proportional to the output.
Data-dependent writes (scatter, scatter_add, index_put) are scatters (graph.scatter): each
entry written or added where it points, work proportional to the entries. index_fill and
embedding_renorm_ mark the named positions with a one-hot compare over the indexed axis.
"""

from __future__ import annotations

import math
import warnings

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.checks import check_index
from ...record.tensor import ZyxTensor, read, wrap, write
from ...record.transfer import from_cpu, zdtype
from ..math.reduce import check_dim
from ..registry import aten, dtype_name, operand, register, wrap_dim


def _wrap_negative(index: Node, n: int) -> Node:
    """The int64 ``index`` with negative entries counted from the end of an axis of ``n``."""
    return g.where(g.binary("lt", index, g.const(0, dtypes.int64, index.shape)),
                   g.binary("add", index, g.const(n, dtypes.int64, index.shape)), index)


def index_take(x: Node, dim: int, index: Node) -> Node:
    """``x`` with axis ``dim`` replaced by the entries of 1-D ``index`` (int64, may be negative):
    one gather, each output element read from where its entry points."""
    n = x.shape[dim]
    nd = len(x.shape)
    m = index.shape[0]
    shape = x.shape[:dim] + (m,) + x.shape[dim + 1:]
    spread = g.expand(g.reshape(_wrap_negative(index, n), (1,) * dim + (m,) + (1,) * (nd - dim - 1)), shape)
    return g.gather(x, spread, dim)


# CPU torch's messages for an index value out of range ({index}: the entry; checks.py).
OUT_OF_RANGE = "index out of range in self"


def out_of_bounds(dim: int, size: int) -> str:
    return f"index {{index}} is out of bounds for dimension {dim} with size {size}"


def _check_index_dtype(index, name: str) -> None:
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32 or int64 for index")


@register(aten.index_select.default)
def index_select(x, dim, index):
    _check_index_dtype(index, "index_select")
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    node = read(x)
    if not node.shape:
        node = g.reshape(node, (1,))
    dim = wrap_dim(dim, x.dim())
    idx = g.cast(g.reshape(read(index), (index.numel(),)), dtypes.int64)
    if dim == 1 and x.dim() > 1:  # (ATen's kernel for dim 1 has an error of its own)
        check_index(idx, 0, node.shape[dim], x._storage.device, RuntimeError,
                    f"INDICES element is out of DATA bounds, id={{index}} axis_dim={node.shape[dim]}")
    else:
        check_index(idx, 0, node.shape[dim], x._storage.device, IndexError, OUT_OF_RANGE)
    out = index_take(node, dim, idx)
    if x.dim() == 0:
        out = g.reshape(out, ())
    return wrap(out, x._storage.device)


@register(aten.take.default)
def take(x, index):
    """x.flatten()[index], in index's shape (negative entries count from the end)."""
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {dtype_name(index.dtype)}")
    total, count = x.numel(), index.numel()
    device = x._storage.device
    if count == 0:
        return wrap(g.const(0, zdtype(x.dtype), tuple(index.shape)), device)
    if total == 0:
        raise IndexError("take(): tried to take from an empty tensor")
    idx = g.reshape(read(index), (count,))
    check_index(idx, -total, total, device, IndexError,
                f"out of range: tried to access index {{index}} on a tensor of {total} elements.")
    out = index_take(g.reshape(read(x), (total,)), 0, idx)
    return wrap(g.reshape(out, tuple(index.shape)), device)


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x, dim, index, value):
    """x with the slices along ``dim`` that ``index`` names set to ``value`` (negative entries
    count from the end): each position compared with every entry, no host round trip."""
    # ATen's order: the Tensor overload checks its value's dimensions and calls the Scalar one
    # with value.item(), which checks the index dtype, a complex value, dim, the index's dims.
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    if index.dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    complex_value = value.dtype.is_complex if isinstance(value, torch.Tensor) else isinstance(value, complex)
    if complex_value and not x.dtype.is_complex:
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    d = check_dim(x, dim)
    if index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    node = read(x)
    device = x._storage.device
    if index.numel() == 0:
        return wrap(node, device)
    shape = node.shape or (1,)
    node = g.reshape(node, shape)
    n, m = shape[d], index.numel()
    idx = g.reshape(read(index), (m,))
    check_index(idx, -n, n, device, IndexError, out_of_bounds(d, n))
    idx = _wrap_negative(idx, n)
    wide = (n, m)
    named = g.binary("eq", g.expand(g.reshape(g.iota((n,)), (n, 1)), wide),
                     g.expand(g.reshape(idx, (1, m)), wide))
    named = g.reshape(g.reduce("max", named, (1,)), (1,) * d + (n,) + (1,) * (len(shape) - d - 1))
    if isinstance(value, ZyxTensor):
        fill = operand(value, x.dtype)
    else:  # a Python number, or a CPU scalar tensor
        fill = g.const(value.item() if isinstance(value, torch.Tensor) else value, node.dtype)
    fill = g.expand(g.reshape(g.cast(fill, node.dtype), (1,) * len(shape)), shape)
    out = g.where(g.expand(named, shape), fill, node)
    return wrap(g.reshape(out, tuple(x.shape)), device)


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    flat = g.cast(g.reshape(read(indices), (indices.numel(),)), dtypes.int64)
    check_index(flat, 0, weight.shape[0], weight._storage.device, IndexError, OUT_OF_RANGE)
    out = index_take(read(weight), 0, flat)
    return wrap(g.reshape(out, tuple(indices.shape) + (weight.shape[1],)), weight._storage.device)


def row_hits(rows: int, flat: Node) -> Node:
    """(rows, m) bool: whether entry k of the int64 indices ``flat`` (m,) names row r."""
    wide = (rows, flat.shape[0])
    return g.binary("eq", g.expand(g.reshape(g.iota((rows,)), (rows, 1)), wide),
                    g.expand(g.reshape(flat, (1, flat.shape[0])), wide))


@register(aten.embedding_renorm_.default)
def embedding_renorm_(weight, indices, max_norm, norm_type):
    """Rows of ``weight`` named in ``indices`` whose ``norm_type``-norm exceeds ``max_norm`` are
    scaled down to it (in place; ATen's 1e-7 guard). A row is "named" when any index equals it:
    a one-hot any-reduce, so duplicates need no host-side unique()."""
    w = read(weight)
    rows, cols = w.shape
    acc = dtypes.float32 if w.dtype in (dtypes.float16, dtypes.bfloat16) else w.dtype
    wf = g.cast(w, acc)
    flat = g.reshape(g.cast(read(indices), dtypes.int64), (indices.numel(),))
    m = indices.numel()
    named = row_hits(rows, flat)
    named = g.reduce("max", named, (1,)) if m else g.const(False, dtypes.bool_, (rows, 1))
    a = g.unary("abs", wf)
    if norm_type == 1:
        norm = g.reduce("sum", a, (1,))
    elif norm_type == 2:
        norm = g.unary("sqrt", g.reduce("sum", g.binary("mul", a, a), (1,)))
    else:
        p = g.const(float(norm_type), acc, a.shape)
        norm = g.reduce("sum", g.binary("pow", a, p), (1,))
        norm = g.binary("pow", norm, g.const(1.0 / norm_type, acc, norm.shape))
    over = g.binary("and", named, g.binary("lt", g.const(max_norm, acc, norm.shape), norm))
    scale = g.binary("div", g.const(max_norm, acc, norm.shape),
                     g.binary("add", norm, g.const(1e-7, acc, norm.shape)))
    scale = g.where(over, scale, g.const(1.0, acc, norm.shape))
    write(weight, g.cast(g.binary("mul", wf, g.expand(scale, (rows, cols))), w.dtype))
    return weight


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {mask.dtype}")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    raw = value.item() if isinstance(value, torch.Tensor) and not isinstance(value, ZyxTensor) else value
    if isinstance(raw, complex) or (isinstance(value, torch.Tensor) and value.is_complex()):
        raise RuntimeError(f"value cannot be converted to type {x.dtype} without overflow")
    node = read(x)
    m = read(mask)
    # Out of place, the input broadcasts with the mask (ATen expands it first); the in-place
    # form reaches here through the dispatcher, which rejects a result of another shape.
    shape = tuple(torch.broadcast_shapes(node.shape, m.shape))
    node = g.expand(g.reshape(node, (1,) * (len(shape) - len(node.shape)) + node.shape), shape)
    m = g.expand(g.reshape(m, (1,) * (len(shape) - len(m.shape)) + m.shape), shape)
    v = read(value) if isinstance(value, ZyxTensor) else g.const(raw, node.dtype)
    v = g.expand(g.reshape(g.cast(v, node.dtype), (1,) * len(shape)), shape)
    return wrap(g.where(g.cast(m, dtypes.bool_), v, node), x._storage.device)


def _gather_node(x: Node, dim: int, index: Node) -> Node:
    """out[i0.., ik, ..] = x[i0.., index[i0.., ik, ..], ..] for index of x's rank (its other
    axes at most x's)."""
    n = x.shape[dim]
    table = g.shrink(x, tuple((0, s) if i != dim else (0, n) for i, s in enumerate(index.shape)))
    return g.gather(table, _wrap_negative(index, n), dim)


@register(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    d = wrap_dim(dim, x.dim())  # (first, as ATen's meta function)
    if index.dtype not in (torch.int64, torch.int32) and index.numel():
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if index.numel() == 0:  # ATen returns the empty result before checking ranks
        return wrap(g.const(0, zdtype(x.dtype), tuple(index.shape)), x._storage.device)
    if index.dim() != x.dim() and x.dim() and index.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for i in range(index.dim()):
        if i != d and x.dim() and index.shape[i] > x.shape[i]:
            raise RuntimeError(f"Size does not match at dimension {i} expected index {list(index.shape)} "
                               f"to be smaller than self {list(x.shape)} apart from dimension {d}")
    node = read(x)
    idx = g.cast(read(index), dtypes.int64)
    size = x.shape[d] if x.dim() else 1
    check_index(idx, 0, size, x._storage.device, RuntimeError, out_of_bounds(d, size))
    if not node.shape:
        node = g.reshape(node, (1,))
        idx = g.reshape(idx, (1,) * max(1, len(idx.shape))) if idx.shape else g.reshape(idx, (1,))
        out = _gather_node(node, 0, idx)
        return wrap(g.reshape(out, tuple(index.shape)), x._storage.device)
    if index.numel() == 0:
        return wrap(g.const(0, node.dtype, tuple(index.shape)), x._storage.device)
    return wrap(_gather_node(node, d, idx), x._storage.device)


_HALVES = (dtypes.float16, dtypes.bfloat16)


def add_at(x: Node, dim: int, index: Node, src: Node, widen_halves: bool) -> Node:
    """x with src[c] added at c with c[dim] = index[c] (int64 entries of src's shape, negative
    ones counted from the end; checked by the caller), in entry order as CPU torch adds them.
    Each addition rounds to x's dtype (index_put's accumulate, put), or with ``widen_halves``
    half values are added in float32 and rounded once (scatter_add, index_add: CPU torch's
    kernels accumulate them in float). Bools are added as int32 (an or)."""
    index = _wrap_negative(index, x.shape[dim])
    if x.dtype == dtypes.bool_:
        wide = dtypes.int32
    elif widen_halves and x.dtype in _HALVES:
        wide = dtypes.float32
    else:
        return g.scatter(x, index, src, dim, "add")
    return g.cast(g.scatter(g.cast(x, wide), index, g.cast(src, wide), dim, "add"), x.dtype)


def _scatter_node(x: Node, dim: int, index: Node, src: Node, reduce_add: bool,
                  widen_halves: bool = False) -> Node:
    """x with x[.., index[i], ..] (+)= src[i] along ``dim`` (graph.scatter: of several entries
    for one element the last one written, or all added in order: ``add_at``)."""
    src = g.shrink(src, tuple((0, s) for s in index.shape))
    if not reduce_add:
        return g.scatter(x, _wrap_negative(index, x.shape[dim]), src, dim, "set")
    return add_at(x, dim, index, src, widen_halves)


def _scatter(x, dim, index, src, reduce_add):
    node = read(x)
    idx = g.cast(read(index), dtypes.int64)
    if isinstance(src, ZyxTensor):
        s = g.cast(read(src), node.dtype)
    else:
        s = g.const(src, node.dtype, tuple(index.shape))
    if index.numel() == 0:
        return wrap(node, x._storage.device)
    dim = dim % max(x.dim(), 1)
    size = x.shape[dim] if x.dim() else 1
    check_index(idx, 0, size, x._storage.device, RuntimeError, out_of_bounds(dim, size))
    if not node.shape:
        node, idx = g.reshape(node, (1,)), g.reshape(idx, (1,))
        s = g.reshape(s, (1,))
    out = _scatter_node(node, dim, idx, s, reduce_add, widen_halves=True)
    return wrap(g.reshape(out, tuple(x.shape)), x._storage.device)


def _check_scatter(name, x, index, src):
    if index.dtype not in (torch.int64, torch.int32) and index.numel():  # empty: any dtype, a no-op
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if isinstance(src, torch.Tensor) and src.dtype != x.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    if index.numel() == 0:  # ATen returns early for an empty index, before the rank checks
        return
    if index.dim() and x.dim() and index.dim() != x.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, torch.Tensor) and index.dim() and src.dim() and index.dim() != src.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")


@register(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    _check_scatter("scatter", x, index, src)
    return _scatter(x, dim, index, src, reduce_add=False)


@register(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    _check_scatter("scatter", x, index, src)  # (ATen names scatter_add's checks "scatter()")
    return _scatter(x, dim, index, src, reduce_add=True)


def _on_device(indices, device) -> list:
    """Host index tensors (``x[cpu_idx]``: PyTorch does not move them for us) transferred."""
    return [wrap(from_cpu(i, device), device) if isinstance(i, torch.Tensor) and not isinstance(i, ZyxTensor)
            else i for i in indices]


UINT8_DEPRECATED = "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead."


def _check_mask(x, mask, start: int) -> None:
    """ATen's expandTensors: a mask covering ``x``'s dims from ``start`` has their sizes (checked
    before its true positions are counted; a uint8 mask warns that it is deprecated)."""
    if mask.dtype == torch.uint8:
        warnings.warn(UINT8_DEPRECATED, UserWarning, stacklevel=6)
    for j in range(mask.dim()):
        if start + j < x.dim() and mask.shape[j] != x.shape[start + j]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not match the "
                             f"shape of the indexed tensor {list(x.shape)} at index {start + j}")


def _as_long_indices(x, indices) -> tuple[list, set[int]]:
    """Indices with every bool mask replaced by the long index tensors of its true positions,
    and the positions in that list of the tensors that came from masks."""
    out, from_masks = [], set()
    for idx in indices:
        if idx is not None and idx.dtype in (torch.bool, torch.uint8):
            _check_mask(x, idx, len(out))
            positions = nonzero(idx).unbind(1)
            from_masks.update(range(len(out), len(out) + len(positions)))
            out.extend(positions)
        else:
            out.append(idx)
    return out, from_masks


def _advanced(x, indices):
    """Flatten PyTorch advanced indexing to one axis.

    Returns (node with the indexed dims flattened into axis 0 and the others after it in
    order, flat index node of the broadcast index shape B, B, rest dims, where B goes in the
    result: 0 or the first indexed dim when the indexed dims are adjacent)."""
    indices, from_masks = _as_long_indices(x, _on_device(indices, x._storage.device))
    if len(indices) > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()} (got {len(indices)})")
    indexed = [d for d, idx in enumerate(indices) if idx is not None]
    for d in indexed:
        if indices[d].dtype not in (torch.int64, torch.int32):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    try:
        shape = tuple(torch.broadcast_shapes(*(tuple(indices[d].shape) for d in indexed)))
    except RuntimeError:
        shapes = ", ".join(str(list(indices[d].shape)) for d in indexed)
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{shapes}") from None
    if math.prod(shape) and any(x.shape[d] == 0 for d in indexed):
        # (ATen's AdvancedIndex: no entry of a non-empty index can be in range of an empty dim)
        raise IndexError("index is out of bounds for dimension with size 0")
    node = read(x)
    rest = [d for d in range(x.dim()) if d not in indexed]
    node = g.permute(node, tuple(indexed + rest))
    sizes = [x.shape[d] for d in indexed]
    total = 1
    for n in sizes:
        total *= n
    node = g.reshape(node, (total,) + tuple(x.shape[d] for d in rest))
    longs = {d: g.cast(read(indices[d]), dtypes.int64) for d in indexed}
    for d, n in zip(indexed, sizes):
        if d not in from_masks:  # (a mask's positions are in range by construction)
            check_index(longs[d], -n, n, x._storage.device, IndexError, out_of_bounds(d, n))
    flat = None
    stride = 1
    for d, n in reversed(list(zip(indexed, sizes))):
        idx = longs[d]
        idx = g.expand(g.reshape(idx, (1,) * (len(shape) - len(idx.shape)) + idx.shape), shape)
        idx = _wrap_negative(idx, n)
        term = g.binary("mul", idx, g.const(stride, dtypes.int64, shape)) if stride != 1 else idx
        flat = term if flat is None else g.binary("add", flat, term)
        stride *= n
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    position = indexed[0] if adjacent else 0
    return node, flat, shape, tuple(x.shape[d] for d in rest), position


def _place(nb: int, nrest: int, position: int) -> tuple[int, ...]:
    """Permutation taking (B..., rest...) to the result order with B at ``position``."""
    b_axes = list(range(nb))
    r_axes = list(range(nb, nb + nrest))
    return tuple(r_axes[:position] + b_axes + r_axes[position:])


@register(aten.index.Tensor)
def index(x, indices):
    if not indices:
        raise IndexError("at least one index must be provided")
    indices = _on_device(indices, x._storage.device)
    if not any(i is not None for i in indices):
        return wrap(read(x), x._storage.device)
    node, flat, shape, rest, position = _advanced(x, indices)
    m = 1
    for s_ in shape:
        m *= s_
    out = index_take(node, 0, g.reshape(flat, (m,))) if m and node.shape[0] else \
        g.const(0, node.dtype, (m,) + rest)
    out = g.reshape(out, shape + rest)
    out = g.permute(out, _place(len(shape), len(rest), position))
    return wrap(out, x._storage.device)


def _expandable(shape, target) -> bool:
    """ATen's is_expandable_to: ``shape`` broadcasts to ``target`` without changing it."""
    if len(shape) > len(target):
        return False
    return all(n == 1 or n == t for n, t in zip(reversed(shape), reversed(target)))


def _check_values(x, values, target) -> None:
    """make_index_put_iterator's checks, in its order: the values expand to the indexing result
    ``target``, then they have ``x``'s dtype."""
    vshape = tuple(values.shape) if isinstance(values, torch.Tensor) else ()
    if not _expandable(vshape, tuple(target)):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(vshape)} cannot be broadcast "
                           f"to indexing result of shape {list(target)}")
    if isinstance(values, torch.Tensor) and values.dtype != x.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{dtype_name(x.dtype)} for the destination and {dtype_name(values.dtype)} "
                           "for the source.")


@register(aten.index_put.default)
def index_put(x, indices, values, accumulate=False):
    indices = _on_device(indices, x._storage.device)
    if all(i is None for i in indices):
        # ATen indexes nothing: its values check against the whole tensor, then its kernel
        # asserts (an internal error) that it has an index.
        _check_values(x, values, x.shape)
        raise RuntimeError("index_put_: at least one index tensor must be provided")
    if isinstance(values, ZyxTensor):
        vnode = g.cast(read(values), zdtype(x.dtype))
    elif isinstance(values, torch.Tensor) and values.numel() != 1:
        # ``x[mask] = cpu_tensor`` reaches us with the values still on the host: a transfer.
        vnode = g.cast(from_cpu(values, x._storage.device), zdtype(x.dtype))
    else:
        vnode = operand(values, x.dtype)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == torch.bool \
            and tuple(indices[0].shape) == tuple(x.shape) and vnode.numel == 1:
        # (ATen fills a mask with a host value; zyx's device values reach its dtype check)
        _check_values(x, values, tuple(values.shape) if isinstance(values, torch.Tensor) else ())
        # A full-shape mask with one value: an elementwise select, no data-dependent shape.
        node = read(x)
        mask = g.cast(read(indices[0]), dtypes.bool_)
        v = g.expand(g.reshape(vnode, (1,) * len(node.shape)), node.shape)
        if accumulate:
            v = g.binary("or" if node.dtype == dtypes.bool_ else "add", node, v)
        return wrap(g.where(mask, v, node), x._storage.device)
    node, flat, shape, rest, position = _advanced(x, indices)
    # values broadcast to the result layout of x[indices], then back to (B..., rest...).
    target = tuple(_result_shape(shape, rest, position))
    _check_values(x, values, target)
    m = math.prod(shape)
    if m == 0 or node.shape[0] == 0:
        return wrap(read(x), x._storage.device)
    vals = g.expand(g.reshape(vnode, (1,) * (len(target) - len(vnode.shape)) + vnode.shape), target)
    perm = _place(len(shape), len(rest), position)
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    vals = g.reshape(g.permute(vals, inverse), (m,) + rest)
    index_full = g.expand(g.reshape(flat, (m,) + (1,) * len(rest)), (m,) + rest)
    out = _scatter_node(node, 0, index_full, vals, accumulate)
    # Undo the flattening: (N, rest...) → indexed dims + rest → x's order.
    indexed = [d for d in range(x.dim()) if d not in _rest_dims(x, indices)]
    order = indexed + _rest_dims(x, indices)
    out = g.reshape(out, tuple(x.shape[d] for d in order))
    out = g.permute(out, tuple(order.index(d) for d in range(x.dim())))
    return wrap(out, x._storage.device)


def _rest_dims(x, indices) -> list[int]:
    expanded = []
    for idx in indices:
        if idx is not None and idx.dtype in (torch.bool, torch.uint8):
            expanded.extend([idx] * idx.dim())
        else:
            expanded.append(idx)
    return [d for d in range(x.dim()) if d >= len(expanded) or expanded[d] is None]


def _result_shape(shape, rest, position):
    return tuple(rest[:position]) + tuple(shape) + tuple(rest[position:])


def inclusive_count(flag: Node) -> Node:
    """rank[j] = number of true entries of 1-D bool ``flag`` up to and including j (int64)."""
    n = flag.shape[0]
    as_int = g.cast(flag, dtypes.int64)
    wide = (n, n)
    rows = g.expand(g.reshape(g.iota((n,)), (n, 1)), wide)
    cols = g.expand(g.reshape(g.iota((n,)), (1, n)), wide)
    upto = g.where(g.binary("le", cols, rows), g.expand(g.reshape(as_int, (1, n)), wide),
                   g.const(0, dtypes.int64, wide))
    return g.reshape(g.reduce("sum", upto, (1,)), (n,))


def true_positions(flag: Node, device) -> tuple[int, Node | None]:
    """(count, positions) of the true entries of 1-D bool ``flag``. The count is a
    data-dependent shape: it is realized (DESIGN.md lists that as a realization trigger);
    the positions stay lazy."""
    n = flag.shape[0]
    as_int = g.cast(flag, dtypes.int64)
    count = int(wrap(g.reshape(g.reduce("sum", as_int, (0,)), ()), device).item()) if n else 0
    if count == 0:
        return 0, None
    return count, ranked_positions(flag, count)[0]


def ranked_positions(flag: Node, rows: int) -> tuple[Node, Node]:
    """(positions, found), each (rows,): entry r is the position j of the (r+1)-th true entry
    of 1-D bool ``flag`` (the j with inclusive count r+1 that is itself true), and whether
    there is one (position 0 where not)."""
    n = flag.shape[0]
    wide = (rows, n)
    k = g.expand(g.reshape(g.binary("add", g.iota((rows,)), g.const(1, dtypes.int64, (rows,))), (rows, 1)),
                 wide)
    hit = g.binary("and", g.binary("eq", g.expand(g.reshape(inclusive_count(flag), (1, n)), wide), k),
                   g.expand(g.reshape(flag, (1, n)), wide))
    pos = g.expand(g.reshape(g.iota((n,)), (1, n)), wide)
    positions = g.reduce("sum", g.where(hit, pos, g.const(0, dtypes.int64, wide)), (1,))
    found = g.reduce("max", g.cast(hit, dtypes.int64), (1,))
    return g.reshape(positions, (rows,)), g.reshape(g.cast(found, dtypes.bool_), (rows,))


@register(aten.nonzero.default)
def nonzero(x):
    """Positions of non-zero entries, shape (count, ndim) (the count is realized)."""
    node = g.reshape(g.cast(read(x), dtypes.bool_), (x.numel(),))
    count, flat = true_positions(node, x._storage.device)
    if count == 0 or x.dim() == 0:
        return wrap(g.const(0, dtypes.int64, (count, x.dim())), x._storage.device)
    return wrap(_coordinates(flat, tuple(x.shape)), x._storage.device)


@register(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    """``nonzero`` cut or padded with ``fill_value`` to ``size`` rows: a static shape, so
    nothing is realized. Row r is the position whose inclusive count of true entries is r + 1."""
    device = x._storage.device
    n = x.numel()
    if x.dim() == 0 or size == 0 or n == 0:
        return wrap(g.const(fill_value if x.dim() else 0, dtypes.int64, (size, x.dim())), device)
    flat, found = ranked_positions(g.reshape(g.cast(read(x), dtypes.bool_), (n,)), size)
    out_shape = (size, x.dim())
    found = g.expand(g.reshape(found, (size, 1)), out_shape)
    coords = _coordinates(flat, tuple(x.shape))
    return wrap(g.where(found, coords, g.const(fill_value, dtypes.int64, out_shape)), device)


def _coordinates(flat: Node, shape: tuple[int, ...]) -> Node:
    """(rows, len(shape)) coordinates of the flat positions ``flat`` (rows,) in ``shape``."""
    rows = flat.shape[0]
    coords = []
    stride = math.prod(shape)
    for size in shape:
        stride //= max(size, 1)
        c_ = g.binary("idiv", flat, g.const(max(stride, 1), dtypes.int64, (rows,)))
        coords.append(g.reshape(g.binary("mod", c_, g.const(size, dtypes.int64, (rows,))), (rows, 1)))
    out = coords[0]
    for i, c_ in enumerate(coords[1:], start=1):
        out = g.binary("add", g.pad(out, ((0, 0), (0, 1))), g.pad(c_, ((0, 0), (i, 0))))
    return out
