"""Autograd and training on zyx: the same model, data and optimizer on zyx and on CPU torch give
the same losses and parameters; a training loop reaches a steady state (schedule-cache hits,
constant kernel count, flat memory). Models are kept tiny so `make test` stays fast.
"""

import copy
import io

import pytest
import torch
from conftest import assert_close
from torch import nn

OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam_single": lambda p: torch.optim.Adam(p, lr=0.01, foreach=False),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    "adamw_single": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False),
}


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(model, opt_fn, data, device, steps, clip=None, set_to_none=True):
    model = copy.deepcopy(model).to(device)
    opt = opt_fn(model.parameters())
    x, y = (t.to(device) for t in data)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses), model, opt


def _compare(model, opt_fn, data, steps=20, **kwargs):
    lz, mz, oz = _train(model, opt_fn, data, "zyx", steps, **kwargs)
    lc, mc, _ = _train(model, opt_fn, data, "cpu", steps, **kwargs)
    torch.testing.assert_close(lz, lc, rtol=1e-4, atol=1e-6)
    for pz, pc in zip(mz.parameters(), mc.parameters()):
        assert pz.device.type == "zyx"
        assert_close(pz.detach(), pc.detach(), rtol=1e-4, atol=1e-4)
    return mz, oz


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_mlp_optimizers_match_cpu(name):
    torch.manual_seed(0)
    data = (torch.randn(4, 8), torch.randn(4, 4))
    _compare(_mlp(), OPTIMIZERS[name], data, clip=1.0 if "sgd" in name else None,
             set_to_none="single" not in name)


def test_autograd_basics():
    for dev in ("cpu", "zyx"):
        torch.manual_seed(0)
        x = torch.randn(3, 4).to(dev).requires_grad_()
        w = torch.randn(4, 2).to(dev).requires_grad_()
        seen = []

        def hook(grad, seen=seen):
            seen.append(grad.cpu())
            return grad * 2

        w.register_hook(hook)
        y = (x @ w).tanh()
        (gx,) = torch.autograd.grad(y.sum(), x, retain_graph=True)
        y.pow(2).sum().backward(retain_graph=True)
        y.sum().backward()  # accumulates into .grad
        with torch.no_grad():
            z = x * 2
        with torch.inference_mode():
            zi = x * 3
        result = (gx.cpu(), x.grad.cpu(), w.grad.cpu(), torch.stack(seen), z.requires_grad, zi.requires_grad)
        if dev == "cpu":
            expected = result
    for got, want in zip(result, expected):
        if isinstance(got, torch.Tensor):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert got == want
    assert x.grad.device.type == "zyx" and w.grad.device.type == "zyx"


