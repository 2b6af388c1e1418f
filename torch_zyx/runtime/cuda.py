"""CUDA runtime: CUDA C source → CUBIN with NVRTC, loaded and launched through the driver API.

The last stage of the flow for NVIDIA GPUs (``cuda-bindings`` for the driver API and NVRTC,
the ``nvidia-cuda-nvrtc`` wheel for libnvrtc: ``pip install torch_zyx[cuda]``). Same surface
as runtime/opencl.py. Each GPU is one ``CUDADevice`` on its primary context (the one torch
uses, so device pointers, streams and events interoperate with torch's), with one stream that
runs its kernels and copies in order, and its ``CUDAPool`` (memory/cuda.py).

Kernels are compiled to CUBIN for the device's compute capability (``sm_90`` on an H200; a
GPU newer than NVRTC knows gets PTX for the newest architecture NVRTC has, which the driver
compiles). Builds are batched as on OpenCL: ``compile`` records the source, the first launch of
any recorded program compiles every recorded source of the device as one NVRTC program (NVRTC
costs ~40 ms per program plus ~4 ms per kernel), and a batch that fails is compiled again
kernel by kernel, so the failing kernel's launch raises its own ``CompileError`` with the
source, NVRTC's log and a command that reproduces it. CUBINs are cached on disk under
``<cache>/cuda``: a batch's image once (with a checksum), and per kernel a reference to it,
keyed by the kernel's source, the architecture and the NVRTC version; files are written to a
temporary name and renamed, and an entry that fails its checksum or to load is compiled again.

Launches (``CUDAProgram.launch``): ungrouped kernels are grid-stride loops (codegen/cuda.py), so
a launch runs ``min(iterations, a few waves of the GPU)`` threads in blocks of 256 (fewer per
block when there are few iterations, to spread them over the SMs); a grouped kernel runs one
block of its ``__launch_bounds__`` size per outer iteration. Each launch first makes the stream
wait for the events of other streams among its ``wait_events`` (those of its own stream are
ordered already), then records one event (ASYNC EVENT RULES).

``compile_cuda(source, arch)`` needs no GPU and no driver: CI compiles the kernels the test
suite generates with it (tests/conftest.py), and the error names how to reproduce.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import re
import time
from pathlib import Path

from cuda.bindings import driver, nvrtc

from ..config import CONFIG, DEBUG_COMPILE, native_extension
from ..memory.cuda import CUDAError, CUDAPool, CUDAStream, check, current, primary_context
from ..memory.events import Event, completed
from . import CompileError
from .disk_cache import read_entry, write_entry

log = logging.getLogger("torch_zyx")

# Threads per block of ungrouped launches; fewer when a launch has few iterations.
_BLOCK = 256
_MIN_BLOCK = 64
# Ungrouped launches run at most this many full-occupancy waves of blocks (grid-stride loops
# take the rest). More, shorter blocks even out the SMs' finishing times: the 64M-element
# gelu/sigmoid chain (float4 steps) took 216 us with 2 waves, 203-211 with 8 on an H200.
_WAVES = 8
# Kernels per NVRTC program (compile time grows with it; a failing batch is compiled again
# kernel by kernel).
_BATCH = 64
_NVRTC_OPTIONS = ("-std=c++17", "-w")
_MASK64 = (1 << 64) - 1
# A plan's launches in one C call (_cuda_launch.c), through the driver's own cuLaunchKernel.
_CALLS = native_extension("torch_zyx.runtime._cuda_launch", "a cuda-bindings call per kernel")
_launch_address: list[int] = []  # cuLaunchKernel's address (0: none), found once
_HEAD = re.compile(r"__global__(?:\s+__launch_bounds__\((\d+)\))?\s+void\s+(\w+)\(([^)]*)\)")
_DYNAMIC_SHARED = re.compile(r"// zyx: dynamic shared memory (\d+) bytes")

# ------------------------------------------------------------------------------------ NVRTC


def _nvrtc_check(result, call: str):
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"zyx: NVRTC {call} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


_version: tuple[int, int] | None = None
_archs: list[int] | None = None


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the libnvrtc in use (loads it: raises when it is not found)."""
    global _version
    if _version is None:
        _version = tuple(_nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion"))
    return _version


def supported_archs() -> list[int]:
    """The compute capabilities (major * 10 + minor) NVRTC can make CUBIN for."""
    global _archs
    if _archs is None:
        archs = _nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
        _archs = sorted(int(a) for a in archs)
    return _archs


def target(arch: int) -> tuple[str, bool]:
    """The NVRTC architecture option for a device of compute capability ``arch`` and whether
    it makes CUBIN (else PTX, for a GPU newer than this NVRTC: the driver compiles that)."""
    archs = supported_archs()
    if arch in archs:
        return f"--gpu-architecture=sm_{arch}", True
    older = [a for a in archs if a <= arch]
    if not older:
        raise RuntimeError(f"zyx: NVRTC {nvrtc_version()} cannot compile for sm_{arch} (it knows {archs})")
    return f"--gpu-architecture=compute_{older[-1]}", False


def _reproduce(arch: int) -> str:
    return (f"save the source as k.cu, then `nvcc -cubin -arch=sm_{arch} -std=c++17 k.cu`, or "
            f"`python -c \"from torch_zyx.runtime.cuda import compile_cuda; "
            f"compile_cuda(open('k.cu').read(), {arch})\"`")


def compile_cuda(source: str, arch: int, name: str = "zyx_kernels", fast: bool = False,
                 ptx: bool = False) -> bytes:
    """``source`` compiled for compute capability ``arch`` (90: sm_90): a CUBIN image (PTX for
    a GPU newer than NVRTC). Needs no GPU and no driver. Raises ``CompileError`` with NVRTC's
    log. For checking sources rather than running them: ``fast`` trades code quality for
    compile time (``--Ofast-compile=max``, NVRTC 12.8 on: a third of the time on long kernels),
    ``ptx`` stops at PTX for ``compute_<arch>`` (C++ front end and NVVM, without ptxas: a fifth
    of the time)."""
    option, _cubin = target(arch)
    if ptx:
        option, _cubin = f"--gpu-architecture=compute_{arch}", False
    program = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                           "nvrtcCreateProgram")
    try:
        options = [option.encode()] + [o.encode() for o in _NVRTC_OPTIONS]
        if fast and nvrtc_version() >= (12, 8):
            options.append(b"--Ofast-compile=max")
        result = nvrtc.nvrtcCompileProgram(program, len(options), options)[0]
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            # NVRTC writes into the buffer: a bytearray, never a (possibly shared) bytes object.
            buffer = bytearray(_nvrtc_check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize"))
            _nvrtc_check(nvrtc.nvrtcGetProgramLog(program, buffer), "nvrtcGetProgramLog")
            message = bytes(buffer).rstrip(b"\0 ").decode(errors="replace") or str(result)
            raise CompileError(name, source, f"NVRTC {'.'.join(map(str, nvrtc_version()))} ({option}): "
                                             f"{message}", _reproduce(arch))
        if _cubin:
            image = bytearray(_nvrtc_check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize"))
            _nvrtc_check(nvrtc.nvrtcGetCUBIN(program, image), "nvrtcGetCUBIN")
        else:
            image = bytearray(_nvrtc_check(nvrtc.nvrtcGetPTXSize(program), "nvrtcGetPTXSize"))
            _nvrtc_check(nvrtc.nvrtcGetPTX(program, image), "nvrtcGetPTX")
        return bytes(image)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def compile_each(sources: list[tuple[str, str]], arch: int, batch: int = _BATCH, fast: bool = False,
                 ptx: bool = False) -> list[CompileError]:
    """Compile ``(name, source)`` pairs in batches (many kernels per NVRTC program); a batch
    that fails is compiled again kernel by kernel. Returns the kernels' errors."""
    errors = []
    for first in range(0, len(sources), batch):
        part = sources[first:first + batch]
        try:
            compile_cuda("\n".join(source for _name, source in part), arch, fast=fast, ptx=ptx)
        except CompileError:
            for name, source in part:
                try:
                    compile_cuda(source, arch, name, fast=fast, ptx=ptx)
                except CompileError as exc:
                    errors.append(exc)
    return errors


# ------------------------------------------------------------------------------- disk cache


def _cache_dir() -> Path | None:
    return CONFIG.cache_dir / "cuda" if CONFIG.disk_cache else None


def _key(source: str, arch: int) -> str:
    major, minor = nvrtc_version()
    text = f"{source}\0sm_{arch}\0nvrtc {major}.{minor}\0{' '.join(_NVRTC_OPTIONS)}"
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------- device


class CUDAProgram:
    """One kernel of a device; compiled with the device's other pending kernels at its first
    launch (see the module docstring)."""

    def __init__(self, device: CUDADevice, name: str, source: str):
        self.device, self.name, self.source = device, name, source
        self.key = ""
        head = next((m for m in _HEAD.finditer(source) if m.group(2) == name), None)
        if head is None:
            raise ValueError(f"zyx: no kernel {name} in the CUDA source")
        self.group_size = int(head.group(1) or 0)
        # Bytes of dynamic shared memory the kernel's group-shared arrays take (codegen/cuda.py
        # renders arrays past 48 KiB so); 0: static arrays only.
        dynamic = _DYNAMIC_SHARED.search(source)
        self.shared_bytes = int(dynamic.group(1)) if dynamic else 0
        params = [p.strip() for p in head.group(3).split(",") if p.strip()]
        self.n_buffers = sum(1 for p in params if "*" in p)
        self.n_params = sum(1 for p in params if re.search(r"\bp\d+$", p))
        self._function = None
        self._error: CompileError | None = None
        self._params_address = 0

    def _attach(self, function) -> None:
        self._function = function
        if self.shared_bytes:
            # Past 48 KiB a kernel must ask for its dynamic shared memory before its launches.
            with current(self.device.ctx):
                check(driver.cuFuncSetAttribute(
                    function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.shared_bytes), f"cuFuncSetAttribute {self.name}")
        # Every argument is 8 bytes (pointers, unsigned long long parameters, long long end):
        # one array of values and one of pointers to them, filled per launch (cuLaunchKernel
        # copies the values when it is called).
        n = self.n_buffers + self.n_params + 1
        self._values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self._values)
        self._pointers = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        self._params_address = ctypes.addressof(self._pointers)

    def built(self):
        """The kernel's CUfunction, compiling the device's pending programs first if needed;
        raises the kernel's CompileError."""
        if self._function is None:
            if self._error is None:
                self.device.build_pending()
            if self._error is not None:
                raise self._error
        return self._function

    def shape(self, global_size: int) -> tuple[int, int] | None:
        """(blocks, threads per block) of a launch of ``global_size`` outer iterations (grouped
        kernels: that many blocks of their group size), or None when there is nothing to launch
        (a grouped kernel of no iterations: it has no ``id < end`` guard, cstyle.py)."""
        if not self.group_size:
            return self.device.launch_shape(max(global_size, 1))
        return (global_size, self.group_size) if global_size else None

    def launch(self, buffers: list, params: list[int], global_size: int, work: int,
               wait_events: list[Event]) -> Event:
        """Run outer iterations [0, global_size) (grouped kernels: that many blocks)."""
        del work  # the grid-stride loop shares the iterations out
        device = self.device
        self.built()
        values = self._values
        i = 0
        for buffer in buffers:
            values[i] = buffer.raw.ptr
            i += 1
        for j in range(self.n_params):
            values[i] = params[j] & _MASK64 if j < len(params) else 0
            i += 1
        values[i] = global_size
        shape = self.shape(global_size)
        if shape is None:
            # The events waited for stay in the event table until they complete.
            return completed()
        grid, block = shape
        stream = device.stream
        with current(device.ctx):
            stream.wait_for(wait_events)
            check(driver.cuLaunchKernel(self._function, grid, 1, 1, block, 1, 1, self.shared_bytes,
                                        stream.handle, self._params_address, 0),
                  f"cuLaunchKernel {self.name}")
            return stream.record()


def _attribute(name: str, device) -> int:
    return int(check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, name), device),
                     "cuDeviceGetAttribute"))


