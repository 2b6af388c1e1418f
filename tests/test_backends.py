"""Every zyx backend against CPU torch: one representative set of ops, parametrized over backends.

The zyx devices are built once per process from ``CONFIG.backends``. So that one process can
test every backend, this module (collected before the others) appends "opencl" to the
backends before any device exists: the CPU stays zyx:0 for the other test modules and the
OpenCL devices follow it. A backend without a device skips with the reason.
"""

import re

import pytest
import torch
from conftest import assert_close

from torch_zyx.codegen.llvm import STREAM_STORE_BYTES
from torch_zyx.config import CONFIG
from torch_zyx.execute import contexts, realize

if not contexts._devices and "opencl" not in CONFIG.backends:
    CONFIG.backends = [*CONFIG.backends, "opencl"]

BACKENDS = ["cpu", "opencl"]


def _device_for(backend: str) -> torch.device:
    for ctx in contexts.devices():
        if ctx.runtime.name == backend:
            return torch.device("zyx", ctx.index)
    if backend == "opencl":
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            pytest.skip("opencl: pyopencl is not installed (`make ocl` installs PoCL and pyopencl)")
        if "opencl" not in CONFIG.backends:
            pytest.skip("opencl: zyx devices were built before this module could add the backend; "
                        "run with ZYX_BACKENDS=cpu,opencl")
        pytest.skip("opencl: pyopencl finds no OpenCL platform with a device (install pocl-opencl-icd)")
    pytest.skip(f"{backend}: backend not configured")


@pytest.fixture(params=BACKENDS)
def dev(request) -> torch.device:
    return _device_for(request.param)


def _supports(device: torch.device, dtype_name: str) -> bool:
    runtime = contexts.devices()[device.index].runtime
    return getattr(runtime, "supports", lambda _name: True)(dtype_name)


def test_elementwise_chain(dev):
    x, y = torch.randn(1000, 33), torch.randn(1000, 33)
    expect = torch.where(x > 0, (x * 0.5 + 0.25).exp().sin(), y.abs().sqrt()) - x.tanh() * y.sigmoid()
    got = torch.where(x.to(dev) > 0, (x.to(dev) * 0.5 + 0.25).exp().sin(), y.to(dev).abs().sqrt()) \
        - x.to(dev).tanh() * y.to(dev).sigmoid()
    assert_close(got, expect, rtol=1e-4, atol=1e-5)


def test_broadcast_and_scalars(dev):
    x, b = torch.randn(7, 1, 5), torch.randn(3, 1)
    assert_close((x.to(dev) + b.to(dev)) / 3.0 - 1.5, (x + b) / 3.0 - 1.5)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_reductions(dev, dim):
    x = torch.randn(64, 130)
    xd = x.to(dev)
    if dim is None:
        assert_close(xd.sum(), x.sum(), rtol=1e-4, atol=1e-4)
        assert_close(xd.amax(), x.amax())
        assert_close(xd.mean(), x.mean(), rtol=1e-4, atol=1e-5)
    else:
        assert_close(xd.sum(dim), x.sum(dim), rtol=1e-4, atol=1e-4)
        assert_close(xd.amax(dim), x.amax(dim))
        assert_close(xd.amin(dim), x.amin(dim))
        assert_close(xd.mean(dim), x.mean(dim), rtol=1e-4, atol=1e-5)


def test_max_propagates_nan(dev):
    x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, -float("inf")]])
    assert_close(x.to(dev).amax(1), x.amax(1), equal_nan=True)
    assert_close(torch.maximum(x.to(dev), x.to(dev).flip(1)), torch.maximum(x, x.flip(1)), equal_nan=True)


