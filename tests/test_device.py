"""The zyx device as PyTorch users see it: moves, conversions, repr, torch.zyx, debug output, errors."""

import gc
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ZYX0_BACKEND, assert_close

import torch_zyx
from torch_zyx import dispatch
from torch_zyx.config import CONFIG
from torch_zyx.integration import device_guard

REPO = Path(__file__).resolve().parent.parent


def test_device_and_moves():
    assert torch.device("zyx").type == "zyx"
    x = torch.randn(5, 3)
    for z in (x.to("zyx"), x.zyx(), x.to(torch.device("zyx"))):
        assert z.device == torch.device("zyx", 0)
        assert_close(z, x)
    z = x.to("zyx")
    assert z.cpu().device.type == "cpu" and z.to("cpu").device.type == "cpu"
    torch.testing.assert_close(z.to("cpu"), x)
    assert_close(z.to(torch.float64), x.to(torch.float64))
    assert_close(z.to(torch.int32), x.to(torch.int32))


def test_factory_and_scalars():
    data = [[1.5, 2.0], [3.0, -4.25]]
    z = torch.tensor(data, device="zyx")
    assert z.device.type == "zyx"
    assert z.tolist() == data
    assert (z.sum() * 2).item() == pytest.approx(4.5)
    assert torch.tensor([3, 4], device="zyx").tolist() == [3, 4]
    array = (z + 1).cpu().numpy()
    assert array.shape == (2, 2) and array[1, 1] == pytest.approx(-3.25)
    # As CUDA tensors: numpy() needs the host copy first, or force=True.
    expected = r"can't convert zyx:0 device type tensor to numpy\. Use Tensor\.cpu\(\)"
    with pytest.raises(TypeError, match=expected):
        z.numpy()
    assert z.requires_grad_().numpy(force=True).tolist() == data


@pytest.mark.parametrize("device", [None, "zyx"])
def test_tensor_from_a_list_of_zyx_scalars(device):
    """torch.tensor / as_tensor of a (nested) list of 0-d zyx tensors, as of CUDA ones: PyTorch
    reads each element's value with the Python key excluded (an internal assert before)."""
    losses = {d: [torch.tensor(1.5, device=d) * 2, torch.tensor(-2, device=d)] for d in ("cpu", "zyx")}
    for make in (lambda v: torch.tensor(v, device=device),
                 lambda v: torch.as_tensor([[v[0]], [v[1]]], device=device),
                 lambda v: torch.tensor(v, dtype=torch.float16, device=device)):
        got, want = make(losses["zyx"]), make(losses["cpu"])
        assert got.device.type == (device or "cpu")
        torch.testing.assert_close(got.cpu(), want.cpu())
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        torch.tensor([torch.ones(2, device="zyx")])


# *_like and new_* factories on a zyx tensor: dtype, strides, device (a ``device`` argument
# naming the CPU puts the result there) and values as CPU torch gives them.
LIKE_FACTORIES = {
    "new_zeros": (lambda t: t.new_zeros((2, 3)), "zyx"),
    "new_ones int64": (lambda t: t.new_ones(2, dtype=torch.int64), "zyx"),
    "new_full": (lambda t: t.new_full((2,), 7.5), "zyx"),
    "new_full 0-d bool": (lambda t: t.new_full((), True), "zyx"),
    "new_ones empty": (lambda t: t.new_ones((0, 2)), "zyx"),
    "new_zeros on cpu": (lambda t: t.new_zeros((2, 3), device="cpu"), "cpu"),
    "zeros_like": (lambda t: torch.zeros_like(t), "zyx"),
    "ones_like float64": (lambda t: torch.ones_like(t, dtype=torch.float64), "zyx"),
    "zeros_like channels_last": (lambda t: torch.zeros_like(t, memory_format=torch.channels_last), "zyx"),
    "ones_like of a view": (lambda t: torch.ones_like(t[:, :2].transpose(1, 2)), "zyx"),
    "ones_like on cpu": (lambda t: torch.ones_like(t, device="cpu"), "cpu"),
    "full_like on cpu": (lambda t: torch.full_like(t, 3, device="cpu"), "cpu"),
    "zeros_like of a view on cpu": (lambda t: torch.zeros_like(t.transpose(1, 3), device="cpu"), "cpu"),
}


@pytest.mark.parametrize("name", list(LIKE_FACTORIES))
def test_like_and_new_factories_match_cpu(name):
    make, device = LIKE_FACTORIES[name]
    x = torch.randn(2, 3, 4, 5)
    expected, got = make(x), make(x.to("zyx"))
    assert got.device.type == device
    assert (got.dtype, got.shape, got.stride()) == (expected.dtype, expected.shape, expected.stride())
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("args", [(16,), (2, 16), (0, 16, 3), (5, 0, -2), (0, 1, 0.1), (-3.7, 4.1, 0.3),
                                  (10, 10), (0.5, 5.2)])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.int64, torch.float16, torch.int32, torch.uint8])
def test_arange_matches_cpu(args, dtype):
    if dtype == torch.int64 and any(isinstance(a, float) for a in args):
        pytest.skip("integer aranges of float bounds: the meta path, checked by OpInfo's arange")
    try:
        expected = torch.arange(*args, dtype=dtype)
    except RuntimeError as error:  # (uint8 of negative bounds: CPU torch's error)
        with pytest.raises(RuntimeError, match=str(error)):
            torch.arange(*args, dtype=dtype, device="zyx")
        return
    got = torch.arange(*args, dtype=dtype, device="zyx")
    assert got.device.type == "zyx" and (got.dtype, got.shape) == (expected.dtype, expected.shape)
    assert_close(got, expected)


def test_arange_errors_and_out():
    for bad in [(0, 5, 0), (5, 0, 1), (0, float("inf"))]:
        with pytest.raises(RuntimeError) as on_cpu:
            torch.arange(*bad)
        with pytest.raises(RuntimeError) as on_zyx:
            torch.arange(*bad, device="zyx")
        assert str(on_zyx.value) == str(on_cpu.value)
    out = torch.empty(0, dtype=torch.int64, device="zyx")
    torch.arange(5, out=out)
    assert out.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_tril_triu_match_cpu(dtype):
    torch.manual_seed(0)
    for shape in ((5, 7), (3, 4, 6), (2, 1, 3, 3), (0, 3)):
        x = (torch.randn(shape) * 5).to(dtype)
        for k in (0, 1, -1, -10, 10):
            for fn in (torch.tril, torch.triu):
                assert torch.equal(fn(x.to("zyx"), k).cpu(), fn(x, k))
            y = x.to("zyx")
            y.triu_(k)
            assert torch.equal(y.cpu(), x.triu(k))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.randn(4).to("zyx").tril()


