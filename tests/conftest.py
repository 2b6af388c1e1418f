"""Shared test set-up (the zyx device is registered before any test module imports torch
internals) and the helpers that compare zyx with CPU torch."""

import math

import pytest
import torch

import torch_zyx
from torch_zyx.config import CONFIG

# The backend of zyx:0, the device the tests use (`make test-opencl`: ZYX_BACKENDS=opencl).
# Read from the configuration, not the devices: creating those here would be too early for
# test_backends.py, which adds the OpenCL backend before any device exists.
ZYX0_BACKEND = CONFIG.backends[0] if CONFIG.backends else "cpu"

# CPU torch computes the reference results single-threaded: GNU OpenMP is not fork-safe, and
# test_opinfo.py forks each test; a child of a process whose OpenMP pool exists hangs in its
# first parallel region (seen: mkl fft in gomp_team_barrier_wait_end). zyx's own CPU runtime
# uses its own thread pool, which is rebuilt after fork.
torch.set_num_threads(1)


@pytest.fixture
def counters():
    """Reset torch_zyx's counters; the test reads them through ``torch_zyx.counters()``."""
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    return torch_zyx.counters


@pytest.fixture
def no_fallback(monkeypatch):
    """Ops without a zyx lowering raise instead of running on the CPU (native lowerings only);
    modules that test only native lowerings use it for every test (``pytestmark``)."""
    monkeypatch.setattr(CONFIG, "cpu_fallback", False)


def assert_close(zyx_value, cpu_value, **kwargs):
    """Compare a zyx result with the CPU torch result (values, dtype, shape)."""
    if isinstance(zyx_value, (tuple, list)):
        assert len(zyx_value) == len(cpu_value)
        for a, b in zip(zyx_value, cpu_value):
            assert_close(a, b, **kwargs)
        return
    assert isinstance(zyx_value, torch.Tensor) and zyx_value.device.type == "zyx", type(zyx_value)
    torch.testing.assert_close(zyx_value.cpu(), cpu_value, **kwargs)


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


def make(shape, dtype, seed=0, low=-4, high=4, positive=False):
    """A deterministic CPU tensor of ``dtype`` with a useful spread of values."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        lo = 0.1 if positive else low
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (high - lo) + lo).to(dtype)
    lo = 1 if positive else (0 if dtype == torch.uint8 else low)
    return torch.randint(lo, high + 1, shape, generator=gen).to(dtype)


def to_zyx(x):
    if isinstance(x, torch.Tensor):
        return x.to("zyx")
    if isinstance(x, (list, tuple)):
        return type(x)(to_zyx(v) for v in x)
    return x


def tol(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    return {}


def compare(z, c, **kw):
    if isinstance(z, (tuple, list)):
        assert len(z) == len(c)
        for a, b in zip(z, c):
            compare(a, b, **kw)
        return
    if isinstance(c, torch.Tensor):
        opts = dict(tol(c.dtype), equal_nan=True)
        opts.update(kw)
        assert_close(z, c, **opts)
    else:
        assert z == c or (isinstance(c, float) and math.isclose(z, c, rel_tol=1e-5, abs_tol=1e-6))


def check(fn, *args, native=True, mutates=(), **kw):
    """fn(*args) on CPU and on zyx agree; inputs at positions ``mutates`` agree afterwards too."""
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    zyx_args = [to_zyx(a) for a in args]
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    try:
        expected = fn(*cpu_args)
    except Exception as error:  # noqa: BLE001
        # Any error means an invalid combination: zyx must reject it the same way.
        with pytest.raises(type(error)):
            fn(*zyx_args)
        return
    got = fn(*zyx_args)
    compare(got, expected, **kw)
    for i in mutates:
        compare(zyx_args[i], cpu_args[i], **kw)
    if native:
        assert torch_zyx.counters()["cpu_fallbacks"] == 0, "op fell back to the CPU"


# The CUDA render check of CI (ZYX_CHECK_CUDA_RENDER=1, tests/cuda_render_check.py): its hooks.
from cuda_render_check import (  # noqa: F401
    pytest_configure,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
