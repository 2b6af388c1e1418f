"""OpenCL memory pool: ``cl.Buffer`` allocations with a free-buffer cache, and OpenCL events.

Same surface as the host pool (DESIGN.md "Backends"). Host→device copies are enqueued without
blocking; the pool keeps the host memory's owner (``keepalive``) in an in-flight list until
the copy's event completes (ASYNC EVENT RULES). Device→host copies block. Events from this
pool's context are passed to OpenCL as wait lists, so the device orders the work itself;
any other event is waited on by the host first.
"""

from __future__ import annotations

import ctypes
import threading
from collections import defaultdict

import pyopencl as cl

from ..config import CONFIG, DEBUG_ALLOCATIONS
from .events import Event


class CLEvent(Event):
    """An ``Event`` backed by a ``cl.Event`` (a kernel launch or a copy)."""

    __slots__ = ("cl_event",)

    def __init__(self, cl_event, keepalive=None):
        super().__init__(keepalive)
        self.cl_event = cl_event

    def is_done(self) -> bool:
        if self._done.is_set():
            return True
        status = self.cl_event.command_execution_status
        if status < 0:
            return True  # failed: ``wait`` raises
        if status == cl.command_execution_status.COMPLETE:
            self.set()
            return True
        return False

    def wait(self) -> None:
        if not self._done.is_set():
            error = None
            try:
                self.cl_event.wait()
            except cl.Error as exc:
                error = RuntimeError(f"zyx: OpenCL work failed: {exc}")
            self.set(error)
        super().wait()


def cl_wait_list(events: list[Event], context) -> list:
    """The ``cl.Event``s of ``events`` that OpenCL can wait on; other events are waited here."""
    out = []
    for event in events:
        if isinstance(event, CLEvent) and event.cl_event.context == context:
            if not event._done.is_set():
                out.append(event.cl_event)
        else:
            event.wait()
    return out


def host_view(ptr: int, nbytes: int):
    """A writable buffer-protocol view of host memory at ``ptr`` (no copy, no ownership)."""
    return (ctypes.c_char * nbytes).from_address(ptr)


class CLBuffer:
    """One allocation: the ``cl.Buffer`` and its size."""

    __slots__ = ("__weakref__", "mem", "nbytes")

    def __init__(self, nbytes: int, mem):
        self.nbytes, self.mem = nbytes, mem


class OpenCLPool:
    name = "opencl"

    def __init__(self, context, queue):
        self.context, self.queue = context, queue
        self._cache: dict[int, list[CLBuffer]] = defaultdict(list)
        # Reentrant: a Buffer freed by the garbage collector inside allocate() takes it again.
        self._lock = threading.RLock()
        self.allocated = 0  # bytes held by live buffers (not counting the cache)
        self.max_allocated = 0
        self.reserved = 0  # live + cached
        self._pending: list[tuple[CLBuffer, list[Event]]] = []
        # Async host→device copies whose host memory must stay alive: (event, keepalive).
        self._inflight: list[tuple[Event, object]] = []

    def _sweep(self) -> None:
        """Move freed buffers whose pending work finished into the cache (lock held)."""
        still = []
        for buffer, events in self._pending:
            if all(e.is_done() for e in events):
                self._cache[buffer.nbytes].append(buffer)
            else:
                still.append((buffer, events))
        self._pending = still
        self._inflight = [(e, keep) for e, keep in self._inflight if not e.is_done()]

    def allocate(self, nbytes: int) -> tuple[CLBuffer, Event | None]:
        with self._lock:
            self._sweep()
            cached = self._cache.get(nbytes)
            buffer = cached.pop() if cached else None
            if buffer is None:
                try:
                    mem = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))
                except cl.MemoryError:
                    self._release_cache()  # out of device memory: give the cached buffers back
                    mem = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))
                buffer = CLBuffer(nbytes, mem)
                self.reserved += nbytes
            self.allocated += nbytes
            self.max_allocated = max(self.max_allocated, self.allocated)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx alloc opencl {nbytes} B (live {self.allocated} B)")
        return buffer, None

    def free(self, buffer: CLBuffer, wait_events: list[Event]) -> None:
        # Reuse must not overtake pending work on the buffer: it waits in ``_pending`` until
        # its events complete; the caller never blocks.
        with self._lock:
            self.allocated -= buffer.nbytes
            if any(not e.is_done() for e in wait_events):
                self._pending.append((buffer, wait_events))
            else:
                self._cache[buffer.nbytes].append(buffer)
        if CONFIG.debug & DEBUG_ALLOCATIONS:
            print(f"zyx free opencl {buffer.nbytes} B (live {self.allocated} B)")

    def host_to_pool(self, src_ptr: int, nbytes: int, keepalive, buffer: CLBuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``nbytes`` from host address ``src_ptr`` (owned by ``keepalive``) into ``buffer``."""
        wait_for = cl_wait_list(wait_events, self.context)
        cl_event = cl.enqueue_copy(self.queue, buffer.mem, host_view(src_ptr, nbytes), is_blocking=False,
                                   wait_for=wait_for or None)
        self.queue.flush()
        event = CLEvent(cl_event, keepalive)
        with self._lock:
            # Held here too: the event may be consumed (dropped) before the copy finishes.
            self._inflight.append((event, keepalive))
        return event

    def pool_to_host(self, buffer: CLBuffer, out_ptr: int, nbytes: int, wait_events: list[Event]) -> None:
        wait_for = cl_wait_list(wait_events, self.context)
        cl.enqueue_copy(self.queue, host_view(out_ptr, nbytes), buffer.mem, is_blocking=True,
                        wait_for=wait_for or None)

    def sync(self, events: list[Event]) -> None:
        for event in events:
            event.wait()

    def _release_cache(self) -> None:
        for buffers in self._cache.values():
            for buffer in buffers:
                self.reserved -= buffer.nbytes
                buffer.mem.release()
        self._cache.clear()

    def empty_cache(self) -> None:
        with self._lock:
            self._sweep()
            self._release_cache()