def test_model_to_zyx():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 6)
    expected = model(x)
    model.to("zyx")
    assert all(p.device.type == "zyx" for p in model.parameters())
    with torch.no_grad():
        assert_close(model(x.to("zyx")), expected.detach(), rtol=1e-5, atol=1e-5)


def test_model_to_zyx_keeps_parameter_objects():
    """model.to("zyx") keeps the parameter objects, as .cuda() does: a weight two modules share (an
    embedding tied to the output projection) stays one parameter, and an optimizer built before
    the move trains the model, through dtype changes, .cpu() and to_empty too. PyTorch gave each
    module a new parameter of its own for a PrivateUse1 device."""
    torch.manual_seed(0)

    def model():
        emb, head, mid = torch.nn.Embedding(10, 6), torch.nn.Linear(6, 10, bias=False), torch.nn.Linear(6, 6)
        head.weight = emb.weight
        mid.register_buffer("scale", torch.full((6,), 0.5))
        return torch.nn.ModuleList([emb, mid, head])

    def train(modules, opt, idx):
        emb, mid, head = modules
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(head(mid(emb(idx)) * mid.scale), idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss.detach(), emb.weight.detach()

    cpu, zyx = model(), model()
    zyx.load_state_dict(cpu.state_dict())
    params = list(zyx.parameters())
    opt = torch.optim.SGD(zyx.parameters(), lr=0.5)  # built before the move
    zyx[0].weight.grad = torch.ones(10, 6)
    zyx.to("zyx")
    assert list(zyx.parameters()) == params and zyx[2].weight is zyx[0].weight is params[0]
    assert zyx[0].weight.device.type == "zyx" and zyx[0].weight.grad.device.type == "zyx"
    assert isinstance(params[0], torch.nn.Parameter) and params[0].requires_grad
    idx = torch.tensor([1, 4, 7, 2])
    expected = train(cpu, torch.optim.SGD(cpu.parameters(), lr=0.5), idx)
    for e, z in zip(expected, train(zyx, opt, idx.to("zyx"))):
        assert_close(z, e, rtol=1e-5, atol=1e-6)
    zyx.double()
    assert zyx[2].weight is zyx[0].weight is params[0] and params[0].dtype == torch.float64
    zyx.cpu()
    assert zyx[2].weight is zyx[0].weight is params[0] and params[0].device.type == "cpu"
    torch.testing.assert_close(params[0], cpu[0].weight.detach().double())
    zyx.to_empty(device="zyx")
    assert zyx[2].weight is zyx[0].weight is params[0] and params[0].device.type == "zyx"
    assert zyx[1].scale.device.type == "zyx"
    # A parameter that cannot take its new contents in place (a weak reference holds it) is
    # replaced; modules sharing it still share the new one.
    import weakref

    again = model()
    held = weakref.ref(again[0].weight)
    again.to("zyx")
    assert again[0].weight is not held() and again[2].weight is again[0].weight
    assert again[0].weight.device.type == "zyx"


def _lazy_model():
    return torch.nn.Sequential(torch.nn.LazyLinear(5), torch.nn.ReLU(), torch.nn.LazyBatchNorm1d(),
                               torch.nn.LazyLinear(2))


@pytest.mark.parametrize("how", ["device argument", "default device", "to", "deepcopy then to", "to_empty"])
def test_lazy_modules_on_zyx(how):
    """Lazy modules work on zyx as on CUDA: placeholders made on zyx or moved there report zyx
    and materialize there at the first forward (they raised: a placeholder cannot wrap a zyx
    tensor, and moving one read its shape), keeping the parameter objects; the model then
    trains as on CPU."""
    import copy

    if how == "device argument":
        model = torch.nn.Sequential(torch.nn.LazyLinear(5, device="zyx"), torch.nn.ReLU(),
                                    torch.nn.LazyBatchNorm1d(device="zyx"),
                                    torch.nn.LazyLinear(2, device="zyx"))
    elif how == "default device":
        with torch.device("zyx"):
            model = _lazy_model()
    elif how == "to":
        model = _lazy_model().to("zyx")
    elif how == "deepcopy then to":  # (PyTorch cannot deep-copy a lazy buffer, on any device)
        layers = (torch.nn.LazyLinear(5), torch.nn.ReLU(), torch.nn.BatchNorm1d(5), torch.nn.LazyLinear(2))
        model = copy.deepcopy(torch.nn.Sequential(*layers)).to("zyx")
    else:
        model = _lazy_model().to_empty(device="zyx")
    assert all(t.device == torch.device("zyx:0") for t in [*model.parameters(), *model.buffers()])
    weight = model[0].weight
    x = torch.randn(6, 3)
    model(x.to("zyx"))
    assert model[0].weight is weight and isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert not torch.nn.parameter.is_lazy(weight) and weight.shape == (5, 3)
    assert all(t.device.type == "zyx" for t in [*model.parameters(), *model.buffers()])
    assert model[2].running_mean.shape == (5,) and "running_mean" in model[2].state_dict()
    cpu = _lazy_model()
    cpu(x)
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    for net, device in ((cpu, "cpu"), (model, "zyx")):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            net(x.to(device)).square().mean().backward()
            opt.step()
    for (name, expected), actual in zip(cpu.state_dict().items(), model.state_dict().values()):
        assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_lazy_module_conversions_before_the_first_forward():
    model = torch.nn.LazyBatchNorm1d().to("zyx", torch.float64)
    assert model.weight.device.type == "zyx" and model.running_mean.dtype == torch.float64
    model(torch.randn(4, 3, dtype=torch.float64, device="zyx"))
    assert model.weight.dtype == torch.float64 and model.running_var.device.type == "zyx"
    back = torch.nn.LazyConv2d(3, 2).to("zyx").cpu()
    assert back.weight.device.type == "cpu"
    back(torch.randn(1, 2, 4, 4))
    assert back.weight.device.type == "cpu" and type(back.weight) is torch.nn.Parameter


def test_memory_format_conversions_match_cpu():
    """``to(memory_format=...)`` lays the copy out as asked, ``to(dtype)`` and ``clone`` keep a
    dense layout (channels_last stays channels_last), as on CPU; Module.to(memory_format) too."""
    x = torch.arange(120.0).reshape(2, 3, 4, 5)
    conversions = {
        "to channels_last": lambda t: t.to(memory_format=torch.channels_last),
        "to dtype keeps it": lambda t: t.to(memory_format=torch.channels_last).double(),
        "clone keeps it": lambda t: t.contiguous(memory_format=torch.channels_last).clone(),
        "to contiguous": lambda t: t.to(memory_format=torch.channels_last).to(
            torch.float16, memory_format=torch.contiguous_format),
        "strided view": lambda t: t[:, :, ::2].to(torch.float64),
        "to cpu keeps it": lambda t: t.to(memory_format=torch.channels_last).to("cpu"),
    }
    for name, convert in conversions.items():
        got, want = convert(x.to("zyx")), convert(x)
        assert got.stride() == want.stride() and got.dtype == want.dtype, name
        assert torch.equal(got.cpu(), want), name
    conv = torch.nn.Conv2d(3, 4, 3).to("zyx").to(memory_format=torch.channels_last)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("cpu", [
    torch.arange(12.0).reshape(3, 4) / 7,
    torch.tensor([1, -2, 3]),
    torch.tensor(2.5),
    torch.ones(2, 3, dtype=torch.float64),
    torch.tensor([True, False]),
    torch.zeros(0, 3),
    torch.randn(100, 100),
])
def test_repr_matches_cpu_with_device(cpu):
    text = repr(cpu.to("zyx"))
    expected = repr(cpu)
    # PyTorch puts device=... before dtype=...; the rest of the text is CPU's.
    assert "device='zyx:0'" in text
    assert re.sub(r",\s*device='zyx:0'", "", text) == expected
    assert str(cpu.to("zyx")) == text


def test_repr_device_suffix_position():
    assert repr(torch.tensor([1.0, 2.0]).to("zyx")) == "tensor([1., 2.], device='zyx:0')"


def test_torch_zyx_module():
    zyx = torch.zyx
    assert zyx.is_available() and zyx.device_count() >= 1
    torch.ones(1, device="zyx").cpu()
    assert zyx.is_initialized()
    assert zyx.current_device() == 0
    zyx.set_device(0)
    assert zyx.current_device() == 0
    zyx.synchronize()
    zyx.manual_seed(1234)
    a = torch.rand(8, device="zyx").cpu()
    zyx.manual_seed_all(1234)
    b = torch.rand(8, device="zyx").cpu()
    torch.testing.assert_close(a, b)
    state = zyx.get_rng_state()
    assert isinstance(state, torch.Tensor) and state.dtype == torch.uint8
    c = torch.rand(8, device="zyx").cpu()
    zyx.set_rng_state(state)
    torch.testing.assert_close(torch.rand(8, device="zyx").cpu(), c)
    # Settle first: buffers of the temporaries above go back to the pool once their events are
    # done, which would otherwise lower the count while ``big`` is measured.
    gc.collect()
    zyx.synchronize()
    before = zyx.memory_allocated()
    big = torch.ones(1 << 16, device="zyx")
    big.cpu()
    assert zyx.memory_allocated() >= before + (1 << 18)
    assert zyx.max_memory_allocated() >= zyx.memory_allocated()
    del big
    zyx.empty_cache()


def test_torch_zyx_memory_and_device_queries():
    """What device-agnostic code asks ``torch.get_device_module(device)`` besides issue 2's list
    (torch.cuda has them): memory statistics, free memory, the device's name and properties."""
    zyx = torch.get_device_module("zyx")
    assert zyx is torch.zyx
    gc.collect()
    zyx.synchronize()
    big = torch.ones(1 << 16, device="zyx")
    big.cpu()
    stats = zyx.memory_stats()
    assert stats["allocated_bytes.all.current"] == zyx.memory_allocated() >= 1 << 18
    assert stats["allocated_bytes.all.peak"] == zyx.max_memory_allocated()
    assert stats["reserved_bytes.all.current"] == zyx.memory_reserved() <= zyx.max_memory_reserved()
    del big
    gc.collect()
    zyx.synchronize()
    zyx.reset_max_memory_allocated()
    assert zyx.max_memory_allocated() == zyx.memory_allocated()
    free, total = zyx.mem_get_info()
    assert 0 < free <= total
    properties = zyx.get_device_properties(0)
    assert properties.total_memory == total and properties.multi_processor_count >= 1
    assert properties.name == zyx.get_device_name()
    assert zyx.get_device_name(0).split(":")[0] in ("cpu", "opencl", "cuda")
    assert zyx.is_bf16_supported()


@pytest.mark.skipif(not device_guard.native_hooks(), reason="the C++ device guard is not in use (no C++ "
                    "compiler, or ZYX_NATIVE=0): PyTorch's Python guard has no events")
def test_timing_events_and_streams():
    """torch.zyx.Event(enable_timing=True) as torch.cuda.Event: recording notes when the work
    before it finished, elapsed_time is the time between two (it raised "Backend doesn't support
    elapsedTime"); torch.zyx.Stream / current_stream / stream are zyx's one stream."""
    import time

    zyx = torch.get_device_module("zyx")
    start, end = zyx.Event(enable_timing=True), zyx.Event(enable_timing=True)
    x = torch.randn(256, 256, device="zyx")
    start.record()
    y = (x * 2).relu().sum()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    assert not torch_zyx.record.pending.is_lazy(y._storage._value)  # (realized by the record)
    assert 45.0 <= start.elapsed_time(end) <= 5000.0
    plain = zyx.Event()
    plain.record()
    assert plain.query()
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(plain)
    stream = zyx.Stream()
    assert stream == zyx.current_stream() == zyx.default_stream() and stream.device.type == "zyx"
    with zyx.stream(stream):
        z = x + 1
    assert_close(z, x.cpu() + 1)


@pytest.mark.skipif(not device_guard.native_hooks(), reason="the C++ device guard and hooks are not in use "
                    "(no C++ compiler, or ZYX_NATIVE=0): torch.accelerator's synchronize and memory "
                    "functions need them")
def test_torch_accelerator_functions():
    """torch.accelerator (and torch.Stream / torch.Event) on zyx: synchronizing realizes what is
    pending and waits for it; the memory functions report zyx's pools (they raised before)."""
    acc = torch.accelerator
    assert acc.current_accelerator().type == "zyx" and acc.device_count() >= 1
    torch_zyx.reset_counters()
    x = torch.randn(1000, device="zyx") * 2
    acc.synchronize()
    assert torch_zyx.counters()["realizations"] == 1
    y = x + 1
    acc.current_stream().synchronize()
    event = torch.Event(device="zyx")
    event.record()
    event.synchronize()
    assert torch_zyx.counters()["realizations"] == 2 and event.query()
    gc.collect()
    acc.synchronize()
    assert acc.memory_allocated() == torch.zyx.memory_allocated() >= 2 * 4000
    big = torch.ones(1 << 16, device="zyx") + y.sum()
    acc.synchronize()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.zyx.memory_allocated() >= 1 << 18
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_reserved() >= acc.memory_allocated()
    del big
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated()
    acc.empty_cache()
    assert acc.memory_reserved() == torch.zyx.memory_reserved()
    free, total = acc.get_memory_info()
    assert 0 < free <= total


def test_counters_and_reset():
    torch_zyx.reset_counters()
    assert all(v == 0 for v in torch_zyx.counters().values())
    (torch.randn(4, device="zyx") * 3).cpu()
    c = torch_zyx.counters()
    assert c["realizations"] >= 1 and c["kernels_launched"] >= 1
    for name in ("kernels_compiled", "schedule_cache_hits", "schedule_cache_misses", "cpu_fallbacks",
                 "bytes_allocated"):
        assert name in c
    torch_zyx.reset_counters()
    assert torch_zyx.counters()["kernels_launched"] == 0


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, ZYX_DISK_CACHE="0", **env)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full_env, capture_output=True,
                          text=True, check=False, timeout=120)