def test_forward_mode_ad_matches_cpu():
    """Dual numbers, torch.func.jvp and hessian (forward over reverse) on zyx tensors: forward AD
    makes zero tangents with _efficientzerotensor, a factory zyx had no kernel for."""
    import torch.autograd.forward_ad as fwAD

    def run(device):
        torch.manual_seed(0)
        x, t = torch.randn(4, 3).to(device), torch.randn(4, 3).to(device)
        w = torch.randn(3, 5).to(device)
        with fwAD.dual_level():
            dual = fwAD.make_dual(x, t)
            out = torch.nn.functional.layer_norm((dual.sin() * dual) @ w, (5,)).softmax(-1).sum(0)
            primal, tangent = fwAD.unpack_dual(out)
        value, jvp = torch.func.jvp(lambda z: (z.tanh() @ z.T).sum(1), (x,), (t,))
        hessian = torch.func.hessian(lambda z: (z ** 3).sum() + (z @ w).exp().sum())(x[0])
        return primal, tangent, value, jvp, hessian

    for expected, got in zip(run("cpu"), run("zyx")):
        assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_state_dict_roundtrip_across_devices():
    torch.manual_seed(0)
    data = (torch.randn(4, 8), torch.randn(4, 4))
    _, mz, oz = _train(_mlp(), OPTIMIZERS["adam_foreach"], data, "zyx", 3)
    buf = io.BytesIO()
    torch.save({"model": mz.state_dict(), "opt": oz.state_dict()}, buf)
    buf.seek(0)
    on_zyx = torch.load(buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    for key, value in mz.state_dict().items():
        assert on_zyx["model"][key].device.type == "zyx" and on_cpu["model"][key].device.type == "cpu"
        assert_close(on_zyx["model"][key], on_cpu["model"][key])
        assert_close(value, on_cpu["model"][key])
    # CPU model + optimizer continue from the zyx state exactly like the zyx ones.
    mc = _mlp()
    mc.load_state_dict(on_cpu["model"])
    oc = torch.optim.Adam(mc.parameters(), lr=0.01, foreach=True)
    oc.load_state_dict(on_cpu["opt"])
    mz2 = _mlp().to("zyx")
    mz2.load_state_dict(on_cpu["model"])  # CPU tensors into zyx parameters
    oz2 = torch.optim.Adam(mz2.parameters(), lr=0.01, foreach=True)
    oz2.load_state_dict(on_zyx["opt"])
    x, y = data
    for model, opt, dev in ((mc, oc, "cpu"), (mz2, oz2, "zyx")):
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        opt.step()
    for pz, pc in zip(mz2.parameters(), mc.parameters()):
        assert_close(pz.detach(), pc.detach(), rtol=1e-5, atol=1e-6)


def test_steady_state_training_loop(counters):
    """From the third step on: schedule-cache hits only, same kernels per step, flat memory."""
    torch.manual_seed(0)
    model = _mlp().to("zyx")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8).to("zyx"), torch.randn(4, 4).to("zyx")
    per_step, memory = [], []
    for _ in range(200):
        before = counters()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        after = counters()
        per_step.append({k: after[k] - before[k] for k in after})
        memory.append(torch.zyx.memory_allocated())
    steady = per_step[2:]
    assert all(s["kernelizer_runs"] == 0 and s["schedule_cache_misses"] == 0 for s in steady)
    assert all(s["realizations"] == 1 for s in steady)  # the whole step realizes at loss.item()
    assert len({s["kernels_launched"] for s in steady}) == 1
    # Fused: forward + backward are 8 kernels; gradient clipping and Adam over the 4 parameters
    # add 9 (one per elementwise op would be ~40).
    assert steady[0]["kernels_launched"] <= 20
    assert all(s["cpu_fallbacks"] == 0 for s in per_step)
    assert max(memory[100:]) <= max(memory[2:100])



# The foreach forms an optimizer step uses, on lists of tensors of several shapes: those the
# fast path builds nodes for (ops/optim/foreach.py), and forms it hands to the general path (a view that
# is not its whole storage, float16, a bool scalar, a tensor of scalars).
FOREACH_CASES = {
    "add_.Scalar": lambda t, u, v: torch._foreach_add_(t, 0.3),
    "add_.List alpha": lambda t, u, v: torch._foreach_add_(t, u, alpha=-0.7),
    "sub_.ScalarList": lambda t, u, v: torch._foreach_sub_(t, [0.1, 2, -3.5]),
    "mul_.Scalar": lambda t, u, v: torch._foreach_mul_(t, 0.9),
    "mul_.List": lambda t, u, v: torch._foreach_mul_(t, u),
    "div_.ScalarList": lambda t, u, v: torch._foreach_div_(t, [0.9, 0.81, 3]),
    "div_.List": lambda t, u, v: torch._foreach_div_(t, v),
    "lerp_.Scalar small weight": lambda t, u, v: torch._foreach_lerp_(t, u, 0.1),
    "lerp_.Scalar large weight": lambda t, u, v: torch._foreach_lerp_(t, u, 0.7),
    "addcmul_.Scalar": lambda t, u, v: torch._foreach_addcmul_(t, u, v, 0.001),
    "addcdiv_.ScalarList": lambda t, u, v: torch._foreach_addcdiv_(t, u, v, [-0.1, 0.2, 1]),
    "sqrt_": lambda t, u, v: torch._foreach_sqrt_(v),
    "sqrt": lambda t, u, v: torch._foreach_sqrt(v),
    "mul_.Tensor": lambda t, u, v: torch._foreach_mul_(t, u[0].new_tensor(0.25)),
    "add_.Tensor alpha": lambda t, u, v: torch._foreach_add_(t, u[0].new_tensor(1.5), alpha=2),
    "mul_.Scalar bool": lambda t, u, v: torch._foreach_mul_(t, True),
    "addcdiv_.Tensor": lambda t, u, v: torch._foreach_addcdiv_(t, u, v, torch.tensor([0.5, -1.0, 2.0])),
}


# Cases the general path takes whatever the layout.
FOREACH_GENERAL = {"mul_.Scalar bool", "addcdiv_.Tensor"}


