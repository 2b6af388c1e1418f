"""Shared test set-up: the zyx device is registered before any test module imports torch internals."""

import pytest
import torch

import torch_zyx


@pytest.fixture
def counters():
    """Reset torch_zyx's counters; the test reads them through ``torch_zyx.counters()``."""
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    return torch_zyx.counters


def assert_close(zyx_value, cpu_value, **kwargs):
    """Compare a zyx result with the CPU torch result (values, dtype, shape)."""
    if isinstance(zyx_value, (tuple, list)):
        assert len(zyx_value) == len(cpu_value)
        for a, b in zip(zyx_value, cpu_value):
            assert_close(a, b, **kwargs)
        return
    assert isinstance(zyx_value, torch.Tensor) and zyx_value.device.type == "zyx", type(zyx_value)
    torch.testing.assert_close(zyx_value.cpu(), cpu_value, **kwargs)
