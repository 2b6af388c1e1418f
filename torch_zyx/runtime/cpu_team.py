"""The CPU runtime's thread teams: how one launch's parallel entry runs on several threads.

Every team has ``launch(entry address, task, threads, wait events, keepalive) → Event`` (the
task: cpu_calls.py ``Task``), ``settle()`` (join what the calling thread launched and left running) and
``reset()`` (for a forked child). The device picks one (``ZYX_CPU_TEAM``):

- ``OpenMPTeam`` (default): the OpenMP runtime CPU torch loaded, one parallel region per
  launch. zyx's kernels and CPU torch's ops share its threads: after a torch op its team keeps
  spinning for milliseconds, and a second team of zyx's own would fight it for the cores (on a
  16-core host x * 2 on 16 MB took 1.0 ms on the native team next to torch, 0.22 ms on this one).
- ``NativeTeam`` (x86-64 Linux): zyx's own helper threads waiting in machine code (spin on a
  shared word for a moment, then sleep on a futex), woken at once by one store and one futex
  call. Its launcher sleeps rather than spins while it waits for the last helper, so it holds
  up better on a machine busy with other processes, where OpenMP's spinning launcher can spend
  a whole 4 ms scheduler tick waiting for a helper that shares its core.
- ``PythonWorkers``: Python threads fed through a queue, each making one call into the
  parallel entry; what a forked child uses (no team survives fork) and the last fallback.

The OpenMP team returns from a detached launch once the region has started, and the calling
thread joins it at its next wait or settle; the native team runs the launch on the calling
thread too and returns when it is done; Python workers return an event at once.
"""

from __future__ import annotations

import ctypes
import queue
import re
import sys
import threading

import llvmlite.binding as llvm

from ..memory.events import Event, completed, wait_all
from .cpu_calls import CALLS

# The team's shared state: { i32 word, i32 pending, ptr entry, ptr task }. ``word`` is
# (launch sequence << 8) | helpers taking part (helpers 0..helpers-1 run the launch), so a
# helper reads which launch and whether it takes part in one atomic load; ``pending`` counts
# the helpers still running it. A helper starts from word 0 (no launch yet): it may first run
# after the first launch was published. Futex operations are raw syscalls (202; 128 =
# FUTEX_WAIT_PRIVATE, 129 = FUTEX_WAKE_PRIVATE). Time stamps bound the spinning: a helper
# spins up to ``idle_cycles`` after a launch (back-to-back launches find it awake), the
# launcher up to ``wait_cycles`` for the last helper, before sleeping.
_TEAM_IR = """%zyx.team = type {{ i32, i32, ptr, ptr }}

declare i64 @syscall(i64, ...)
declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()

; The value of *word once it differs from old: spin up to spin_cycles, then sleep on a futex.
define internal i32 @zyx_await_change(ptr %word, i32 %old, i64 %spin_cycles) {{
entry:
  br label %spin
spin:
  %since = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %value = load atomic i32, ptr %word acquire, align 4
  %changed = icmp ne i32 %value, %old
  br i1 %changed, label %done, label %check
check:
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %since
  %long = icmp ugt i64 %spent, %spin_cycles
  br i1 %long, label %sleep, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  br label %poll
sleep:
  %expected = zext i32 %old to i64
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %word, i64 128, i64 %expected, ptr null)
  br label %spin
done:
  ret i32 %value
}}

define void @zyx_team_worker(ptr %team, i32 %index) {{
entry:
  %seen = alloca i32
  store i32 0, ptr %seen
  br label %idle
idle:
  %old = load i32, ptr %seen
  %word = call i32 @zyx_await_change(ptr %team, i32 %old, i64 {idle_cycles})
  store i32 %word, ptr %seen
  %helpers = and i32 %word, 255
  %mine = icmp slt i32 %index, %helpers
  br i1 %mine, label %run, label %idle
run:
  %fn.at = getelementptr %zyx.team, ptr %team, i32 0, i32 2
  %fn = load ptr, ptr %fn.at
  %task.at = getelementptr %zyx.team, ptr %team, i32 0, i32 3
  %task = load ptr, ptr %task.at
  call void %fn(ptr %task)
  %pending = getelementptr %zyx.team, ptr %team, i32 0, i32 1
  %left = atomicrmw sub ptr %pending, i32 1 acq_rel
  %last = icmp eq i32 %left, 1
  br i1 %last, label %wake, label %idle
wake:
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %pending, i64 129, i64 1, ptr null)
  br label %idle
}}

define void @zyx_team_run(ptr %team, ptr %fn, ptr %task, i32 %helpers) {{
entry:
  %fn.at = getelementptr %zyx.team, ptr %team, i32 0, i32 2
  store ptr %fn, ptr %fn.at
  %task.at = getelementptr %zyx.team, ptr %team, i32 0, i32 3
  store ptr %task, ptr %task.at
  %pending = getelementptr %zyx.team, ptr %team, i32 0, i32 1
  store atomic i32 %helpers, ptr %pending release, align 4
  %word = load i32, ptr %team
  %sequence = and i32 %word, -256
  %next = add i32 %sequence, 256
  %published = or i32 %next, %helpers
  store atomic i32 %published, ptr %team release, align 4
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %team, i64 129, i64 2147483647, ptr null)
  call void %fn(ptr %task)
  br label %wait
wait:
  %left = load atomic i32, ptr %pending acquire, align 4
  %done = icmp eq i32 %left, 0
  br i1 %done, label %exit, label %sleep
sleep:
  %changed = call i32 @zyx_await_change(ptr %pending, i32 %left, i64 {wait_cycles})
  br label %wait
exit:
  ret void
}}
"""
_MAX_HELPERS = 255
# About 100 us and 40 us at 2.5 GHz.
_IDLE_CYCLES = 250_000
_WAIT_CYCLES = 100_000