_DEBUG_SCRIPT = """
import torch
from torch_zyx.ops import registry
x = torch.ones(8, device='zyx')
print((x * 2 + 1).relu().sum().item())
del registry.LOWERINGS[torch.ops.aten.histc.default]  # an op without a lowering
try:
    torch.histc(torch.randn(4, device='zyx'))
except NotImplementedError as exc:
    print('raised', exc)
"""


def test_debug_output_and_fallback_env():
    # One subprocess (importing torch is slow): ZYX_DEBUG bits 4|16|32 and ZYX_CPU_FALLBACK=0.
    result = _run(_DEBUG_SCRIPT, ZYX_DEBUG=str(4 | 16 | 32), ZYX_CPU_FALLBACK="0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "zyx schedule kernel 0" in out and "store t" in out
    source_start = {"cpu": "define void @k_", "opencl": "__kernel void k_",
                    "cuda": 'extern "C" __global__'}[ZYX0_BACKEND]
    assert source_start in out  # generated LLVM IR / OpenCL C / CUDA C
    assert "zyx launch k_" in out
    assert out.index("zyx schedule kernel 0") < out.index(source_start)
    assert "24.0" in out
    raised = [line for line in out.splitlines() if line.startswith("raised")]
    assert raised and "aten.histc" in raised[0] and "float32" in raised[0]


def test_compile_error_carries_source():
    from torch_zyx.runtime.cpu import CompileError, CPUDevice

    bad = "define void @broken(ptr %a) {\nentry:\n  %x = fadd float %undefined_value, 1.0\n  ret void\n}\n"
    with pytest.raises(CompileError) as info:
        CPUDevice().compile("broken", bad)
    message = str(info.value)
    assert "broken" in message and "%undefined_value" in message and info.value.source == bad


def _hide_lowering(monkeypatch, op) -> None:
    # The fallback path is exercised on a lowered op with its lowering taken out of the table
    # (any op picked for having no lowering gets one sooner or later).
    from torch_zyx.ops import registry

    monkeypatch.delitem(registry.LOWERINGS, op)


def test_no_fallback_raises(monkeypatch):
    monkeypatch.setattr(CONFIG, "cpu_fallback", False)
    _hide_lowering(monkeypatch, torch.ops.aten.histc.default)
    x = torch.randn(4, 4, device="zyx")
    # The op and the dtype are named.
    with pytest.raises(NotImplementedError, match=r"aten\.histc.*float32"):
        torch.histc(x)


_NATIVE_GUARD = pytest.mark.skipif(not device_guard.native(), reason="the C++ device guard is not in use "
                                   "(no C++ compiler, or ZYX_NATIVE=0): PyTorch's Python guard terminates "
                                   "the process on an error inside a backward")


@_NATIVE_GUARD
def test_error_in_backward_raises_from_backward(monkeypatch):
    # sin's backward (a C++ autograd node) calls cos on zyx; its lowering raises there. The error
    # leaves backward() as on CPU, and the device works on after it.
    def failing_cos(*args):
        raise RuntimeError("cos failed inside a backward")

    monkeypatch.setitem(dispatch._LOWERING_OF, torch.ops.aten.cos.default._name, failing_cos)
    x = torch.randn(4, 4, device="zyx", requires_grad=True)
    with pytest.raises(RuntimeError, match="cos failed inside a backward"):
        x.sin().sum().backward()
    monkeypatch.undo()
    x.grad = None
    x.sin().sum().backward()
    assert_close(x.grad, x.detach().cpu().cos())


@_NATIVE_GUARD
def test_no_fallback_in_backward_raises_from_backward(monkeypatch):
    # hardshrink's backward op, whose lowering is taken out: with ZYX_CPU_FALLBACK=0 the
    # NotImplementedError leaves backward().
    monkeypatch.setattr(CONFIG, "cpu_fallback", False)
    _hide_lowering(monkeypatch, torch.ops.aten.hardshrink_backward.default)
    x = torch.randn(6, device="zyx", requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"no lowering for .*ZYX_CPU_FALLBACK=0"):
        torch.nn.functional.hardshrink(x, 0.5).sum().backward()
    assert (x * 2).cpu().shape == (6,)


_DEFERRED_SCRIPT = """
import torch
from torch_zyx.integration import device_guard
from torch_zyx.config import CONFIG
from torch_zyx.ops import registry
assert not device_guard.native()
CONFIG.cpu_fallback = False
del registry.LOWERINGS[torch.ops.aten.hardshrink_backward.default]
x = torch.randn(6, device='zyx', requires_grad=True)
torch.nn.functional.hardshrink(x, 0.5).sum().backward()
try:
    x.grad.cpu()
except NotImplementedError as exc:
    print('deferred:', exc)
print('after:', tuple((x * 2).cpu().shape))
"""


def test_no_fallback_in_backward_under_python_guard_raises_after_it():
    # Under PyTorch's Python guard (ZYX_NATIVE=0, or no C++ compiler) an exception inside a
    # backward would terminate the process: the missing lowering runs on the CPU there and its
    # error is raised at the next read, and the state is clean after.
    result = _run(_DEFERRED_SCRIPT, ZYX_NATIVE="0")
    assert result.returncode == 0, result.stderr
    expected = r"deferred: zyx: no lowering for aten\.hardshrink_backward.*=0"
    assert re.search(expected, result.stdout), result.stdout
    assert "after: (6,)" in result.stdout


_UNBUILT_SCRIPT = """
import sys
sys.modules["torch_zyx.lazy._native"] = None  # as if the install had no C compiler
sys.modules["torch_zyx.runtime._launch"] = None
import torch
import torch_zyx  # (also where the package runs from its source tree, without its entry point)
x = torch.arange(4.0, device="zyx")
print("result", (x * 2 + 1).sum().item())
"""


def test_unbuilt_c_extensions_warn_and_fall_back():
    # pip hides a failed optional build: the Python fallbacks work, and a warning says why
    # recording is slower; ZYX_NATIVE=0 chooses them without one.
    result = _run(_UNBUILT_SCRIPT, ZYX_BACKENDS="cpu")
    assert result.returncode == 0, result.stderr
    assert "result 16.0" in result.stdout
    fallbacks = {"torch_zyx.lazy._native": "nodes_py", "torch_zyx.runtime._launch": "ctypes"}
    for name, fallback in fallbacks.items():
        pattern = rf"C extension {re.escape(name)} is not built .*; using {fallback}"
        assert re.search(pattern, result.stderr), result.stderr
    quiet = _run(_UNBUILT_SCRIPT, ZYX_BACKENDS="cpu", ZYX_NATIVE="0")
    assert quiet.returncode == 0 and "is not built" not in quiet.stderr, quiet.stderr


def test_native_guard_is_used_where_it_can_be_built():
    # The C++ guard is built wherever a C++ compiler and torch's headers exist; it failing to
    # build there would bring back the terminated processes (see device_guard.py).
    headers = Path(torch.__file__).parent / "include" / "c10" / "core" / "impl" / "DeviceGuardImplInterface.h"
    if not CONFIG.native or device_guard.compiler() is None or not headers.exists():
        pytest.skip("no C++ compiler or torch headers here, or ZYX_NATIVE=0: the Python guard is expected")
    assert device_guard.native() and device_guard.native_hooks()


def test_fallback_runs_on_cpu_and_counts(counters, monkeypatch):
    _hide_lowering(monkeypatch, torch.ops.aten.histc.default)
    x = torch.randn(5, 5)
    assert_close(torch.histc(x.to("zyx"), bins=4), torch.histc(x, bins=4))
    assert counters()["cpu_fallbacks"] >= 1
    det = torch.linalg.det(x.to("zyx"))
    assert_close(det, torch.linalg.det(x), rtol=1e-4, atol=1e-4)



_THREADS_SCRIPT = """
import copy, sys, threading, traceback, torch, torch_zyx
sys.setswitchinterval(1e-6)  # a thread switch between almost any two bytecodes
torch.manual_seed(0)
weights = [torch.randn(16, 16) for i in range(3)]
inputs = [torch.randn(8, 16) for i in range(4)]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                            torch.nn.Linear(32, 4))
labels = torch.randint(0, 4, (8,))
def program(x, ws):
    for w in ws:
        x = torch.relu(x @ w) / 4 + x.sum(-1, keepdim=True) * 1e-2
    return x.softmax(-1)
def train(net, x, y, steps=3):
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in net.parameters()]
expected = [program(x, weights) for x in inputs]
trained = [train(copy.deepcopy(model), x, labels) for x in inputs]
on_zyx = [w.to("zyx") for w in weights]
errors = []
def work(i):
    try:
        for step in range(3):
            got = program(inputs[i].to("zyx"), on_zyx)
            if step % 2:
                torch.zyx.synchronize()
            if not torch.allclose(got.cpu(), expected[i], atol=1e-5):
                errors.append(("program", i, step))
        params = train(copy.deepcopy(model).to("zyx"), inputs[i].to("zyx"), labels.to("zyx"))
        if not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(params, trained[i])):
            errors.append(("training", i))
    except Exception:
        errors.append(("raised", i, traceback.format_exc()))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("errors", errors)
"""


def test_threads_record_and_realize_at_once():
    """Python threads recording, training and realizing on zyx at the same time get CPU torch's
    values. A realization takes every thread's pending storages: it kept the value it computed
    for a parameter another thread had stepped meanwhile (that step was lost; trained weights
    0.02-0.13 off). Two threads compiling one kernel at once segfaulted (LLVM disposed the
    duplicate's engine while the other compiled), and on Python 3.11 the index expressions'
    cached keys took a lock per class: two threads computing keys that contain each other
    deadlocked."""
    result = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], capture_output=True, text=True,
                            check=False, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "errors []" in result.stdout