@pytest.mark.parametrize("layout", ["whole", "views", "float16"])
@pytest.mark.parametrize("name", list(FOREACH_CASES))
def test_foreach_ops_match_cpu(name, layout, monkeypatch):
    from torch_zyx.ops.optim import foreach

    per_element = []  # the general path's per-tensor calls
    element = foreach._element
    monkeypatch.setattr(foreach, "_element", lambda *args: per_element.append(1) or element(*args))
    torch.manual_seed(0)
    shapes = [(3, 4), (5,), (2, 3, 2)]
    dtype = torch.float16 if layout == "float16" else torch.float32
    lists = [[torch.randn(s, dtype=dtype) for s in shapes] for _ in range(2)]
    lists.append([torch.rand(s, dtype=dtype) + 0.5 for s in shapes])
    if layout == "views":  # each tensor the first half of a larger storage
        lists = [[torch.cat([t, t]).narrow(0, 0, t.shape[0]) for t in ts] for ts in lists]
    zyx_lists = [[t.to("zyx") for t in ts] for ts in lists]
    if layout == "views":
        zyx_lists = [[torch.cat([t, t]).narrow(0, 0, t.shape[0]) for t in ts] for ts in zyx_lists]
    out_cpu = FOREACH_CASES[name](*lists)
    out_zyx = FOREACH_CASES[name](*zyx_lists)
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == torch.float16 else {"rtol": 1e-6, "atol": 1e-6}
    for ts_zyx, ts_cpu in zip(zyx_lists, lists):
        for tz, tc in zip(ts_zyx, ts_cpu):
            assert_close(tz, tc, **tol)
    fast = layout == "whole" and name not in FOREACH_GENERAL
    assert (not per_element) == fast
    if out_cpu is not None:
        assert len(out_zyx) == len(out_cpu)
        for tz, tc in zip(out_zyx, out_cpu):
            assert tz.device.type == "zyx" and tz.dtype == tc.dtype
            assert_close(tz, tc, **tol)


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw_foreach", "adamw_single"])
def test_lr_scheduler_reuses_kernels(name, counters):
    """A learning rate that changes every step is a scalar parameter, not part of the schedule
    key: from the third step on, nothing is kernelized or compiled; losses still match CPU."""
    torch.manual_seed(0)
    model = _mlp()
    data = torch.randn(4, 8), torch.randn(4, 4)
    losses, misses = {}, []
    for device in ("zyx", "cpu"):
        m = copy.deepcopy(model).to(device)
        opt = OPTIMIZERS[name](m.parameters())
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        x, y = (t.to(device) for t in data)
        losses[device] = []
        for _ in range(8):
            before = counters()
            opt.zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            sched.step()
            losses[device].append(loss.item())
            if device == "zyx":
                torch.zyx.synchronize()
                after = counters()
                misses.append((after["schedule_cache_misses"] - before["schedule_cache_misses"],
                               after["kernels_compiled"] - before["kernels_compiled"]))
    assert misses[2:] == [(0, 0)] * 6
    torch.testing.assert_close(torch.tensor(losses["zyx"]), torch.tensor(losses["cpu"]), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ conv, pooling, batch norm

F = nn.functional
CONV_CASES = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b), (3, 4, 3, 3)),
    "conv2d_stride_pad": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (3, 4, 3, 3)),
    "conv2d_dilation": (lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=2),
                        (3, 4, 3, 2)),
    "conv2d_groups": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), (6, 2, 3, 3)),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                         (4, 3, 3, 3)),
}
POOL_CASES = {
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "max_pool2d_overlap_pad": lambda x: F.max_pool2d(x, 3, 1, 1),
    "max_pool2d_ceil_dilation": lambda x: F.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
    "avg_pool2d_ceil_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg_pool2d_no_count_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
}


