"""End-to-end smoke test: a few ops on zyx equal the CPU results."""

import torch
from conftest import assert_close


def test_elementwise_matmul_reduce():
    a, b = torch.randn(16, 8), torch.randn(8, 12)
    assert_close(((a.to("zyx") @ b.to("zyx")) * 2 + 1).relu().sum(-1), ((a @ b) * 2 + 1).relu().sum(-1),
                 rtol=1e-4, atol=1e-4)