@pytest.mark.skipif(ZYX0_BACKEND != "cpu", reason="an OpenCL or CUDA context does not survive fork "
                    "(PoCL's driver threads are gone in the child; CUDA forbids it); OpInfo tests use a "
                    "spawned worker there")
def test_forked_child_can_launch_kernels():
    # The CPU runtime's thread pool does not survive fork(); the child must get its own, or a
    # large launch waits forever (this hung forked OpInfo tests).
    import os

    x = torch.randn(1 << 20, device="zyx")
    expected = (x.cpu() * 3 + 1).relu().sum()
    assert (x * 2).sum().item() != 0  # the parent's pool threads exist now
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            value = (x * 3 + 1).relu().sum().item()
            ok = abs(value - expected.item()) <= 1e-3 * abs(expected.item())
        finally:
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1" and status == 0


def _cpu_context():
    """The first CPU device's context (skips the test when no CPU backend is enabled)."""
    from torch_zyx.execute import contexts

    contexts = [ctx for ctx in contexts.devices() if ctx.runtime.name == "cpu"]
    if not contexts:
        pytest.skip("no CPU backend is enabled (ZYX_BACKENDS)")
    return contexts[0]


def _thread_team(kind: str, runtime):
    from torch_zyx.runtime import cpu_team

    if kind == "openmp":
        team = cpu_team.OpenMPTeam.find()
        if team is None:
            pytest.skip("no OpenMP runtime is loaded in this process")
        return team
    if kind == "native":
        if not cpu_team.NativeTeam.supported(runtime.triple):
            pytest.skip(f"the native team needs x86-64 Linux, not {runtime.triple}")
        return cpu_team.NativeTeam(runtime.new_target_machine(), 3)
    return cpu_team.PythonWorkers(4)