def _check_grad(fn, *inputs):
    """Forward and backward (random output gradient) of ``fn`` on zyx against CPU torch."""
    cpu = [t.clone().requires_grad_() for t in inputs]
    zyx = [t.to("zyx").requires_grad_() for t in inputs]
    out_c, out_z = fn(*cpu), fn(*zyx)
    assert_close(out_z, out_c.detach(), rtol=1e-4, atol=1e-5)
    grad = torch.randn_like(out_c)
    grads_c = torch.autograd.grad(out_c, cpu, grad)
    grads_z = torch.autograd.grad(out_z, zyx, grad.to("zyx"))
    assert_close(list(grads_z), list(grads_c), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_convolution_matches_cpu(name, monkeypatch):
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    fn, wshape = CONV_CASES[name]
    torch.manual_seed(0)
    bias_size = wshape[1] if "transpose" in name else wshape[0]
    _check_grad(fn, torch.randn(2, 4, 7, 6), torch.randn(wshape), torch.randn(bias_size))


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pooling_matches_cpu(name, monkeypatch):
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    torch.manual_seed(0)
    _check_grad(POOL_CASES[name], torch.randn(2, 3, 7, 6))


def test_max_pool2d_indices_match_cpu():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 6)
    x[0, 0, :2, :2] = 1.0  # ties: the first maximum of the window wins, as on CPU
    for args in ((2,), (3, 2, 1), (3, 1, 1, 2, True)):
        out_z, idx_z = F.max_pool2d(x.to("zyx"), *args, return_indices=True)
        out_c, idx_c = F.max_pool2d(x, *args, return_indices=True)
        assert_close(out_z, out_c)
        assert_close(idx_z, idx_c)


def test_conv_bias_relu_is_one_kernel(counters):
    x, w, b = (torch.randn(s).to("zyx") for s in ((2, 4, 8, 8), (3, 4, 3, 3), (3,)))
    torch.zyx.synchronize()
    counters()
    F.relu(F.conv2d(x, w, b, padding=1)).cpu()
    assert counters()["kernels_launched"] == 1 and counters()["cpu_fallbacks"] == 0


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_cpu(training, monkeypatch):
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    torch.manual_seed(0)
    stats = (torch.randn(4), torch.rand(4) + 0.5)
    running = {dev: [s.clone().to(dev) for s in stats] for dev in ("cpu", "zyx")}

    def fn(x, w, b):
        rm, rv = running[x.device.type]
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3)

    _check_grad(fn, torch.randn(3, 4, 5, 5), torch.randn(4), torch.randn(4))
    # Running statistics are updated in place (training) or left alone (eval), as on CPU.
    assert_close(running["zyx"], running["cpu"], rtol=1e-5, atol=1e-6)


