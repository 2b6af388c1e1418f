"""Configuration: every ``ZYX_*`` environment variable and config.json setting, read in one place.

Every other module asks this one; nothing else reads ``os.environ``. Values are read once at
import; tests that need other values change the attributes of ``CONFIG`` directly.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("torch_zyx")

# ZYX_DEBUG bits (DESIGN.md, "Configuration and debugging").
DEBUG_DEVICES = 1
DEBUG_PERF = 2
DEBUG_SCHEDULE = 4
DEBUG_IR = 8
DEBUG_SOURCE = 16
DEBUG_LAUNCHES = 32
DEBUG_ALLOCATIONS = 64
DEBUG_COMPILE = 128
DEBUG_AUTOTUNE = 256


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        log.warning("ignoring %s=%r: not an integer", name, value)
        return default


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_FORMS = "bytes (1073741824), with a unit (512M, 8G, 2GiB) or a fraction of the device's memory (0.5)"


def _env_size(name: str) -> float:
    """A memory size from the environment: bytes (> 1), a fraction of a device's memory (in (0, 1]),
    or 0 when unset or invalid (with one warning naming the accepted forms)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return 0.0
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if match:
        number, unit = float(match.group(1)), match.group(2).upper()
        if unit:
            return number * _SIZE_UNITS[unit]
        if 0 < number <= 1 or number > 1 and number.is_integer():
            return number
    log.warning("zyx: ignoring %s=%r: expected %s; no limit", name, text, _SIZE_FORMS)
    return 0.0


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "").strip() or default
    if value not in choices:
        log.warning("zyx: ignoring %s=%r: expected one of %s; using %r", name, value, ", ".join(choices), default)
        return default
    return value


def _cache_dir() -> Path:
    explicit = os.environ.get("ZYX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zyx"


def _config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "zyx" / "config.json"


@dataclass
class Config:
    debug: int = 0
    cpu_fallback: bool = True
    # Backend names in device order: "cpu" (LLVM), "opencl" (pyopencl), "cuda" (cuda-bindings
    # and NVRTC, every GPU); ZYX_BACKENDS=cuda,cpu or config.json's "backends".
    backends: list[str] = field(default_factory=lambda: ["cpu"])
    threads: int = 1
    max_pending: int = 10000
    cache_dir: Path = field(default_factory=_cache_dir)
    # ZYX_AUTOTUNE: 0 heuristics only, 1 search each kernel's lowering choices when first
    # compiled, 2 a wider search (execute/autotune.py); config.json's "autotune".
    autotune: int = 0
    disk_cache: bool = True
    cpu_team: str = "openmp"
    vector_bits: int = 0
    native: bool = True
    # ZYX_MEMORY_LIMIT: the most bytes each device's pool holds (cached buffers included); a
    # value in (0, 1] is a fraction of the device's memory; 0: no limit.
    memory_limit: float = 0.0
    # ZYX_CACHE_ENTRIES: plans kept in memory (lowered kernels and each device's programs: twice
    # as many); the least recently used go beyond it (execute/cache.py). A compiled CPU program
    # holds ~1.5 MB (its MCJIT engine): 512 programs are ~0.75 GB.
    cache_entries: int = 256

    def debug_on(self, bit: int) -> bool:
        return bool(self.debug & bit)

    def memory_limit_bytes(self, device_bytes: int) -> int:
        """The pool limit of a device with ``device_bytes`` of memory (0: none)."""
        limit = self.memory_limit
        return int(limit * device_bytes) if 0 < limit <= 1 else int(limit)


def _load() -> Config:
    config = Config(
        debug=_env_int("ZYX_DEBUG", 0),
        cpu_fallback=_env_int("ZYX_CPU_FALLBACK", 1) != 0,
        threads=max(1, _env_int("ZYX_THREADS", os.cpu_count() or 1)),
        max_pending=max(16, _env_int("ZYX_MAX_PENDING", 10000)),
        autotune=min(2, max(0, _env_int("ZYX_AUTOTUNE", 0))),
        disk_cache=_env_int("ZYX_DISK_CACHE", 1) != 0,
        cpu_team=_env_choice("ZYX_CPU_TEAM", "openmp", ("openmp", "native", "python")),
        vector_bits=max(0, _env_int("ZYX_VECTOR_BITS", 0)),
        native=_env_int("ZYX_NATIVE", 1) != 0,
        memory_limit=_env_size("ZYX_MEMORY_LIMIT"),
        cache_entries=max(16, _env_int("ZYX_CACHE_ENTRIES", 256)),
    )
    file_backends = None
    path = _config_file()
    if path.exists():
        try:
            data = json.loads(path.read_text())
            file_backends = data.get("backends")
            config.autotune = min(2, max(0, int(data.get("autotune", config.autotune))))
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("zyx: ignoring the config file %s: %s (expected a JSON object such as "
                        "{\"backends\": [\"cpu\"], \"autotune\": false})", path, exc)
    elif config.debug & DEBUG_DEVICES:
        print(f"zyx: no config file at {path}, using defaults")
    env_backends = os.environ.get("ZYX_BACKENDS")
    if env_backends:
        config.backends = [name.strip() for name in env_backends.split(",") if name.strip()]
    elif isinstance(file_backends, list) and file_backends:
        config.backends = [str(name) for name in file_backends]
    return config


CONFIG = _load()


def native_extension(name: str, fallback: str):
    """The C extension module ``name`` (``pip install`` compiles it) when ``ZYX_NATIVE`` is not
    0 and it is built, else None: the caller then uses ``fallback``, its Python counterpart."""
    if not CONFIG.native:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # not built: no C compiler or Python headers at install
        # A warning, not an info line: pip hides the failed optional build, and recording and
        # launching without the extension is several times slower.
        log.warning("zyx: the C extension %s is not built (%s); using %s, which is slower. Install "
                    "with a C compiler and the Python headers (in a source tree: `python setup.py "
                    "build_ext --inplace`), or set ZYX_NATIVE=0 to use it on purpose.", name, exc, fallback)
        return None
