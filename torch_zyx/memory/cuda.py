"""CUDA memory: zyx's caching pool on ``cuMemAlloc``, pinned host staging, CUDA events and streams.

The memory half of the CUDA backend (runtime/cuda.py is the other half; DESIGN.md "Backends").
Same surface as the host and OpenCL pools (memory/pool.py), through the CUDA driver API of
``cuda-bindings``:

- ``CUDAStream``: the one stream per device that runs the device's kernels and copies, in
  order. ``record()`` gives a ``CUDAEvent``; ``wait_for(events)`` makes later work wait for
  events of other streams (``cuStreamWaitEvent``, no host wait), while any non-CUDA event (a
  CPU device's) is waited on by the host. Events of the stream itself need no wait: the
  stream runs in order.
- ``CUDAPool``: device buffers (``CUDABuffer.ptr``, a device address) in the caching pool.
  Because every kernel and copy of a device runs on its one stream, a freed buffer can be
  handed out again at once when its pending work is that stream's own (later work on the
  stream comes after it), as PyTorch's caching allocator does per stream; work of another
  stream (a copy to another GPU, one to torch's stream) still holds it back until its event
  completes. Host→device copies read the source into pinned staging blocks before returning
  and finish asynchronously (the block waits for its copy's event); device→host copies go
  through pinned blocks too and block. Device↔device copies (another zyx CUDA device, a torch
  ``cuda`` tensor) run on the stream of the destination's device with events both ways.

There is no separate copy stream: host→device copies already return at once (staged), and
with one stream per device a buffer's reuse never needs an event; a copy stream would overlap
transfers with kernels only for work that does not depend on them.

Every driver call runs with the device's (primary) context current, pushed only when another
one is (``current``), so torch, which uses the same primary contexts, keeps its current device.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import defaultdict

from cuda.bindings import driver

from ..config import CONFIG, DEBUG_LAUNCHES
from .events import Event
from .pool import CachingPool

_SUCCESS = driver.CUresult.CUDA_SUCCESS
_NOT_READY = driver.CUresult.CUDA_ERROR_NOT_READY
_OUT_OF_MEMORY = driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY
_DISABLE_TIMING = int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
_NON_BLOCKING = int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
_PORTABLE = int(driver.CU_MEMHOSTALLOC_PORTABLE)

# Pinned staging: blocks of a power of two from 4 KiB to ``_CHUNK``; a larger transfer moves in
# chunks, the host copying one while the DMA engine moves the one before. Blocks freed beyond
# ``_STAGING_CACHE`` bytes are given back (cuMemHostAlloc takes ~0.1-0.3 ms per MiB).
_MIN_BLOCK = 4096
_CHUNK = 8 << 20
_STAGING_CACHE = 256 << 20
# How long an event found unfinished vouches for the events recorded after it (CUDAEvent).
_POLL_S = 50e-6


class CUDAError(RuntimeError):
    """A CUDA driver call failed."""

    def __init__(self, call: str, result):
        name = _error_text(driver.cuGetErrorName, result)
        text = _error_text(driver.cuGetErrorString, result)
        super().__init__(f"zyx: CUDA {call} failed: {name}: {text}")
        self.result = result


class CUDAOutOfMemory(MemoryError):
    """cuMemAlloc found no room (the pool then empties its cache and retries once)."""


def _error_text(fn, result) -> str:
    try:
        err, text = fn(result)
    except Exception:  # noqa: BLE001  (a broken driver must not hide the original error)
        return str(result)
    if err != _SUCCESS or text is None:
        return str(result)
    return text.decode() if isinstance(text, bytes) else str(text)


def check(result, call: str = "driver call"):
    """The values of a cuda-bindings result tuple ``(CUresult, values...)``, or ``CUDAError``."""
    err = result[0]
    if err != _SUCCESS:
        if err == _OUT_OF_MEMORY:
            raise CUDAOutOfMemory(f"zyx: CUDA {call}: out of memory")
        raise CUDAError(call, err)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


class current:
    """``with current(ctx):`` runs driver calls with ``ctx`` current, pushing it only when
    another context is (torch's current device stays as it was)."""

    __slots__ = ("ctx", "pushed")

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        now = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        self.pushed = now is None or int(now) != int(self.ctx)
        if self.pushed:
            check(driver.cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
        return self

    def __exit__(self, *exc) -> None:
        if self.pushed:
            check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")


_primary: dict[int, object] = {}


def primary_context(ordinal: int):
    """The primary context of GPU ``ordinal`` (the one torch's runtime uses for ``cuda:ordinal``),
    retained once per process."""
    ctx = _primary.get(ordinal)
    if ctx is None:
        device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = _primary[ordinal] = check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
    return ctx


class CUDAEvent(Event):
    """An ``Event`` backed by a CUDA event recorded on ``stream``, the ``seq``-th recorded there;
    its handle goes back to the stream's free list when the event object dies (a wait already
    enqueued on it is not affected by a later re-record: CUDA waits on the record made before
    the wait).

    ``is_done`` is asked often (the event table prunes finished events at every launch and
    read, the pool sweeps its freed buffers), so it uses the stream's order instead of one
    cuEventQuery per event and call: an event recorded before one found finished is finished;
    one recorded after one found unfinished less than ``_POLL_S`` ago is taken as unfinished
    (a "not yet" only delays cleanup; waits use cuEventSynchronize)."""

    __slots__ = ("handle", "seq", "stream")

    def __init__(self, stream: CUDAStream, handle, seq: int, keepalive=None):
        super().__init__(keepalive)
        self.stream, self.handle, self.seq = stream, handle, seq

    def is_done(self) -> bool:
        if self._done:
            return True
        stream = self.stream
        if self.seq <= stream.done_seq:
            self.set()
            return True
        if self.seq >= stream.busy_seq and time.perf_counter() - stream.busy_at < _POLL_S:
            return False
        result = driver.cuEventQuery(self.handle)[0]
        if result == _NOT_READY:
            now = time.perf_counter()
            if self.seq < stream.busy_seq or now - stream.busy_at >= _POLL_S:
                stream.busy_seq, stream.busy_at = self.seq, now
            return False
        self._finished(result)
        return True

    def wait(self) -> None:
        if not self._done:
            if self.seq <= self.stream.done_seq:
                self.set()
            else:
                self._finished(driver.cuEventSynchronize(self.handle)[0])
        super().wait()

    def _finished(self, result) -> None:
        if result == _SUCCESS:
            stream = self.stream
            stream.done_seq = max(stream.done_seq, self.seq)
            self.set()
        else:
            self.set(CUDAError("work before an event", result))

    def __del__(self):
        try:
            self.stream.recycle(self.handle)
        except (AttributeError, TypeError):  # interpreter shutdown
            return


class CUDAStream:
    """One non-blocking stream of a device's context, with recycled events."""

    def __init__(self, ctx):
        self.ctx = ctx
        with current(ctx):
            self.handle = check(driver.cuStreamCreate(_NON_BLOCKING), "cuStreamCreate")
        self._free_events: list = []
        self._lock = threading.Lock()
        self.seq = 0  # events recorded so far
        self.done_seq = 0  # every event up to this one is known finished
        self.busy_seq, self.busy_at = 1 << 62, 0.0  # an event found unfinished, and when

    def _new_handle(self):
        with self._lock:
            if self._free_events:
                return self._free_events.pop()
        return check(driver.cuEventCreate(_DISABLE_TIMING), "cuEventCreate")

    def recycle(self, handle) -> None:
        with self._lock:
            self._free_events.append(handle)

    def record(self, keepalive=None) -> CUDAEvent:
        """An event completing when the work enqueued on this stream so far is done (context
        current)."""
        handle = self._new_handle()
        with self._lock:  # numbered in the order recorded (CUDAEvent.is_done relies on it)
            check(driver.cuEventRecord(handle, self.handle), "cuEventRecord")
            self.seq += 1
            seq = self.seq
        return CUDAEvent(self, handle, seq, keepalive)

    def wait_for(self, events: list[Event]) -> None:
        """Later work on this stream starts after ``events`` (context current)."""
        for event in events:
            if isinstance(event, CUDAEvent):
                if event.stream is not self and not event._done:
                    check(driver.cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")
            else:
                event.wait()

    def synchronize(self) -> None:
        seq = self.seq
        with current(self.ctx):
            check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")
        self.done_seq = max(self.done_seq, seq)


def _after_foreign_stream(stream: CUDAStream, ctx, stream_handle: int) -> None:
    """Later work on ``stream`` starts after the work enqueued so far on ``stream_handle``, a
    stream of context ``ctx`` (torch's current stream of a device; 0: its legacy default
    stream)."""
    _after_stream(stream.handle, stream.ctx, stream_handle, ctx)


def _after_stream(waiting, waiting_ctx, stream_handle: int, ctx) -> None:
    """Later work on stream ``waiting`` (of context ``waiting_ctx``) starts after the work
    enqueued so far on ``stream_handle`` (of ``ctx``). The event is made in that context, as
    cuEventRecord requires; destroying it after the wait is enqueued is safe (CUDA waits on the
    record made before the wait)."""
    with current(ctx):
        marker = check(driver.cuEventCreate(_DISABLE_TIMING), "cuEventCreate")
        try:
            check(driver.cuEventRecord(marker, stream_handle), "cuEventRecord")
            with current(waiting_ctx):
                check(driver.cuStreamWaitEvent(waiting, marker, 0), "cuStreamWaitEvent")
        finally:
            check(driver.cuEventDestroy(marker), "cuEventDestroy")


class CUDABuffer:
    """One device allocation: its address and size."""

    __slots__ = ("__weakref__", "nbytes", "ptr")

    def __init__(self, nbytes: int, ptr: int):
        self.nbytes, self.ptr = nbytes, ptr


class _Pinned:
    """A page-locked host block from cuMemHostAlloc."""

    __slots__ = ("nbytes", "ptr")

    def __init__(self, nbytes: int, ptr: int):
        self.nbytes, self.ptr = nbytes, ptr


class PinnedStaging:
    """Pinned host blocks for asynchronous copies, by power-of-two size, kept until the copy
    that uses a block is done (its event), then reused."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._free: dict[int, list[_Pinned]] = defaultdict(list)
        self._inflight: list[tuple[Event, _Pinned]] = []
        self._cached = 0
        self._lock = threading.Lock()

    @staticmethod
    def size_class(nbytes: int) -> int:
        return max(_MIN_BLOCK, 1 << (max(nbytes, 1) - 1).bit_length())

    def take(self, nbytes: int) -> _Pinned:
        size = self.size_class(nbytes)
        with self._lock:
            self._sweep()
            free = self._free.get(size)
            if free:
                self._cached -= size
                return free.pop()
        ptr = check(driver.cuMemHostAlloc(size, _PORTABLE), "cuMemHostAlloc")
        return _Pinned(size, int(ptr))

    def give(self, block: _Pinned, event: Event | None = None) -> None:
        """Return ``block``; with ``event``, only once the copy it stands for is done."""
        with self._lock:
            if event is not None and not event.is_done():
                self._inflight.append((event, block))
                return
            self._keep(block)

    def _keep(self, block: _Pinned) -> None:
        if self._cached + block.nbytes > _STAGING_CACHE:
            check(driver.cuMemFreeHost(block.ptr), "cuMemFreeHost")
            return
        self._cached += block.nbytes
        self._free[block.nbytes].append(block)

    def _sweep(self) -> None:
        if not self._inflight:
            return
        inflight, self._inflight = self._inflight, []
        for event, block in inflight:
            if event.is_done():
                self._keep(block)
            else:
                self._inflight.append((event, block))

    def release(self) -> None:
        """Give the cached blocks back (the pool's empty_cache)."""
        with self._lock:
            self._sweep()
            free, self._free, self._cached = self._free, defaultdict(list), 0
        with current(self.ctx):
            for blocks in free.values():
                for block in blocks:
                    check(driver.cuMemFreeHost(block.ptr), "cuMemFreeHost")


class CUDAPool(CachingPool):
    name = "cuda"
    out_of_memory_errors = (CUDAOutOfMemory,)

    def __init__(self, ctx, stream: CUDAStream, ordinal: int):
        super().__init__()
        self.ctx, self.stream, self.ordinal = ctx, stream, ordinal
        self.staging = PinnedStaging(ctx)
        # Asynchronous device→device copies whose source must stay alive (a torch tensor).
        self._inflight: list[tuple[Event, object]] = []
        # Addresses of dead ConstantBuffers, and those waiting for the work before their death.
        self._dead_constants: list[int] = []
        self._freeing_constants: list[tuple[Event, list[int]]] = []

    # ------------------------------------------------------------------ allocation

    def _new_buffer(self, nbytes: int) -> CUDABuffer:
        with current(self.ctx):
            ptr = check(driver.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")
        return CUDABuffer(nbytes, int(ptr))

    def _release_buffer(self, buffer: CUDABuffer) -> None:
        with current(self.ctx):
            check(driver.cuMemFree(buffer.ptr), "cuMemFree")

    def _release_cache(self, wait_pending: bool = False) -> None:
        # Cached buffers may still be read or written by work queued on the stream (their
        # events were dropped at free: stream order covers reuse, not cuMemFree).
        self.stream.synchronize()
        super()._release_cache(wait_pending)
        self.staging.release()

    def free(self, buffer, wait_events: list[Event]) -> None:
        # Work queued on this device's stream precedes any later use of the buffer, which is
        # queued on the same stream: only other streams' work (and host events) holds it back.
        own = self.stream
        super().free(buffer, [e for e in wait_events if not (isinstance(e, CUDAEvent) and e.stream is own)])

    def _sweep(self) -> None:
        super()._sweep()
        if self._inflight:
            self._inflight = [(e, keep) for e, keep in self._inflight if not e.is_done()]
        if self._dead_constants or self._freeing_constants:
            self._free_constants()

    def _free_constants(self) -> None:
        """Free the memory of dead ConstantBuffers once the work enqueued before they died is
        done (an event recorded when they are first seen here)."""
        if self._dead_constants:
            dead, self._dead_constants = self._dead_constants, []
            with current(self.ctx):
                self._freeing_constants.append((self.stream.record(), dead))
        keep = []
        for event, ptrs in self._freeing_constants:
            if event.is_done():
                with current(self.ctx):
                    for ptr in ptrs:
                        check(driver.cuMemFree(ptr), "cuMemFree")
            else:
                keep.append((event, ptrs))
        self._freeing_constants = keep

    def constant(self, data: bytes) -> CUDABuffer:
        """A buffer holding ``data``, outside the cache and the accounting (ConstantBuffer).
        Written synchronously, so nothing is pending on it afterwards."""
        with current(self.ctx):
            ptr = int(check(driver.cuMemAlloc(max(len(data), 1)), "cuMemAlloc"))
            if data:
                check(driver.cuMemcpyHtoD(ptr, data, len(data)), "cuMemcpyHtoD")
        return _ConstantBuffer(len(data), ptr, self)

    # ------------------------------------------------------------------ host copies

    def host_to_pool(self, src_ptr: int, nbytes: int, keepalive, buffer: CUDABuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``nbytes`` from host address ``src_ptr`` into ``buffer``: the bytes are copied
        into pinned blocks before this returns (the caller may change its memory then, as after
        PyTorch's copies from pageable memory); the DMA finishes later, to the returned event."""
        del keepalive  # read here, into the staging blocks
        stream = self.stream
        with current(self.ctx):
            stream.wait_for(wait_events)
            event = None
            for offset in range(0, max(nbytes, 1), _CHUNK):
                n = min(_CHUNK, nbytes - offset)
                if n <= 0:
                    break
                block = self.staging.take(n)
                ctypes.memmove(block.ptr, src_ptr + offset, n)
                check(driver.cuMemcpyHtoDAsync(buffer.ptr + offset, block.ptr, n, stream.handle),
                      "cuMemcpyHtoDAsync")
                event = stream.record()
                self.staging.give(block, event)
            if event is None:
                event = stream.record()
        if CONFIG.debug & DEBUG_LAUNCHES:
            print(f"zyx copy host->cuda:{self.ordinal} {nbytes} B")
        return event

    def pool_to_host(self, buffer: CUDABuffer, out_ptr: int, nbytes: int, wait_events: list[Event]) -> None:
        """Copy ``buffer`` to host address ``out_ptr`` once the work on it is done (blocking).
        Chunks alternate between two pinned blocks: the host copies one out while the next one
        moves."""
        stream = self.stream
        with current(self.ctx):
            stream.wait_for(wait_events)
            previous = None  # (block, event, offset, n) of the chunk in flight
            for offset in range(0, nbytes, _CHUNK):
                n = min(_CHUNK, nbytes - offset)
                block = self.staging.take(n)
                check(driver.cuMemcpyDtoHAsync(block.ptr, buffer.ptr + offset, n, stream.handle),
                      "cuMemcpyDtoHAsync")
                chunk = (block, stream.record(), offset, n)
                if previous is not None:
                    self._drain(previous, out_ptr)
                previous = chunk
            if previous is not None:
                self._drain(previous, out_ptr)
        if CONFIG.debug & DEBUG_LAUNCHES:
            print(f"zyx copy cuda:{self.ordinal}->host {nbytes} B")

    def _drain(self, chunk: tuple, out_ptr: int) -> None:
        block, event, offset, n = chunk
        event.wait()
        ctypes.memmove(out_ptr + offset, block.ptr, n)
        self.staging.give(block)

    # ------------------------------------------------------------------ torch's memory

    @staticmethod
    def wrap(ptr: int, nbytes: int, owner) -> CUDABuffer:
        """Device memory that ``owner`` holds (a torch ``cuda`` tensor's storage on this GPU) as
        this pool's buffer object, for kernels to read or write in place (the caller keeps
        ``owner``: buffer.ExternalBuffer)."""
        return CUDABuffer(nbytes, ptr)

    def follow(self, stream_handle: int) -> None:
        """Work enqueued from now on runs after the work enqueued so far on torch's stream
        ``stream_handle`` of this GPU (what wrote the tensors a compiled graph reads)."""
        _after_foreign_stream(self.stream, self.ctx, stream_handle)

    def chain(self, first_handle: int, then_handle: int) -> None:
        """Work enqueued from now on on stream ``then_handle`` runs after the work enqueued so
        far on stream ``first_handle`` (two of torch's streams of this GPU: a compiled graph
        that launches on torch's current stream, called on another one than before)."""
        _after_stream(then_handle, self.ctx, first_handle, self.ctx)

    def finish(self, stream_handle: int) -> None:
        """Wait until the work enqueued so far on ``stream_handle`` (one of torch's streams of
        this GPU) is done."""
        with current(self.ctx):
            check(driver.cuStreamSynchronize(stream_handle), "cuStreamSynchronize")

    def lead(self, stream_handle: int, events: list[Event]) -> None:
        """Work enqueued from now on on torch's stream ``stream_handle`` runs after ``events`` (a
        compiled graph's launches: torch reads their results, or reuses the memory of tensors
        they read once freed, in its own stream's order)."""
        with current(self.ctx):
            for event in events:
                if isinstance(event, CUDAEvent):
                    check(driver.cuStreamWaitEvent(stream_handle, event.handle, 0), "cuStreamWaitEvent")
                else:
                    event.wait()

    # ------------------------------------------------------------------ device copies

    def device_ptr(self, buffer: CUDABuffer) -> int:
        return buffer.ptr

    def pool_to_pool(self, src: CUDABuffer, src_pool: CUDAPool, nbytes: int, dst: CUDABuffer,
                     wait_events: list[Event]) -> Event:
        """Copy ``src`` (a buffer of ``src_pool``, this device's or another GPU's) into ``dst``
        on this device's stream, after ``wait_events`` (both buffers' pending work). The
        returned event must be recorded for both buffers (the source's pool keeps it from
        reuse until then: the copy is another stream's work there)."""
        stream = self.stream
        with current(self.ctx):
            stream.wait_for(wait_events)
            if nbytes:
                self._copy(dst.ptr, self.ctx, src.ptr, src_pool.ctx, nbytes)
            return stream.record()

    def from_device(self, src_ptr: int, src_ordinal: int, nbytes: int, keepalive, buffer: CUDABuffer,
                    wait_events: list[Event], after_stream: int) -> Event:
        """Copy ``nbytes`` of device memory at ``src_ptr`` (a torch ``cuda`` tensor's, on GPU
        ``src_ordinal``) into ``buffer``, after the work enqueued so far on the source's stream
        ``after_stream`` (torch's current stream there) and ``wait_events``. ``keepalive`` (the
        tensor) is held until the copy is done, so torch's allocator cannot hand its memory out
        before."""
        stream, src_ctx = self.stream, primary_context(src_ordinal)
        _after_foreign_stream(stream, src_ctx, after_stream)
        with current(self.ctx):
            stream.wait_for(wait_events)
            if nbytes:
                self._copy(buffer.ptr, self.ctx, src_ptr, src_ctx, nbytes)
            event = stream.record(keepalive)
        with self._lock:
            self._inflight.append((event, keepalive))
        if CONFIG.debug & DEBUG_LAUNCHES:
            print(f"zyx copy cuda:{src_ordinal} (torch)->zyx cuda:{self.ordinal} {nbytes} B")
        return event

    def to_device(self, buffer: CUDABuffer, dst_ptr: int, dst_ordinal: int, nbytes: int,
                  wait_events: list[Event], dst_stream: int) -> Event:
        """Copy ``buffer`` into device memory at ``dst_ptr`` (a torch ``cuda`` tensor's, on GPU
        ``dst_ordinal``), ordered after the work enqueued so far on torch's stream
        ``dst_stream`` (which allocated it) and before anything enqueued there later."""
        stream, dst_ctx = self.stream, primary_context(dst_ordinal)
        _after_foreign_stream(stream, dst_ctx, dst_stream)
        with current(self.ctx):
            stream.wait_for(wait_events)
            if nbytes:
                self._copy(dst_ptr, dst_ctx, buffer.ptr, self.ctx, nbytes)
            event = stream.record()
        with current(dst_ctx):
            # A stream may wait on an event of another context (cuStreamWaitEvent).
            check(driver.cuStreamWaitEvent(dst_stream, event.handle, 0), "cuStreamWaitEvent")
        if CONFIG.debug & DEBUG_LAUNCHES:
            print(f"zyx copy zyx cuda:{self.ordinal}->cuda:{dst_ordinal} (torch) {nbytes} B")
        return event

    def _copy(self, dst_ptr: int, dst_ctx, src_ptr: int, src_ctx, nbytes: int) -> None:
        """Device to device on this pool's stream (context current): within one device, or
        between two (peer access where the GPUs have it, else the driver stages through the
        host)."""
        if int(dst_ctx) == int(src_ctx):
            check(driver.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, self.stream.handle), "cuMemcpyDtoDAsync")
        else:
            check(driver.cuMemcpyPeerAsync(dst_ptr, dst_ctx, src_ptr, src_ctx, nbytes, self.stream.handle),
                  "cuMemcpyPeerAsync")


class _ConstantBuffer(CUDABuffer):
    """A ConstantBuffer's memory. When the last reference dies every launch that reads it has
    been enqueued (launches hold their buffers while enqueuing), on the pool's stream: the pool
    frees it once the stream's work up to that point is done (``_free_constants``)."""

    __slots__ = ("pool",)

    def __init__(self, nbytes: int, ptr: int, pool: CUDAPool):
        super().__init__(nbytes, ptr)
        self.pool = pool

    def __del__(self):
        try:
            self.pool._dead_constants.append(self.ptr)  # list.append: safe from any thread
        except AttributeError:  # interpreter shutdown
            return
