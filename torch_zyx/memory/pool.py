"""The caching pool every device's memory pool builds on: free-buffer cache, event-aware reuse,
accounting, and the out-of-memory retry.

A device pool (memory/host.py, memory/opencl.py) supplies ``_new_buffer(nbytes)``,
``_release_buffer(buffer)`` and the copies; this base keeps freed buffers until the events
of the work still using them complete (ASYNC EVENT RULES), then hands them out again for the
same size, as PyTorch's caching allocators do. ``allocated`` / ``max_allocated`` /
``reserved`` are what ``torch.zyx.memory_allocated()`` and friends report.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from ..config import CONFIG, DEBUG_ALLOCATIONS
from .events import Event, wait_all

try:  # (the exception type torch code catches; the memory stage needs nothing else of torch)
    from torch import OutOfMemoryError as _TorchOutOfMemory
except ImportError:  # pragma: no cover
    _TorchOutOfMemory = RuntimeError


class PoolOutOfMemory(_TorchOutOfMemory, MemoryError):
    """An allocation did not fit: the device had no memory left, or the pool reached its limit
    (``ZYX_MEMORY_LIMIT``), even after the pool's cache was released. A ``torch.OutOfMemoryError``,
    as CUDA's allocator raises."""


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{int(nbytes)} bytes"


class CachingPool:
    name = "pool"
    # Whether its buffers are host memory a CPU tensor can share (host.py).
    host_memory = False
    # The exception a device raises when an allocation does not fit.
    out_of_memory_errors: tuple[type[BaseException], ...] = (MemoryError,)

    def __init__(self):
        self._cache: dict[int, list] = defaultdict(list)
        # Re-entrant: the garbage collector can free a Buffer (which calls free()) while this
        # thread is inside allocate() holding the lock.
        self._lock = threading.RLock()
        self.allocated = 0  # bytes held by live buffers (not counting the cache)
        self.max_allocated = 0
        self.reserved = 0  # live + cached
        self.max_reserved = 0
        self._pending: list[tuple[object, list[Event]]] = []
        # The most bytes the pool may hold, cached buffers included (0: as much as the device
        # gives); the executor sets it from ZYX_MEMORY_LIMIT (execute/contexts.py).
        self.limit = 0

    # --------------------------------------------------------------- device-specific parts

    def _new_buffer(self, nbytes: int):
        raise NotImplementedError

    def _release_buffer(self, buffer) -> None:
        """Give a cached buffer's memory back to the device (plain Python memory: nothing)."""

    def constant(self, data: bytes):
        """A buffer holding ``data``, outside the cache and the accounting (buffer.ConstantBuffer)."""
        raise NotImplementedError

    # --------------------------------------------------------------- shared surface

    def _sweep(self) -> None:
        """Move freed buffers whose pending work finished into the cache (lock held)."""
        # Detached first: a buffer the garbage collector frees during the walk (re-entrant
        # ``free`` on this thread) lands in the fresh list instead of being dropped with it.
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        for buffer, events in pending:
            if all(e.is_done() for e in events):
                self._cache[buffer.nbytes].append(buffer)
            else:
                self._pending.append((buffer, events))

    def allocate(self, nbytes: int) -> tuple[object, Event | None]:
        with self._lock:
            self._sweep()
            cached = self._cache.get(nbytes)
            if cached:
                buffer = cached.pop()
            else:
                buffer = self._allocate_new(nbytes)
                self.reserved += nbytes
                self.max_reserved = max(self.max_reserved, self.reserved)
            self.allocated += nbytes
            self.max_allocated = max(self.max_allocated, self.allocated)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx alloc {self.name} {nbytes} B (live {self.allocated} B)")
        return buffer, None

    def _allocate_new(self, nbytes: int):
        if self.limit and self.reserved + nbytes > self.limit:
            # Over the limit: the cached buffers go back first (after their pending work).
            self._release_cache(wait_pending=True)
            if self.reserved + nbytes > self.limit:
                raise PoolOutOfMemory(self._out_of_memory(nbytes, f"Its limit (ZYX_MEMORY_LIMIT) is "
                                                                  f"{_size(self.limit)}"))
        try:
            return self._new_buffer(nbytes)
        except self.out_of_memory_errors:
            # Out of memory: give the cached buffers back (waiting for pending frees) and retry
            # once; nothing already computed is lost.
            self._release_cache(wait_pending=True)
            try:
                return self._new_buffer(nbytes)
            except self.out_of_memory_errors as exc:
                raise PoolOutOfMemory(self._out_of_memory(nbytes, "The device has no more")) from exc

    def _out_of_memory(self, nbytes: int, why: str) -> str:
        """The message of an allocation that did not fit, with the pool's figures (as CUDA's)."""
        return (f"zyx: {self.name} pool out of memory. Tried to allocate {_size(nbytes)}. {why}; "
                f"{_size(self.allocated)} is allocated by tensors and {_size(self.reserved - self.allocated)} "
                f"is reserved by the pool but unallocated (peak allocated {_size(self.max_allocated)}).")

    def free(self, buffer, wait_events: list[Event]) -> None:
        # Reuse must not overtake pending work on the buffer: until its events complete the
        # buffer waits in ``_pending``; the caller never blocks.
        with self._lock:
            self.allocated -= buffer.nbytes
            if wait_events and any(not e.is_done() for e in wait_events):
                self._pending.append((buffer, wait_events))
            else:
                self._cache[buffer.nbytes].append(buffer)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx free {self.name} {buffer.nbytes} B (live {self.allocated} B)")

    def sync(self, events: list[Event]) -> None:
        wait_all(events)

    def _release_cache(self, wait_pending: bool = False) -> None:
        if wait_pending:
            for _buffer, events in list(self._pending):
                wait_all(events)
        self._sweep()
        # Swapped out before the walk, for the same reason as in ``_sweep``.
        cache, self._cache = self._cache, defaultdict(list)
        for buffers in cache.values():
            for buffer in buffers:
                self.reserved -= buffer.nbytes
                self._release_buffer(buffer)

    def empty_cache(self) -> None:
        with self._lock:
            self._release_cache()
