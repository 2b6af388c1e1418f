"""More lowerings checked against CPU torch, with CPU fallback disabled: reducing scatters,
index_add/index_copy, masked_select/masked_scatter, put, *_scatter view ops, error inputs."""

from __future__ import annotations

import pytest
import torch

from torch_zyx.config import CONFIG


@pytest.fixture(autouse=True)
def no_fallback():
    saved = CONFIG.cpu_fallback
    CONFIG.cpu_fallback = False
    yield
    CONFIG.cpu_fallback = saved


def same(fn, *args, **kwargs):
    """Run ``fn`` on CPU and on zyx copies of the tensor arguments; compare the results."""
    cpu = fn(*args, **kwargs)
    moved = [a.to("zyx") if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*moved, **kwargs)
    assert out.device.type == "zyx"
    torch.testing.assert_close(out.cpu(), cpu)
    return out


def _data():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    index = torch.tensor([[0, 1, 0, 3, 3], [2, 2, 1, 0, 3]])
    src = torch.randn(2, 5)
    return x, index, src


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x, index, src = _data()
    same(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), x, index, src)


def test_scatter_reduce_int_mean_rounds_down():
    x = torch.tensor([1, -3, 5, 7])
    index = torch.tensor([0, 0, 1, 2, 2])
    src = torch.tensor([2, -6, 3, 0, -1])
    same(lambda a, i, s: a.scatter_reduce(0, i, s, "mean"), x, index, src)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce):
    torch.manual_seed(1)
    x, src = torch.randn(5, 3), torch.randn(4, 3)
    index = torch.tensor([0, 4, 0, 2])
    same(lambda a, i, s: a.index_reduce(0, i, s, reduce), x, index, src)
    same(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=False), x, index, src)


def test_index_add_copy():
    torch.manual_seed(2)
    x, src = torch.randn(3, 5), torch.randn(3, 2)
    index = torch.tensor([4, 1])
    same(lambda a, i, s: a.index_add(1, i, s, alpha=2.0), x, index, src)
    same(lambda a, i, s: a.index_copy(1, i, s), x, index, src)
    with pytest.raises(RuntimeError, match="source tensor shape must match"):
        torch.zeros(3, 2, device="zyx").index_add(0, torch.tensor([0, 1], device="zyx"),
                                                   torch.ones(2, device="zyx"))


def test_masked_select_and_scatter():
    torch.manual_seed(3)
    x = torch.randn(3, 4)
    mask = x > 0
    same(torch.masked_select, x, mask)
    same(torch.masked_select, x, torch.tensor([True, False, False, True]))
    src = torch.arange(12.0).reshape(3, 4)
    same(lambda a, m, s: a.masked_scatter(m, s), x, mask, src)


def test_masked_scatter_grad():
    torch.manual_seed(4)
    x, mask = torch.randn(3, 4), torch.randn(3, 4) > 0
    src = torch.randn(12, requires_grad=True)
    grad = torch.randn(3, 4)
    zsrc = src.detach().to("zyx").requires_grad_()
    (expected,) = torch.autograd.grad(x.masked_scatter(mask, src), src, grad)
    (got,) = torch.autograd.grad(x.to("zyx").masked_scatter(mask.to("zyx"), zsrc), zsrc, grad.to("zyx"))
    torch.testing.assert_close(got.cpu(), expected)


def test_put():
    x = torch.zeros(2, 3)
    index = torch.tensor([5, 0, 5])
    src = torch.tensor([1.0, 2.0, 3.0])
    same(lambda a, i, s: a.put(i, s, accumulate=True), x, index, src)


def test_view_scatters():
    torch.manual_seed(5)
    x = torch.randn(4, 4)
    same(lambda a, s: torch.diagonal_scatter(a, s, 1), x, torch.randn(3))
    same(lambda a, s: torch.select_scatter(a, s, 1, 2), x, torch.randn(4))
    same(lambda a, s: torch.slice_scatter(a, s, 0, 1, 4, 2), x, torch.randn(2, 4))
    same(lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 4), 3), x, torch.randn(2, 2))


def test_error_inputs():
    z = torch.zeros(5, device="zyx")
    with pytest.raises(RuntimeError, match="shifts"):
        torch.roll(z, ())
    with pytest.raises(RuntimeError, match="must be 2-D"):
        torch.nn.functional.embedding(torch.tensor([[0, 1]], device="zyx"), torch.zeros(3, device="zyx"))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.zeros(3, 5, dtype=torch.float64, device="zyx").scatter(
            0, torch.zeros(2, 2, dtype=torch.int64, device="zyx"), torch.ones(2, 5, device="zyx"))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.as_strided_scatter(torch.zeros(4, 4, device="zyx"), torch.zeros(20, 20, device="zyx"),
                                 (20, 20), (20, 1), 0)


def test_gather_int32_index():
    x = torch.randn(4, 3)
    index = torch.tensor([[0, 3, 1]], dtype=torch.int32)
    same(lambda a, i: torch.gather(a, 0, i), x, index)


def test_repeat_interleave_tensor():
    same(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3, 1]))
    same(lambda x, r: torch.repeat_interleave(x, r, dim=0), torch.randn(3, 2), torch.tensor([1, 3, 2]))


def test_embedding_max_norm_renorms_in_place():
    torch.manual_seed(6)
    weight = torch.randn(6, 3) * 3
    idx = torch.tensor([[0, 2], [2, 5]])
    zw = weight.to("zyx")
    out = torch.nn.functional.embedding(idx.to("zyx"), zw, max_norm=1.0)
    expected = torch.nn.functional.embedding(idx, weight, max_norm=1.0)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(zw.cpu(), weight)  # renorm writes the used rows back


def test_bilinear_and_empty_batch_grad():
    torch.manual_seed(7)
    for batch in (4, 0):
        a, b = torch.randn(batch, 3, requires_grad=True), torch.randn(batch, 4, requires_grad=True)
        w = torch.randn(5, 3, 4, requires_grad=True)
        grad = torch.randn(batch, 5)
        expected = torch.autograd.grad(torch.nn.functional.bilinear(a, b, w), [a, b, w], grad)
        za, zb, zw = (t.detach().to("zyx").requires_grad_() for t in (a, b, w))
        got = torch.autograd.grad(torch.nn.functional.bilinear(za, zb, zw), [za, zb, zw], grad.to("zyx"))
        for e, z in zip(expected, got):
            torch.testing.assert_close(z.cpu(), e)


def test_empty_output_reduce_launches_nothing():
    # A (0, N) reduce result once launched N iterations into a 0-byte buffer (heap corruption).
    x = torch.randn(0, 5, 3)
    same(lambda t: t.sum(2), x)
    same(lambda a, b: a @ b, torch.ones(0, 5, dtype=torch.int64), torch.ones(5, 10, dtype=torch.int64))


def test_scatter_int32_index_and_reduce_arg():
    x = torch.zeros(3, 5)
    index = torch.tensor([[0, 1, 2], [2, 2, 0]], dtype=torch.int32)
    src = torch.arange(1.0, 7.0).reshape(2, 3)
    same(lambda a, i, s: a.scatter(0, i, s), x, index, src)
    same(lambda a, i, s: a.scatter_add(0, i, s), x, index, src)
    same(lambda a, i, s: (a + 2).scatter(0, i, s, reduce="multiply"), x, index, src)
    same(lambda a, i: a.scatter(0, i, 1.5, reduce="add"), x, index)
