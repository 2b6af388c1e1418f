"""``torch.zyx``: the device module (as ``torch.cuda``), the device guard and the hooks.

Registered by ``torch_zyx._register`` through PyTorch's PrivateUse1 Python-backend setup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch
import torch.optim.optimizer as _optimizer
from torch.utils import _foreach_utils

from ..execute.contexts import devices
from ..record import random
from ..record.pending import realize_all
from ..record.tensor import ZyxTensor

# torch.optim picks its multi-tensor (foreach) path by default only for tensor types in this
# list (DTensor registers itself the same way). zyx records every update lazily, so the foreach
# path is the fused one here as on CUDA; its per-step scalars also travel as a buffer
# (ops/optim/foreach.py), which keeps the schedule cached from step to step.
for _types in (_foreach_utils._foreach_supported_types, _optimizer._foreach_supported_types):
    if ZyxTensor not in _types:
        _types.append(ZyxTensor)

_current = [0]
_initialized = [False]


def _ctx(index=None):
    all_devices = devices()
    _initialized[0] = True
    index = _current[0] if index is None else (index.index if isinstance(index, torch.device) else index)
    index = 0 if index is None else int(index)
    if not 0 <= index < len(all_devices):
        raise RuntimeError(f"zyx: invalid device index {index} ({len(all_devices)} zyx devices)")
    return all_devices[index]


def is_available() -> bool:
    return len(devices()) > 0


def device_count() -> int:
    return len(devices())


def current_device() -> int:
    return _current[0]


def set_device(device) -> None:
    index = device.index if isinstance(device, torch.device) else device
    _ctx(index)
    _current[0] = int(index)


class device:  # (lower case: torch.cuda.device's name)
    """Context manager making ``index`` (an int, "zyx:N" or a torch.device; None or -1: no
    change) the current zyx device, as ``torch.cuda.device``."""

    def __init__(self, index):
        if isinstance(index, str):
            index = torch.device(index)
        self.index = index.index if isinstance(index, torch.device) else index
        self.previous = None

    def __enter__(self):
        self.previous = _current[0]
        if self.index is not None and self.index >= 0:
            set_device(self.index)
        return self

    def __exit__(self, *exc) -> bool:
        _current[0] = self.previous
        return False


def is_initialized() -> bool:
    return _initialized[0]


def synchronize(device=None) -> None:
    realize_all()
    if device is None:
        for ctx in devices():
            ctx.synchronize()
    else:
        _ctx(device).synchronize()


def manual_seed(seed: int) -> None:
    random.manual_seed(seed, _current[0])


def manual_seed_all(seed: int) -> None:
    for ctx in devices():
        random.manual_seed(seed, ctx.index)


def seed() -> None:
    import time

    manual_seed(time.time_ns())


def seed_all() -> None:
    import time

    manual_seed_all(time.time_ns())


def initial_seed() -> int:
    return random.seed_of(_current[0])


def get_rng_state(device=None) -> torch.Tensor:
    index = _ctx(device).index
    return torch.frombuffer(bytearray(random.get_state(index)), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    index = _ctx(device).index
    random.set_state(bytes(new_state.to(torch.uint8).cpu().numpy().tobytes()), index)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states) -> None:
    for i, state in enumerate(states):
        set_rng_state(state, i)


def memory_allocated(device=None) -> int:
    return _ctx(device).pool.allocated


def max_memory_allocated(device=None) -> int:
    return _ctx(device).pool.max_allocated


def memory_reserved(device=None) -> int:
    return _ctx(device).pool.reserved


def max_memory_reserved(device=None) -> int:
    return _ctx(device).pool.max_reserved


def reset_max_memory_allocated(device=None) -> None:
    pool = _ctx(device).pool
    pool.max_allocated = pool.allocated


def reset_peak_memory_stats(device=None) -> None:
    reset_max_memory_allocated(device)
    pool = _ctx(device).pool
    pool.max_reserved = pool.reserved


def memory_stats(device=None) -> dict[str, int]:
    """``torch.cuda.memory_stats``'s aggregate byte counters for zyx's pool (its allocations
    are what tensors hold; there is no separate request size or split blocks)."""
    pool = _ctx(device).pool
    counters = {"allocated_bytes": (pool.allocated, pool.max_allocated),
                "active_bytes": (pool.allocated, pool.max_allocated),
                "requested_bytes": (pool.allocated, pool.max_allocated),
                "reserved_bytes": (pool.reserved, pool.max_reserved)}
    stats = {}
    for name, (current, peak) in counters.items():
        stats[f"{name}.all.current"] = current
        stats[f"{name}.all.peak"] = peak
    return dict(sorted(stats.items()))


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory, as ``torch.cuda.mem_get_info``: the host's
    available and physical memory for the CPU backend (zyx's pools are host memory), an
    OpenCL device's global memory less what zyx's pool holds of it, a CUDA GPU's own answer
    (``cuMemGetInfo``: what every process left free)."""
    ctx = _ctx(device)
    own = getattr(ctx.runtime, "mem_get_info", None)
    if own is not None:
        return own()
    total = getattr(ctx.runtime, "global_memory", None)
    if total is None:
        page = os.sysconf("SC_PAGE_SIZE")
        return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
    return max(0, total - ctx.pool.reserved), total


