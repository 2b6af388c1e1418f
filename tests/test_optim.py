"""torch.optim's fused steps (``fused=True``) on zyx: the same model, data and optimizer on zyx and
on CPU torch (whose fused kernels ops/optim/fused.py follows) give the same parameters and state, with
half-precision parameters, gradient scaling and skipped steps; the step stays on the device."""

import copy

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.usefixtures("no_fallback")

FUSED = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adam amsgrad maximize": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, maximize=True, fused=True),
    "adam weight decay": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, fused=True),
    "adam tensor lr": lambda p: torch.optim.Adam(p, lr=torch.tensor(1e-2), fused=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, fused=True),
    "adamw amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, betas=(0.3, 0.9), fused=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
    "sgd momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=1e-2,
                                              fused=True),
    "sgd nesterov maximize": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                       maximize=True, fused=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=1e-2, fused=True),
}


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)


def _train(model, make_optimizer, device, steps=4, scaler=None):
    model = copy.deepcopy(model).to(device)
    optimizer = make_optimizer(model.parameters())
    x = torch.linspace(-2, 2, 30).reshape(5, 6).to(device, next(model.parameters()).dtype)
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(x).float().pow(2).mean()
        if scaler is None:
            loss.backward()
            optimizer.step()
            continue
        scaler.scale(loss).backward()
        if step == 1:  # one step with a non-finite gradient: skipped, the scale backs off
            model[0].weight.grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return [p.detach() for p in model.parameters()] + state


def _compare(got, want, **tolerance):
    assert len(got) == len(want)
    for z, c in zip(got, want):
        assert z.device.type == "zyx" and z.dtype == c.dtype and z.shape == c.shape
        torch.testing.assert_close(z.cpu(), c, **tolerance)


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_optimizers_match_cpu(name):
    model = _model()
    _compare(_train(model, FUSED[name], "zyx"), _train(model, FUSED[name], "cpu"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adam", "adamw amsgrad", "adagrad"])
def test_fused_optimizers_half_parameters(name):
    """float16 parameters and state, updated in float32 as CPU's fused kernels do. Not SGD: CPU
    torch's vectorized half kernel (2.13) never stores the updated parameters (only the last
    numel % 32 elements change) and loads the half momentum buffer as float32 values."""
    model = _model(torch.float16)
    _compare(_train(model, FUSED[name], "zyx"), _train(model, FUSED[name], "cpu"), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd momentum", "adagrad"])
def test_fused_optimizers_with_grad_scaler(name):
    """GradScaler hands fused optimizers the scale and the inf flag: gradients are unscaled in
    the step and a step with an inf gradient changes nothing (its step count is taken back)."""
    model = _model()
    got = _train(model, FUSED[name], "zyx", steps=4, scaler=torch.amp.GradScaler("zyx", init_scale=1024.0))
    want = _train(model, FUSED[name], "cpu", steps=4, scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    _compare(got, want, rtol=1e-5, atol=1e-6)


def test_fused_adam_step_stays_on_the_device(counters):
    """The step count is never read back: a training step is one realization at the loss's
    read, and the second step's schedule is the first's."""
    model = _model().to("zyx")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    x = torch.randn(5, 6).to("zyx")
    kernels = []
    for _ in range(3):
        counters_before = counters()
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        loss.item()
        after = counters()
        kernels.append(after["kernels_launched"] - counters_before["kernels_launched"])
        assert after["realizations"] - counters_before["realizations"] == 1
    assert kernels[1] == kernels[2]
    assert counters()["schedule_cache_hits"] >= 1
