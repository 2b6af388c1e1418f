"""Host memory pool: the CPU backend's buffers, with a free-buffer cache and event-aware reuse.

Surface shared by every pool (DESIGN.md "Backends"; cache, reuse and accounting in
memory/pool.py): ``allocate(nbytes) → (buffer, event)``, ``free(buffer, wait_events)``,
``host_to_pool(src_ptr, nbytes, keepalive, buffer, wait) → event``
(the source bytes are read before it returns; the copy into the pool may finish later),
``pool_to_host(buffer, out_ptr, nbytes, wait)`` (blocking), ``sync(events)``,
``constant(data) → buffer`` (immutable, outside the cache and accounting: buffer.ConstantBuffer),
and the accounting that ``torch.zyx.memory_allocated()`` reports.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from .events import Event, completed, wait_all
from .pool import CachingPool

log = logging.getLogger("torch_zyx")

_ALIGN = 64


class HostBuffer:
    """A 64-byte aligned block of host memory; ``ptr`` is its address."""

    __slots__ = ("__weakref__", "_storage", "nbytes", "ptr")

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self._storage = np.empty(max(nbytes, 1) + _ALIGN, dtype=np.uint8)
        base = self._storage.ctypes.data
        self.ptr = base + (-base % _ALIGN)

    @classmethod
    def wrap(cls, ptr: int, nbytes: int, owner) -> HostBuffer:
        """Host memory at ``ptr`` that ``owner`` holds (a CPU tensor's storage), as a buffer of
        this pool's kind, allocating nothing (buffer.ExternalBuffer)."""
        buffer = cls.__new__(cls)
        buffer.nbytes, buffer._storage, buffer.ptr = nbytes, owner, ptr
        return buffer

    def view(self) -> np.ndarray:
        start = self.ptr - self._storage.ctypes.data
        return self._storage[start:start + self.nbytes]


class HostPool(CachingPool):
    name = "host"
    host_memory = True

    def _new_buffer(self, nbytes: int) -> HostBuffer:
        return HostBuffer(nbytes)

    def host_to_pool(self, src_ptr: int, nbytes: int, keepalive, buffer: HostBuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``nbytes`` from host address ``src_ptr`` (owned by ``keepalive``) into ``buffer``."""
        wait_all(wait_events)
        ctypes.memmove(buffer.ptr, src_ptr, nbytes)
        return completed()

    @staticmethod
    def wrap(ptr: int, nbytes: int, owner) -> HostBuffer:
        """Host memory that ``owner`` holds (a CPU tensor's) as this pool's buffer object, for a
        kernel to read or write in place."""
        return HostBuffer.wrap(ptr, nbytes, owner)

    def constant(self, data: bytes) -> HostBuffer:
        """A buffer holding ``data``, not from the cache nor counted (buffer.ConstantBuffer)."""
        buffer = HostBuffer(len(data))
        ctypes.memmove(buffer.ptr, data, len(data))
        return buffer

    def pool_to_host(self, buffer: HostBuffer, out_ptr: int, nbytes: int, wait_events: list[Event]) -> None:
        wait_all(wait_events)
        ctypes.memmove(out_ptr, buffer.ptr, nbytes)
