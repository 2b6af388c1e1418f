"""Process-wide counters (``torch_zyx.counters()``): what the pipeline did, for tests and users."""

from __future__ import annotations

NAMES = ("kernels_launched", "kernels_compiled", "realizations", "schedule_cache_hits",
         "schedule_cache_misses", "cpu_fallbacks", "bytes_allocated", "kernelizer_runs",
         # torch.compile(backend="zyx") (compile/): plans traced, and calls of graphs that could not
         # be one plan and ran op by op.
         "compiled_plans", "compile_fallbacks",
         # Entries the bounded caches dropped (execute/cache.py, ZYX_CACHE_ENTRIES).
         "cache_evictions",
         # ZYX_AUTOTUNE (execute/autotune.py): kernels searched, and found in the stored results.
         "autotune_searches", "autotune_cache_hits",
         # Small CPU kernels compiled without optimization at first, and optimized once their
         # plans ran a few times (runtime/cpu.py ``CPUProgram.upgrade``).
         "kernels_compiled_quick", "kernels_optimized")

_values = dict.fromkeys(NAMES, 0)


def bump(name: str, amount: int = 1) -> None:
    _values[name] += amount


def counters() -> dict[str, int]:
    return dict(_values)


def reset_counters() -> None:
    for name in NAMES:
        _values[name] = 0