def test_softmax(dev):
    x = torch.randn(16, 1000)
    assert_close(torch.softmax(x.to(dev), -1), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    assert_close(torch.log_softmax(x.to(dev), 0), torch.log_softmax(x, 0), rtol=1e-4, atol=1e-5)


def test_layer_norm(dev):
    x, w, b = torch.randn(8, 10, 64), torch.randn(64), torch.randn(64)
    got = torch.nn.functional.layer_norm(x.to(dev), (64,), w.to(dev), b.to(dev))
    assert_close(got, torch.nn.functional.layer_norm(x, (64,), w, b), rtol=1e-4, atol=1e-4)


def _on_cpu_runtime(dev) -> bool:
    return dev.type == "zyx" and contexts.devices()[dev.index].runtime.name == "cpu"


def _launched(monkeypatch, compute):
    """``compute()``'s result, realized, and the sources of the CPU programs its realization
    launched (not the newest compiled program: an earlier test in this process may have
    compiled the same kernel, which then is not compiled again), one by one or as a plan's
    steps (``CPUDevice.run_steps``: kernels by address)."""
    from torch_zyx.execute import contexts
    from torch_zyx.runtime.cpu import CPUDevice, CPUProgram

    sources = []
    launch, run_steps = CPUProgram.launch, CPUDevice.run_steps

    def recording_launch(self, *args):
        sources.append(self.source)
        return launch(self, *args)

    def recording_run_steps(steps, *args):
        programs = {program.address: program for ctx in contexts.devices() for program in ctx.programs.values()
                    if isinstance(program, CPUProgram)}
        sources.extend(programs[step[0]].source for step in steps)
        return run_steps(steps, *args)

    with monkeypatch.context() as patch:
        patch.setattr(CPUProgram, "launch", recording_launch)
        patch.setattr(CPUDevice, "run_steps", staticmethod(recording_run_steps))
        result = compute()
        torch.zyx.synchronize()
    return result, sources


# Row kernels: on the CPU the loop storing row r also accumulates row r + 1's first reduces
# (those reading only the row: all of layer norm's, softmax's maximum), each chunk of rows
# computing its first row's before and storing its last row after. Chunks of one row
# (16 x 25000), many chunks (600 rows), two rows, rows over two axes, reduces over two axes,
# size-1 axes inside the row.
@pytest.mark.parametrize("shape, dims", [((600, 1029), 1), ((16, 25000), 1), ((2, 4096), 1),
                                         ((3, 5, 64), 1), ((4, 6, 40), 2), ((7, 1, 33), 2)])
def test_pipelined_row_kernels(dev, shape, dims, monkeypatch):
    # Seeded: the tolerances below hold for float32 sums over up to 25000 values, but with fresh
    # inputs each run one log_softmax element in 400000 once landed just past them on PoCL.
    seeded = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=seeded) * 3 + 1
    w, b = torch.randn(*shape[-dims:], generator=seeded), torch.randn(*shape[-dims:], generator=seeded)
    xd, wd, bd = x.to(dev), w.to(dev), b.to(dev)
    axes = tuple(range(-dims, 0))
    got, sources = _launched(monkeypatch, lambda: torch.nn.functional.layer_norm(xd, shape[-dims:], wd, bd))
    assert_close(got, torch.nn.functional.layer_norm(x, shape[-dims:], w, b), rtol=1e-4, atol=1e-4)
    if _on_cpu_runtime(dev):
        assert sources and all(re.search(r"add nsw i64 %end, -1", source) for source in sources), \
            "layer norm's row loop is not pipelined"
    rms = xd * torch.rsqrt((xd * xd).mean(axes, keepdim=True) + 1e-6)
    assert_close(rms, x * torch.rsqrt((x * x).mean(axes, keepdim=True) + 1e-6), rtol=1e-4, atol=1e-5)
    assert_close(xd / xd.abs().sum(axes, keepdim=True), x / x.abs().sum(axes, keepdim=True),
                 rtol=1e-4, atol=1e-6)
    assert_close(xd - xd.mean(axes, keepdim=True), x - x.mean(axes, keepdim=True), rtol=1e-4, atol=1e-4)
    half = torch.nn.functional.layer_norm(xd.half(), shape[-dims:])
    assert_close(half, torch.nn.functional.layer_norm(x.half(), shape[-dims:]), rtol=2e-3, atol=2e-3)
    # Softmax (the sum of exp(x - max) runs per row, after the carried maximum; its store
    # loop reads back the exponentials the sum loop wrote) and log_softmax.
    flat, flat_d = x.flatten(-dims), xd.flatten(-dims)
    # (rtol 1e-4: sums over up to 25000 values)
    got, sources = _launched(monkeypatch, lambda: torch.softmax(flat_d, -1))
    assert_close(got, torch.softmax(flat, -1), rtol=1e-4, atol=1e-5)
    if _on_cpu_runtime(dev):
        assert sources and all(re.search(r"add nsw i64 %end, -1", source) for source in sources), \
            "softmax's row loop is not pipelined"
    assert_close(torch.log_softmax(flat_d, -1), torch.log_softmax(flat, -1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [((33, 17), (17, 40)), ((3, 16, 64), (3, 64, 32))])
def test_matmul(dev, shape):
    a, b = torch.randn(*shape[0]), torch.randn(*shape[1])
    assert_close(a.to(dev) @ b.to(dev), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8])
