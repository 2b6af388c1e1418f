"""The CPU runtime's foreign calls: kernels, their parallel entries and the OpenMP runtime's
region functions, all called by address.

Stage 6 of the flow (... → renderer → **device**); cpu.py and cpu_team.py launch through
``CALLS``. Two implementations with one surface:

- ``_launch.c`` (built by the install, used unless ``ZYX_NATIVE=0``): one C call per step, no
  ctypes objects. Each launch through ctypes made a pointer array, a parameter array and a task
  structure and converted every call's arguments: a few microseconds per launch warm, several
  times that when the interpreter's caches are cold after a large kernel.
- ``CtypesCalls`` below: the same through ctypes (no C compiler at install, or ZYX_NATIVE=0).

The surface: ``Task(pointers, params, end, chunk, homes, backward=0)`` (one parallel launch's task
as the parallel entry reads it, ``{ ptr buffers, ptr params, ptr counters, i64 end, i64 chunk,
i64 homes, i64 backward }``, owning both arrays and the homes' chunk counters, one per cache
line; ``.address``; backward: each home block's chunks last first, cpu.py ``_PARALLEL_ENTRY``),
``serial(kernel, pointers, params, start, end)``, ``serial_each(steps, pointers, params)`` (a
plan's small launches in order: each step ``(kernel, slots, param indices, end)`` runs
``kernel(pointers[slots], params[indices], 0, end)``), ``entry(entry, task)``,
``omp_parallel(parallel, entry, task, threads)``, ``omp_start(start, entry, task, threads)``,
``omp_end(end)`` and ``omp_team_size(fn)``. Every call that runs machine code releases the GIL.
"""

from __future__ import annotations

import ctypes
import functools

from ..config import native_extension

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_GOMP_PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
_GOMP_START = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
_GOMP_END = ctypes.CFUNCTYPE(None)
_TEAM_SIZE = ctypes.CFUNCTYPE(ctypes.c_int)


@functools.cache
def _function(prototype, address: int):
    return prototype(address)


def _arrays(pointers: list[int], params: list[int]):
    # (at least one element each: a kernel may take the address of an empty array)
    return ((ctypes.c_void_p * max(len(pointers), 1))(*pointers),
            (ctypes.c_int64 * max(len(params), 1))(*params))


# Words between two homes' counters: one 64-byte cache line each (no false sharing).
COUNTER_WORDS = 8
# The most home blocks a task has (_launch.c refuses more): a team of more threads shares them.
MAX_HOMES = 4096


class CtypesTask(ctypes.Structure):
    """``_launch.Task`` through ctypes."""

    _fields_ = [("buffers", ctypes.c_void_p), ("params", ctypes.c_void_p), ("counters", ctypes.c_void_p),
                ("end", ctypes.c_int64), ("chunk", ctypes.c_int64), ("homes", ctypes.c_int64),
                ("backward", ctypes.c_int64)]

    def __init__(self, pointers: list[int], params: list[int], end: int, chunk: int, homes: int,
                 backward: int = 0):
        self._arrays = _arrays(pointers, params)  # (the task owns them)
        self._counters = (ctypes.c_int64 * (homes * COUNTER_WORDS))()
        super().__init__(ctypes.addressof(self._arrays[0]), ctypes.addressof(self._arrays[1]),
                         ctypes.addressof(self._counters), end, chunk, homes, int(backward != 0))

    @property
    def address(self) -> int:
        return ctypes.addressof(self)


class CtypesCalls:
    """``_launch``'s functions through ctypes."""

    Task = CtypesTask

    @staticmethod
    def serial(kernel: int, pointers: list[int], params: list[int], start: int, end: int) -> None:
        buffers, param_array = _arrays(pointers, params)
        _function(_KERNEL, kernel)(buffers, param_array, start, end)

    @classmethod
    def serial_each(cls, steps, pointers: list[int], params: list[int]) -> None:
        for kernel, slots, indices, end in steps:
            cls.serial(kernel, [pointers[i] for i in slots], [params[i] for i in indices], 0, end)

    @staticmethod
    def entry(entry: int, task: CtypesTask) -> None:
        _function(_ENTRY, entry)(task.address)

    @staticmethod
    def omp_parallel(parallel: int, entry: int, task: CtypesTask, threads: int) -> None:
        _function(_GOMP_PARALLEL, parallel)(entry, task.address, threads, 0)

    @staticmethod
    def omp_start(start: int, entry: int, task: CtypesTask, threads: int) -> None:
        _function(_GOMP_START, start)(entry, task.address, threads)

    @staticmethod
    def omp_end(end: int) -> None:
        _function(_GOMP_END, end)()

    @staticmethod
    def omp_team_size(team_size: int) -> int:
        return _function(_TEAM_SIZE, team_size)()


CALLS = native_extension("torch_zyx.runtime._launch", "ctypes") or CtypesCalls