class _SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def test_small_cnn_trains_like_cpu(monkeypatch):
    """conv-bn-relu-maxpool-linear, 20 SGD steps on zyx and CPU from the same init; then eval."""
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    torch.manual_seed(0)
    model = _SmallCNN()
    data = (torch.randn(4, 1, 8, 8), torch.randint(0, 3, (4,)))
    results = {}
    for dev in ("zyx", "cpu"):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        x, y = (t.to(dev) for t in data)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        m.eval()
        results[dev] = (torch.tensor(losses), m, m(x).detach())
    (lz, mz, ez), (lc, mc, ec) = results["zyx"], results["cpu"]
    torch.testing.assert_close(lz, lc, rtol=1e-4, atol=1e-6)
    for (name, pz), pc in zip(mz.state_dict().items(), mc.state_dict().values()):
        assert pz.device.type == "zyx", name
        assert_close(pz, pc, rtol=1e-4, atol=1e-4)  # includes running_mean/var, num_batches_tracked
    assert_close(ez, ec, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ transformer


@pytest.mark.parametrize("use_mask", [False, True])
def test_transformer_encoder_layer_adam_matches_cpu(use_mask, monkeypatch):
    """nn.TransformerEncoderLayer (batch_first, dropout=0), 20 Adam steps on zyx and CPU.

    The key projection's bias has a mathematically zero gradient (softmax ignores a shift that
    is the same for every key), so both devices compute rounding noise (~1e-9) for it, which
    Adam normalizes into steps of about lr: those 16 entries are checked to get a ~0 gradient
    instead of compared. Every other parameter matches within 1e-4 (measured: ~3e-7).
    """
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    torch.manual_seed(0)
    d = 16
    layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
    x, y = torch.randn(2, 6, d), torch.randn(2, 6, d)
    mask = nn.Transformer.generate_square_subsequent_mask(6) if use_mask else None
    results = {}
    for dev in ("zyx", "cpu"):
        m = copy.deepcopy(layer).to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        xd, yd = x.to(dev), y.to(dev)
        md = None if mask is None else mask.to(dev)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = F.mse_loss(m(xd, src_mask=md), yd)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        key_bias_grad = m.self_attn.in_proj_bias.grad[d:2 * d].abs().max().item()
        results[dev] = (torch.tensor(losses), m, key_bias_grad)
    (lz, mz, gz), (lc, mc, gc) = results["zyx"], results["cpu"]
    torch.testing.assert_close(lz, lc, rtol=1e-4, atol=1e-6)
    assert gz < 1e-6 and gc < 1e-6
    for (name, pz), pc in zip(mz.named_parameters(), mc.parameters()):
        pz, pc = pz.detach(), pc.detach()
        if name == "self_attn.in_proj_bias":
            pz, pc = torch.cat([pz[:d], pz[2 * d:]]), torch.cat([pc[:d], pc[2 * d:]])
        assert_close(pz, pc, rtol=1e-4, atol=1e-4)


# The training path's direct lowerings (each replaces a PyTorch decomposition of many dispatched
# ops): layer norm's backward, select/slice backward, the 2-norm clip_grad_norm_ takes of every
# gradient, and the safe softmax of masked attention. Each is checked against CPU torch and for
# not going through the decomposition (dispatch's unlowered path).


def _unlowered_calls(monkeypatch) -> list:
    from torch_zyx import dispatch

    calls = []
    unlowered = dispatch._dispatch_unlowered
    monkeypatch.setattr(dispatch, "_dispatch_unlowered",
                        lambda func, args, kwargs: calls.append(str(func)) or unlowered(func, args, kwargs))
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("shape, normalized, affine", [
    ((4, 6, 8), [8], (True, True)), ((4, 6, 8), [6, 8], (True, False)), ((4, 6, 8), [8], (False, False)),
    ((8,), [8], (True, True)), ((3, 5), [5], (False, True))])
def test_layer_norm_backward_matches_cpu(shape, normalized, affine, dtype, monkeypatch):
    aten = torch.ops.aten
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype) * 2 + 1
    w = torch.randn(normalized, dtype=dtype) if affine[0] else None
    b = torch.randn(normalized, dtype=dtype) if affine[1] else None
    grad = torch.randn(shape, dtype=dtype)
    _, mean, rstd = aten.native_layer_norm(x, normalized, w, b, 1e-5)
    calls = _unlowered_calls(monkeypatch)
    for mask in ([True, affine[0], affine[1]], [True, False, False], [False, affine[0], affine[1]]):
        expected = aten.native_layer_norm_backward(grad, x, normalized, mean, rstd, w, b, mask)
        on_zyx = [None if t is None else t.to("zyx") for t in (grad, x, mean, rstd, w, b)]
        got = aten.native_layer_norm_backward(*on_zyx[:2], normalized, *on_zyx[2:], mask)
        for g, e in zip(got, expected):
            assert (g is None) == (e is None)
            if e is not None:
                assert g.device.type == "zyx" and g.dtype == e.dtype and g.shape == e.shape
                tol = 1e-2 if dtype == torch.float16 else 1e-5
                assert_close(g, e, rtol=tol, atol=tol)
    assert "aten.native_layer_norm_backward.default" not in calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_select_and_slice_backward_match_cpu(dtype, monkeypatch):
    aten = torch.ops.aten
    x = (torch.randn(4, 5, 6) * 5).to(dtype)
    calls = _unlowered_calls(monkeypatch)
    for dim in (0, 1, -1):
        rest = [s for d, s in enumerate(x.shape) if d != dim % 3]
        for index in (0, 2, -1):
            grad = (torch.randn(rest) * 5).to(dtype)
            expected = aten.select_backward(grad, list(x.shape), dim, index)
            got = aten.select_backward(grad.to("zyx"), list(x.shape), dim, index)
            assert torch.equal(got.cpu(), expected)
        size = x.shape[dim]
        for start, end, step in ((0, 3, 1), (1, 4, 1), (-3, 2 ** 63 - 1, 1), (2, 2, 1), (0, 100, 2)):
            length = len(range(*slice(start, end, step).indices(size)))
            shape = list(x.shape)
            shape[dim] = length
            grad = (torch.randn(shape) * 5).to(dtype)
            expected = aten.slice_backward(grad, list(x.shape), dim, start, end, step)
            got = aten.slice_backward(grad.to("zyx"), list(x.shape), dim, start, end, step)
            assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)
    assert "aten.select_backward.default" not in calls
    assert calls.count("aten.slice_backward.default") == 3  # the step-2 slices only
    # Through autograd: a column and a row block of a leaf.
    a = torch.randn(3, 4, requires_grad=True)
    az = a.detach().to("zyx").requires_grad_()
    for index in (lambda t: t[:, 1] * 2, lambda t: t[1:3] ** 2):
        a.grad = az.grad = None
        index(a).sum().backward()
        index(az).sum().backward()
        assert_close(az.grad, a.grad)


