"""CPU runtime: LLVM IR text → machine code with llvmlite (host CPU, O3), launched through ctypes.

A program is ``void kernel(ptr* buffers, i64* params, i64 start, i64 end)`` that runs outer
iterations [start, end). ``launch`` splits the outer range over a thread pool; ctypes releases
the GIL during the call, so the chunks run in parallel and the Python thread keeps recording.
Compiled objects are cached on disk under ``$XDG_CACHE_HOME/zyx/llvm`` keyed by source hash.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import queue
import re
import threading

import llvmlite.binding as llvm

from ..codegen.llvm import PREFETCH_ATTRIBUTE, STREAM_ATTRIBUTE
from ..config import CONFIG, DEBUG_COMPILE
from ..memory.events import Event, completed, wait_all
from ..memory.host import HostPool
from . import CompileError

log = logging.getLogger("torch_zyx")

_KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
# ``void kernel_parallel(ptr* buffers, i64* params, i64* counter, i64 end, i64 chunk)``.
_PARALLEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_int64)
_PARALLEL_SUFFIX = "_parallel"
# The parallel entry added to every kernel: runs [start, start + chunk) for start taken off
# *counter (an atomic add) until start reaches end.
_PARALLEL_ENTRY = """
define void @{name}{suffix}(ptr %bufs, ptr %params, ptr %counter, i64 %end, i64 %chunk) {{
entry:
  br label %take
take:
  %start = atomicrmw add ptr %counter, i64 %chunk monotonic
  %done = icmp sge i64 %start, %end
  br i1 %done, label %exit, label %run
run:
  %next = add i64 %start, %chunk
  %short = icmp slt i64 %next, %end
  %stop = select i1 %short, i64 %next, i64 %end
  call void @{name}(ptr %bufs, ptr %params, i64 %start, i64 %stop)
  br label %take
exit:
  ret void
}}
"""
# Below this many scalar operations a launch runs on the calling thread: waking the pool costs more.
_SERIAL_WORK = 1 << 15
# The smallest chunk of a parallel launch, in scalar operations (about 10-20 us of work).
_GRAIN_WORK = 1 << 16


# An optimized vector store: lanes, element type, alignment.
_VECTOR_STORE = re.compile(r"(  store <(\d+) x (\w+)> [^\n]*?, align (\d+))")
_ELEMENT_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat": 2, "i8": 1, "i16": 2, "i32": 4, "i64": 8}


# An optimized vector load tagged with its buffer's alias scope list.
_VECTOR_LOAD = re.compile(r"^  %[\w.]+ = load <\d+ x \w+>, ptr (%[\w.]+), align \d+, !alias\.scope (![0-9]+)",
                          re.MULTILINE)
# The alias metadata of buffer K (codegen/llvm.py ``alias_metadata``), as LLVM prints it again.
_SCOPE_NODE = re.compile(r'^(![0-9]+) = distinct !\{![0-9]+, ![0-9]+, !"buffer (\d+)"\}', re.MULTILINE)
_SCOPE_LIST = re.compile(r"^(![0-9]+) = !\{(![0-9]+)\}$", re.MULTILINE)
_PREFETCH_SPEC = re.compile(PREFETCH_ATTRIBUTE + r'"="([0-9:,]+)"')


def _add_prefetches(text: str, spec: str) -> str:
    """``text`` with an ``llvm.prefetch`` ahead of every vector load from the buffers in
    ``spec`` ("slot:bytes ahead:locality,...", codegen/llvm.py ``LLVMRenderer.prefetches``)."""
    ahead_of: dict[int, tuple[int, int]] = {}
    for item in spec.split(","):
        slot, distance, locality = (int(part) for part in item.split(":"))
        ahead_of[slot] = (distance, locality)
    scope_slot = {m.group(1): int(m.group(2)) for m in _SCOPE_NODE.finditer(text)}
    list_slot = {m.group(1): scope_slot[m.group(2)] for m in _SCOPE_LIST.finditer(text)
                 if m.group(2) in scope_slot}
    count = 0

    def prefetch(match: re.Match) -> str:
        nonlocal count
        slot = list_slot.get(match.group(2))
        if slot not in ahead_of:
            return match.group(0)
        distance, locality = ahead_of[slot]
        count += 1
        ahead = f"%zyx.ahead{count}"
        return (f"  {ahead} = getelementptr i8, ptr {match.group(1)}, i64 {distance}\n"
                f"  call void @llvm.prefetch.p0(ptr {ahead}, i32 0, i32 {locality}, i32 1)\n{match.group(0)}")

    text = _VECTOR_LOAD.sub(prefetch, text)
    if count:
        text += "\ndeclare void @llvm.prefetch.p0(ptr, i32, i32, i32)\n"
    return text


def _nontemporal(match: re.Match) -> str:
    """One vector store, marked non-temporal when it fills a whole aligned 16, 32 or 64-byte
    register: x86 has no non-temporal store for anything smaller or unaligned, and LLVM would
    split it into scalar ones (much slower than plain stores)."""
    store, lanes, element, align = match.groups()
    nbytes = int(lanes) * _ELEMENT_BYTES.get(element, 0)
    if nbytes in (16, 32, 64) and int(align) >= nbytes:
        return store + ", !nontemporal !{i32 1}"
    return store


class _Workers:
    """The kernel threads: started on first use, each runs the tasks put in one queue. Lighter
    per launch than an executor (no future per task): a launch puts one task per thread."""

    def __init__(self, count: int):
        self.count = count
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.started = False
        self.lock = threading.Lock()

    def submit(self, task) -> None:
        if not self.started:
            with self.lock:
                if not self.started:
                    for i in range(self.count):
                        # Daemon: an idle kernel thread must not keep the interpreter alive.
                        threading.Thread(target=self._run, name=f"zyx-cpu-{i}", daemon=True).start()
                    self.started = True
        self.queue.put(task)

    def _run(self) -> None:
        while True:
            self.queue.get()()


class CPUProgram:
    def __init__(self, device: CPUDevice, name: str, engine, address: int, source: str):
        self.device, self.name, self.source = device, name, source
        self._engine = engine  # keeps the machine code alive
        self._fn = _KERNEL_TYPE(address)
        self._parallel = _PARALLEL_TYPE(engine.get_function_address(name + _PARALLEL_SUFFIX))

    def launch(self, buffers: list, params: list[int], global_size: int, work: int,
               wait_events: list[Event]) -> Event:
        """Run outer iterations [0, global_size); ``work`` estimates total scalar operations."""
        pointers = (ctypes.c_void_p * max(len(buffers), 1))(*[b.ptr for b in buffers])
        param_array = (ctypes.c_int64 * max(len(params), 1))(*params)
        threads = self.device.threads
        if threads <= 1 or work < _SERIAL_WORK or global_size <= 1:
            wait_all(wait_events)
            self._fn(pointers, param_array, 0, global_size)
            return completed()
        # Each worker makes one call into the kernel's parallel entry, which takes chunks off a
        # shared atomic counter in machine code until none are left: no trip through the GIL
        # per chunk (with 16 threads, guided chunks handed out in Python made a 0.2 ms kernel
        # take 2 ms), and a thread that loses its core on a shared machine leaves the rest of
        # the chunks to the others. About 8 chunks per thread, none under a grain of work.
        grain = max(1, global_size * _GRAIN_WORK // max(work, 1))
        chunk = max(grain, -(-global_size // (8 * threads)))
        workers = min(threads, -(-global_size // chunk))
        counter = ctypes.c_int64(0)
        event = Event(keepalive=(pointers, param_array, buffers, counter))
        remaining = [workers]
        lock = threading.Lock()
        counter_address = ctypes.addressof(counter)

        def run_chunks() -> None:
            error = None
            try:
                wait_all(wait_events)
                self._parallel(pointers, param_array, counter_address, global_size, chunk)
            except BaseException as exc:  # noqa: BLE001  (any failure is surfaced through the event)
                error = exc
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last or error is not None:
                event.set(error)

        for _ in range(workers):
            self.device.workers.submit(run_chunks)
        return event


class CPUDevice:
    """The embedded default device: the host CPU through LLVM."""

    name = "cpu"
    renderer = "llvm"

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        self.triple = llvm.get_process_triple()
        self.target_machine = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3,
            reloc="pic", codemodel="default")
        self.threads = CONFIG.threads
        self.workers = _Workers(self.threads)
        # A forked child (DataLoader workers, forking test runners) inherits the workers' queue
        # but not their threads: submitted chunks would wait forever. Give the child fresh ones.
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        self.pool = HostPool()
        self._cache_dir = CONFIG.cache_dir / "llvm"
        self._lock = threading.Lock()
        self.vector_bits = 512 if "+avx512f" in llvm.get_host_cpu_features().flatten() else 256

    def _after_fork_in_child(self) -> None:
        self.workers = _Workers(self.threads)
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"cpu: {llvm.get_host_cpu_name()} ({self.threads} threads, LLVM)"

    def _optimize(self, module) -> None:
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pto.loop_interleaving = True
        pass_builder = llvm.create_pass_builder(self.target_machine, pto)
        pass_builder.getModulePassManager().run(module, pass_builder)

    def _after_optimization(self, module, source: str):
        """The optimized module with what the renderer asked for in function attributes
        (x86 only). STREAM_ATTRIBUTE: full, aligned vector stores non-temporal, and an
        ``sfence`` before returning (non-temporal stores are weakly ordered, and the thread that
        learns the chunk finished, through the event, must see them). PREFETCH_ATTRIBUTE:
        software prefetches ahead of the vector loads of some buffers."""
        text = str(module)
        changed = False
        if f'"{STREAM_ATTRIBUTE}"' in source:
            text = _VECTOR_STORE.sub(_nontemporal, text)
            if "!nontemporal" in text:
                text = text.replace("  ret void", "  call void @llvm.x86.sse.sfence()\n  ret void")
                text += "\ndeclare void @llvm.x86.sse.sfence()\n"
                changed = True
        spec = _PREFETCH_SPEC.search(source)
        if spec is not None:
            prefetched = _add_prefetches(text, spec.group(1))
            changed = changed or prefetched != text
            text = prefetched
        if not changed:
            return module
        rewritten = llvm.parse_assembly(text)
        rewritten.triple = self.triple
        return rewritten

    def compile(self, name: str, source: str) -> CPUProgram:
        # The module is the kernel plus its parallel entry; errors and the program carry the
        # kernel's own source (what the renderer wrote).
        kernel_source = source
        source = source + _PARALLEL_ENTRY.format(name=name, suffix=_PARALLEL_SUFFIX)
        digest = hashlib.sha256((self.triple + llvm.get_host_cpu_name() + source).encode()).hexdigest()[:32]
        cached_object = self._cache_dir / f"{digest}.o"
        with self._lock:
            try:
                module = llvm.parse_assembly(source)
                module.verify()
            except RuntimeError as exc:
                raise CompileError(name, kernel_source, str(exc),
                                   "save the source to k.ll and run `llc -O3 k.ll`") from None
            module.triple = self.triple
            cached = cached_object.read_bytes() if CONFIG.disk_cache and cached_object.exists() else None
            if cached is None:
                self._optimize(module)
                if self.triple.startswith("x86_64"):
                    module = self._after_optimization(module, source)
                if CONFIG.debug & DEBUG_COMPILE:
                    print(f"zyx compile {name}: {len(source)} chars of LLVM IR")
            engine = llvm.create_mcjit_compiler(module, self.target_machine)
            # The object cache hands MCJIT the machine code from disk (no codegen) or is told
            # the fresh machine code so the next process can skip compiling.
            engine.set_object_cache(lambda _module, data: self._store_object(cached_object, data),
                                    lambda _module: cached)
            engine.finalize_object()
            address = engine.get_function_address(name)
        return CPUProgram(self, name, engine, address, kernel_source)

    def _store_object(self, path, data: bytes) -> None:
        if not CONFIG.disk_cache:
            return
        try:
            self._cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("zyx: cannot write kernel cache %s: %s", path, exc)
