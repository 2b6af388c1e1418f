"""Mixed precision on zyx: ``torch.autocast("zyx")`` applies CUDA's per-op dtype policies
(torch_zyx/integration/autocast.py) and ``torch.amp.GradScaler("zyx")`` scales, unscales and updates on the
device (ops/optim/amp.py). References are CPU torch computing the same casts explicitly, and CPU
torch's own GradScaler ops."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close
from torch import nn

pytestmark = pytest.mark.usefixtures("no_fallback")

LOW = [torch.bfloat16, torch.float16]


def _data():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)


@pytest.mark.parametrize("dtype", LOW)
def test_matmuls_run_in_the_region_dtype(dtype):
    x, w, b = _data()
    z = [t.to("zyx") for t in (x, w, b)]
    with torch.autocast("zyx", dtype=dtype):
        results = [F.linear(*z), z[0] @ z[1].t(), torch.mm(z[0], z[1].t()),
                   torch.addmm(z[2], z[0], z[1].t()),
                   F.conv2d(z[0].view(1, 1, 4, 8), z[1][:2, :4].reshape(2, 1, 2, 2))]
    low = [t.to(dtype) for t in (x, w, b)]
    expected = [F.linear(*low), low[0] @ low[1].t(), low[0] @ low[1].t(),
                torch.addmm(low[2], low[0], low[1].t()),
                F.conv2d(low[0].view(1, 1, 4, 8), low[1][:2, :4].reshape(2, 1, 2, 2))]
    for got, want in zip(results, expected):
        assert got.dtype == dtype
        assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", LOW)
def test_float32_ops_and_reductions(dtype):
    x = torch.randn(4, 8).to(dtype)
    zx = x.to("zyx")
    with torch.autocast("zyx", dtype=dtype):
        results = {
            "softmax": torch.softmax(zx, -1), "log_softmax": F.log_softmax(zx, -1), "sum": zx.sum(),
            "cumsum": zx.cumsum(0), "exp": zx.exp(), "mse_loss": F.mse_loss(zx, torch.zeros_like(zx)),
            "layer_norm": F.layer_norm(zx, (8,)), "sum with dtype": zx.sum(dtype=torch.float64),
            "cat promotes": torch.cat([zx, torch.ones(1, 8, device="zyx")]),
            "addcmul promotes": torch.addcmul(torch.ones(4, 8, device="zyx"), zx, zx),
        }
    wide = x.float()
    expected = {
        "softmax": torch.softmax(wide, -1), "log_softmax": F.log_softmax(wide, -1), "sum": wide.sum(),
        "cumsum": wide.cumsum(0), "exp": wide.exp(), "mse_loss": F.mse_loss(wide, torch.zeros_like(wide)),
        "layer_norm": F.layer_norm(wide, (8,)), "sum with dtype": x.sum(dtype=torch.float64),
        "cat promotes": torch.cat([wide, torch.ones(1, 8)]),
        "addcmul promotes": torch.addcmul(torch.ones(4, 8), wide, wide),
    }
    for name, got in results.items():
        assert got.dtype == expected[name].dtype, name
        assert_close(got, expected[name], rtol=1e-5, atol=1e-5)


def test_what_autocast_leaves_alone():
    x64 = torch.randn(3, 3, dtype=torch.float64)
    ints = torch.arange(9).view(3, 3)
    with torch.autocast("zyx", dtype=torch.float16):
        assert (x64.to("zyx") @ x64.to("zyx")).dtype == torch.float64  # float64 is not eligible
        assert (ints.to("zyx") @ ints.to("zyx")).dtype == torch.int64
        assert (x64.float() @ x64.float()).dtype == torch.float32  # CPU tensors: another device's region
        with torch.autocast("zyx", enabled=False):
            assert (x64.float().to("zyx") @ x64.float().to("zyx")).dtype == torch.float32
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(torch.rand(3, device="zyx"), torch.rand(3, device="zyx"))


def test_autocast_training_step_keeps_float32_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(8, 8), torch.randn(8, 4)
    grads = {}
    for device in ("cpu", "zyx"):
        net = copy.deepcopy(model).to(device)
        # CPU reference: the same casts by hand (CPU torch's own autocast has other policies).
        if device == "cpu":
            h = F.relu(F.linear(x.bfloat16(), net[0].weight.bfloat16(), net[0].bias.bfloat16()))
            out = F.linear(h, net[2].weight.bfloat16(), net[2].bias.bfloat16())
            loss = F.mse_loss(out.float(), y)
        else:
            with torch.autocast("zyx", dtype=torch.bfloat16):
                out = net(x.to(device))
                loss = F.mse_loss(out, y.to(device))
            assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
        loss.backward()
        grads[device] = [p.grad for p in net.parameters()]
    for got, want in zip(grads["zyx"], grads["cpu"]):
        assert got.dtype == torch.float32
        assert_close(got, want, rtol=1e-2, atol=1e-2)


GRADS = {
    "finite": [torch.randn(3, 4), torch.randn(5)],
    "inf": [torch.randn(3, 4), torch.tensor([1.0, float("inf")])],
    "nan": [torch.tensor([float("nan"), 2.0]), torch.randn(4)],
    "half": [torch.randn(3, 4).half(), torch.tensor([65504.0, 1.0]).half()],
}


@pytest.mark.parametrize("case", GRADS)
def test_unscale_matches_cpu(case):
    cpu = [t.clone() for t in GRADS[case]]
    zyx = [t.to("zyx") for t in GRADS[case]]
    found_cpu, found_zyx = torch.zeros(1), torch.zeros(1, device="zyx")
    inv = torch.tensor([0.125])
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(zyx, found_zyx, inv.to("zyx"))
    assert_close(zyx, cpu, equal_nan=True)
    assert_close(found_zyx, found_cpu)


@pytest.mark.parametrize("found, tracker, scale", [(0.0, 0, 1024.0), (1.0, 5, 1024.0), (0.0, 1, 1024.0),
                                                   (0.0, 1, 3e38)])
def test_update_scale_matches_cpu(found, tracker, scale):
    results = []
    for device in ("cpu", "zyx"):
        s = torch.tensor([scale], device=device)
        t = torch.tensor([tracker], dtype=torch.int32, device=device)
        torch._amp_update_scale_(s, t, torch.tensor([found], device=device), 2.0, 0.5, 2)
        results.append((s, t))
    assert_close(list(results[1]), list(results[0]))


def test_grad_scaler_skips_a_non_finite_step_like_cpu():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x = torch.randn(6, 4)
    states = {}
    for device in ("cpu", "zyx"):
        net = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
        scales = []
        for step in range(5):
            opt.zero_grad()
            loss = net(x.to(device)).pow(2).mean() * (float("inf") if step == 2 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        states[device] = (scales, [p.detach() for p in net.parameters()])
    assert states["zyx"][0] == states["cpu"][0]
    assert_close(states["zyx"][1], states["cpu"][1])
