"""Host memory pool: the CPU backend's buffers, with a free-buffer cache and event-aware reuse.

Surface shared by every pool (DESIGN.md "Backends"): ``allocate(nbytes) → (buffer, event)``,
``free(buffer, wait_events)``, ``host_to_pool(src_ptr, nbytes, keepalive, buffer, wait) → event``
(async: ``keepalive`` owns the source bytes until the event completes),
``pool_to_host(buffer, out_ptr, nbytes, wait)`` (blocking), ``sync(events)``,
and the accounting that ``torch.zyx.memory_allocated()`` reports.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import defaultdict

import numpy as np

from ..config import CONFIG, DEBUG_ALLOCATIONS
from .events import Event, completed, wait_all

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

    def view(self) -> np.ndarray:
        start = self.ptr - self._storage.ctypes.data
        return self._storage[start:start + self.nbytes]


class HostPool:
    name = "host"

    def __init__(self):
        self._cache: dict[int, list[HostBuffer]] = defaultdict(list)
        self._lock = threading.Lock()
        self.allocated = 0  # bytes held by live buffers (not counting the cache)
        self.max_allocated = 0
        self.reserved = 0  # live + cached
        self._pending: list[tuple[HostBuffer, list[Event]]] = []

    def _sweep(self) -> None:
        """Move freed buffers whose pending work finished into the cache (lock held)."""
        still = []
        for buffer, events in self._pending:
            if all(e.is_done() for e in events):
                self._cache[buffer.nbytes].append(buffer)
            else:
                still.append((buffer, events))
        self._pending = still

    def allocate(self, nbytes: int) -> tuple[HostBuffer, Event | None]:
        with self._lock:
            if self._pending:
                self._sweep()
            cached = self._cache.get(nbytes)
            buffer = cached.pop() if cached else None
            if buffer is None:
                buffer = HostBuffer(nbytes)
                self.reserved += nbytes
            self.allocated += nbytes
            self.max_allocated = max(self.max_allocated, self.allocated)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx alloc host {nbytes} B (live {self.allocated} B)")
        return buffer, None

    def free(self, buffer: HostBuffer, wait_events: list[Event]) -> None:
        # Reuse must not overtake pending work on the buffer: until its events complete the
        # buffer waits in ``_pending``; it never blocks the caller.
        with self._lock:
            self.allocated -= buffer.nbytes
            if any(not e.is_done() for e in wait_events):
                self._pending.append((buffer, wait_events))
            else:
                self._cache[buffer.nbytes].append(buffer)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx free host {buffer.nbytes} B (live {self.allocated} B)")

    def host_to_pool(self, src_ptr: int, nbytes: int, keepalive, buffer: HostBuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``nbytes`` from host address ``src_ptr`` (owned by ``keepalive``) into ``buffer``."""
        wait_all(wait_events)
        ctypes.memmove(buffer.ptr, src_ptr, nbytes)
        return completed()

    def pool_to_host(self, buffer: HostBuffer, out_ptr: int, nbytes: int, wait_events: list[Event]) -> None:
        wait_all(wait_events)
        ctypes.memmove(out_ptr, buffer.ptr, nbytes)

    def sync(self, events: list[Event]) -> None:
        wait_all(events)

    def empty_cache(self) -> None:
        with self._lock:
            self._sweep()
            for buffers in self._cache.values():
                self.reserved -= sum(b.nbytes for b in buffers)
            self._cache.clear()
