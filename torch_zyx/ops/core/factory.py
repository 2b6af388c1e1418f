"""Creation and copies: empty/fill/copy/_to_copy/arange/linspace/eye/full, triangle indices and
parts (tril/triu), item. The random ops and factories are random/sampling.py's; the ops that change
which storage a tensor views (resize_, set_, as_strided_) are storage_views.py's.
"""

from __future__ import annotations

import math
import sys

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ... import dtypes
from ...lazy import graph as g
from ...record import overlap
from ...record.tensor import Storage, ZyxTensor, read, reinterpreted, wrap, write
from ...record.tensor import meta as meta_of
from ...record.transfer import COMPLEX_TO_ZYX, from_cpu, from_other_device, to_cpu, to_torch_device, zdtype
from ..registry import aten, device_of, register


def _device(index):
    from ...execute.contexts import devices

    all_devices = devices()
    index = 0 if index is None else index
    if index >= len(all_devices):
        raise RuntimeError(f"zyx: invalid device index {index} ({len(all_devices)} zyx devices)")
    return all_devices[index]


def empty_storage(shape, strides, dtype: torch.dtype, device_index) -> ZyxTensor:
    """A tensor with fresh (zero-valued) storage large enough for ``shape``/``strides``."""
    shape = tuple(int(s) for s in shape)
    extent = g.strided_extent(shape, strides)
    complex_dtype = COMPLEX_TO_ZYX.get(dtype)
    if complex_dtype is not None:  # (a real storage of pairs, read as complex: record/complex.py)
        pairs = Storage(g.const(0, dtypes.COMPLEX_PART[complex_dtype], (2 * extent,)), _device(device_index))
        return ZyxTensor(reinterpreted(pairs, complex_dtype), shape, strides, 0)
    storage = Storage(g.const(0, zdtype(dtype), (extent,)), _device(device_index))
    return ZyxTensor(storage, shape, strides, 0)


def _contiguous_for(shape, memory_format) -> tuple[int, ...]:
    if memory_format == torch.channels_last and len(shape) == 4:
        _, c, h, w = shape
        return (h * w * c, 1, w * c, c)
    if memory_format == torch.channels_last_3d and len(shape) == 5:
        _, c, d, h, w = shape
        return (d * h * w * c, 1, h * w * c, w * c, c)
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


def _elsewhere(device) -> bool:
    """Whether a factory's ``device`` argument names a device other than zyx."""
    return device is not None and torch.device(device).type != "zyx"


@register(aten.empty_like.default)
def empty_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    elsewhere = _elsewhere(device)
    index = device.index if isinstance(device, torch.device) and device.type == "zyx" else x.device.index
    shape, strides, _, _ = meta_of(x)
    if not elsewhere and strides == g.contiguous_strides(shape) and memory_format in _KEEPS_CONTIGUOUS:
        # A contiguous input stays contiguous (the common case, without the meta round trip).
        return empty_storage(shape, strides, dtype or x.dtype, index)
    meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    meta = torch.empty_like(meta, dtype=dtype, memory_format=memory_format or torch.preserve_format)
    if elsewhere:  # (``torch.ones_like(x, device="cpu")``: the result is on that device)
        return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=device)
    return empty_storage(meta.shape, meta.stride(), meta.dtype, index)


