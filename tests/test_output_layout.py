"""Strides of pointwise results against CPU torch: TensorIterator's layout (ops/layout.py).

A pointwise op on zyx lays its result out as CPU torch does: contiguous for contiguous inputs,
channels-last for channels-last ones, one dense layout kept, otherwise the input dimensions in
the order of their strides; values as CPU torch's, and a view of the result works exactly where
CPU torch's does.
"""

import pytest
import torch
import torch.nn.functional as F

CASES = {
    "channels-last relu": lambda t: t.relu(),
    "channels-last add scalar": lambda t: t + 1.5,
    "channels-last times itself": lambda t: t * t,
    "channels-last sigmoid": lambda t: torch.sigmoid(t),
    "channels-last where": lambda t: torch.where(t > 0, t, 0.0),
    "channels-last gelu": lambda t: F.gelu(t),
    "channels-last and contiguous": lambda t: t + t.contiguous(),
    "channels-last + broadcast bias": lambda t: t + torch.arange(3.0, device=t.device).view(1, 3, 1, 1),
    "channels-last + 0-d": lambda t: t * torch.tensor(2.0, device=t.device),
    "permuted abs": lambda t: t.permute(0, 2, 3, 1).abs(),
    "transposed sub": lambda t: t.transpose(1, 2) - 1,
    "transposed + its slice": lambda t: t.transpose(1, 2) + t.transpose(1, 2)[:1],
    "strided slice": lambda t: t[:, :, ::2] * 2,
    "comparison": lambda t: t.transpose(0, 3) > 0,
    "cast": lambda t: t.transpose(0, 3).to(torch.float64),
    "clone": lambda t: t.transpose(0, 3).clone(),
    "contiguous clone": lambda t: t.transpose(0, 3).clone(memory_format=torch.contiguous_format),
}


@pytest.mark.parametrize("name", CASES)
def test_pointwise_results_follow_their_inputs(name):
    fn = CASES[name]
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    expected = fn(x)
    got = fn(x.to("zyx"))
    assert got.stride() == expected.stride(), (got.stride(), expected.stride())
    torch.testing.assert_close(got.cpu(), expected)


def test_a_view_of_the_result_works_where_it_works_on_the_cpu():
    y = torch.randn(3, 4)
    for dev in ("cpu", "zyx"):
        t = y.to(dev).t() * 2
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            t.view(12)
        assert t.reshape(12).shape == (12,)
    torch.testing.assert_close((y.to("zyx").t() * 2).reshape(12).cpu(), (y.t() * 2).reshape(12))


def test_in_place_and_out_keep_the_destination():
    x = torch.randn(4, 3).t()
    for dev in ("cpu", "zyx"):
        dst = torch.empty(3, 4, device=dev)
        torch.mul(x.to(dev), 2, out=dst)
        assert dst.stride() == (4, 1)
        t = x.to(dev).clone()
        t.mul_(3)
        assert t.stride() == (1, 3)
    z = x.to("zyx").clone()
    z.add_(1)
    torch.testing.assert_close(z.cpu(), x + 1)


def test_autograd_through_channels_last():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).requires_grad_()
    z = x.detach().to("zyx").requires_grad_()
    (x.sigmoid() * x).sum().backward()
    (z.sigmoid() * z).sum().backward()
    torch.testing.assert_close(z.grad.cpu(), x.grad)


# Views with dimensions of size 1: their strides decide nothing in the result's own layout, but
# a later op's order of dimensions reads them (ATen's insertion sort over stride comparisons).
SIZE_ONE_CASES = {
    "comparison with a number": lambda t, o: t > 0,  # (the number is an operand: no fast setup)
    "number times": lambda t, o: 2.5 * t,
    "number minus": lambda t, o: 1 - t,
    "where with a number": lambda t, o: torch.where(t > 0, t, 0.0),
    "where of a comparison": lambda t, o: torch.where(t > 0, o, o),
    "sum with a broadcast": lambda t, o: (t > 0) + o,
    "lerp": lambda t, o: torch.lerp(t, o, 0.25),
    "clamp": lambda t, o: t.clamp(min=0),
    "number to a power": lambda t, o: torch.pow(2, t),  # (ATen computes it out=: contiguous)
    "power of a number": lambda t, o: t ** 2,
    "clone": lambda t, o: t.clone(),  # (a dense tensor's copy keeps its strides exactly)
    "copy to another dtype": lambda t, o: t.to(torch.float64),
    "complex copy": lambda t, o: t.to(torch.complex64).clone(),
}


@pytest.mark.parametrize("name", SIZE_ONE_CASES)
@pytest.mark.parametrize("pending_limit", [False, True])
def test_every_stride_follows_cpu_torch_with_size_one_dimensions(name, pending_limit, monkeypatch):
    """Every stride, those of size-1 dimensions too, as CPU torch gives them: a permuted view of
    (1, 1, 2, 1) compared with a number keeps the view's strides (2, 1, 1, 2), and a where over
    it broadcast with the original lays out (4, 1, 2, 4), as on the CPU. ``pending_limit``: each
    result realized as soon as it is recorded (the pending-graph limit), which must not change
    its layout."""
    if pending_limit:
        from torch_zyx.config import CONFIG

        monkeypatch.setattr(CONFIG, "max_pending", 0)
    fn = SIZE_ONE_CASES[name]
    base = torch.randn(1, 1, 2, 1)
    other = torch.randn(3, 1, 2, 1)
    for view in (lambda t: t.permute(0, 2, 3, 1), lambda t: t.permute(2, 0, 3, 1)[:, None],
                 lambda t: t.expand(3, 1, 2, 1).permute(3, 1, 2, 0).abs()):
        expected = fn(view(base), other)
        got = fn(view(base.to("zyx")), other.to("zyx"))
        assert got.stride() == expected.stride(), (got.stride(), expected.stride())
        torch.testing.assert_close(got.cpu(), expected)
