"""Device buffers as the lazy graph sees them: a pool allocation with dtype and size.

A ``Buffer`` is the ``arg`` of ``BUFFER`` nodes. When the last node or storage holding it dies,
its memory goes back to its pool after the work still pending on it (per the event table).
An ``ExternalBuffer`` is memory zyx does not own (a CPU tensor's, in a compiled graph's call).
A ``ConstantBuffer`` holds a realization's scalar parameters: written once when made, only read
by kernels, outside the pool (see its docstring).
"""

from __future__ import annotations

import itertools

from ..dtypes import DType

_ids = itertools.count()


class _Memory:
    """What launches and the event table read of every kind of buffer below: ``id``,
    ``device``, ``dtype``, ``numel``, ``raw`` (the pool's object, with ``ptr``)."""

    __slots__ = ()

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return self.raw.ptr


class Buffer(_Memory):
    __slots__ = ("__weakref__", "device", "dtype", "id", "numel", "raw")

    def __init__(self, device, dtype: DType, numel: int):
        self.id = next(_ids)
        self.device = device  # an execute.contexts.DeviceContext
        self.dtype, self.numel = dtype, numel
        self.raw, _event = device.pool.allocate(max(numel, 1) * dtype.itemsize)

    def write_from_host(self, src_ptr: int, keepalive, fresh: bool = False) -> None:
        """Fill the buffer from host address ``src_ptr`` (``nbytes`` bytes, owned by
        ``keepalive``): the source is read before this returns (the caller may then change it),
        the buffer written after the work pending on it; later users wait through the event
        table. ``fresh``: the buffer was just made, so no work can be pending on it
        (events are keyed by buffer id)."""
        device = self.device
        wait = [] if fresh else device.events.take([self.id])
        event = device.pool.host_to_pool(src_ptr, self.nbytes, keepalive, self.raw, wait)
        if not event.is_done():  # a finished copy (the host pool's) is nothing to wait for
            device.events.record([self.id], event)

    def __del__(self):
        try:
            device, raw = self.device, self.raw
        except AttributeError:  # __init__ failed before the allocation
            return
        try:
            device.pool.free(raw, device.events.take([self.id]))
        except (AttributeError, TypeError):  # interpreter shutdown: modules may already be gone
            return

    def __repr__(self) -> str:
        return f"<Buffer {self.id} {self.dtype} x{self.numel}>"


class ExternalBuffer(_Memory):
    """Memory zyx does not own, bound to a plan's slot for one call: a torch tensor's storage (a
    CPU tensor's on a host device, a ``cuda`` tensor's on a CUDA device) that a compiled graph
    or a read-back writes in place (compile/graph.py, record/transfer.py). ``raw`` is the pool's
    view of it (the pool's ``wrap``); ``owner`` keeps the memory alive while launches use it.
    Never returned to a pool. Same attributes as ``Buffer`` for launches and the event table."""

    __slots__ = ("__weakref__", "device", "dtype", "id", "numel", "owner", "raw")

    def __init__(self, device, dtype: DType, numel: int, raw, owner):
        self.id = next(_ids)
        self.device = device
        self.dtype, self.numel = dtype, numel
        self.raw, self.owner = raw, owner

    @classmethod
    def over(cls, device, dtype: DType, numel: int, ptr: int, owner) -> ExternalBuffer:
        """``numel`` elements at ``ptr``, memory of ``device``'s kind that ``owner`` holds."""
        return cls(device, dtype, numel, device.pool.wrap(ptr, numel * dtype.itemsize, owner), owner)

    def __repr__(self) -> str:
        return f"<ExternalBuffer {self.id} {self.dtype} x{self.numel}>"


class ConstantBuffer(_Memory):
    """Immutable device memory holding ``data`` (scalar parameters), outside the pool.

    Written synchronously when made and never again (kernels only load from scalar slots), so
    no work is ever pending on its contents: it takes no part in the event table (a kernel has
    nothing to wait for before reading it, and two kernels reading it do not depend on each
    other). Its memory is not reused either, only dropped when the last reference dies, which
    pending work holds (CPU launches keep their buffers until done; OpenCL retains the
    ``cl.Buffer``s a queued kernel uses). Not counted in the pool's accounting: it is the
    runtime's cache, not memory a tensor holds. Same attributes as ``Buffer`` for launches."""

    __slots__ = ("__weakref__", "device", "dtype", "id", "numel", "raw")

    def __init__(self, device, dtype: DType, data: bytes):
        self.id = next(_ids)
        self.device = device
        self.dtype, self.numel = dtype, len(data) // dtype.itemsize
        self.raw = device.pool.constant(data)

    def __repr__(self) -> str:
        return f"<ConstantBuffer {self.id} {self.dtype} x{self.numel}>"
