"""Environment report (``python -m torch_zyx.info``): what to paste into a bug report.

The zyx counterpart of ``python -m torch.utils.collect_env``: versions, the backends zyx can
use and, for each one it cannot, why; the devices zyx sees; whether the native C and C++ parts
are built and used; the cache and config file locations; the effective configuration and the
``ZYX_*`` environment variables that are set.

``collect()`` returns the report as data (a dict of sections, each a dict or a list of dicts),
which tests check; ``format_report`` renders it; ``main`` prints it. Every probe catches its own
errors and reports them as its result (a tool for broken set-ups must not fail on them). This is
the one module besides config.py that reads ``os.environ``: to show what is set, not to act on it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

import torch_zyx
from torch_zyx.config import CONFIG, _config_file
from torch_zyx.integration.device_guard import compiler, native, native_hooks
from torch_zyx.record.transfer import COMPLEX_TO_ZYX, TORCH_TO_ZYX

try:  # imports pyopencl, which is optional (the "opencl" extra): its absence is a probe result
    from torch_zyx.runtime.opencl import opencl_devices
except Exception as exc:  # noqa: BLE001  (a broken pyopencl may raise more than ImportError)
    opencl_devices = None
    _OPENCL_IMPORT_ERROR: Exception | None = exc
else:
    _OPENCL_IMPORT_ERROR = None

log = logging.getLogger("torch_zyx")

# The C extensions the install compiles (setup.py); without them zyx uses Python / ctypes.
NATIVE_EXTENSIONS = {"torch_zyx.lazy._native": "the graph's node table; without it lazy/nodes_py.py",
                     "torch_zyx.runtime._launch": "CPU kernel launches; without it ctypes"}
# Environment variables outside ZYX_* that change what zyx or CPU torch does.
RELATED_ENV = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "OMP_NUM_THREADS", "TORCH_DEVICE_BACKEND_AUTOLOAD")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _probe(fn, *args):
    """``fn(*args)``, or ``{"error": ...}`` when it raises: one failing probe must not hide the
    rest of the report."""
    try:
        return fn(*args)
    except Exception as exc:
        log.debug("torch_zyx.info: probe %s failed", getattr(fn, "__name__", fn), exc_info=True)
        return {"error": _error(exc)}


def _package_version(name: str) -> str | None:
    """The installed distribution's version, None when not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit(directory: Path) -> str | None:
    """The commit of the source checkout torch_zyx runs from, if it is one (read-only git)."""
    try:
        result = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict:
    package_dir = Path(torch_zyx.__file__).resolve().parent
    info = {"torch_zyx": _package_version("torch_zyx") or "not installed (source tree)",
            "torch_zyx location": str(package_dir),
            "torch_zyx git commit": _git_commit(package_dir) or "not a git checkout",
            "torch": torch.__version__,
            "torch CUDA build": torch.version.cuda or "no (CPU build)",
            "Python": sys.version.replace("\n", " "),
            "numpy": _package_version("numpy") or "not installed"}
    llvmlite = _package_version("llvmlite")
    info["llvmlite"] = llvmlite or "not installed"
    if llvmlite:
        info["LLVM (llvmlite's)"] = _probe(_llvm_version)
    info["pyopencl"] = _package_version("pyopencl") or "not installed"
    cuda = _package_version("cuda-bindings") or _package_version("cuda-python")
    info["cuda-bindings"] = cuda or "not installed"
    info["NVRTC"] = _package_version("nvidia-cuda-nvrtc") or "not installed (the nvidia-cuda-nvrtc wheel)"
    info["platform"] = platform.platform()
    info["CPU"] = f"{_cpu_model()} ({platform.machine()}, {os.cpu_count()} logical CPUs"
    if hasattr(os, "sched_getaffinity"):
        info["CPU"] += f", {len(os.sched_getaffinity(0))} usable by this process"
    info["CPU"] += ")"
    info["torch threads"] = torch.get_num_threads()
    info["C++ compiler (device guard)"] = compiler() or "none found"
    # The torch dtypes zyx holds and computes (uint16/32/64 with CPU torch's kernel coverage;
    # complex64/128 as real pairs, record/complex.py; complex32 as float16 pairs, with the few
    # ComplexHalf kernels CPU torch has).
    limited = {torch.complex32: "complex32 (CPU torch's ComplexHalf ops only)"}
    info["zyx dtypes"] = ", ".join(limited.get(d, str(d).removeprefix("torch."))
                                   for d in (*TORCH_TO_ZYX, *COMPLEX_TO_ZYX))
    return info


