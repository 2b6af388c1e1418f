"""OpenCL memory pool: ``cl.Buffer`` allocations with a free-buffer cache, and OpenCL events.

Same surface as the host pool (DESIGN.md "Backends"). Host→device copies are staged in a private
host copy, then enqueued without blocking: the caller may change its memory as soon as the call
returns (as after PyTorch's copies from pageable memory), and the pool keeps the staging copy in
an in-flight list until the copy's event completes (ASYNC EVENT RULES). Device→host copies
block. Events from this pool's context are passed to OpenCL as wait lists, so the device
orders the work itself; any other event is waited on by the host first.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pyopencl as cl

from .events import Event
from .pool import CachingPool


class CLEvent(Event):
    """An ``Event`` backed by a ``cl.Event`` (a kernel launch or a copy)."""

    __slots__ = ("cl_event",)

    def __init__(self, cl_event, keepalive=None):
        super().__init__(keepalive)
        self.cl_event = cl_event

    def is_done(self) -> bool:
        if self._done:
            return True
        status = self.cl_event.command_execution_status
        if status < 0:
            return True  # failed: ``wait`` raises
        if status == cl.command_execution_status.COMPLETE:
            self.set()
            return True
        return False

    def wait(self) -> None:
        if not self._done:
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
            if not event._done:
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


class OpenCLPool(CachingPool):
    name = "opencl"
    out_of_memory_errors = (cl.MemoryError, MemoryError)

    def __init__(self, context, queue):
        super().__init__()
        self.context, self.queue = context, queue
        # Async host→device copies whose host memory must stay alive: (event, keepalive).
        self._inflight: list[tuple[Event, object]] = []

    def _new_buffer(self, nbytes: int) -> CLBuffer:
        return CLBuffer(nbytes, cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1)))

    def _release_buffer(self, buffer: CLBuffer) -> None:
        buffer.mem.release()

    def _sweep(self) -> None:
        super()._sweep()
        self._inflight = [(e, keep) for e, keep in self._inflight if not e.is_done()]

    def host_to_pool(self, src_ptr: int, nbytes: int, keepalive, buffer: CLBuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``nbytes`` from host address ``src_ptr`` (owned by ``keepalive``) into ``buffer``.
        The bytes are read before this returns (into a staging copy): a copy enqueued from the
        caller's own memory raced the caller's next in-place op on it (``z = x.to("zyx")``, then
        ``x.add_(1)``: z got the new values when PoCL ran the copy late, seen in a loaded CI)."""
        staged = np.frombuffer(host_view(src_ptr, nbytes), dtype=np.uint8).copy()
        wait_for = cl_wait_list(wait_events, self.context)
        cl_event = cl.enqueue_copy(self.queue, buffer.mem, staged, is_blocking=False,
                                   wait_for=wait_for or None)
        self.queue.flush()
        event = CLEvent(cl_event, staged)
        with self._lock:
            # Held here too: the event may be consumed (dropped) before the copy finishes.
            self._inflight.append((event, staged))
        return event

    def constant(self, data: bytes) -> CLBuffer:
        """A buffer holding ``data``, not from the cache nor counted (buffer.ConstantBuffer).
        ``COPY_HOST_PTR`` copies at creation: nothing is pending on it afterwards."""
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return CLBuffer(len(data), cl.Buffer(self.context, flags, hostbuf=data))

    def pool_to_host(self, buffer: CLBuffer, out_ptr: int, nbytes: int, wait_events: list[Event]) -> None:
        wait_for = cl_wait_list(wait_events, self.context)
        cl.enqueue_copy(self.queue, host_view(out_ptr, nbytes), buffer.mem, is_blocking=True,
                        wait_for=wait_for or None)
