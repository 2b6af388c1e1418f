"""OpenCL runtime: OpenCL C source → programs through pyopencl, one context and queue per device.

A program is ``__kernel void k(buffers..., params..., long end)`` with one work item per outer
iteration (the renderer guards ``id < end``), so ``launch`` rounds the global size up to a
multiple of the local size. A grouped kernel declares its work-group size
(``reqd_work_group_size``, read back as CL_KERNEL_COMPILE_WORK_GROUP_SIZE): there one outer
iteration is one work group, so ``launch`` runs ``global_size`` groups of that size. Launches
are enqueued on the device's in-order queue with the OpenCL events they must wait for and
return a ``CLEvent``. PoCL serves machines without a GPU; vendor drivers (NVIDIA, AMD, Intel)
serve GPUs. Build errors carry the build log.

Builds are batched: ``compile`` only records the source, and the first launch of any recorded
program builds every recorded source of the device as one OpenCL program (a plan compiles all
its new kernels before it launches the first). Each clBuildProgram has a fixed cost that
dwarfs a small kernel's, mostly parsing clang's 900 KB opencl-c.h, which PoCL 3.1 includes in
every build: measured ~0.8 s per one-kernel build, while 10 or 50 kernels built as one
program take about the time of one. Per-kernel work (PoCL's work-group function and machine
code, ~0.2-0.3 s at the kernel's first launch) stays per kernel. A batch that fails to build is
built again kernel by kernel, so the failing kernel's launch raises its own ``CompileError``.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyopencl as cl

from ..config import CONFIG, DEBUG_COMPILE
from ..memory.events import Event
from ..memory.opencl import CLEvent, OpenCLPool, cl_wait_list
from . import CompileError

log = logging.getLogger("torch_zyx")

# Work items per work group on GPUs; CPU drivers (PoCL) prefer larger groups they vectorize.
_GPU_LOCAL = 256
_CPU_LOCAL = 1024
# Kernels per batched build: PoCL loads the whole program's bitcode again for each kernel's
# first launch (its work-group function), so a batch stays moderate.
_BATCH = 48


class OpenCLProgram:
    """One kernel; built with the other kernels compiled before its first launch (see above)."""

    def __init__(self, device: OpenCLDevice, name: str, source: str):
        self.device, self.name, self.source = device, name, source
        self._kernel = None
        self._error: CompileError | None = None

    def _attach(self, kernel) -> None:
        device = self.device
        self._kernel = kernel
        self._num_args = kernel.num_args
        info = cl.kernel_work_group_info
        wg = kernel.get_work_group_info(info.WORK_GROUP_SIZE, device.cl_device)
        self._local = max(1, min(device.local_size, wg))
        self.group_size = int(kernel.get_work_group_info(info.COMPILE_WORK_GROUP_SIZE, device.cl_device)[0])

    def launch(self, buffers: list, params: list[int], global_size: int, work: int,
               wait_events: list[Event]) -> Event:
        """Run outer iterations [0, global_size), one work item each."""
        del work  # the device schedules work groups itself
        device = self.device
        if self._kernel is None:
            if self._error is None:
                device.build_pending()
            if self._error is not None:
                raise self._error
        args = [b.raw.mem for b in buffers]
        # Arguments: buffers, the parameters the kernel reads (maybe fewer than given), end.
        n_params = self._num_args - len(buffers) - 1
        values = list(params[:n_params]) + [0] * max(0, n_params - len(params))
        args += [np.uint64(p & 0xFFFFFFFFFFFFFFFF) for p in values]
        args.append(np.int64(global_size))
        wait_for = cl_wait_list(wait_events, device.context)
        if self.group_size:
            if global_size == 0:
                # Nothing to compute, and a grouped kernel has no ``id < end`` guard (cstyle.py).
                return CLEvent(cl.enqueue_marker(device.queue, wait_for=wait_for or None))
            local = self.group_size
            padded = global_size * local
        else:
            # Always the same local size, even for a launch smaller than one group: PoCL compiles
            # a kernel again for every new local size (1-2 s each), and surplus items exit at
            # the guard.
            local = self._local
            padded = -(-max(global_size, 1) // local) * local
        # The queue is used from one thread (the recording thread); set_args + enqueue is safe.
        self._kernel.set_args(*args)
        cl_event = cl.enqueue_nd_range_kernel(device.queue, self._kernel, (padded,), (local,),
                                              wait_for=wait_for or None)
        device.queue.flush()
        # No keepalive of the Buffers here: a freed Buffer's memory waits in the pool until
        # this event is done (ASYNC EVENT RULES), and OpenCL retains the cl.Buffers it uses.
        # Holding Buffers would run Buffer.__del__ (which takes the event table's lock) from
        # inside EventTable.take when the table drops a finished event.
        return CLEvent(cl_event)


class OpenCLDevice:
    """One OpenCL device with its own context, in-order queue and memory pool."""

    name = "opencl"
    renderer = "opencl"

    def __init__(self, cl_device):
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context, cl_device)
        self.pool = OpenCLPool(self.context, self.queue)
        # Plain facts for the executor's lowering options (execute/contexts.py chooses from them).
        self.is_gpu = bool(cl_device.type & cl.device_type.GPU)
        self.compute_units = cl_device.max_compute_units
        self.global_memory = cl_device.global_mem_size
        self.max_group_size = cl_device.max_work_group_size
        self.local_memory = cl_device.local_mem_size
        self.local_size = min(_GPU_LOCAL if self.is_gpu else _CPU_LOCAL, self.max_group_size)
        self.fp64 = "cl_khr_fp64" in cl_device.extensions or bool(cl_device.double_fp_config)
        self._pending: list[OpenCLProgram] = []  # compiled, not built yet

    def describe(self) -> str:
        d = self.cl_device
        return (f"opencl: {d.platform.name.strip()} / {d.name.strip()} ({d.max_compute_units} compute units, "
                f"{d.global_mem_size / 2**30:.1f} GiB{', fp64' if self.fp64 else ''})")

    def supports(self, dtype_name: str) -> bool:
        return dtype_name != "float64" or self.fp64

    def settle(self) -> None:
        """Nothing to join: the queue runs launches on its own, each to its event."""

    def compile(self, name: str, source: str) -> OpenCLProgram:
        """A program for ``source``, built (with every other pending one) at its first launch."""
        program = OpenCLProgram(self, name, source)
        self._pending.append(program)
        return program

    def build_pending(self) -> None:
        """Build the pending programs, ``_BATCH`` kernels per OpenCL program."""
        pending, self._pending = self._pending, []
        for first in range(0, len(pending), _BATCH):
            self._build_batch(pending[first:first + _BATCH])

    def _build_batch(self, programs: list[OpenCLProgram]) -> None:
        start = time.perf_counter()
        # Every source has its own prelude (pragmas, guarded helpers): they may repeat.
        source = "\n".join(p.source for p in programs)
        try:
            built = cl.Program(self.context, source).build()
        except cl.RuntimeError as exc:
            if len(programs) == 1:
                programs[0]._error = CompileError(
                    programs[0].name, source, str(exc),
                    "save the source to k.cl and build it with pyopencl or clinfo")
                return
            for program in programs:  # find the failing kernel(s); the others still run
                self._build_batch([program])
            return
        for program in programs:
            program._attach(getattr(built, program.name))
        if CONFIG.debug & DEBUG_COMPILE:
            print(f"zyx compile opencl: {len(programs)} kernels, {len(source)} chars of OpenCL C: "
                  f"{time.perf_counter() - start:.2f} s")


def opencl_devices() -> tuple[list[OpenCLDevice], str]:
    """Every device of every OpenCL platform, in platform order, and why there are none."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        return [], f"no OpenCL platform ({exc})"
    found = []
    for platform in platforms:
        try:
            found.extend(OpenCLDevice(d) for d in platform.get_devices())
        except cl.Error as exc:
            log.warning("zyx: OpenCL platform %r unusable: %s", platform.name, exc)
    return found, "" if found else "OpenCL platforms have no devices"