@register(aten.empty_strided.default)
def empty_strided_lowering(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return empty_strided(size, stride, dtype, layout, device, pin_memory)


@register(aten.empty.memory_format)
def empty_lowering(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return empty_memory_format(size, dtype, layout, device, pin_memory, memory_format)


@register(aten.fill_.Scalar, aten.fill_.Tensor)
def fill_(x, value):
    if isinstance(value, torch.Tensor):  # fill_.Tensor refuses an expanded tensor, fill_.Scalar takes it
        overlap.check_internal(x)
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


def _plain(src):
    """``src`` as a plain tensor when it is a CPU tensor subclass: some override what a copy
    reads (an ``UninitializedParameter`` moved with ``.to("zyx")`` raises at ``.shape``)."""
    if isinstance(src, ZyxTensor) or type(src) is torch.Tensor or not isinstance(src, torch.Tensor):
        return src
    with torch._C.DisableTorchFunctionSubclass():
        return src.as_subclass(torch.Tensor)


def _source_node(src, device):
    if isinstance(src, ZyxTensor):
        if src._storage.device is not device:
            # Cross-device: device to device where both can (CUDA GPUs), else through the host.
            return from_other_device(src, device)
        return read(src)
    return from_cpu(src, device)


@register(aten.copy_.default)
def copy_(dst, src, non_blocking=False):
    if not isinstance(dst, ZyxTensor):
        dst.copy_(to_torch_device(src, dst.device))  # (through the host unless dst is on a GPU)
        return dst
    src = _plain(src)
    overlap.check_internal(dst)
    overlap.check_inputs(dst, (src,))
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
        # (``x``'s reference count tells the read-back whether only the calling expression holds it)
        return to_cpu(x, sys.getrefcount(x)).to(dtype)
    if device is not None and torch.device(device).type == "cuda":  # torch's own GPU tensors
        return to_torch_device(x, torch.device(device)).to(dtype)
    target = _device(torch.device(device).index) if device is not None else x._storage.device
    node = _source_node(x, target)
    return _laid_out(x, g.cast(node, zdtype(dtype)), dtype, target, memory_format)


@register(torch.ops.prims.device_put.default)
def device_put(x, device, non_blocking=False):
    """A copy of ``x`` on ``device`` (PyTorch's reference decompositions, e.g. of shrink and
    padding backwards, move their scalar operands with it)."""
    return _to_copy(x, device=device, non_blocking=non_blocking)


def copy_strides(x, memory_format) -> tuple | None:
    """The strides of a copy of ``x`` in ``memory_format`` as CPU torch's clone and ``to`` give
    them (preserve_format: a dense tensor's own strides, those of size-1 dimensions too, which
    later ops' layouts read; channels_last: NHWC strides), or None where they are contiguous."""
    shape, strides = meta_of(x)[:2]
    contiguous = g.contiguous_strides(shape)
    if memory_format is torch.contiguous_format or (
            memory_format in (None, torch.preserve_format) and strides == contiguous):
        return None  # (the common case, without a meta tensor: casts in every step)
    copied = torch.empty_strided(shape, strides, dtype=x.dtype, device="meta")
    copied = copied.clone(memory_format=memory_format or torch.preserve_format)
    return None if tuple(copied.stride()) == contiguous else tuple(copied.stride())


def _laid_out(x, node, dtype, device, memory_format):
    """A new tensor holding ``node`` (``x``'s values) with the strides of a copy of ``x`` in
    ``memory_format`` (``copy_strides``)."""
    strides = copy_strides(x, memory_format)
    if strides is None:
        return wrap(node, device)
    out = empty_storage(tuple(x.shape), strides, dtype, device.index)
    write(out, node)
    return out


@register(aten.clone.default)
def clone(x, memory_format=None):
    return _laid_out(x, read(x), x.dtype, x._storage.device, memory_format)


@register(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def lift_fresh(x):
    if isinstance(x, ZyxTensor):
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None:
            # A constant made while a function is traced with fake tensors (``torch.tensor(-inf,
            # device=x.device)`` in torch.masked): torch made it a real zyx tensor below the
            # modes, which decline subclasses, so it would stay untracked and meet fake tensors.
            # Lifted as CPU torch would lift it (a constant the tracer records, its fake made by
            # the fake mode), then moved to the device by a recorded copy.
            with _disable_current_modes():  # (its values: a real CPU tensor, not a fake one)
                values = to_cpu(x)
                scalar = values.item() if values.numel() == 1 else None
            if scalar is not None:
                # A traced ``full``: a lifted one-element constant is one the fake mode computes
                # with (constant propagation), and its copy to zyx below the modes has no kernel.
                return torch.full(x.shape, scalar, dtype=x.dtype, device=x.device)
            return torch.ops.aten.lift_fresh.default(values).to(x.device)
        return x
    return wrap(from_cpu(x, device_of(x) or _device(0)), _device(0))


@register(aten._local_scalar_dense.default)
def local_scalar_dense(x):
    return to_cpu(x).item()


def _arange_size(start, end, step, dtype) -> tuple[int, torch.dtype] | None:
    """(length, dtype) of ``torch.arange(start, end, step, dtype=dtype)`` for Python int/float
    bounds that ATen accepts, computed as ATen does (the length in double, or exactly for
    integers); None for anything else, which the meta tensor's checks and errors handle
    (a meta arange costs ~100 us: every transformer forward makes position ids)."""
    values = (start, end, step)
    if not all(v.__class__ is int or v.__class__ is float for v in values):
        return None
    all_ints = all(v.__class__ is int for v in values)
    if dtype is None:
        dtype = torch.int64 if all_ints else torch.get_default_dtype()
    if dtype == torch.bool or (dtype == torch.int64 and not all_ints):
        return None  # (int64 results of float bounds truncate them first: the meta path's rule)
    if not all(map(math.isfinite, values)):
        return None
    if step == 0 or (step > 0 and end < start) or (step < 0 and end > start):
        return None
    if all_ints:
        return -((start - end) // step), dtype
    # Floating results, and the narrower integer ones, whose length CPU torch takes from the
    # bounds as given (their values from the truncated start and step: see ``arange``).
    return math.ceil((float(end) - float(start)) / float(step)), dtype


@register(aten.arange.start_step)
def arange(start, end=None, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    size = _arange_size(start, end, step, dtype)
    if size is None:
        cpu_meta = torch.arange(start, end, step, dtype=dtype, device="meta")
        size = cpu_meta.numel(), cpu_meta.dtype
    n, out_torch_dtype = size
    out_dtype = zdtype(out_torch_dtype)
    index = torch.device(device).index if device is not None else None
    compute = dtypes.float64 if out_dtype.is_float else dtypes.int64
    if not out_dtype.is_float:
        # CPU torch's integer aranges count from the truncated start by the truncated step
        # (arange(0, 1, 0.1, dtype=torch.int32) is ten zeros).
        start, step = int(start), int(step)
    values = g.binary("add", g.const(start, compute, (n,)),
                      g.binary("mul", g.cast(g.iota((n,)), compute), g.const(step, compute, (n,))))
    return wrap(g.cast(values, out_dtype), _device(index))


def arange_end(end, dtype=None, layout=None, device=None, pin_memory=None):
    """``aten::arange(end)``, registered as the device's kernel (``torch_zyx._register``)."""
    return arange(0, end, 1, dtype, layout, device, pin_memory)


def arange_start_end(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    """``aten::arange.start(start, end)``, registered as the device's kernel."""
    return arange(start, end, 1, dtype, layout, device, pin_memory)


def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """``aten::_efficientzerotensor``, registered as the device's kernel (it has no composite
    form): forward AD's zero tangents. CPU and CUDA make a ZeroTensor, zeros no op ever reads;
    here they are plain zeros, which a kernel folds as constants all the same."""
    index = torch.device(device).index if device is not None else None
    dtype = dtype or torch.get_default_dtype()
    return wrap(g.const(0, zdtype(dtype), tuple(int(s) for s in size)), _device(index))


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
                torch.uint8: "Byte", torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16",
                torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64"}
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


def _triangle_part(x, diagonal: int, lower: bool):
    """``x`` with the elements off its lower (upper) triangle zeroed, over the last two dims:
    one mask from two iotas instead of PyTorch's reference (two aranges, a comparison, a
    where: ~0.3-0.5 ms of recording; a causal mask makes one every step)."""
    node = read(x)
    shape = node.shape
    if len(shape) < 2:
        raise NotImplementedError  # (ATen's error, from the reference)
    if node.numel == 0:
        return wrap(node, x._storage.device)
    rows, cols = shape[-2:]
    row = g.expand(g.reshape(g.iota((rows,)), (rows, 1)), (rows, cols))
    col = g.expand(g.reshape(g.iota((cols,)), (1, cols)), (rows, cols))
    offset = g.binary("sub", col, row)
    limit = g.const(int(diagonal), dtypes.int64, (rows, cols))
    keep = g.binary("le", offset, limit) if lower else g.binary("le", limit, offset)
    keep = g.expand(g.reshape(keep, (1,) * (len(shape) - 2) + (rows, cols)), shape)
    return wrap(g.where(keep, node, g.const(0, node.dtype, shape)), x._storage.device)


@register(aten.tril.default)
def tril(x, diagonal=0):
    return _triangle_part(x, diagonal, lower=True)


@register(aten.triu.default)
def triu(x, diagonal=0):
    return _triangle_part(x, diagonal, lower=False)


@register(aten.full_like.default)
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    out = empty_like(x, dtype=dtype, device=device, memory_format=memory_format)
    if out.__class__ is not ZyxTensor:  # on another device
        return out.fill_(fill_value)
    return fill_(out, fill_value)


# ones_like/zeros_like and new_zeros/new_ones/new_full: what PyTorch's references decompose
# them into, without the trip through the dispatcher (autograd seeds every backward with a
# ones_like; ~20 -> ~10 us of recording). new_* results on another device: the references.
@register(aten.ones_like.default)
def ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 1, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
                     memory_format=memory_format)


@register(aten.zeros_like.default)
def zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(x, 0, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
                     memory_format=memory_format)


@register(aten.new_full.default)
def new_full(x, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    if _elsewhere(device):
        raise NotImplementedError
    return full(size, fill_value, dtype=dtype or x.dtype, device=device or x.device)


@register(aten.new_zeros.default)
def new_zeros(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return new_full(x, size, 0, dtype=dtype, device=device)


@register(aten.new_ones.default)
def new_ones(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return new_full(x, size, 1, dtype=dtype, device=device)


@register(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = torch.bool if isinstance(fill_value, bool) else (
            torch.int64 if isinstance(fill_value, int) else torch.get_default_dtype())
    out = empty_memory_format(size, dtype=dtype, device=device)
    return fill_(out, fill_value)