@pytest.mark.parametrize("kind", ["openmp", "native", "python"])
def test_cpu_thread_teams(kind, monkeypatch):
    # Every thread team runs every chunk of a launch exactly once, for launches with more
    # chunks than threads, fewer chunks than threads, and several dependent kernels in a row.
    ctx = _cpu_context()
    runtime = ctx.runtime
    monkeypatch.setattr(runtime, "team", _thread_team(kind, runtime))
    monkeypatch.setattr(runtime, "threads", 4)
    device = torch.device("zyx", ctx.index)
    x = torch.randn(1 << 20)
    rows = torch.randn(3, 1 << 16)
    for _ in range(3):
        xz = x.to(device)
        assert_close((xz * 3 + 1).relu(), (x * 3 + 1).relu())
        assert_close(xz.view(256, -1).softmax(-1), x.view(256, -1).softmax(-1))
        assert_close(rows.to(device).exp().sum(-1), rows.exp().sum(-1), rtol=1e-4, atol=1e-2)


def _cpu_calls(kind: str):
    from torch_zyx.runtime import cpu_calls

    if kind == "ctypes":
        return cpu_calls.CtypesCalls
    try:
        from torch_zyx.runtime import _launch
    except ImportError:
        pytest.skip("the C launch calls are not built here (no C compiler or Python headers)")
    return _launch