def _llvm_version() -> str:
    import llvmlite.binding as llvm

    return ".".join(map(str, llvm.llvm_version_info))


def _cpu_backend() -> dict:
    if importlib.util.find_spec("llvmlite") is None:
        return {"found": False, "reason": "llvmlite is not installed (pip install llvmlite)"}
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten().split(",")
    vectors = [name for name in ("avx512f", "avx2", "avx", "neon", "sve") if f"+{name}" in features]
    return {"found": True, "detail": f"LLVM {_llvm_version()}, host CPU {llvm.get_host_cpu_name()} "
                                     f"({llvm.get_process_triple()}; {', '.join(vectors) or 'no wide vectors'})"}


def _opencl_backend() -> dict:
    if importlib.util.find_spec("pyopencl") is None:
        return {"found": False, "reason": "pyopencl is not installed (pip install pyopencl, or `make ocl` "
                                          "for PoCL as well)"}
    if opencl_devices is None:
        return {"found": False, "reason": f"zyx's OpenCL runtime failed to import: {_error(_OPENCL_IMPORT_ERROR)}"}
    # Makes a context and a queue per device, as zyx would (the devices zyx sees, below, have
    # OpenCL ones only when "opencl" is among the configured backends).
    runtimes, reason = opencl_devices()
    if not runtimes:
        return {"found": False, "reason": reason or "no OpenCL device"}
    # describe() starts with the backend's name ("opencl: "), which the report already gives.
    return {"found": True, "detail": "; ".join(runtime.describe().partition(": ")[2] or runtime.describe()
                                               for runtime in runtimes)}


def _cuda_backend() -> dict:
    from torch_zyx.execute.contexts import cuda_unavailable

    reason = cuda_unavailable()
    if reason:
        return {"found": False, "reason": f"{reason} (NVIDIA driver: {_cuda_driver()})"}
    from torch_zyx.runtime.cuda import cuda_devices

    # Retains each GPU's primary context, as zyx would.
    runtimes, reason = cuda_devices()
    if not runtimes:
        return {"found": False, "reason": reason}
    return {"found": True, "detail": "; ".join(runtime.describe().partition(": ")[2] for runtime in runtimes)}


