"""Values crossing between zyx devices and the host or torch's own devices: ``.cpu()``, ``.to("zyx")``,
copies to torch ``cuda`` tensors and between zyx devices, and the dtype maps they use.

Stage 1 support (record/, DESIGN.md "Tensors, storages, views, mutation"): a read-back realizes the
storage (pending.py) and copies its buffer out through the device's pool; an upload copies a CPU
tensor into a new buffer and gives a ``BUFFER`` node. On the CPU backend, whose buffers are host
memory, large copies run on torch's threads, and the read-back of a value computed for it alone
(``(a * b).cpu()``) has its kernel write the CPU tensor directly (``_read_directly``).
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from typing import TYPE_CHECKING

import torch

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..memory.events import wait_all
from .checks import pending_checks
from .pending import deferred_errors, is_lazy, raise_deferred, realize_all, realize_into

if TYPE_CHECKING:
    from .tensor import Storage, ZyxTensor

TORCH_TO_ZYX = {
    torch.float16: dtypes.float16, torch.bfloat16: dtypes.bfloat16, torch.float32: dtypes.float32,
    torch.float64: dtypes.float64, torch.int8: dtypes.int8, torch.int16: dtypes.int16,
    torch.int32: dtypes.int32, torch.int64: dtypes.int64, torch.uint8: dtypes.uint8, torch.bool: dtypes.bool_,
    torch.uint16: dtypes.uint16, torch.uint32: dtypes.uint32, torch.uint64: dtypes.uint64,
}
# Complex dtypes are storages' and tensors' only (record/complex.py): lowerings that look a dtype
# up in TORCH_TO_ZYX to build nodes find none for them and decline (``zdtype``).
COMPLEX_TO_ZYX = {torch.complex64: dtypes.complex64, torch.complex128: dtypes.complex128,
                  torch.complex32: dtypes.complex32}
ZYX_TO_TORCH = {v: k for k, v in (*TORCH_TO_ZYX.items(), *COMPLEX_TO_ZYX.items())}


def supports_dtype(dtype: torch.dtype) -> bool:
    """Whether zyx computes ``dtype`` natively (as zyx's ``supports_dtype``)."""
    return dtype in TORCH_TO_ZYX or dtype in COMPLEX_TO_ZYX


# Set when a torch dtype of ``BAREBONES`` is first converted (``ops/unsigned.py``: dispatch
# checks CPU torch's kernel coverage of these dtypes only once one is in use).
BAREBONES = (torch.uint16, torch.uint32, torch.uint64)
barebones_seen = [False]

# Set once a complex dtype is met (a complex storage made, or ``zdtype`` asked for one): from then
# on dispatch sends the ops that involve complex values to the complex lowerings (ops/complex/),
# so that other programs pay nothing for them.
complex_seen = [False]


class ComplexDecline(NotImplementedError):
    """A lowering asked for a node dtype of a complex dtype: it declines, and dispatch (which now
    knows complex values are in use) takes the op to the complex lowerings."""


def zdtype(dtype: torch.dtype) -> dtypes.DType:
    if dtype in BAREBONES:
        barebones_seen[0] = True
    try:
        return TORCH_TO_ZYX[dtype]
    except KeyError:
        if dtype in COMPLEX_TO_ZYX:
            complex_seen[0] = True
            raise ComplexDecline(f"zyx computes {dtype} as pairs of real values") from None
        raise TypeError(f"zyx does not support dtype {dtype}") from None


def _resolved(t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` (a CPU copy of ``t``'s memory) with ``t``'s lazy conjugate and negative bits
    applied, as PyTorch reads such a view."""
    if t.is_conj():
        values = torch.conj_physical(values)
    if t.is_neg():
        values = torch.neg(values)
    return values


def _host_bytes(ptr: int, nbytes: int) -> torch.Tensor:
    """A CPU uint8 tensor over ``nbytes`` of host memory at ``ptr`` (no copy; the caller keeps
    the memory alive)."""
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)


def host_view(storage: torch.UntypedStorage, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of ``dtype`` over the bytes of a zyx storage (its host memory, no copy)."""
    nbytes = storage.nbytes()
    if nbytes == 0:
        return torch.empty(0, dtype=dtype)
    return _host_bytes(storage.data_ptr(), nbytes).view(dtype)


# Copies of host memory at least this large go through torch's copy, which splits them over its
# threads (a 16 MiB read-back: 0.75-0.86 ms against 1.4-1.9 ms for one thread's memmove on the
# 2-core box); smaller ones are not worth making the tensor views.
PARALLEL_COPY_BYTES = 1 << 20

# A read-back's kernel writes the CPU tensor itself (``_read_directly``) from this size on; below
# it the copy costs less than a second computation of the value would if it was needed again.
DIRECT_READ_BYTES = 1 << 18

_getrefcount = sys.getrefcount
log = logging.getLogger("torch_zyx")


def _host_memory(device) -> bool:
    """Whether ``device``'s buffers are host memory (its pool can ``wrap`` a CPU tensor's)."""
    return device.pool.host_memory


def _realized(storage: Storage):
    """``storage``'s buffer for a read (realizes it; raises the errors found so far)."""
    if deferred_errors:
        raise_deferred()
    if pending_checks():
        # Values a compiled graph's call computed are buffers already, with its index checks
        # still pending (compile/graph.py): a read raises what they found, as in eager mode.
        realize_all(storage.device, storage)
    return storage.realize()


def storage_to_cpu(storage: Storage) -> torch.Tensor:
    """A CPU copy of ``storage``'s whole contents, flat in its dtype (realizes it)."""
    buffer = _realized(storage)
    device = storage.device
    flat = torch.empty(storage.numel, dtype=ZYX_TO_TORCH[storage.dtype])
    if not storage.numel:
        return flat
    # (the storage's bytes: a dtype view's storage reads its base's buffer, whose last bytes may
    # be part of no element of its dtype)
    nbytes = storage.numel * storage.dtype.itemsize
    wait = device.events.take([buffer.id])
    if nbytes >= PARALLEL_COPY_BYTES and _host_memory(device):
        wait_all(wait)
        flat.view(torch.uint8).copy_(_host_bytes(buffer.ptr, nbytes))
    else:
        device.pool.pool_to_host(buffer.raw, flat.data_ptr(), nbytes, wait)
    return flat


def to_cpu(t: ZyxTensor, held: int | None = None) -> torch.Tensor:
    """A CPU copy of ``t`` (realizes its storage). ``held``: ``t``'s reference count as the
    ``_to_copy`` lowering saw it (``.cpu()``, ``.to("cpu")``), which lets ``_read_directly`` tell
    a temporary ``(a * b).cpu()`` from a tensor something else holds."""
    storage = t._storage
    if t.storage_offset() == 0 and t.numel() == storage.numel and t.is_contiguous():
        # (a dtype view's storage holds no value of its own to compute into the CPU tensor)
        direct = held is not None and getattr(storage, "base", None) is None
        flat = _read_directly(t, storage, held) if direct else None
        if flat is None:
            flat = storage_to_cpu(storage)
        out = flat.view(tuple(t.shape))  # the copy is already private to the caller
    else:
        flat = storage_to_cpu(storage)
        out = flat.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset()).clone()
    return _resolved(t, out) if complex_seen[0] else out


# A read-back of a value computed for it alone, ``(F.gelu(x) * y).cpu()``, has the value's kernel
# write the CPU tensor's memory instead of a pool buffer that is then copied: half the memory
# traffic, as CPU torch's own op writing its result. That is only worth it, and only right, when
# nothing else wants the value: the tensor is held by the calling expression alone, no other
# tensor shares its storage, and the storage is lazy (listed once as pending). Reference counts
# tell (what each holder adds depends on the Python and torch versions, so ``_calibrate`` measures
# the counts of a temporary through the real call path once). The storage then keeps its lazy
# value: if something held the tensor after all (a reference the counts miss), it is computed
# again at the next realization, so a wrong guess costs time, never a wrong value.
_probe: dict = {}  # while calibrating: calibrating thread → the counts ``_read_directly`` saw there
_temporary: list = []  # [the counts of a temporary, or None where a named tensor shows the same]


def _read_directly(t: ZyxTensor, storage: Storage, held: int) -> torch.Tensor | None:
    """``t``'s values in a new flat CPU tensor its kernel wrote, or None (then copy them)."""
    counts = (held, t._use_count(), _getrefcount(storage))
    if _probe and threading.get_ident() in _probe:
        _probe[threading.get_ident()].append(counts)
        return torch.empty(storage.numel, dtype=ZYX_TO_TORCH[storage.dtype])
    device = storage.device
    nbytes = storage.numel * storage.dtype.itemsize
    if not _host_memory(device) or nbytes < DIRECT_READ_BYTES or not is_lazy(storage._shaped or storage._value):
        return None
    if not _temporary:
        _temporary.append(_calibrate(device))
    temporary = _temporary[0]
    if temporary is None or any(count > limit for count, limit in zip(counts, temporary)):
        return None
    from ..memory.buffer import ExternalBuffer

    flat = torch.empty(storage.numel, dtype=ZYX_TO_TORCH[storage.dtype])
    out = ExternalBuffer.over(device, storage.dtype, storage.numel, flat.data_ptr(), flat)
    if not realize_into(storage, out):
        return None  # (the value went to a pool buffer: a root of another storage too)
    wait_all(device.events.take([out.id]))
    return flat


def _calibrate(device) -> tuple | None:
    """The counts ``_read_directly`` sees for a temporary's ``.cpu()``, or None where a named
    tensor's shows no more. Measured once, with lazy tensors that are never realized, in a new
    thread: there no op's dispatch is under way (inside one, as in any ``.cpu()`` that gets here,
    torch's dispatch holds more references), just as where user code calls ``.cpu()``."""
    seen: list = []

    def probe():
        _probe[threading.get_ident()] = seen
        try:
            base = torch.zeros(1, device=torch.device("zyx", device.index))
            named = base + 1
            named.cpu()
            (base + 1).cpu()
        finally:
            del _probe[threading.get_ident()]

    thread = threading.Thread(target=probe, name="zyx-read-back-probe")
    thread.start()
    thread.join()
    if len(seen) != 2 or seen[0][0] <= seen[1][0]:
        log.info("zyx: no way to tell a temporary's read-back (counts %s): results are copied", seen)
        return None
    return seen[1]


def from_cpu(src: torch.Tensor, device) -> Node:
    """A BUFFER node holding a copy of the CPU tensor ``src``."""
    from ..memory.buffer import Buffer

    if src.is_meta:
        # CPU torch's error: a meta tensor has no data (reading its data pointer crashed).
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")
    if complex_seen[0] or src.is_complex():
        if src.is_conj() or src.is_neg():
            src = src.resolve_conj().resolve_neg()
        if src.is_complex():  # (its pairs: record/complex.py)
            if src.dtype not in COMPLEX_TO_ZYX:
                zdtype(src.dtype)  # raises: complex32
            complex_seen[0] = True
            src = torch.view_as_real(src)
    if src.device.type != "cpu":
        direct = _from_torch_device(src, device)
        if direct is not None:
            return direct
        src = src.cpu()  # another device's memory: through the host
    src = src.detach().contiguous()
    dtype = zdtype(src.dtype)
    buffer = Buffer(device, dtype, src.numel())
    nbytes = buffer.nbytes
    if nbytes >= PARALLEL_COPY_BYTES and _host_memory(device):
        # (a fresh buffer of host memory: no work can be pending on it)
        _host_bytes(buffer.ptr, nbytes).copy_(src.view(-1).view(torch.uint8))
    elif nbytes:
        buffer.write_from_host(src.data_ptr(), src)
    return g.reshape(g.buffer(buffer, dtype, src.numel()), tuple(src.shape))


# Copies between zyx devices and torch's own devices that stay on the GPU: a pool that can copy
# device to device (memory/cuda.py: ``pool_to_pool``, ``from_device``, ``to_device``) does, with
# the events of both sides (ASYNC EVENT RULES; torch's current stream waits or is waited on);
# any other pair goes through the host.


def _as_view(flat: Node, t: torch.Tensor) -> Node:
    """``t``'s elements of the flat copy ``flat`` of its storage."""
    shape = tuple(t.shape)
    if t.storage_offset() == 0 and t.numel() == flat.shape[0] and t.is_contiguous():
        return g.reshape(flat, shape)
    return g.strided(flat, shape, tuple(t.stride()), t.storage_offset())


def _from_torch_device(src: torch.Tensor, device) -> Node | None:
    """A BUFFER node holding a copy of ``src``, a torch ``cuda`` tensor, copied device to
    device into ``device``'s pool when it can (else None: through the host)."""
    from ..memory.buffer import Buffer

    pool = device.pool
    if src.device.type != "cuda" or not hasattr(pool, "from_device"):
        return None
    src = src.detach().contiguous()
    dtype = zdtype(src.dtype)
    buffer = Buffer(device, dtype, src.numel())
    if src.numel():
        index = src.device.index if src.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index).cuda_stream
        event = pool.from_device(src.data_ptr(), index, buffer.nbytes, src, buffer.raw, [], stream)
        device.events.record([buffer.id], event)
    return g.reshape(g.buffer(buffer, dtype, src.numel()), tuple(src.shape))


def to_torch_device(t: ZyxTensor, device: torch.device) -> torch.Tensor:
    """A copy of ``t`` on torch's own ``device`` (``cuda``): device to device from a zyx CUDA
    device (torch's current stream there waits for the copy), else through the host."""
    storage = t._storage
    zyx_device = storage.device
    if device.type != "cuda" or not hasattr(zyx_device.pool, "to_device"):
        return to_cpu(t).to(device)
    buffer = _realized(storage)
    index = device.index if device.index is not None else torch.cuda.current_device()
    flat = torch.empty(storage.numel, dtype=ZYX_TO_TORCH[storage.dtype], device=torch.device("cuda", index))
    if storage.numel:
        stream = torch.cuda.current_stream(index).cuda_stream
        nbytes = storage.numel * storage.dtype.itemsize  # (a dtype view's bytes: see storage_to_cpu)
        event = zyx_device.pool.to_device(buffer.raw, flat.data_ptr(), index, nbytes,
                                          zyx_device.events.take([buffer.id]), stream)
        zyx_device.events.record([buffer.id], event)
    if t.storage_offset() == 0 and t.numel() == storage.numel and t.is_contiguous():
        return flat.view(tuple(t.shape))
    return flat.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset()).clone()


def from_other_device(src: ZyxTensor, device) -> Node:
    """The values of ``src``, a tensor of another zyx device, copied to ``device``: device to
    device when both pools are of one kind that can (two CUDA GPUs), else through the host."""
    from ..memory.buffer import Buffer

    storage = src._storage
    source = storage.device
    pool = device.pool
    if not hasattr(pool, "pool_to_pool") or type(source.pool) is not type(pool):
        return from_cpu(to_cpu(src), device)
    buffer = _realized(storage)
    copy = Buffer(device, storage.dtype, storage.numel)
    if storage.numel:
        wait = source.events.take([buffer.id])
        event = pool.pool_to_pool(buffer.raw, source.pool, copy.nbytes, copy.raw, wait)
        # The source's pool must not hand the buffer out before the copy (another stream) read it.
        source.events.record([buffer.id], event)
        device.events.record([copy.id], event)
    return _as_view(g.buffer(copy, storage.dtype, storage.numel), src)