# Every native team whose threads were started, with its state (see NativeTeam._start).
_STARTED_TEAMS: list = []


class _TeamState(ctypes.Structure):
    _fields_ = [("word", ctypes.c_int32), ("pending", ctypes.c_int32), ("entry", ctypes.c_void_p),
                ("task", ctypes.c_void_p)]


class NativeTeam:
    """``helpers`` threads parked in machine code plus the launching thread. The team's engine
    owns ``target_machine`` (a machine of its own: CPUDevice.new_target_machine)."""

    name = "native team"

    def __init__(self, target_machine, helpers: int):
        module = llvm.parse_assembly(_TEAM_IR.format(idle_cycles=_IDLE_CYCLES, wait_cycles=_WAIT_CYCLES))
        module.verify()
        self._engine = llvm.create_mcjit_compiler(module, target_machine)
        self._engine.finalize_object()
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(
            self._engine.get_function_address("zyx_team_worker"))
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
            self._engine.get_function_address("zyx_team_run"))
        self.helpers = min(helpers, _MAX_HELPERS)
        self.reset()

    def reset(self) -> None:
        """A fresh state with no threads yet (in a forked child, which inherits the machine
        code but not the helper threads)."""
        self._state = _TeamState()
        self._address = ctypes.addressof(self._state)
        self._started = False
        # One launch at a time: the state holds one launch (the call releases the GIL).
        self._lock = threading.Lock()

    @staticmethod
    def supported(triple: str) -> bool:
        return triple.startswith("x86_64") and sys.platform.startswith("linux")

    def _start(self) -> None:
        # The helpers run this team's machine code and read its state for the rest of the
        # process: neither may be freed (a team dropped by its device would crash them).
        _STARTED_TEAMS.append((self, self._state))
        for index in range(self.helpers):
            # Each thread makes one call that never returns (GIL released for good). Daemon:
            # an idle helper must not keep the interpreter alive.
            thread = threading.Thread(target=self._worker, args=(self._address, index),
                                      name=f"zyx-cpu-{index}", daemon=True)
            thread.start()
        self._started = True

    def settle(self) -> None:
        """Nothing is left running after a launch returns."""

    def launch(self, entry: int, task, threads: int, wait_events: list[Event], keepalive,
               detach: bool = False) -> Event:
        wait_all(wait_events)
        with self._lock:
            if not self._started:
                self._start()
            self._run(self._address, entry, task.address, min(threads - 1, self.helpers))
        return completed()