def _cuda_driver() -> str:
    """The CUDA driver's version from libcuda (cuDriverGetVersion needs no cuInit), or why not."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1" if sys.platform.startswith("linux") else "nvcuda")
    except OSError:
        return "not found (no libcuda)"
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return "libcuda found, cuDriverGetVersion failed"
    return f"CUDA {version.value // 1000}.{version.value % 1000 // 10}"


def backends() -> dict:
    """Each backend: found or not, with what was found or the reason, and whether it is
    configured (``ZYX_BACKENDS`` / config.json)."""
    result = {}
    for name, probe in (("cpu", _cpu_backend), ("opencl", _opencl_backend), ("cuda", _cuda_backend)):
        entry = _probe(probe)
        if "error" in entry:
            entry = {"found": False, "reason": f"probe failed: {entry['error']}"}
        entry["configured"] = name in CONFIG.backends
        result[name] = entry
    return result


def devices() -> list[dict]:
    """The devices zyx numbers (``torch.zyx``): index, backend and name."""
    found = []
    for index in range(torch.zyx.device_count()):
        name = _probe(torch.zyx.get_device_name, index)
        if isinstance(name, dict):
            found.append({"index": index, "backend": "?", "name": f"(get_device_name failed: {name['error']})"})
        else:
            # Each runtime's describe() starts with its backend's name ("cpu: ...", "opencl: ...").
            backend, _, rest = name.partition(": ")
            found.append({"index": index, "backend": backend, "name": rest or name})
    return found


def _extension(name: str) -> dict:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        return {"built": False, "in use": False, "reason": _error(exc)}
    return {"built": True, "in use": CONFIG.native, "file": getattr(module, "__file__", "?")}


def native_parts() -> dict:
    """The C extensions and the C++ device guard and hooks: built, and used in this process."""
    parts = {}
    for name, role in NATIVE_EXTENSIONS.items():
        parts[name] = {"role": role, **_probe(_extension, name)}
    parts["C++ device guard"] = {"in use": native(), "role": "errors inside a backward propagate; "
                                                            "without it PyTorch's Python guard"}
    parts["C++ device hooks"] = {"in use": native_hooks(), "role": "pinned memory, zyx generators"}
    if not CONFIG.native:
        parts["note"] = "ZYX_NATIVE=0: the Python/ctypes fallbacks and PyTorch's Python guard are used"
    return parts


def _count_files(directory: Path) -> int:
    return sum(1 for entry in directory.iterdir() if entry.is_file()) if directory.is_dir() else 0


def paths() -> dict:
    cache = Path(CONFIG.cache_dir)
    config_file = _config_file()
    info = {"cache directory": str(cache), "cache directory exists": cache.is_dir(),
            "cached CPU kernel objects": _count_files(cache / "llvm"),
            "config.json": str(config_file), "config.json exists": config_file.is_file()}
    if config_file.is_file():
        try:
            # Compact JSON, so the report shows the file as zyx reads it.
            info["config.json contents"] = json.dumps(json.loads(config_file.read_text()))
        except (OSError, ValueError) as exc:
            info["config.json contents"] = f"unreadable, ignored by zyx: {_error(exc)}"
    return info


def configuration() -> dict:
    """Every field of the effective configuration (``torch_zyx.config.CONFIG``)."""
    return {field.name: _plain(getattr(CONFIG, field.name)) for field in dataclasses.fields(CONFIG)}


def _plain(value):
    return str(value) if isinstance(value, Path) else value


def environment() -> dict:
    """The ``ZYX_*`` variables that are set, and the related others."""
    zyx = {name: value for name, value in sorted(os.environ.items()) if name.startswith("ZYX_")}
    related = {name: os.environ[name] for name in RELATED_ENV if name in os.environ}
    return {"ZYX_ variables set": zyx, "related variables set": related}


SECTIONS = (("Versions", versions), ("Backends", backends), ("Devices zyx sees", devices),
            ("Native parts", native_parts), ("Paths", paths), ("Configuration (CONFIG)", configuration),
            ("Environment", environment))


def collect() -> dict:
    """The whole report: section title -> data (a dict, or a list of dicts for the devices)."""
    return {title: _probe(probe) for title, probe in SECTIONS}


def _format_value(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "(none)"
    return str(value)


def _backend_lines(section: dict) -> list[str]:
    lines = []
    for name, entry in section.items():
        if entry["found"]:
            lines.append(f"  {name:<7} found: {entry.get('detail')}")
            if not entry["configured"]:
                lines.append(f"  {'':<7} (not used: not in ZYX_BACKENDS or config.json's \"backends\")")
        else:
            lines.append(f"  {name:<7} not found: {entry.get('reason')}")
    return lines


def _native_lines(section: dict) -> list[str]:
    lines = []
    for name, entry in section.items():
        if not isinstance(entry, dict):
            lines.append(f"  {name}: {entry}")
            continue
        if "error" in entry:
            lines.append(f"  {name}: probe failed: {entry['error']}")
            continue
        state = []
        if "built" in entry:
            state.append("built" if entry["built"] else "NOT built")
        state.append("in use" if entry["in use"] else "NOT in use")
        lines.append(f"  {name}: {', '.join(state)} ({entry['role']})")
        where = entry.get("file") or entry.get("reason")
        if where:
            lines.append(f"      {where}")
    return lines


def format_report(report: dict) -> str:
    """The report as text: one block per section."""
    lines = []
    for title, section in report.items():
        lines.append(f"== {title}")
        if isinstance(section, dict) and "error" in section:
            lines.append(f"  probe failed: {section['error']}")
        elif isinstance(section, list):
            for item in section:
                lines.append(f"  zyx:{item['index']}  {item['backend']:<7} {item['name']}")
            if not section:
                lines.append("  (none)")
        elif title == "Backends":
            lines.extend(_backend_lines(section))
        elif title == "Native parts":
            lines.extend(_native_lines(section))
        else:
            lines.extend(f"  {key}: {_format_value(value)}" for key, value in section.items())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(format_report(collect()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
