"""Shared test set-up: the zyx device is registered before any test module imports torch internals."""

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
