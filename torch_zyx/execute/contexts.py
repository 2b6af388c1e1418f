"""zyx devices as the executor sees them: one ``DeviceContext`` per device (its runtime, pool,
event table, compiled programs and scalar constants), and ``devices()``, which finds them in the
configured backend order.

Part of the executor (stage between the tensor model and codegen/runtime). The runtimes are
the last stage of the flow: they are imported on first use, so importing torch_zyx does not
load llvmlite's target machine, an OpenCL driver or the CUDA driver until a zyx tensor needs a
device. A backend whose driver or package is missing is skipped with a warning saying why.
"""

from __future__ import annotations

import logging
import os

from ..codegen import cuda as cuda_renderer
from ..codegen import llvm as llvm_renderer
from ..codegen import opencl as opencl_renderer
from ..codegen.lower import LoweringOptions
from ..codegen.lower_tiles import GPU_MMA_TILES, GPU_TILES
from ..config import CONFIG, DEBUG_DEVICES, DEBUG_SOURCE
from ..counters import bump
from ..dtypes import pack_scalars
from ..lazy.panels import DEFAULT_TILE
from ..memory.buffer import ConstantBuffer
from ..memory.events import EventTable
from .cache import BoundedCache

log = logging.getLogger("torch_zyx")

RENDERERS = {"llvm": llvm_renderer.render, "opencl": opencl_renderer.render, "cuda": cuda_renderer.render}
# Renderers for devices with work groups (GPUs, PoCL): grouped reduces, see lowering_options.
_GROUPED_RENDERERS = ("opencl", "cuda")
# Renderers with vector loads and stores (``cstyle.Language.vector_types``): elementwise kernels
# there compute four neighbouring elements per outer iteration (``LoweringOptions.vector_width``).
_VECTOR_RENDERERS = ("cuda",)
# Scalar parameter buffers kept per device (a few bytes each).
_MAX_CONSTANTS = 256


class DeviceContext:
    """One zyx device: its runtime, pool, event table and compiled programs."""

    def __init__(self, index: int, runtime):
        self.index = index
        self.runtime = runtime
        self.pool = runtime.pool
        # ZYX_MEMORY_LIMIT: bytes, or a fraction of the device's memory (the host's for the CPU).
        total = getattr(runtime, "global_memory", None) or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.pool.limit = CONFIG.memory_limit_bytes(total)
        self.events = EventTable()
        self.programs: dict[str, object] = BoundedCache(2 * CONFIG.cache_entries)
        self.render = RENDERERS[runtime.renderer]
        # Device facts a renderer takes into account (the CPU's cache size for streaming stores).
        self.render_options = getattr(runtime, "render_options", {})
        self.lowering = lowering_options(runtime)
        # (dtype, values) → the ConstantBuffer holding them: a graph realized again with the same
        # scalar parameters (layer norm's eps and 1/n, an unchanged learning rate) reuses its
        # buffer instead of allocating and copying one per realization.
        self.constants: dict[tuple, ConstantBuffer] = {}

    def constant(self, dtype, values: list[float]) -> ConstantBuffer:
        """The scalar parameters ``values`` of ``dtype`` on this device."""
        key = (dtype, tuple(values))  # finite non-zero floats (is_scalar_param): == is exact
        buffer = self.constants.get(key)
        if buffer is None:
            if len(self.constants) >= _MAX_CONSTANTS:
                # Values that change every step (Adam's bias corrections) would grow it forever.
                # Dropping a buffer still in use is safe (see ConstantBuffer).
                self.constants.clear()
            buffer = self.constants[key] = ConstantBuffer(self, dtype, pack_scalars(dtype, values))
        return buffer

    def program(self, name: str, source: str, quick: bool = False, specializing: bool = False):
        """The runtime's program for ``source``, compiled once per device. ``quick``: the runtime
        may compile it fast and unoptimized first (a CPU kernel that runs briefly; it is
        optimized if its plans keep running, see ``realize.launch_plan``). ``specializing``: the
        program replaces a plan's size-generic one (counted as an optimization, not a new kernel)."""
        program = self.programs.get(source)
        if program is None:
            if CONFIG.debug & DEBUG_SOURCE:
                print(f"zyx source {name}:\n{source}")
            # (only runtimes with ``quick_compile`` are asked for a quick one)
            program = self.runtime.compile(name, source, quick=True) if quick else \
                self.runtime.compile(name, source)
            self.programs[source] = program
            bump("kernels_optimized" if specializing else "kernels_compiled")
        elif not quick and getattr(program, "quick", False):
            program.upgrade()  # (the same source for more work: its optimized code now)
        return program

    def synchronize(self) -> None:
        for event in self.events.take_all():
            event.wait()

    def settle(self) -> None:
        """Join the launches this thread left running (runtime ``settle``): the end of every
        realization, once its Python bookkeeping ran next to its last kernel."""
        self.runtime.settle()