# OpenMP runtimes that export GNU's ``GOMP_parallel`` (LLVM's and Intel's export it as well).
_OPENMP_LIBRARY = re.compile(r"/lib(gomp|omp|iomp5)[-.\w]*\.so[.\d]*$")


# On teams of at least this many threads the launcher of a detached region takes no chunks
# (when the region has other threads to take them): its share of a large kernel would stream
# through its own core's caches and evict the interpreter's working set, and the Python that
# follows (the next op's recording, the next realization) ran up to 2x slower out of the shared
# L3. 16-core host, layer norm 1024x4096 + synchronize, medians per process (7 without, 9 with):
# 304-385 -> 221-302 us per call, the kernel itself unchanged (139-166 -> 133-157 us); in one
# process, 16 alternating blocks of 60 calls: 308-335 -> 264-275 us. On small teams the
# launcher's share of the work is worth more than its caches (2 threads: the kernel would take
# 2x as long).
IDLE_LAUNCHER_TEAM = 8


def _address(library, name: str) -> int | None:
    """The address of ``library``'s function ``name``, None if it has none."""
    function = getattr(library, name, None)
    return None if function is None else ctypes.cast(function, ctypes.c_void_p).value


class _Region(Event):
    """A parallel region the team's threads are already running (``GOMP_parallel_start``); the
    launching thread joins it when it first waits on it or settles the team: it runs the
    parallel entry itself, taking whatever chunks are left (unless ``launcher_works`` is
    false), and ends the region. Another thread waits for that (OpenMP lets only the launcher
    end a region)."""

    __slots__ = ("_entry", "_launcher_works", "_owner", "_task", "_team")

    def __init__(self, team: OpenMPTeam, entry: int, task, keepalive, launcher_works: bool):
        super().__init__(keepalive=(keepalive, task))
        self._team, self._entry, self._task = team, entry, task
        self._launcher_works = launcher_works
        self._owner = threading.get_ident()

    def wait(self) -> None:
        if not self._done and threading.get_ident() == self._owner:
            self._team.settle()
        super().wait()

    def join(self) -> None:
        if self._launcher_works:
            CALLS.entry(self._entry, self._task)
        CALLS.omp_end(self._team._end)  # (the end barrier waits for every thread of the region)
        self.set()