def test_transposing_copies(dev, dtype):
    # Copies whose innermost loop reads a new source line every step are blocked on the CPU
    # (lower_loops.transpose_tile): whole lines, any extent, any element size.
    if dtype == torch.float64 and not _supports(dev, "float64"):
        pytest.skip("the OpenCL device has no cl_khr_fp64")
    for shape, perm in [((300, 64), (1, 0)), ((40, 36), (1, 0)), ((8, 96, 20), (2, 0, 1)),
                        ((6, 16, 33), (0, 2, 1)), ((5, 7), (1, 0))]:
        x = (torch.randn(*shape) * 50).to(dtype)
        assert_close(x.to(dev).permute(perm).contiguous(), x.permute(perm).contiguous())
    # With a scalar parameter (a load that stays put) and into a slice of a larger result.
    x = torch.randn(256, 96).to(dtype)
    assert_close(torch.cat([x.to(dev).t() * 1.7, x.to(dev).t()]), torch.cat([x.t() * 1.7, x.t()]))
    w = torch.randn(512, 784).to(dtype)
    assert_close(w.to(dev).t().reshape(784 // 16, 16, 512).permute(0, 2, 1).contiguous(),
                 w.t().reshape(784 // 16, 16, 512).permute(0, 2, 1).contiguous())


def test_views_and_inplace(dev):
    x = torch.randn(6, 8)
    xd = x.to(dev)
    assert_close(xd.t().contiguous()[1:5:2], x.t().contiguous()[1:5:2])
    assert_close(xd.reshape(4, 12).permute(1, 0)[::3], x.reshape(4, 12).permute(1, 0)[::3])
    assert_close(torch.cat([xd, xd.flip(0)], 1), torch.cat([x, x.flip(0)], 1))
    xd[1:3] += 1
    x[1:3] += 1
    xd[:, 0].mul_(-2)
    x[:, 0].mul_(-2)
    assert_close(xd, x)
    assert_close(torch.nn.functional.pad(xd, (1, 2)), torch.nn.functional.pad(x, (1, 2)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_float_dtypes(dev, dtype):
    if dtype == torch.float64 and not _supports(dev, "float64"):
        pytest.skip("the OpenCL device has no cl_khr_fp64")
    x, y = torch.randn(300, 7).to(dtype), torch.randn(300, 7).to(dtype)
    tol = {} if dtype == torch.float64 else {"rtol": 2e-2, "atol": 2e-2}
    assert_close(x.to(dev) * y.to(dev) + 1, x * y + 1, **tol)
    assert_close(x.to(dev).float().sum(1), x.float().sum(1), rtol=1e-3, atol=1e-3)
    assert_close(x.to(dev).to(torch.float32), x.to(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_casts_round_in_kernel(dev, dtype):
    # Every finite half value, the midpoints between neighbours (ties to even), subnormals,
    # overflow to infinity and random float bit patterns: cast to ``dtype`` and back inside one
    # kernel (the result is stored as float, so only the cast itself can round).
    halves = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    halves = halves[torch.isfinite(halves)].sort().values
    midpoints = ((halves[1:].double() + halves[:-1].double()) / 2).float()
    seeded = torch.Generator().manual_seed(0)
    bits = torch.randint(-2**31, 2**31 - 1, (50000,), dtype=torch.int32, generator=seeded)
    values = torch.cat([halves, midpoints, bits.view(torch.float32), torch.tensor([65519.0, 65520.0, 1e-8])])
    got = values.to(dev).to(dtype).float() * 2
    assert_close(got, values.to(dtype).float() * 2, rtol=0, atol=0, equal_nan=True)


def test_large_outputs(dev, monkeypatch):
    # Over a few MB the CPU kernels store past the caches (non-temporal vector stores, then a
    # fence before the chunk reports done): odd sizes leave a scalar tail after the vector loop.
    cpu = _on_cpu_runtime(dev)
    if cpu:
        # The device streams from a quarter of its last-level cache up (75 MB on a 300 MB L3):
        # these sizes stream with the renderer's base threshold.
        options = contexts.devices()[dev.index].render_options
        assert options["stream_store_bytes"] >= STREAM_STORE_BYTES
        monkeypatch.setitem(options, "stream_store_bytes", STREAM_STORE_BYTES)
    x = torch.randn(1 << 20 | 7)
    rows, w, b = torch.randn(600, 1031), torch.randn(1031), torch.randn(1031)
    xd = x.to(dev)
    assert_close(xd * 2 + 1, x * 2 + 1)
    assert_close((xd.double() - 1).to(dev), x.double() - 1)
    assert_close((xd > 0).to(torch.int64), (x > 0).to(torch.int64))
    rows_d, w_d, b_d = rows.to(dev), w.to(dev), b.to(dev)
    got, sources = _launched(monkeypatch, lambda: torch.nn.functional.layer_norm(rows_d, (1031,), w_d, b_d))
    assert_close(got, torch.nn.functional.layer_norm(rows, (1031,), w, b), rtol=1e-4, atol=1e-4)
    if cpu:
        # One kernel, storing past the caches; the rows stream in (prefetched past the caches),
        # the weight and bias, read again for every row, do not: one streamed slot.
        assert len(sources) == 1 and "zyx-stream-stores" in sources[0]
        assert re.search(r'"zyx-prefetch"="\d+:512:0"', sources[0])
        # Rows of whole 64-byte lines: every vector store of the kernel is aligned and streams
        # (a buffer's address is loaded once at the kernel's entry, where its alignment stays
        # known; loaded in the row loop, the optimizer lost it and no store streamed).
        lines = torch.randn(512, 1024)
        got, sources = _launched(monkeypatch, lambda: torch.nn.functional.layer_norm(lines.to(dev), (1024,)))
        assert_close(got, torch.nn.functional.layer_norm(lines, (1024,)), rtol=1e-4, atol=1e-4)
        name = re.search(r"define void @(\w+)\(", sources[-1]).group(1)
        optimized = contexts.devices()[dev.index].runtime.optimized_ir(name, sources[-1])
        stores = re.findall(r"store <\d+ x float>.*", optimized)
        assert stores and all("!nontemporal" in store for store in stores)
        # softmax keeps its rows in cache (three passes over each) and reads the next row as it
        # stores this one (pipelined): no software prefetch.
        soft = torch.randn(600, 1031).to(dev)
        got, sources = _launched(monkeypatch, lambda: torch.softmax(soft, -1))
        assert_close(got, torch.softmax(soft.cpu(), -1))
        assert sources and all("%end, -1" in s and "zyx-prefetch" not in s for s in sources)
        # A row read in one pass is left to the hardware prefetcher.
        once = torch.randn(600, 1033).to(dev)
        got, sources = _launched(monkeypatch, lambda: once.sum(-1))
        assert_close(got, once.cpu().sum(-1), rtol=1e-4, atol=1e-4)
        assert sources and all("fadd" in s and "zyx-prefetch" not in s for s in sources)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_int_dtypes(dev, dtype):
    x = torch.randint(0, 100, (50, 9), dtype=dtype)
    y = torch.randint(1, 20, (50, 9), dtype=dtype)
    xd, yd = x.to(dev), y.to(dev)
    assert_close(xd + yd * 3, x + y * 3)
    assert_close(xd // yd, x // y)
    assert_close(torch.maximum(xd, yd), torch.maximum(x, y))
    assert_close(xd.sum(1), x.sum(1))
    assert_close((xd > yd).to(torch.int64), (x > y).to(torch.int64))


def test_bool(dev):
    x, y = torch.randn(40, 3) > 0, torch.randn(40, 3) > 0
    xd, yd = x.to(dev), y.to(dev)
    assert_close(xd & ~yd, x & ~y)
    assert_close(xd | yd, x | y)
    assert_close(xd.any(1), x.any(1))
    assert_close(xd.all(0), x.all(0))
    assert_close(torch.where(xd, 1.0, -1.0), torch.where(x, 1.0, -1.0))


def test_random_matches_cpu_backend(dev):
    cpu_dev = _device_for("cpu")
    torch.zyx.manual_seed_all(1234)
    a = torch.rand(1000, device=cpu_dev)
    torch.zyx.manual_seed_all(1234)
    b = torch.rand(1000, device=dev)
    # The counter-based generator is the same kernel on every backend.
    torch.testing.assert_close(a.cpu(), b.cpu())
    assert 0.0 <= float(b.min()) and float(b.max()) < 1.0


def test_cross_device_copy():
    cpu_dev, ocl_dev = _device_for("cpu"), _device_for("opencl")
    x = torch.randn(123, 5)
    a = x.to(cpu_dev) * 2
    b = a.to(ocl_dev) + 1
    c = b.to(cpu_dev) - 1
    assert b.device == ocl_dev and c.device == cpu_dev
    assert_close(b, x * 2 + 1)
    assert_close(c, x * 2)
    d = torch.empty(123, 5, device=ocl_dev)
    d.copy_(a)
    assert_close(d, x * 2)


# Long reductions with few outputs: on OpenCL one work group per output with a local-memory
# tree reduce (lowering's grouped reduces); on the CPU the same cases run as loops.
@pytest.mark.parametrize("shape", [(16, 4096), (5, 1000), (3, 7, 300), (1, 257)])
def test_grouped_row_reductions(dev, shape):
    x = torch.randn(*shape)
    xd = x.to(dev)
    assert_close(xd.sum(-1), x.sum(-1), rtol=1e-4, atol=1e-3)
    assert_close(xd.amax(-1), x.amax(-1))
    assert_close(xd.amin(-1), x.amin(-1))
    assert_close(xd.mean(-1), x.mean(-1), rtol=1e-4, atol=1e-5)
    assert_close(torch.softmax(xd, -1), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    assert_close(torch.log_softmax(xd, -1), torch.log_softmax(x, -1), rtol=1e-4, atol=1e-5)
    n = shape[-1]
    got = torch.nn.functional.layer_norm(xd, (n,))
    assert_close(got, torch.nn.functional.layer_norm(x, (n,)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1 << 20,), (1000, 333), (4, 64, 65)])
def test_grouped_full_reductions(dev, shape):
    x = torch.rand(*shape)
    xd = x.to(dev)
    assert_close(xd.sum(), x.double().sum().float(), rtol=1e-4, atol=1e-3)
    assert_close(xd.amax(), x.amax())
    assert_close(xd.amin(), x.amin())
    # A reduce over non-trailing axes: the flat reduced index splits over two axes.
    assert_close(xd.sum((0, -1)) if len(shape) > 1 else xd.sum(0), x.sum((0, -1)) if len(shape) > 1
                 else x.sum(0), rtol=1e-4, atol=1e-2)


def test_grouped_reduction_nan_and_inf(dev):
    x = torch.randn(6, 3000)
    x[1, 2999] = float("nan")
    x[2, 0] = float("nan")
    x[3, 1234] = float("inf")
    x[4] = -float("inf")
    xd = x.to(dev)
    assert_close(xd.amax(-1), x.amax(-1), equal_nan=True)
    assert_close(xd.amin(-1), x.amin(-1), equal_nan=True)
    assert_close(xd.amax(), x.amax(), equal_nan=True)
    assert_close(xd.sum(-1), x.sum(-1), rtol=1e-4, atol=1e-3, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_grouped_int_reductions(dev, dtype):
    x = torch.randint(0, 2 if dtype == torch.bool else 100, (7, 5000)).to(dtype)
    xd = x.to(dev)
    assert_close(xd.sum(-1), x.sum(-1))
    assert_close(xd.sum(), x.sum())
    assert_close(xd.amax(-1), x.amax(-1))
    assert_close(xd.amin(), x.amin())
    if dtype == torch.bool:
        assert_close(xd.any(-1), x.any(-1))
        assert_close(xd.all(), x.all())


def test_grouped_reduce_in_chain(dev):
    # Grouped reduces next to elementwise work: a norm, its use, a second reduce after it.
    x, w = torch.randn(32, 2048), torch.randn(2048)
    xd, wd = x.to(dev), w.to(dev)
    norm = xd / xd.norm(dim=-1, keepdim=True) * wd
    ref = x / x.norm(dim=-1, keepdim=True) * w
    assert_close(norm, ref, rtol=1e-4, atol=1e-5)
    assert_close((norm * norm).sum(-1).amax(), (ref * ref).sum(-1).amax(), rtol=1e-4, atol=1e-4)


def test_opencl_grouped_kernels_are_used():
    dev = _device_for("opencl")
    ctx = contexts.devices()[dev.index]
    x = torch.randn(8, 4096)
    before = {id(v[0]) for v in realize._lowered.values()}
    assert_close(x.to(dev).sum(-1) * 2, x.sum(-1) * 2, rtol=1e-4, atol=1e-3)
    new = [v[0] for v in realize._lowered.values() if id(v[0]) not in before]
    grouped = [k for k in new if k.group_size]
    assert ctx.lowering.group_size > 1 and grouped, "the 8 x 4096 row sum should be a grouped reduce"
    assert all(k.group_size <= ctx.runtime.max_group_size for k in grouped)
    ops = {ins.op for ins in grouped[0].instrs}
    assert {"LOCAL", "BARRIER", "SPECIAL", "IF"} <= ops


def test_opencl_async_copies_and_pool_reuse():
    dev = _device_for("opencl")
    ctx = contexts.devices()[dev.index]
    pool = ctx.pool
    x = torch.randn(256, 1024)
    # Host→device copies are asynchronous: their events wait in the table, not on the host.
    xd = x.to(dev)
    ys = [xd * float(i) for i in range(4)]
    for i, y in enumerate(ys):
        assert_close(y, x * float(i))
    del ys
    torch.zyx.synchronize()
    reserved = pool.reserved
    for i in range(5):
        y = (xd + float(i)).sum(-1)  # same sizes as before: served from the pool's cache
        assert_close(y, (x + float(i)).sum(-1), rtol=1e-4, atol=1e-3)
        del y
    torch.zyx.synchronize()
    pool._sweep()
    assert pool.reserved <= reserved + x.numel() * 4, "freed buffers should be reused, not reallocated"