def lowering_options(runtime) -> LoweringOptions:
    """What lowering may use on this device: grouped reduces need work groups (OpenCL's, CUDA's
    blocks), sized from the device's facts (CUDA: 1024 threads and 48 KiB of static shared
    memory per block; an H200 has 132 SMs)."""
    if runtime.renderer not in _GROUPED_RENDERERS:
        return LoweringOptions(matmul_tile=getattr(runtime, "matmul_tile", DEFAULT_TILE),
                               pipeline_rows=runtime.renderer == "llvm")
    # Two float64 partials per item must fit in the group's shared memory.
    fit = max(1, runtime.local_memory // 16)
    group = min(256, runtime.max_group_size, fit)
    group = 1 << (group.bit_length() - 1)  # the tree halves: a power of two
    few = min(1024, runtime.max_group_size, fit)
    few = 1 << (few.bit_length() - 1)
    # GPUs: group while the grouped launch still fills the device; CPU drivers run a group on
    # one core, so there grouping pays only while there are not many more outputs than cores.
    max_outputs = runtime.compute_units * (4096 if runtime.is_gpu else 64)
    return LoweringOptions(group_size=group, few_group_size=few, few_outputs=runtime.compute_units,
                           group_min_reduce=256, group_max_outputs=max_outputs,
                           row_loops=not runtime.is_gpu, local_memory=runtime.local_memory,
                           vector_width=4 if runtime.renderer in _VECTOR_RENDERERS else 1,
                           block_tiles=GPU_TILES if runtime.is_gpu else (),
                           tensor_cores=getattr(runtime, "tensor_cores", ()), mma_tiles=GPU_MMA_TILES,
                           async_copies=bool(getattr(runtime, "tensor_cores", ())),
                           tile_local_memory=getattr(runtime, "tile_local_memory", 0),
                           compute_units=runtime.compute_units)


_devices: list[DeviceContext] = []
def devices() -> list[DeviceContext]:
    if not _devices:
        from ..runtime.cpu import CPUDevice  # the runtime is the last stage: loaded on first use

        # Devices are numbered in the configured backend order (ZYX_BACKENDS=opencl,cpu puts
        # every OpenCL device before the CPU); a backend that finds nothing is skipped.
        for name in CONFIG.backends:
            if name == "cpu":
                _devices.append(DeviceContext(len(_devices), CPUDevice()))
            elif name == "opencl":
                for runtime in _opencl_runtimes():
                    _devices.append(DeviceContext(len(_devices), runtime))
            elif name == "cuda":
                for runtime in _cuda_runtimes():
                    _devices.append(DeviceContext(len(_devices), runtime))
            else:
                log.warning("zyx: backend %r is not available in this build; skipped", name)
        if not _devices:
            _devices.append(DeviceContext(0, CPUDevice()))
        if CONFIG.debug & DEBUG_DEVICES:
            for ctx in _devices:
                print(f"zyx:{ctx.index} {ctx.runtime.describe()}")
    return _devices


def _opencl_runtimes() -> list:
    try:
        from ..runtime.opencl import opencl_devices
    except ImportError as exc:
        log.warning("zyx: backend 'opencl' skipped: pyopencl is not installed (%s); try `make ocl`", exc)
        return []
    runtimes, reason = opencl_devices()
    if not runtimes:
        log.warning("zyx: backend 'opencl' skipped: %s", reason)
    return runtimes


def cuda_unavailable() -> str:
    """Why the CUDA backend cannot be used here ("" when it can): cuda-bindings or NVRTC not
    installed, no driver, no GPU (``python -m torch_zyx.info`` reports it). Makes no device."""
    try:
        from ..runtime.cuda import probe
    except ImportError as exc:
        return _NO_CUDA_BINDINGS.format(exc=exc)
    return probe()[1]


_NO_CUDA_BINDINGS = ("cuda-bindings is not installed ({exc}); pip install 'torch_zyx[cuda]' "
                     "(cuda-bindings and nvidia-cuda-nvrtc)")


def _cuda_runtimes() -> list:
    try:
        from ..runtime.cuda import cuda_devices
    except ImportError as exc:
        log.warning("zyx: backend 'cuda' skipped: %s", _NO_CUDA_BINDINGS.format(exc=exc))
        return []
    runtimes, reason = cuda_devices()
    if not runtimes:
        log.warning("zyx: backend 'cuda' skipped: %s", reason)
    return runtimes