class OpenMPTeam:
    """The team of the OpenMP runtime CPU torch loaded: zyx's kernels and CPU torch's ops share
    one set of threads (a team still spinning after a torch op takes the kernel at once, and
    the two never compete for cores); its launcher spins at the end barrier.

    A detached launch (a large one: the device decides) starts the region
    (``GOMP_parallel_start``) and returns: the team's threads take chunks while the launching
    thread goes on with the Python that follows the launch (the end of a realization: new
    buffer nodes for the storages, the realized graph freed), then joins in (``settle``, or a
    wait on the launch's event; on large teams it only ends the region: IDLE_LAUNCHER_TEAM).
    That Python then runs before the kernel has swept its caches, and the launching thread
    takes fewer chunks: a loop of layer norms 1024x4096 on 2 cores
    ran 10-20% faster (same-process A/B in blocks of calls; 0.5-3% when the two ways
    alternated call by call). One region per thread is open at a time: a launch settles the
    one before it first. Other launches, and all where the runtime lacks the split entry
    points, run to their end in one ``GOMP_parallel`` call."""

    name = "OpenMP team"

    def __init__(self, parallel: int, start: int | None = None, end: int | None = None,
                 team_size: int | None = None, region_threads: int = 0):
        # The runtime's functions, by address (cpu_calls.py calls them).
        self._parallel = parallel
        self._start, self._end = start, end
        # ``omp_get_num_threads``: called by the launcher between start and end, the threads
        # its region really got (fewer than asked under OMP_THREAD_LIMIT or nested regions).
        self._team_size = team_size
        self._open: dict[int, _Region] = {}  # launching thread → its open region
        # Threads of every region (the device's count; 0: each launch's own). The runtime
        # parks the threads a region leaves out, and a later region that takes them back
        # (zyx's next launch, or CPU torch's op, which always asks for all of them) waits for
        # them to wake. On the 16-core host, regions of each launch's size against regions
        # of all 16, same code otherwise: linear 256x512x512 (a pack, then the matmul) 0.35-
        # 0.37 -> 0.27-0.34 ms per call, an MLP Adam step 8.6-9.5 -> 5.3-6.3 ms. A launch
        # with fewer chunks than threads leaves the others nothing to take (they end at once).
        self.region_threads = region_threads

    @classmethod
    def find(cls, region_threads: int = 0) -> OpenMPTeam | None:
        """The team of an OpenMP runtime loaded in this process, if there is one (Linux), its
        regions of ``region_threads`` threads (0: each launch's own)."""
        try:
            with open("/proc/self/maps") as maps:
                paths = {line.split()[-1] for line in maps if _OPENMP_LIBRARY.search(line.rstrip())}
        except OSError:
            return None
        for path in sorted(paths):
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            parallel = _address(library, "GOMP_parallel")
            if parallel is None:
                continue
            start = _address(library, "GOMP_parallel_start")
            end = _address(library, "GOMP_parallel_end")
            if start is None or end is None:
                return cls(parallel, region_threads=region_threads)
            return cls(parallel, start, end, _address(library, "omp_get_num_threads"), region_threads)
        return None

    def reset(self) -> None:
        raise RuntimeError("an OpenMP team does not survive fork()")

    def launch(self, entry: int, task, threads: int, wait_events: list[Event], keepalive,
               detach: bool = False) -> Event:
        if wait_events:
            wait_all(wait_events)
        if self._open:
            self.settle()
        region_threads = max(threads, self.region_threads)
        if self._start is None or not detach:
            CALLS.omp_parallel(self._parallel, entry, task, region_threads)
            return completed()
        CALLS.omp_start(self._start, entry, task, region_threads)
        # The launcher must work when the region got no other thread: nobody else would.
        launcher_works = (threads < IDLE_LAUNCHER_TEAM or self._team_size is None
                          or CALLS.omp_team_size(self._team_size) < 2)
        region = self._open[threading.get_ident()] = _Region(self, entry, task, keepalive, launcher_works)
        return region

    def settle(self) -> None:
        """Join the calling thread's open region, if any."""
        region = self._open.pop(threading.get_ident(), None)
        if region is not None:
            region.join()


class PythonWorkers:
    """Python kernel threads, started on first use, each running the tasks put in one queue.
    Lighter per launch than an executor (no future per task): a launch puts one task per thread."""

    name = "Python workers"

    def __init__(self, count: int):
        self.count = count
        self.reset()

    def reset(self) -> None:
        """A fresh queue with no threads yet (in a forked child)."""
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

    def settle(self) -> None:
        """Launches run on the workers, each to its event; nothing to join."""

    def launch(self, entry: int, task, threads: int, wait_events: list[Event], keepalive,
               detach: bool = False) -> Event:
        event = Event(keepalive=(keepalive, task))
        remaining = [threads]
        lock = threading.Lock()

        def run_chunks() -> None:
            error = None
            try:
                wait_all(wait_events)
                CALLS.entry(entry, task)
            except BaseException as exc:  # noqa: BLE001  (any failure is surfaced through the event)
                error = exc
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last or error is not None:
                event.set(error)

        for _ in range(threads):
            self.submit(run_chunks)
        return event