class CUDADevice:
    """One GPU: its primary context, a stream, a memory pool and the compiled programs."""

    name = "cuda"
    renderer = "cuda"

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.cu_device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        # The primary context: the one torch's runtime uses for this GPU.
        self.ctx = primary_context(ordinal)
        raw_name = check(driver.cuDeviceGetName(256, self.cu_device), "cuDeviceGetName")
        self.device_name = raw_name.split(b"\0", 1)[0].decode(errors="replace").strip()
        major = _attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", self.cu_device)
        minor = _attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", self.cu_device)
        self.arch = major * 10 + minor
        # Plain facts for the executor's lowering options (execute/contexts.py chooses from them).
        self.is_gpu = True
        self.compute_units = _attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", self.cu_device)
        self.max_group_size = _attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", self.cu_device)
        # Static __shared__ arrays are limited to 48 KiB per block whatever the GPU has.
        self.local_memory = min(48 * 1024, _attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
                                                      self.cu_device))
        # What a kernel may ask for as dynamic shared memory (block tiles and attention past
        # 48 KiB: 227 KiB on an H100).
        self.tile_local_memory = _attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                            self.cu_device)
        self.threads_per_unit = _attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
                                           self.cu_device)
        # mma.sync m16n8k16 with half or bfloat16 inputs and float accumulation: sm_80 on.
        self.tensor_cores = ("bfloat16", "float16") if self.arch >= 80 else ()
        self.global_memory = int(check(driver.cuDeviceTotalMem(self.cu_device), "cuDeviceTotalMem"))
        self.driver_version = int(check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))
        self.stream = CUDAStream(self.ctx)
        self.pool = CUDAPool(self.ctx, self.stream, ordinal)
        self._pending: list[CUDAProgram] = []
        self._modules: dict[str, object] = {}  # cache file name or batch key → CUmodule
        self._shapes: dict[int, tuple[int, int]] = {}

    def describe(self) -> str:
        major, minor = nvrtc_version()
        driver_text = f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"
        return (f"cuda: {self.device_name} (sm_{self.arch}, {self.compute_units} SMs, "
                f"{self.global_memory / 2**30:.1f} GiB, driver {driver_text}, NVRTC {major}.{minor})")

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the GPU's memory, as ``torch.cuda.mem_get_info``."""
        with current(self.ctx):
            free, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def settle(self) -> None:
        """Nothing to join: the stream runs launches on its own, each to its event."""

    def synchronize(self) -> None:
        self.stream.synchronize()

    def launch_shape(self, iterations: int) -> tuple[int, int]:
        """(blocks, threads per block) of an ungrouped launch of ``iterations``."""
        shape = self._shapes.get(iterations)
        if shape is None:
            block = min(_BLOCK, self.max_group_size)
            # Few iterations: smaller blocks spread them over more SMs.
            while block > _MIN_BLOCK and -(-iterations // block) < 2 * self.compute_units:
                block //= 2
            waves = self.compute_units * max(1, self.threads_per_unit // block) * _WAVES
            shape = (min(-(-iterations // block), waves), block)
            if len(self._shapes) < 4096:
                self._shapes[iterations] = shape
        return shape

    def plan_steps(self, launches: list[tuple]) -> tuple | None:
        """``launches`` ((program, loop IR, slot indices, random parameter indices) each) as
        ``run_steps``' steps (function, grid, block, slots, parameter indices, end, dynamic
        shared bytes): each launch
        as ``CUDAProgram.launch`` makes it (compiling the programs now). None when a kernel takes
        other parameters than given (launched one by one)."""
        native = _native_launch() != 0
        steps = []
        for program, loop, slots, params in launches:
            function = program.built()
            if len(params) != program.n_params:
                return None
            shape = program.shape(loop.global_size)
            if shape is not None:
                steps.append((int(function) if native else function, *shape, tuple(slots), tuple(params),
                              loop.global_size, program.shared_bytes))
        return tuple(steps)

    def run_steps(self, steps: tuple, pointers: list[int], params: list[int], wait_events: list[Event]) -> Event:
        """Launch ``plan_steps``' steps in order on the stream after ``wait_events`` (those of
        other streams), over the buffers' device ``pointers`` and the random ``params``; one
        event for them all."""
        stream = self.stream
        with current(self.ctx):
            stream.wait_for(wait_events)
            self._launch_steps(stream.handle, steps, pointers, params)
            return stream.record()

    def run_steps_on(self, stream_handle: int, steps: tuple, pointers: list[int], params: list[int]) -> None:
        """``run_steps`` on another stream of this GPU's context (torch's current stream, for a
        compiled graph of torch ``cuda`` tensors), ordered by that stream alone: no events."""
        with current(self.ctx):
            self._launch_steps(stream_handle, steps, pointers, params)

    def _launch_steps(self, stream_handle, steps: tuple, pointers: list[int], params: list[int]) -> None:
        """The launches of ``run_steps`` (context current). Through ``_cuda_launch`` when built:
        every kernel's argument array filled in C and the driver called directly, where
        cuda-bindings costs a few microseconds of Python per kernel."""
        address = _native_launch()
        if address:
            result, step = _CALLS.launch_each(address, int(stream_handle), steps, pointers, params)
            if result:
                raise CUDAError(f"cuLaunchKernel (kernel {step} of the plan)", driver.CUresult(result))
            return
        for function, grid, block, slots, indices, end, shared_bytes in steps:
            values = [pointers[i] for i in slots] + [params[i] & _MASK64 for i in indices] + [end]
            array = (ctypes.c_uint64 * len(values))(*values)
            base = ctypes.addressof(array)
            arguments = (ctypes.c_void_p * len(values))(*(base + 8 * i for i in range(len(values))))
            check(driver.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, shared_bytes, stream_handle,
                                        ctypes.addressof(arguments), 0), "cuLaunchKernel")

    # ------------------------------------------------------------------ compiling

    def compile(self, name: str, source: str) -> CUDAProgram:
        """A program for ``source``, compiled (with every other pending one) at its first launch."""
        program = CUDAProgram(self, name, source)
        self._pending.append(program)
        return program

    def build_pending(self) -> None:
        """Load the pending programs from the disk cache, compile the rest in batches."""
        pending, self._pending = self._pending, []
        cache = _cache_dir()
        misses = []
        for program in pending:
            program.key = _key(program.source, self.arch)
            if cache is None or not self._load_cached(program, cache):
                misses.append(program)
        for first in range(0, len(misses), _BATCH):
            self._build_batch(misses[first:first + _BATCH], cache)

    def _load_cached(self, program: CUDAProgram, cache: Path) -> bool:
        reference = read_entry(cache / f"{program.key}.ref")
        if reference is None:
            return False
        image_name = reference.decode(errors="replace").strip()
        module = self._modules.get(image_name)
        if module is None:
            image = read_entry(cache / image_name)
            if image is None:
                return False
            try:
                module = self._load_module(image)
            except RuntimeError as exc:  # an image this driver cannot load: compile again
                log.warning("zyx: CUDA cache entry %s not loadable (%s); compiling again", image_name, exc)
                return False
            self._modules[image_name] = module
        try:
            program._attach(self._function(module, program.name))
        except RuntimeError:
            return False
        return True

    def _load_module(self, image: bytes):
        with current(self.ctx):
            return check(driver.cuModuleLoadData(image), "cuModuleLoadData")

    def _function(self, module, name: str):
        with current(self.ctx):
            return check(driver.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction {name}")

    def _build_batch(self, programs: list[CUDAProgram], cache: Path | None) -> None:
        start = time.perf_counter()
        # Every source has its own prelude (guarded helpers): they may repeat.
        source = "\n".join(p.source for p in programs)
        try:
            image = compile_cuda(source, self.arch, programs[0].name if len(programs) == 1 else "zyx_batch")
        except CompileError as exc:
            if len(programs) == 1:
                programs[0]._error = exc
                return
            for program in programs:  # find the failing kernel(s); the others still run
                self._build_batch([program], cache)
            return
        module = self._load_module(image)
        image_name = f"image-{hashlib.sha256(image).hexdigest()[:40]}.bin"
        self._modules[image_name] = module
        for program in programs:
            program._attach(self._function(module, program.name))
        if cache is not None:
            try:
                write_entry(cache / image_name, image)
                for program in programs:
                    write_entry(cache / f"{program.key}.ref", image_name.encode())
            except OSError as exc:  # a read-only or full cache directory: compile next time
                log.warning("zyx: cannot write the CUDA kernel cache under %s: %s", cache, exc)
        if CONFIG.debug & DEBUG_COMPILE:
            print(f"zyx compile cuda: {len(programs)} kernels, {len(source)} chars of CUDA C for "
                  f"sm_{self.arch}: {time.perf_counter() - start:.2f} s")


def _native_launch() -> int:
    """The address of the driver's cuLaunchKernel for ``_cuda_launch``, or 0 (no extension, or
    a driver module without ``cuGetProcAddress``, as the test suite's simulated driver)."""
    if not _launch_address:
        address = 0
        get = getattr(driver, "cuGetProcAddress", None)
        if _CALLS is not None and get is not None:
            try:
                result = get(b"cuLaunchKernel", 12000, driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
                address = int(result[1]) if result[0] == driver.CUresult.CUDA_SUCCESS else 0
            except Exception as exc:  # noqa: BLE001  (an older binding: launch through it instead)
                log.info("zyx: cuGetProcAddress(cuLaunchKernel) failed (%s); launching through cuda-bindings", exc)
        _launch_address.append(address)
    return _launch_address[0]


# -------------------------------------------------------------------------------- discovery


def probe() -> tuple[int, str]:
    """(number of GPUs, "") when the backend can run, else (0, why not): no driver, no device,
    no NVRTC. Makes no context (``python -m torch_zyx.info`` asks it)."""
    try:
        check(driver.cuInit(0), "cuInit")
    except Exception as exc:  # noqa: BLE001  (no libcuda raises the loader's own error type)
        return 0, f"no CUDA driver ({type(exc).__name__}: {exc})"
    try:
        count = int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))
    except Exception as exc:  # noqa: BLE001
        return 0, f"the CUDA driver fails ({exc})"
    if count == 0:
        return 0, "the CUDA driver shows no device"
    try:
        nvrtc_version()
    except Exception as exc:  # noqa: BLE001
        return 0, f"NVRTC is not available ({type(exc).__name__}: {exc}); pip install nvidia-cuda-nvrtc"
    return count, ""


def cuda_devices() -> tuple[list[CUDADevice], str]:
    """Every CUDA GPU the driver shows (``CUDA_VISIBLE_DEVICES`` applies), and why there are
    none: no driver, no device, or no NVRTC."""
    count, reason = probe()
    if not count:
        return [], reason
    found = []
    for ordinal in range(count):
        try:
            found.append(CUDADevice(ordinal))
        except Exception as exc:  # noqa: BLE001  (one unusable GPU must not hide the others)
            log.warning("zyx: CUDA device %d unusable: %s", ordinal, exc)
    return found, "" if found else "no usable CUDA device"
