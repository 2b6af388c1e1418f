"""The zyx device guard and hooks: built from ``device_guard.cpp`` and ``device_hooks.cpp`` and
registered with PyTorch.

Part of registering the device (``torch_zyx._register``), before PyTorch's Python-backend
set-up, which would otherwise register its Python guard and hooks. That guard calls into Python
from the stream guard autograd's engine holds around every backward node, also while an
exception unwinds it: an error raised by a zyx op inside a backward terminated the process. The
C++ guard never enters Python, so such an error propagates out of ``backward()`` as on CPU. The
Python hooks forward only availability; the C++ hooks also give pinned host memory
(``pin_memory()``, ``DataLoader(pin_memory=True)``, which raised once zyx was the accelerator)
and ``torch.Generator(device="zyx")`` (device_hooks.cpp).

The sources are compiled once per torch build with the system's C++ compiler against the
headers every torch wheel ships, and the library is cached next to the compiled kernels
(``ZYX_CACHE_DIR``/guard, keyed by the sources and the torch build, so it is never stale:
``ZYX_DISK_CACHE=0``, which is about kernels, does not make every process compile it again).
Without a compiler (or with ``ZYX_NATIVE=0``) PyTorch's Python guard and hooks stay: errors
inside a backward are deferred as far as zyx can (see ``dispatch.cpu_fallback``), and pinned
memory and zyx generators raise PyTorch's "register PrivateUse1HooksInterface" error.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch

from ..config import CONFIG

log = logging.getLogger("torch_zyx")

SOURCES = (Path(__file__).with_name("device_guard.cpp"), Path(__file__).with_name("device_hooks.cpp"))
_COMPILERS = ("c++", "g++", "clang++")
# Whether the C++ guard and hooks are PrivateUse1's; set once by ``install``.
_state = {"native": False, "hooks": False}


def native() -> bool:
    """Whether the zyx device runs under the C++ guard (errors inside a backward propagate)."""
    return _state["native"]


def native_hooks() -> bool:
    """Whether PyTorch asks zyx's C++ hooks (pinned memory, zyx generators)."""
    return _state["hooks"]


def compiler() -> str | None:
    """The C++ compiler the guard is built with, if this machine has one."""
    for name in _COMPILERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def build_command(cxx: str, output: Path) -> list[str]:
    """How the library is compiled (shown with the compiler's output when it fails)."""
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    lib = torch_dir / "lib"
    return [cxx, "-std=c++17", "-O2", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", *map(str, SOURCES), f"-L{lib}", "-lc10", "-ltorch_cpu",
            f"-Wl,-rpath,{lib}",
            "-o", str(output)]


def _library(cxx: str, directory: Path) -> Path:
    """The compiled guard for this torch build in ``directory``, compiled when not there yet."""
    # One library per source, torch build and compiler: a torch upgrade changes the headers.
    identity = f"{torch.__version__}|{Path(torch.__file__).parent}|{cxx}".encode()
    digest = hashlib.sha1(b"".join(source.read_bytes() for source in SOURCES) + identity).hexdigest()[:16]
    library = directory / f"zyx_guard_{digest}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    # Written under a name of this process's, then renamed: processes starting together (test
    # workers) each compile, and none loads a half-written library.
    partial = library.with_name(f"{library.name}.{os.getpid()}.tmp")
    command = build_command(cxx, partial)
    log.info("zyx: compiling the device guard (once per torch build): %s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"compiling the zyx device guard failed ({result.returncode}):\n"
                           f"{' '.join(command)}\n{result.stderr}")
    os.replace(partial, library)
    return library


def install() -> bool:
    """Register the C++ guard for the zyx device; False (PyTorch's Python guard stays) when
    ``ZYX_NATIVE=0``, without a C++ compiler, or when it cannot be built or loaded."""
    if not CONFIG.native:
        return False
    cxx = compiler()
    if cxx is None:
        log.info("zyx: no C++ compiler (%s): PyTorch's Python device guard is used, and an "
                 "error inside a backward may terminate the process", ", ".join(_COMPILERS))
        return False
    try:
        library = ctypes.CDLL(str(_library(cxx, CONFIG.cache_dir / "guard")))
    except (OSError, RuntimeError) as exc:
        log.warning("zyx: the C++ device guard is not available, PyTorch's Python one is used: %s", exc)
        return False
    _state["native"] = library.zyx_register_device_guard() == 1
    _state["hooks"] = library.zyx_register_hooks() == 1
    if _state["native"]:
        library.zyx_set_synchronize(_SYNCHRONIZE)
    if _state["hooks"]:
        library.zyx_set_pool_callback(_POOLS)
        library.zyx_set_attention_callback(_ATTENTION)
    return _state["native"]


def _report(error: Exception, message, capacity: int) -> int:
    """An error of a callback, written for C++ to raise (no exception crosses ctypes)."""
    text = f"{type(error).__name__}: {error}".encode()[:capacity - 1]
    ctypes.memmove(message, text, len(text))
    return 1


def _synchronize(message, capacity: int) -> int:
    """torch.zyx.synchronize() for the C++ guard's stream, event and device synchronization."""
    from .device_module import synchronize

    try:
        synchronize()
    except Exception as exc:  # noqa: BLE001  (C++ raises it as a RuntimeError)
        return _report(exc, message, capacity)
    return 0


def _pools(request: int, values, message, capacity: int) -> int:
    """What the C++ device allocator asks of the pools (device_hooks.cpp ``PoolRequest``):
    0 their statistics into ``values``, 1 empty the caches, 2 reset the peaks, 3 reset the
    accumulated counts (zyx keeps none)."""
    from . import device_module as zyx

    try:
        if request == 0:
            stats = (zyx.memory_allocated(), zyx.max_memory_allocated(), zyx.memory_reserved(),
                     zyx.max_memory_reserved())
            for i, value in enumerate(stats):
                values[i] = value
        elif request == 1:
            zyx.empty_cache()
        elif request == 2:
            zyx.reset_peak_memory_stats()
    except Exception as exc:  # noqa: BLE001  (C++ raises it as a RuntimeError)
        return _report(exc, message, capacity)
    return 0


def _attention_dtypes(device: int) -> int:
    """The dtypes zyx device ``device`` runs scaled_dot_product_attention for as one fused kernel
    (bit 0 half, bit 1 bfloat16: its tensor-core dtypes), asked by device_hooks.cpp's choice of
    SDPA backend once per device; 0 (the math form) when there is no such device."""
    from ..execute import contexts

    try:
        devices = contexts.devices()
        tensor_cores = devices[device].lowering.tensor_cores if device < len(devices) else ()
    except Exception:  # (no exception may cross ctypes: the math form then)
        log.exception("zyx: the fused attention check failed; scaled_dot_product_attention takes its "
                      "math form")
        return 0
    return int("float16" in tensor_cores) | 2 * int("bfloat16" in tensor_cores)


# Kept alive for the process's life: the C++ guard and allocator hold their addresses.
_SYNCHRONIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)(_synchronize)
_POOLS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
                          ctypes.c_int)(_pools)
# (Looked up at each call: a test may answer for a device that has no fused kernel.)
_ATTENTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda device: _attention_dtypes(device))