def get_device_name(device=None) -> str:
    return _ctx(device).runtime.describe()


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.zyx.get_device_properties`` gives (the fields device-agnostic code reads
    of ``torch.cuda``'s)."""

    name: str
    total_memory: int
    multi_processor_count: int
    # Compute capability (CUDA GPUs; 0.0 elsewhere).
    major: int = 0
    minor: int = 0


def get_device_properties(device=None) -> DeviceProperties:
    ctx = _ctx(device)
    runtime = ctx.runtime
    units = getattr(runtime, "compute_units", None) or getattr(runtime, "threads", 1)
    arch = getattr(runtime, "arch", 0)
    return DeviceProperties(runtime.describe(), mem_get_info(ctx.index)[1], units, arch // 10, arch % 10)


# torch.zyx.Stream / torch.zyx.Event make PyTorch's own torch.Stream / torch.Event on zyx (not
# subclasses: torch.Event.elapsed_time refuses an event of a subclass).
class Stream:
    """``torch.zyx.Stream()``: zyx's one stream, a ``torch.Stream(device="zyx")``."""

    def __new__(cls, device=None, priority: int = 0) -> torch.Stream:
        return torch.Stream(device=torch.device("zyx", _ctx(device).index), priority=priority)


class Event:
    """``torch.zyx.Event(enable_timing=True)``, as ``torch.cuda.Event``, a ``torch.Event`` on
    zyx: with timing, recording it notes when the work recorded before it finished (the C++
    device guard), and ``elapsed_time`` gives the milliseconds between two."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(device="zyx", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_ctx(device).index)


def stream(stream):
    """``with torch.zyx.stream(s):`` as ``torch.cuda.stream`` (zyx has one stream)."""
    return stream if stream is not None else contextlib.nullcontext()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True  # every backend computes bfloat16 (in float32 where it has no bfloat16 arithmetic)


def empty_cache() -> None:
    for ctx in devices():
        ctx.pool.empty_cache()


def _is_in_bad_fork() -> bool:
    return False


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


class ZyxModule:
    """The object registered as ``torch.zyx``."""

    is_available = staticmethod(is_available)
    device_count = staticmethod(device_count)
    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    device = device
    is_initialized = staticmethod(is_initialized)
    synchronize = staticmethod(synchronize)
    manual_seed = staticmethod(manual_seed)
    manual_seed_all = staticmethod(manual_seed_all)
    seed = staticmethod(seed)
    seed_all = staticmethod(seed_all)
    initial_seed = staticmethod(initial_seed)
    get_rng_state = staticmethod(get_rng_state)
    set_rng_state = staticmethod(set_rng_state)
    get_rng_state_all = staticmethod(get_rng_state_all)
    set_rng_state_all = staticmethod(set_rng_state_all)
    memory_allocated = staticmethod(memory_allocated)
    max_memory_allocated = staticmethod(max_memory_allocated)
    memory_reserved = staticmethod(memory_reserved)
    max_memory_reserved = staticmethod(max_memory_reserved)
    reset_peak_memory_stats = staticmethod(reset_peak_memory_stats)
    reset_max_memory_allocated = staticmethod(reset_max_memory_allocated)
    memory_stats = staticmethod(memory_stats)
    mem_get_info = staticmethod(mem_get_info)
    get_device_name = staticmethod(get_device_name)
    get_device_properties = staticmethod(get_device_properties)
    is_bf16_supported = staticmethod(is_bf16_supported)
    Stream = Stream
    Event = Event
    current_stream = staticmethod(current_stream)
    default_stream = staticmethod(current_stream)
    stream = staticmethod(stream)
    empty_cache = staticmethod(empty_cache)
    _is_in_bad_fork = staticmethod(_is_in_bad_fork)
    get_amp_supported_dtype = staticmethod(get_amp_supported_dtype)

    @staticmethod
    def _lazy_init() -> None:
        _ctx()


class Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1
