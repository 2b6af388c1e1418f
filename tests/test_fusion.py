"""Fusion: how many kernels common patterns become, and the schedule cache (through counters())."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close


def _chain(x):
    # Ten elementwise ops: scalar operands, an in-place op and an out= op among them.
    t = x * 2 + 1
    t = t.relu() * x - 3
    t = t * 0.5 + x
    t.mul_(2)
    out = torch.empty_like(t)
    torch.sub(t, 1.5, out=out)
    return out.exp()


def _count(fn, *cpu_args):
    import torch_zyx

    args = [a.to("zyx") for a in cpu_args]
    torch.zyx.synchronize()
    torch_zyx.reset_counters()
    result = fn(*args)
    torch.zyx.synchronize()
    launched = torch_zyx.counters()["kernels_launched"]
    assert_close(result, fn(*cpu_args), rtol=1e-4, atol=1e-4)
    return launched


def test_elementwise_chain_is_one_kernel(counters):
    assert _count(_chain, torch.randn(64, 33)) == 1


def test_mul_sum_is_one_kernel(counters):
    assert _count(lambda x, y: (x * y).sum(-1), torch.randn(48, 40), torch.randn(48, 40)) == 1


def test_linear_relu_is_one_kernel(counters):
    fn = lambda x, w, b: torch.relu(x @ w + b)
    assert _count(fn, torch.randn(32, 24), torch.randn(24, 48), torch.randn(48)) == 1


def test_softmax_is_one_kernel(counters):
    # Max, sum of exp and normalize run over each row in one kernel (row reduces fuse).
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(16, 100)) == 1
    assert _count(lambda x: torch.log_softmax(x, -1), torch.randn(16, 100)) == 1
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(4, 8, 50)) == 1


def test_layer_norm_is_one_kernel(counters):
    fn = lambda x, w, b: F.layer_norm(x, (64,), w, b)
    assert _count(fn, torch.randn(16, 64), torch.randn(64), torch.randn(64)) == 1
    assert _count(lambda x: F.layer_norm(x, (64,)), torch.randn(16, 64)) == 1
    assert _count(lambda x: F.layer_norm(x, (6, 40)), torch.randn(4, 6, 40)) == 1


def test_layer_norm_with_statistics_is_two_kernels(counters):
    # Mean and rstd kept (as autograd saves them): stored by one kernel, read by the other.
    fn = lambda x: torch.native_layer_norm(x, (64,), None, None, 1e-5)
    assert _count(fn, torch.randn(16, 64)) <= 2


def test_row_reduce_fusion_keeps_other_patterns_right(counters):
    x = torch.randn(24, 40)
    # A row reduce read by a sum over the rows (a weight gradient): stored, not recomputed.
    assert _count(lambda x: (x - x.mean(-1, keepdim=True)).sum(0), x) <= 2
    # A matmul and a row reduce in one value; a reduce over another axis; a full reduce.
    assert _count(lambda a, w: a @ w + a.sum(-1, keepdim=True), x, torch.randn(40, 40)) <= 2
    assert _count(lambda x: torch.softmax(x, 0), x) <= 3
    assert _count(lambda x: x - x.mean(), x) <= 2
    # Few long rows: the row reduces are split across threads / work groups instead.
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(2, 40000)) <= 6


def test_row_kernels_with_work_groups(counters):
    # Devices with work groups and no row loops (GPUs): one work group per row, its row
    # reduces as group reduces. Checked on OpenCL (PoCL) with those options forced.
    from torch_zyx import realize

    ctx = realize.devices()[0]
    if ctx.runtime.name != "opencl" or ctx.lowering.group_size < 2:
        pytest.skip("needs an OpenCL device as zyx:0 (make test-opencl): CPU kernels have no work groups")
    saved = ctx.lowering
    ctx.lowering = dataclasses.replace(saved, row_loops=False)
    before = set(realize._lowered)
    try:
        # Shapes no other test uses: their plans are built under the options above.
        x, w = torch.randn(37, 1000), torch.randn(1000)
        assert _count(lambda x: torch.softmax(x, -1), x) == 1
        assert _count(lambda x: torch.log_softmax(x, -1), x) == 1
        assert _count(lambda x, w: F.layer_norm(x, (1000,), w), x, w) == 1
        assert _count(lambda x: F.layer_norm(x, (3, 257)), torch.randn(5, 3, 257)) == 1
    finally:
        ctx.lowering = saved
    new = [realize._lowered[k][0] for k in set(realize._lowered) - before]
    assert new and all(k.group_size for k in new)


@pytest.mark.parametrize("tile", [(4, 16), (8, 32)])
def test_matmul_register_tiles(counters, monkeypatch, tile):
    # Each device chooses its matmul register tile (the CPU: 8 x 32 with 512-bit vectors, else
    # 4 x 16); both must give the same results and kernels whatever divides the shapes: rows
    # by the tile's, by 4 or by 2 only, columns by the tile's or by 16 only, operands packed
    # (large) or read in place, a computed operand (ReLU's gradient) stored first.
    from torch_zyx import realize
    from torch_zyx.lazy.panels import MatmulTile

    ctx = realize.devices()[0]
    monkeypatch.setattr(ctx, "lowering", dataclasses.replace(ctx.lowering, matmul_tile=MatmulTile(*tile)))
    monkeypatch.setattr(realize, "_plans", {})  # (plans and kernels built for the other tile)
    monkeypatch.setattr(realize, "_lowered", {})
    for m, k, n in [(256, 64, 512), (260, 40, 48), (10, 33, 80), (136, 96, 528)]:
        a, w = torch.randn(m, k), torch.randn(n, k)
        assert _count(lambda a, w: a @ w.t(), a, w) <= 2  # (B packed, then the matmul)
        b = w.t().contiguous()  # (B laid out along n: read in place)
        assert_close(a.to("zyx") @ b.to("zyx"), a @ b, rtol=1e-4, atol=1e-4)
    x, w = torch.randn(128, 64, requires_grad=True), torch.randn(512, 64, requires_grad=True)
    xz, wz = x.detach().to("zyx").requires_grad_(), w.detach().to("zyx").requires_grad_()
    F.linear(x, w).relu().square().sum().backward()
    F.linear(xz, wz).relu().square().sum().backward()
    assert_close(xz.grad, x.grad, rtol=1e-4, atol=1e-3)
    assert_close(wz.grad, w.grad, rtol=1e-4, atol=1e-3)


def test_second_run_hits_schedule_cache(counters):
    import torch_zyx

    fn = lambda x, y: (x * y + 1).relu().sum(0)
    a, b = torch.randn(20, 30), torch.randn(20, 30)
    first = fn(a.to("zyx"), b.to("zyx")).cpu()
    before = torch_zyx.counters()
    # New buffers with the same graph shape: the plan is reused, nothing is kernelized.
    c, d = torch.randn(20, 30), torch.randn(20, 30)
    second = fn(c.to("zyx"), d.to("zyx")).cpu()
    after = torch_zyx.counters()
    assert after["kernelizer_runs"] == before["kernelizer_runs"]
    assert after["schedule_cache_hits"] == before["schedule_cache_hits"] + 1
    assert after["kernels_compiled"] == before["kernels_compiled"]
    torch.testing.assert_close(first, fn(a, b))
    torch.testing.assert_close(second, fn(c, d))


def _long_loop(x, steps):
    # Each step's value depends on all the steps before it; nothing realizes in between.
    for i in range(steps):
        x = (x * 0.999 + 1e-3).sin() if i % 2 else (x.exp() + 1).log()
    return x


def test_long_chain_without_realization_splits_into_kernels(counters):
    """A chain far longer than one kernel's expression may be (a training loop never synced)
    is stored every so often instead of overflowing the recursion of lowering."""
    x = torch.randn(257)
    launched = _count(lambda t: _long_loop(t, 1500), x)
    assert 2 <= launched <= 40
