"""CPU runtime: LLVM IR text → machine code with llvmlite (host CPU, O3), called by address.

A program is ``void kernel(ptr* buffers, i64* params, i64 start, i64 end)`` that runs outer
iterations [start, end), plus a parallel entry that takes chunks of the outer range off atomic
counters, starting with the block of chunks of the CPU it runs on (``_PARALLEL_ENTRY``).
``launch`` runs the parallel entry on the device's thread team (cpu_team.py); the calls
(cpu_calls.py) release the GIL, so other Python threads keep recording. Compiled objects are
cached on disk under ``$XDG_CACHE_HOME/zyx/llvm`` keyed by source hash.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path

import llvmlite.binding as llvm

from ..codegen.llvm import PREFETCH_ATTRIBUTE, STREAM_ATTRIBUTE, STREAM_STORE_BYTES
from ..config import CONFIG, DEBUG_COMPILE
from ..counters import bump
from ..lazy.panels import DEFAULT_TILE, MatmulTile
from ..memory.events import Event, completed, wait_all
from ..memory.host import HostPool
from . import CompileError
from .cpu_calls import CALLS, COUNTER_WORDS, MAX_HOMES
from .cpu_team import NativeTeam, OpenMPTeam, PythonWorkers
from .disk_cache import PACKAGE_VERSION, read_entry, write_entry

log = logging.getLogger("torch_zyx")

# ``void kernel_parallel(Task* task)``: every thread of a launch calls it with the same task
# (cpu_calls.py: the task's layout).
_PARALLEL_SUFFIX = "_parallel"


# The parallel entry added to every kernel. The outer range is cut into chunks, and the chunks
# into ``homes`` blocks of consecutive chunks (as many as the device has threads), each with its
# own atomic counter. A thread starts with the block of the CPU it runs on (CPU number modulo
# homes), taking its chunks one at a time, then takes what is left of the others, block by
# block: the same rows go to the same core at every launch of a shape, so a kernel finds what
# the previous one wrote (or read) there in that core's L2 cache, as with OpenMP's static
# schedule, and a thread that is late or shares its core leaves its chunks to the others. (One
# counter for all chunks handed them out in arrival order, a different core each launch.)
# Every other launch takes each block's chunks last first (the task's ``backward``): a core's
# block is about as large as its L2 (a 1024x4096 float layer norm on 16 cores: 1 MiB in and
# 1 MiB out per core), and swept in the same order every launch it would miss in L2 on every
# line, each line evicted just before it is needed again; swept the other way, the next launch
# starts with the lines the last one touched, still there. 16-core host, synced calls in a loop:
# layer norm 1024x4096 192-211 -> 147-176 us per call, x * 2 on 16 MiB 188 -> 131 us.
_PARALLEL_ENTRY = """
%zyx.task = type {{ ptr, ptr, ptr, i64, i64, i64, i64 }}
{cpu_declare}
define void @{name}{suffix}(ptr %task) {{
entry:
  %bufs = load ptr, ptr %task
  %params.at = getelementptr %zyx.task, ptr %task, i32 0, i32 1
  %params = load ptr, ptr %params.at
  %counters.at = getelementptr %zyx.task, ptr %task, i32 0, i32 2
  %counters = load ptr, ptr %counters.at
  %end.at = getelementptr %zyx.task, ptr %task, i32 0, i32 3
  %end = load i64, ptr %end.at
  %chunk.at = getelementptr %zyx.task, ptr %task, i32 0, i32 4
  %chunk = load i64, ptr %chunk.at
  %homes.at = getelementptr %zyx.task, ptr %task, i32 0, i32 5
  %homes = load i64, ptr %homes.at
  %backward.at = getelementptr %zyx.task, ptr %task, i32 0, i32 6
  %backward.word = load i64, ptr %backward.at
  %backward = icmp ne i64 %backward.word, 0
  %span = add i64 %end, %chunk
  %span1 = sub i64 %span, 1
  %chunks = udiv i64 %span1, %chunk
  %cpu = {cpu_value}
  %known = icmp sgt i32 %cpu, -1
  %cpu.known = select i1 %known, i32 %cpu, i32 0
  %cpu64 = zext i32 %cpu.known to i64
  %first = urem i64 %cpu64, %homes
  br label %home
home:
  %k = phi i64 [ 0, %entry ], [ %k.next, %next_home ]
  %h.raw = add i64 %first, %k
  %wraps = icmp uge i64 %h.raw, %homes
  %h.wrapped = sub i64 %h.raw, %homes
  %h = select i1 %wraps, i64 %h.wrapped, i64 %h.raw
  %lo.num = mul i64 %h, %chunks
  %lo = udiv i64 %lo.num, %homes
  %h1 = add i64 %h, 1
  %hi.num = mul i64 %h1, %chunks
  %hi = udiv i64 %hi.num, %homes
  %in.home = sub i64 %hi, %lo
  %last = sub i64 %hi, 1
  %slot = mul i64 %h, {counter_words}
  %counter = getelementptr i64, ptr %counters, i64 %slot
  br label %take
take:
  %taken = atomicrmw add ptr %counter, i64 1 monotonic
  %forward = add i64 %lo, %taken
  %from.last = sub i64 %last, %taken
  %index = select i1 %backward, i64 %from.last, i64 %forward
  %have = icmp ult i64 %taken, %in.home
  br i1 %have, label %run, label %next_home
run:
  %start = mul i64 %index, %chunk
  %next = add i64 %start, %chunk
  %short = icmp slt i64 %next, %end
  %stop = select i1 %short, i64 %next, i64 %end
  call void @{name}(ptr %bufs, ptr %params, i64 %start, i64 %stop)
  br label %take
next_home:
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, %homes
  br i1 %more, label %home, label %exit
exit:
  ret void
}}
"""
# Below this many scalar operations a launch runs on the calling thread: waking the pool costs more.
_SERIAL_WORK = 1 << 15
_LLVM_VERSION = ".".join(map(str, llvm.llvm_version_info))

# Absolute addresses, 64-bit: MCJIT maps an object's code and constants separately, and in a long
# process with large allocations in between they came out more than 2 GiB apart, where the
# default model's 32-bit offsets cannot reach ("RuntimeDyldELF ... Assertion `isInt<32>(RealOffset)'
# failed": the process aborted, in the test suite after ~1,900 tests). Constant addresses are then
# loaded whole, outside the loops.
_CODE_MODEL = ("static", "large")
# The smallest chunk of a parallel launch, in scalar operations (about 10-20 us of work).
_GRAIN_WORK = 1 << 16
# On a team of more than _SMALL_TEAM threads a launch takes no more workers than it has pairs
# of chunks: with one chunk per worker, any worker that starts late (woken late, or sharing its
# core) holds up the whole launch, and nobody can take its chunk. 16-core host, same-process
# A/B against one chunk per worker: matmul 256x512x512 0.89 -> 0.66 ms, MLP Adam step 10.4 ->
# 9.2 ms (layer norm unchanged). Not on 2 cores: there a launch of two chunks (an attention's
# ``probs @ v``, two column blocks) needs both threads (transformer step 257 -> 271 ms).
# (The OpenMP team's regions always have all the device's threads since session 15, and any
# of them takes chunks: there the workers only decide whether the launcher takes chunks too.
# The A/B above was measured with regions of the workers' size.)
_MIN_CHUNKS_PER_WORKER = 2
_SMALL_TEAM = 4
# Launches of at least this much work return once their region has started (cpu_team.py
# ``OpenMPTeam``); smaller ones run to their end in one call, which costs a few microseconds
# less (one foreign call instead of three, no event to make) and has nothing to hide behind.
_DETACH_WORK = 1 << 22


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


class CPUProgram:
    """A compiled kernel: its entry addresses (``address`` on the calling thread, the parallel
    entry for the team). ``quick``: compiled without optimization passes (``upgrade`` compiles
    it optimized and moves the addresses there)."""

    def __init__(self, device: CPUDevice, name: str, engine, address: int, source: str, quick: bool = False):
        self.device, self.name, self.source = device, name, source
        self._engine = engine  # keeps the machine code alive
        # And every earlier version's: a plan's launch steps may still hold their addresses.
        self._earlier: list = []
        self.address = address
        self.parallel_address = engine.get_function_address(name + _PARALLEL_SUFFIX)
        self.quick = quick

    def upgrade(self) -> None:
        """The kernel compiled with the optimization passes, its addresses moved there (a no-op
        for one compiled so). The optimized copy has a name of its own: one engine cannot define
        a symbol twice."""
        if not self.quick:
            return
        name = self.name + "_o"
        source = self.source.replace(f"@{self.name}(", f"@{name}(")
        engine, self.address = self.device.machine_code(name, source, quick=False)
        self._earlier.append(self._engine)
        self._engine = engine
        self.parallel_address = engine.get_function_address(name + _PARALLEL_SUFFIX)
        self.quick = False
        bump("kernels_optimized")

    def launch(self, buffers: list, params: list[int], global_size: int, work: int,
               wait_events: list[Event]) -> Event:
        """Run outer iterations [0, global_size); ``work`` estimates total scalar operations."""
        pointers = [b.raw.ptr for b in buffers]
        device = self.device
        threads = device.threads
        if device.runs_serially(work, global_size):
            wait_all(wait_events)
            CALLS.serial(self.address, pointers, params, 0, global_size)
            return completed()
        # Each thread of the team makes one call into the kernel's parallel entry, which takes
        # chunks off a shared atomic counter in machine code until none are left: no trip
        # through the GIL per chunk, and a thread that loses its core on a shared machine
        # leaves the rest of the chunks to the others. About 8 chunks per thread, none under a
        # grain of work, and on large teams at least two per worker.
        grain = max(1, global_size * _GRAIN_WORK // max(work, 1))
        chunk = max(grain, -(-global_size // (8 * threads)))
        per_worker = _MIN_CHUNKS_PER_WORKER if threads > _SMALL_TEAM else 1
        workers = min(threads, -(-global_size // (chunk * per_worker)))
        device.backward = backward = 1 - device.backward  # (see _PARALLEL_ENTRY)
        task = CALLS.Task(pointers, params, global_size, chunk, min(threads, MAX_HOMES), backward)
        return device.team.launch(self.parallel_address, task, workers, wait_events, buffers,
                                  work >= _DETACH_WORK)


def _last_level_cache_bytes() -> int:
    """The size of the largest cache of CPU 0 (Linux sysfs), 0 when unknown."""
    largest = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size_file.read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[-1:] in units and text[:-1].isdigit():
            largest = max(largest, int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            largest = max(largest, int(text))
    return largest


class _SharedEngines:
    """MCJIT engines that hold the machine code of several kernels each: an engine of its own per
    kernel cost ~1.5 MB (its target machine and module), so the 512 programs the caches keep made
    the process ~750 MB larger. Kernels are loaded as object files into the current engine; after
    ``PER_ENGINE`` of them a new one is started, and an engine is freed with the last program that
    holds it (programs leave the bounded caches oldest first, so old engines go)."""

    PER_ENGINE = 64

    def __init__(self, new_target_machine):
        self._new_target_machine = new_target_machine
        self._engine = None
        self._names: set[str] = set()  # kernels loaded into the current engine

    def load(self, name: str, code: bytes):
        """The engine holding kernel ``name`` (machine code ``code``), loading it if needed: a
        kernel compiled again after its program left the caches is still in the engine, and one
        engine cannot define a symbol twice."""
        if self._engine is None or len(self._names) >= self.PER_ENGINE:
            # (an empty module: the kernels come as object files; each engine owns its machine)
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._new_target_machine())
            self._names = set()
        engine = self._engine
        if name not in self._names:
            engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            engine.finalize_object()
            self._names.add(name)
        return engine


class CPUDevice:
    """The embedded default device: the host CPU through LLVM."""

    name = "cpu"
    renderer = "llvm"

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.triple = llvm.get_process_triple()
        # For the optimization passes and emitting object files, never an engine's: an engine
        # takes ownership of the target machine it is made with and frees it with itself
        # (llvmlite marks it owned), so each engine gets its own (new_target_machine). With one shared machine, the first program (or
        # thread team) freed left every later compile a dangling one: a segfault.
        self.target_machine = self.new_target_machine()
        self._engines = _SharedEngines(self.new_target_machine)
        self.threads = CONFIG.threads
        self.backward = 0  # the order the last parallel launch took its chunks in (_PARALLEL_ENTRY)
        # Which CPU a thread of the parallel entry runs on (glibc's sched_getcpu: a vDSO read);
        # elsewhere every thread starts with the first block.
        if "linux" in self.triple:
            self._cpu_number = {"cpu_declare": "declare i32 @sched_getcpu()",
                                "cpu_value": "call i32 @sched_getcpu()"}
        else:
            self._cpu_number = {"cpu_declare": "", "cpu_value": "add i32 0, 0"}
        self.team = self._new_team()
        # A forked child (DataLoader workers, forking test runners) inherits the team but not
        # its threads: a launch would wait for them forever. The child starts fresh threads.
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        self.pool = HostPool()
        self._cache_dir = CONFIG.cache_dir / "llvm"
        self._lock = threading.Lock()
        vector_bits = CONFIG.vector_bits or self._preferred_vector_bits()
        self.render_options = {"stream_store_bytes": max(STREAM_STORE_BYTES, _last_level_cache_bytes() // 4),
                               "vector_bits": vector_bits}
        # 512-bit vectors come with 32 registers: a tile of 16 accumulators (lazy/panels.py).
        self.matmul_tile = MatmulTile(8, 32) if vector_bits == 512 else DEFAULT_TILE

    @staticmethod
    def new_target_machine():
        """An LLVM target machine for the host CPU (O3, ``_CODE_MODEL``)."""
        reloc, code_model = _CODE_MODEL
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3,
            reloc=reloc, codemodel=code_model)

    @staticmethod
    def _preferred_vector_bits() -> int:
        """512 on AVX-512 hosts (LLVM prefers 256 there; a 16-core Xeon ran softmax 1024x4096 in
        0.42 instead of 0.49 ms with 512), else 0: the target's own preference."""
        return 512 if "+avx512f" in llvm.get_host_cpu_features().flatten() else 0

    def _new_team(self):
        if CONFIG.cpu_team == "openmp":
            team = OpenMPTeam.find(region_threads=self.threads)
            if team is not None:
                return team
        if CONFIG.cpu_team in ("native", "openmp") and NativeTeam.supported(self.triple):
            return NativeTeam(self.new_target_machine(), self.threads - 1)
        return PythonWorkers(self.threads)

    def _after_fork_in_child(self) -> None:
        if isinstance(self.team, OpenMPTeam):
            # Its threads are gone in the child, and its first parallel region would wait on
            # them forever (GNU OpenMP is not fork-safe). No compiling in a fork handler.
            self.team = PythonWorkers(self.threads)
        else:
            self.team.reset()
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"cpu: {llvm.get_host_cpu_name()} ({self.threads} threads, {self.team.name}, LLVM)"

    def settle(self) -> None:
        """Finish the launch this thread left running (cpu_team.py ``OpenMPTeam``)."""
        self.team.settle()

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

    def _module_source(self, name: str, source: str) -> str:
        """The module's IR: the kernel plus its parallel entry."""
        return source + _PARALLEL_ENTRY.format(name=name, suffix=_PARALLEL_SUFFIX,
                                               counter_words=COUNTER_WORDS, **self._cpu_number)

    def _parse(self, name: str, kernel_source: str, source: str):
        try:
            module = llvm.parse_assembly(source)
            module.verify()
        except RuntimeError as exc:
            raise CompileError(name, kernel_source, str(exc),
                               "save the source to k.ll and run `llc -O3 k.ll`") from None
        module.triple = self.triple
        return module

    def _optimized(self, module, source: str):
        self._optimize(module)
        if self.triple.startswith("x86_64"):
            module = self._after_optimization(module, source)
        return module

    def optimized_ir(self, name: str, source: str) -> str:
        """The optimized LLVM IR ``compile`` turns into machine code for kernel ``name`` (what
        the optimizer and the runtime's rewrites made of the renderer's ``source``)."""
        full = self._module_source(name, source)
        with self._lock:
            return str(self._optimized(self._parse(name, source, full), full))

    def runs_serially(self, work: int, global_size: int) -> bool:
        """Whether a launch of ``work`` scalar operations over ``global_size`` iterations runs
        on the calling thread (waking the team would cost more)."""
        return self.threads <= 1 or work < _SERIAL_WORK or global_size <= 1

    def plan_steps(self, launches: list[tuple]) -> tuple | None:
        """``launches`` ((program, loop IR, slot indices, random parameter indices) each) as the
        steps of one ``serial_each`` call when every launch is one ``CPUProgram.launch`` runs on
        the calling thread (little work), else None (launched one by one)."""
        steps = []
        for program, loop, slots, params in launches:
            if not self.runs_serially(loop.work, loop.global_size):
                return None
            steps.append((program.address, tuple(slots), tuple(params), loop.global_size))
        return tuple(steps)

    @staticmethod
    def run_steps(steps: tuple, pointers: list[int], params: list[int], wait_events: list[Event]) -> Event:
        """Run ``plan_steps``' steps in order, after ``wait_events``, over the realization's
        buffer ``pointers`` and random ``params``, in one foreign call: a plan of small kernels
        (a compiled graph on tiny tensors, a training step's scalar updates) pays the launch
        path once, not per kernel. Done when it returns."""
        wait_all(wait_events)
        CALLS.serial_each(steps, pointers, params)
        return completed()

    def quick_compile(self, work: int, global_size: int) -> bool:
        """Whether a kernel of ``work`` scalar operations over ``global_size`` iterations is
        compiled without optimization passes at first: one that runs on the calling thread
        (``runs_serially``), where the passes cost ~5x the compile (~40 ms against ~6) and its
        run microseconds either way. A program that keeps running is optimized then
        (``CPUProgram.upgrade``, from execute/realize.py's ``launch_plan``)."""
        return self.runs_serially(work, global_size)

    def compile(self, name: str, source: str, quick: bool = False) -> CPUProgram:
        # Errors and the program carry the kernel's own source (what the renderer wrote).
        engine, address = self.machine_code(name, source, quick)
        if quick:
            bump("kernels_compiled_quick")
        return CPUProgram(self, name, engine, address, source, quick)

    def machine_code(self, name: str, kernel_source: str, quick: bool) -> tuple:
        """(engine, address) of kernel ``name`` compiled from ``kernel_source``, optimized or
        (``quick``) not, from the disk cache where it is there."""
        source = self._module_source(name, kernel_source)
        # Keyed by everything the machine code depends on: the target, LLVM, torch_zyx, the code
        # model, the passes and the module's source.
        key = (f"{self.triple}\x00{llvm.get_host_cpu_name()}\x00{_LLVM_VERSION}\x00{PACKAGE_VERSION}\x00"
               f"{_CODE_MODEL}\x00{'quick' if quick else 'O3'}\x00{source}")
        cached_object = self._cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.obj"
        with self._lock:
            # (checksummed: a garbled object file made MCJIT abort the process)
            code = read_entry(cached_object) if CONFIG.disk_cache else None
            if code is None:
                module = self._parse(name, kernel_source, source)
                if not quick:
                    module = self._optimized(module, source)
                if CONFIG.debug & DEBUG_COMPILE:
                    print(f"zyx compile {name}: {len(source)} chars of LLVM IR{' (quick)' if quick else ''}")
                code = self.target_machine.emit_object(module)
                self._store_object(cached_object, code)
            engine = self._engines.load(name, code)
            return engine, engine.get_function_address(name)

    def _store_object(self, path, data: bytes) -> None:
        if not CONFIG.disk_cache:
            return
        try:
            write_entry(path, data)
        except OSError as exc:
            log.debug("zyx: cannot write kernel cache %s: %s", path, exc)