@pytest.mark.parametrize("kind", ["c", "ctypes"])
@pytest.mark.parametrize("team", ["openmp", "python"])
def test_cpu_calls(kind, team, monkeypatch):
    # Both implementations of the CPU runtime's foreign calls (cpu_calls.py) run serial,
    # parallel and detached launches with buffers and parameters (a random kernel's seeds).
    from torch_zyx.runtime import cpu, cpu_team

    ctx = _cpu_context()
    runtime = ctx.runtime
    calls = _cpu_calls(kind)
    monkeypatch.setattr(cpu, "CALLS", calls)
    monkeypatch.setattr(cpu_team, "CALLS", calls)
    monkeypatch.setattr(runtime, "team", _thread_team(team, runtime))
    monkeypatch.setattr(runtime, "threads", 2)
    device = torch.device("zyx", ctx.index)
    x = torch.randn(1 << 20)
    for detach_work in (1 << 62, 0):  # whole regions, then every parallel launch detached
        monkeypatch.setattr(cpu, "_DETACH_WORK", detach_work)
        xz = x.to(device)
        assert_close((xz[:100] * 3 + 1).relu(), (x[:100] * 3 + 1).relu())  # serial
        assert_close((xz * 3 + 1).relu(), (x * 3 + 1).relu())
        assert_close(xz.view(256, -1).softmax(-1), x.view(256, -1).softmax(-1))
        noise = torch.rand(1 << 20, device=device)
        assert 0.49 < noise.mean().item() < 0.51 and 0 <= noise.min().item() and noise.max().item() < 1


