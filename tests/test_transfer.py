"""Values crossing to and from the host: ``.cpu()`` of a value computed for it alone written by its
kernel into the CPU tensor, large copies on torch's threads, and a wrong guess about who holds a
tensor costing time, never values (torch_zyx/record/transfer.py)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import ZYX0_BACKEND

import torch_zyx
from torch_zyx.record import transfer

N = 1 << 20  # 4 MiB of float32: above both the direct read-back and the parallel copy sizes

CASES = {
    "chain": lambda x, y: F.gelu(x * 1.5 + y) * torch.sigmoid(y) - x,
    "softmax": lambda x, y: torch.softmax(x.view(256, -1), -1),
    "layer_norm": lambda x, y: F.layer_norm(x.view(256, -1), (N // 256,)),
    "tanh gelu": lambda x, y: F.gelu(x, approximate="tanh") + torch.erf(y),
}


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(N, generator=gen), torch.randn(N, generator=gen)


@pytest.mark.skipif(ZYX0_BACKEND != "cpu", reason="read-backs write CPU tensors directly only from host-memory "
                    "pools (the CPU backend); OpenCL and CUDA copy")
def test_temporaries_are_recognized_on_this_python():
    # Measured at the first read-back that could be direct; None would mean every one copies.
    (torch.ones(N, device="zyx") * 2).cpu()
    assert transfer._temporary and transfer._temporary[0] is not None


@pytest.mark.parametrize("case", CASES)
def test_read_back_of_a_temporary_matches_cpu_torch(case, counters):
    fn = CASES[case]
    x, y = _inputs()
    xz, yz = x.to("zyx"), y.to("zyx")
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    got = fn(xz, yz).cpu()
    torch.testing.assert_close(got, fn(x, y), rtol=1e-5, atol=1e-5)
    assert got.device.type == "cpu" and got.is_contiguous()
    if ZYX0_BACKEND == "cpu":
        # The kernel wrote the CPU tensor: no pool buffer was taken for the result.
        assert counters()["bytes_allocated"] < got.nbytes


def test_named_tensor_is_realized_once_and_stays_usable(counters):
    x, _ = _inputs()
    xz = x.to("zyx")
    s = torch.softmax(xz.view(512, -1) * 2, -1)
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    first = s.cpu()
    launched = counters()["kernels_launched"]
    second = s.cpu()
    assert counters()["kernels_launched"] == launched  # read from its buffer, not computed again
    expected = torch.softmax(x.view(512, -1) * 2, -1)
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(second, expected)
    first.add_(1)  # the copies are the caller's own
    torch.testing.assert_close((s + 0).cpu(), expected)


def test_wrong_guess_costs_time_never_values(monkeypatch):
    # Every read-back taken for a temporary's, named tensors too: the CPU tensor must still be
    # private to the caller and the zyx tensor keep its values (computed again when needed).
    monkeypatch.setattr(transfer, "_temporary", [(1 << 30,) * 3])
    x, y = _inputs()
    xz, yz = x.to("zyx"), y.to("zyx")
    kept = xz * 3 + yz
    view = kept.view(1024, -1)[::2]
    out = kept.cpu()
    expected = x * 3 + y
    torch.testing.assert_close(out, expected)
    out.zero_()
    torch.testing.assert_close(kept.cpu(), expected)
    torch.testing.assert_close(view.cpu(), expected.view(1024, -1)[::2])
    kept.add_(1)
    torch.testing.assert_close(kept.cpu(), expected + 1)
    assert out.abs().sum() == 0


def test_index_error_raised_through_a_direct_read_back():
    x = torch.randn(N)
    index = torch.randint(0, N, (N // 2,))
    index[12345] = N + 7
    with pytest.raises(IndexError):
        (x.to("zyx")[index.to("zyx")] * 2).cpu()
    torch_zyx.synchronize()  # nothing left pending from the failed read
    torch.testing.assert_close((x.to("zyx")[:10] * 2).cpu(), x[:10] * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.uint8])
def test_large_copies_both_ways(dtype):
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(3 * N + 5, generator=gen)
    cpu = values > 0 if dtype == torch.bool else (values * 50).to(dtype)
    z = cpu.to("zyx")
    torch.testing.assert_close(z.cpu(), cpu)  # realized buffer: parallel copy out
    strided = cpu[1:].view(-1)[::2]  # not contiguous: uploaded through a contiguous copy
    torch.testing.assert_close(strided.to("zyx").cpu(), strided)
    torch.testing.assert_close(z[7:N].cpu(), cpu[7:N])  # a view of the storage
    if dtype.is_floating_point:
        torch.testing.assert_close((z * 2).to("cpu", torch.float64), (cpu * 2).double())