def test_vector_norm_and_safe_softmax_match_cpu(monkeypatch):
    calls = _unlowered_calls(monkeypatch)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = torch.randn(5, 6, 7, dtype=dtype)
        tol = {"rtol": 1e-2, "atol": 1e-2} if dtype.itemsize == 2 else {"rtol": 1e-5, "atol": 1e-5}
        for kwargs in ({}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"ord": 2.0, "dim": -1}):
            got = torch.linalg.vector_norm(x.to("zyx"), **kwargs)
            expected = torch.linalg.vector_norm(x, **kwargs)
            assert got.dtype == expected.dtype
            assert_close(got, expected, **tol)
    assert not calls  # every one of those lowered directly
    # Other orders and size-1 reductions (|x| exactly, where squares underflow): the decomposition.
    tiny = torch.tensor([[1e-30], [3e-25]])
    assert_close(torch.linalg.vector_norm(tiny.to("zyx"), dim=1), torch.linalg.vector_norm(tiny, dim=1))
    x = torch.randn(5, 6)
    for order in (1, float("inf"), 0):
        assert_close(torch.linalg.vector_norm(x.to("zyx"), order), torch.linalg.vector_norm(x, order))
    calls.clear()
    for dtype in (torch.float32, torch.float16):
        s = torch.randn(2, 3, 5, dtype=dtype)
        s[0, 1] = float("-inf")
        s[1, 2, :3] = float("-inf")
        for dim in (-1, 1):
            for out_dtype in (None, torch.float32):
                got = torch.ops.aten._safe_softmax(s.to("zyx"), dim, out_dtype)
                expected = torch.ops.aten._safe_softmax(s, dim, out_dtype)
                assert got.dtype == expected.dtype
                assert_close(got, expected, rtol=1e-3, atol=1e-3)
    assert not calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_embedding_backward_matches_cpu(dtype, monkeypatch):
    aten = torch.ops.aten
    torch.manual_seed(0)
    calls = _unlowered_calls(monkeypatch)
    for index_shape, rows, padding in (((4, 16), 100, -1), ((4, 16), 100, 3), ((2, 3, 4), 10, 9)):
        indices = torch.randint(0, rows, index_shape)
        if padding >= 0:
            indices.view(-1)[::3] = padding
        grad = torch.randn(*index_shape, 8, dtype=dtype)
        for index_dtype in (torch.int64, torch.int32):
            expected = aten.embedding_dense_backward(grad, indices.to(index_dtype), rows, padding, False)
            got = aten.embedding_dense_backward(grad.to("zyx"), indices.to(index_dtype).to("zyx"), rows,
                                                padding, False)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            tol = 2e-2 if dtype == torch.float16 else 1e-5
            assert_close(got, expected, rtol=tol, atol=tol)
    assert "aten.embedding_dense_backward.default" not in calls
    # Through autograd, with a padding row.
    emb = nn.Embedding(50, 8, padding_idx=2)
    emb_zyx = copy.deepcopy(emb).to("zyx")
    indices = torch.randint(0, 50, (4, 9))
    indices[0, :3] = 2
    emb(indices).square().sum().backward()
    emb_zyx(indices.to("zyx")).square().sum().backward()
    assert_close(emb_zyx.weight.grad, emb.weight.grad, rtol=1e-5, atol=1e-5)


def test_batch_norm_step_records_without_decompositions(monkeypatch):
    """A training step of BatchNorm: its 0-d batch counter's add_(1) takes the elementwise fast
    path (no trip through dispatch's in-place path), and counter and running statistics match
    CPU torch after three steps."""
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm1d(6)
    zyx = torch.nn.BatchNorm1d(6).to("zyx")
    calls = _unlowered_calls(monkeypatch)
    for step in range(3):
        x = torch.randn(5, 6) + step
        cpu(x).sum().backward()
        zyx(x.to("zyx")).sum().backward()
    assert "aten.add_.Tensor" not in calls
    assert zyx.num_batches_tracked.item() == cpu.num_batches_tracked.item() == 3
    assert_close(zyx.running_mean, cpu.running_mean)
    assert_close(zyx.running_var, cpu.running_var)
    assert_close(zyx.weight.grad, cpu.weight.grad)