# Counts its outer iterations: out[i] += 1 (atomically) for i in [start, end).
_COUNTING_KERNEL = """
define void @zyx_count(ptr %bufs, ptr %params, i64 %start, i64 %end) {
entry:
  %out = load ptr, ptr %bufs
  %empty = icmp sge i64 %start, %end
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
  %at = getelementptr i64, ptr %out, i64 %i
  %old = atomicrmw add ptr %at, i64 1 monotonic
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def test_compile_after_a_program_is_freed():
    """Each engine has its own target machine: an engine frees the one it is made with, and
    compiling after the first program was freed segfaulted."""
    import gc

    runtime = _cpu_context().runtime
    program = runtime.compile("zyx_count_a", _COUNTING_KERNEL.replace("zyx_count", "zyx_count_a"))
    del program
    gc.collect()
    program = runtime.compile("zyx_count_b", _COUNTING_KERNEL.replace("zyx_count", "zyx_count_b"))
    out = torch.zeros(5, dtype=torch.int64)
    _cpu_calls("ctypes").serial(program.address, [out.data_ptr()], [], 1, 4)
    assert out.tolist() == [0, 1, 1, 1, 0]


def test_kernels_share_engines_and_load_once(monkeypatch):
    """Kernels are object files in shared MCJIT engines (one per ``PER_ENGINE`` kernels, each with
    its target machine) instead of an engine each; a kernel compiled again while its code is in
    the current engine (its program left the caches) is not loaded twice (a duplicate symbol);
    engines are freed with their last program and compiling goes on."""
    import gc

    from torch_zyx.runtime.cpu import _SharedEngines

    runtime = _cpu_context().runtime
    monkeypatch.setattr(_SharedEngines, "PER_ENGINE", 3)
    monkeypatch.setattr(runtime, "_engines", _SharedEngines(runtime.new_target_machine))
    names = [f"zyx_count_share{i}" for i in range(7)]
    programs = [runtime.compile(n, _COUNTING_KERNEL.replace("zyx_count", n)) for n in names]
    engines = {id(p._engine) for p in programs}
    assert len(engines) == 3  # 3 + 3 + 1 kernels
    again = runtime.compile(names[6], _COUNTING_KERNEL.replace("zyx_count", names[6]))
    assert again._engine is programs[6]._engine and again.address == programs[6].address
    del programs[:3], again
    gc.collect()  # the first engine goes with its programs
    programs.append(runtime.compile("zyx_count_share7", _COUNTING_KERNEL.replace("zyx_count", "zyx_count_share7")))
    for program in programs:
        out = torch.zeros(5, dtype=torch.int64)
        _cpu_calls("ctypes").serial(program.address, [out.data_ptr()], [], 1, 4)
        assert out.tolist() == [0, 1, 1, 1, 0]


@pytest.mark.parametrize("kind", ["c", "ctypes"])
def test_parallel_entry_runs_every_iteration_once(kind):
    """The parallel entry's home blocks (each thread starts with its CPU's block of chunks,
    then takes what is left of the others) run each outer iteration exactly once, whatever
    the range, chunk, number of homes and threads calling it."""
    import threading

    ctx = _cpu_context()
    calls = _cpu_calls(kind)
    program = ctx.runtime.compile("zyx_count", _COUNTING_KERNEL)
    cases = [(1, 1, 1, 1), (10, 3, 4, 2), (100, 7, 16, 5), (97, 1, 3, 8), (5, 8, 2, 3), (1000, 13, 7, 7),
             (64, 64, 255, 4)]
    for (end, chunk, homes, threads), backward in itertools.product(cases, (0, 1)):
        out = torch.zeros(end, dtype=torch.int64)
        task = calls.Task([out.data_ptr()], [], end, chunk, homes, backward)
        workers = [threading.Thread(target=calls.entry, args=(program.parallel_address, task))
                   for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert torch.equal(out, torch.ones(end, dtype=torch.int64)), (end, chunk, homes, threads, backward)


# Numbers its calls: out[start] = the count of calls before this one (buffer 1 holds the count).
_ORDER_KERNEL = """
define void @zyx_order(ptr %bufs, ptr %params, i64 %start, i64 %end) {
entry:
  %out = load ptr, ptr %bufs
  %count.at = getelementptr ptr, ptr %bufs, i64 1
  %count = load ptr, ptr %count.at
  %seq = atomicrmw add ptr %count, i64 1 monotonic
  %at = getelementptr i64, ptr %out, i64 %start
  store i64 %seq, ptr %at
  ret void
}
"""


@pytest.mark.parametrize("kind", ["c", "ctypes"])
def test_parallel_entry_takes_chunks_backward(kind):
    """A backward task hands each home block's chunks out last first."""
    ctx = _cpu_context()
    calls = _cpu_calls(kind)
    program = ctx.runtime.compile("zyx_order", _ORDER_KERNEL)
    orders = []
    for backward in (0, 1):
        out, count = torch.full((6,), -1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
        task = calls.Task([out.data_ptr(), count.data_ptr()], [], 6, 1, 2, backward)
        calls.entry(program.parallel_address, task)  # (one thread: it starts with its CPU's block)
        orders.append(out.tolist())
    for order in orders:
        assert sorted(order) == list(range(6))
    forward, backward = orders
    # Within each home block ([0, 3) and [3, 6)) the chunks go up, then down.
    for block in (slice(0, 3), slice(3, 6)):
        assert forward[block] == sorted(forward[block])
        assert backward[block] == sorted(backward[block], reverse=True)


def test_parallel_launches_alternate_the_chunk_order(monkeypatch):
    """The device's parallel launches alternate the two orders: a kernel starts with the rows
    the one before it touched last, still in that core's cache."""
    from torch_zyx.runtime import cpu

    ctx = _cpu_context()
    monkeypatch.setattr(ctx.runtime, "threads", 2)  # (parallel launches on any machine)
    directions = []
    real_task = cpu.CALLS.Task

    def spy(*args):
        directions.append(args[5])
        return real_task(*args)

    monkeypatch.setattr(cpu.CALLS, "Task", spy)
    x = torch.randn(1 << 20)
    xz = x.to(torch.device("zyx", ctx.index))
    for _ in range(3):
        assert_close(xz * 3, x * 3)
    assert len(directions) == 3 and directions[0] != directions[1] != directions[2]


def _openmp_device(monkeypatch, team_size: bool = False):
    """The CPU device's context with its runtime on the OpenMP team, every launch detached
    (``team_size``: the test needs the runtime's omp_get_num_threads)."""
    from torch_zyx.runtime import cpu

    ctx = _cpu_context()
    team = _thread_team("openmp", ctx.runtime)
    if team._start is None:
        pytest.skip("the OpenMP runtime has no GOMP_parallel_start")
    if team_size and team._team_size is None:
        pytest.skip("the OpenMP runtime has no omp_get_num_threads")
    monkeypatch.setattr(ctx.runtime, "team", team)
    monkeypatch.setattr(cpu, "_DETACH_WORK", 0)  # (x * 3 on 1M floats is below it)
    return ctx


def _buffer_contents(ctx, buffer) -> torch.Tensor:
    out = torch.empty(buffer.numel)
    ctx.pool.pool_to_host(buffer.raw, out.data_ptr(), buffer.nbytes, [])
    return out


def test_openmp_region_is_joined_by_its_launcher(monkeypatch):
    # A launch on the OpenMP team returns with its region still open (the team's threads take
    # chunks while Python goes on); a wait on its event from the launching thread joins it, a
    # wait from another thread blocks until the launcher settles.
    import threading

    from torch_zyx.execute import realize
    from torch_zyx.record.tensor import read
    from torch_zyx.runtime import cpu

    ctx = _openmp_device(monkeypatch)
    monkeypatch.setattr(ctx.runtime, "threads", 2)
    x = torch.randn(1 << 20)
    xz = x.to(torch.device("zyx", ctx.index))
    for joined_by_owner in (True, False):
        (buffer,) = realize.realize([read(xz * 3)], ctx)
        (event,) = ctx.events.take([buffer.id])
        assert not event.is_done()  # the region is open until its launcher joins it
        if joined_by_owner:
            event.wait()
        else:
            reader = threading.Thread(target=event.wait)
            reader.start()
            reader.join(0.2)
            assert reader.is_alive() and not event.is_done()
            ctx.settle()
            reader.join(10)
            assert not reader.is_alive()
        assert event.is_done()
        assert torch.equal(_buffer_contents(ctx, buffer), x * 3)
    ctx.settle()  # (nothing left open)
    # A launch below the detach threshold runs to its end: nothing is left pending on its output.
    monkeypatch.setattr(cpu, "_DETACH_WORK", 1 << 62)
    (buffer,) = realize.realize([read(xz * 5)], ctx)
    assert all(e.is_done() for e in ctx.events.take([buffer.id]))


def test_openmp_launcher_idles_on_large_teams(monkeypatch):
    # On a team of IDLE_LAUNCHER_TEAM threads or more the launcher of a detached region takes
    # no chunks (its caches keep the interpreter's working set); the other threads compute all.
    from torch_zyx.execute import realize
    from torch_zyx.record.tensor import read
    from torch_zyx.runtime import cpu_team

    ctx = _openmp_device(monkeypatch, team_size=True)
    x = torch.randn(1 << 20)
    xz = x.to(torch.device("zyx", ctx.index))
    for threads, launcher_works in ((2, True), (cpu_team.IDLE_LAUNCHER_TEAM, False)):
        monkeypatch.setattr(ctx.runtime, "threads", threads)
        (buffer,) = realize.realize([read(xz * 3)], ctx)
        (event,) = ctx.events.take([buffer.id])
        assert event._launcher_works is launcher_works
        event.wait()
        assert torch.equal(_buffer_contents(ctx, buffer), x * 3)


@pytest.mark.parametrize("detach", [False, True])
def test_openmp_regions_take_every_thread_of_the_device(detach, monkeypatch):
    # Every region has the device's threads, also for a launch with fewer chunks than threads:
    # a region of fewer parks the others, and the next region waits for them to wake (the
    # 16-core host's small matmuls: a pack on 2 threads, then the matmul on 8). The threads
    # that find no chunk leave the results as they are.
    import types

    from torch_zyx.runtime import cpu, cpu_team

    ctx = _openmp_device(monkeypatch)
    team = ctx.runtime.team
    monkeypatch.setattr(team, "region_threads", 4)
    monkeypatch.setattr(ctx.runtime, "threads", 4)
    if not detach:
        monkeypatch.setattr(cpu, "_DETACH_WORK", 1 << 62)
    calls, asked = cpu_team.CALLS, []

    def region(name):
        def call(function, entry, task, threads):
            asked.append(threads)
            return getattr(calls, name)(function, entry, task, threads)
        return call

    recording = types.SimpleNamespace(**{name: getattr(calls, name) for name in dir(calls)
                                         if not name.startswith("__")})
    recording.omp_parallel, recording.omp_start = region("omp_parallel"), region("omp_start")
    monkeypatch.setattr(cpu_team, "CALLS", recording)
    device = torch.device("zyx", ctx.index)
    rows = torch.randn(3, 1 << 16)
    x = torch.randn(1 << 20)
    assert_close(rows.to(device).exp().sum(-1), rows.exp().sum(-1), rtol=1e-4, atol=1e-2)  # 3 chunks
    assert_close((x.to(device) * 3 + 1).relu(), (x * 3 + 1).relu())
    ctx.settle()
    assert asked and set(asked) == {4}, asked


def test_cpu_runtime_gives_its_openmp_team_its_thread_count():
    from torch_zyx.runtime import cpu_team

    runtime = _cpu_context().runtime
    team = runtime._new_team()
    if not isinstance(team, cpu_team.OpenMPTeam):
        pytest.skip(f"the CPU runtime runs on the {team.name} here")
    assert team.region_threads == runtime.threads


_ONE_THREAD_REGION_SCRIPT = """
import torch
import torch.nn.functional as F
from torch_zyx.runtime import cpu_team
works = []
init = cpu_team._Region.__init__
def record(self, *args):
    init(self, *args)
    works.append(self._launcher_works)
cpu_team._Region.__init__ = record
x, w, b = torch.randn(1024, 4096), torch.randn(4096), torch.randn(4096)
z = F.layer_norm(x.to('zyx'), (4096,), w.to('zyx'), b.to('zyx')).cpu()
torch.testing.assert_close(z, F.layer_norm(x, (4096,), w, b))
print('launches', len(works), 'launcher works in all', all(works))
"""


def test_openmp_launcher_works_when_its_region_gets_one_thread():
    # OMP_THREAD_LIMIT=1: the region of a launch that asked for 8 threads has only its
    # launcher, which must then compute everything (an idle one would leave the kernel undone).
    from torch_zyx.runtime import cpu_team

    if ZYX0_BACKEND != "cpu":
        pytest.skip("zyx:0 is not the CPU backend")
    team = cpu_team.OpenMPTeam.find()
    if team is None or team._start is None or team._team_size is None:
        pytest.skip("no OpenMP runtime with GOMP_parallel_start and omp_get_num_threads is loaded")
    result = _run(_ONE_THREAD_REGION_SCRIPT, ZYX_THREADS="8", OMP_THREAD_LIMIT="1")
    assert result.returncode == 0, result.stderr
    launches = re.search(r"launches (\d+) launcher works in all True", result.stdout)
    assert launches and int(launches.group(1)) > 0, result.stdout


@pytest.mark.parametrize("fallback", [True, False])
def test_meta_tensor_copy_raises(fallback, monkeypatch):
    # A meta tensor has no data: copying one to zyx raises as it does to CPU torch (reading its
    # data pointer crashed the process).
    monkeypatch.setattr(CONFIG, "cpu_fallback", fallback)
    meta = torch.empty(3, dtype=torch.int64, device="meta")
    with pytest.raises(NotImplementedError):
        torch.empty(3).copy_(meta)
    with pytest.raises(NotImplementedError):
        meta.to("zyx")
    with pytest.raises(NotImplementedError):
        torch.zeros(3, dtype=torch.int64, device="zyx").copy_(meta)
