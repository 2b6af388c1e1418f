"""Aliasing and mutation semantics of zyx tensors, checked against the same code on CPU torch.

Views share storage: an in-place write through any view is visible through every other view
and the base; values captured lazily keep what they captured (DESIGN.md "Tensors, storages,
views, mutation"). Each test runs one function on a CPU tensor and on its zyx copy.
"""

import gc
import io

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close

from torch_zyx.record import pending


def _both(fn, *inputs):
    """Run ``fn`` on CPU clones and zyx copies of ``inputs``; compare every returned tensor."""
    cpu = fn(*[x.clone() for x in inputs])
    zyx = fn(*[x.to("zyx") for x in inputs])
    assert_close(zyx, cpu)


def _base():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)


def _base_to_views(x):
    v, w = x[1], x.t()[::2]
    x.add_(1)
    return v.clone(), w.clone()


def _sibling_views(x):
    a, b = x[1:3], x[:, 2]
    a.mul_(3)
    return b * 1


def _expand_read(x):
    e = x[0:1].expand(3, 6)
    x[0].add_(1)
    return e + 0


VIEW_MUTATIONS = {
    "step_slice": lambda x: (x[:, ::2].mul_(10), x)[1],
    "t": lambda x: (x.t()[1].add_(100), x)[1],
    "transpose": lambda x: (x.transpose(0, 1)[2:4, 1:3].fill_(-1), x)[1],
    "select": lambda x: (x.select(1, 3).zero_(), x)[1],
    "diagonal": lambda x: (x[:, :4].diagonal().add_(5), x)[1],
    "view": lambda x: (x.view(2, 12)[1, ::3].neg_(), x)[1],
    "unsqueeze": lambda x: (x.unsqueeze(0)[0, 1].sub_(1), x)[1],
    "nested": lambda x: (x[1:, 2:][::2, ::2].mul_(2), x)[1],
    "base_to_views": _base_to_views,
    "sibling_views": _sibling_views,
    "expand_read": _expand_read,
    "index_assign": lambda x: (x.__setitem__((torch.tensor([0, 2]).to(x.device),), 7.0), x)[1],
    "mask_assign": lambda x: (x.__setitem__(x > 10, -3.0), x)[1],
    "slice_iadd": lambda x: (x[:, 1:3].__iadd__(1), x)[1],
    "index_put_": lambda x: x.index_put_((torch.tensor([1, 3]).to(x.device),
                                          torch.tensor([0, 5]).to(x.device)),
                                         torch.tensor([9.0, 8.0]).to(x.device), accumulate=True),
    "masked_fill_": lambda x: (x[:, 1:].masked_fill_(x[:, 1:] > 5, 0.5), x)[1],
    "setitem_scalar": lambda x: (x.__setitem__((1, 2), 42.0), x)[1],
    "setitem_tensor": lambda x: (x.__setitem__((slice(None), 0), torch.ones(4).to(x.device)), x)[1],
}


@pytest.mark.parametrize("name", list(VIEW_MUTATIONS))
def test_view_mutation_visible_everywhere(name):
    _both(VIEW_MUTATIONS[name], _base())


def test_lazy_capture_survives_later_mutation():
    def fn(x):
        y = x + 1
        v = x[1]
        z = v * 2
        x.add_(1)
        v.mul_(0)
        return y, z, x
    _both(fn, _base())


def test_copy_to_device_snapshots_the_source():
    """``x.to("zyx")`` holds x's values at the call, whatever the caller does to x afterwards.
    OpenCL copied from x's memory asynchronously, so an in-place op right after the copy could
    land in it; two threads keep the cores busy so the copy would run late (14 of 300 copies
    were wrong that way before the pool staged the bytes)."""
    import threading

    stop = []

    def keep_busy():
        y = torch.randn(192, 192)
        while not stop:
            y @ y

    threads = [threading.Thread(target=keep_busy) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        copies = []
        for _ in range(100):
            x = torch.zeros(64, 64)
            copies.append(x.to("zyx"))
            x.add_(1)
    finally:
        stop.append(True)
        for thread in threads:
            thread.join()
    assert all(z.cpu().sum().item() == 0 for z in copies)


def test_many_mutations_chain():
    def fn(x):
        for i in range(5):
            x[i % 4].add_(i)
            x[:, i].mul_(2)
        return x
    _both(fn, _base())


def test_out_fresh_resized_noncontiguous():
    a, b = torch.randn(3, 4), torch.randn(3, 4)

    def fn(a, b):
        fresh = torch.empty(3, 4, device=a.device)
        torch.add(a, b, out=fresh)
        resized = torch.empty(0, device=a.device)
        torch.mul(a, b, out=resized)
        big = torch.zeros(4, 6, device=a.device)
        torch.sub(a, b, out=big.t()[1:5, :3].t())
        return fresh, resized, big
    _both(fn, a, b)


def test_copy_across_devices_and_dtypes():
    src = torch.randn(3, 5)
    z = torch.zeros(3, 5, device="zyx")
    z.copy_(src)
    assert_close(z, src)
    zi = torch.zeros(3, 5, dtype=torch.int32, device="zyx")
    zi.copy_(z * 10)
    assert_close(zi, (src * 10).to(torch.int32))
    back = torch.zeros(3, 5, dtype=torch.float64)
    back.copy_(z)
    torch.testing.assert_close(back, src.double())
    part = torch.zeros(5, 3, device="zyx")
    part.t().copy_(src)
    assert_close(part, src.t().contiguous())
    z64 = torch.zeros(5, device="zyx", dtype=torch.float64)
    z64[1:4].copy_(torch.tensor([1, 2, 3]))
    assert_close(z64, torch.tensor([0, 1, 2, 3, 0], dtype=torch.float64))


def test_data_detach_resize_set_clone():
    x = torch.randn(4, 3).to("zyx")
    d = x.detach()
    d.add_(1)  # detach shares storage
    cpu = torch.randn(4, 3)
    x_cpu = cpu.clone()
    z = cpu.to("zyx")
    c = z.clone()
    z.zero_()
    x_cpu.zero_()
    assert_close(c, cpu)  # clone independent
    assert_close(z, x_cpu)
    w = torch.nn.Parameter(torch.ones(2, 2, device="zyx"))
    w.data = torch.full((3,), 2.0, device="zyx")
    assert w.shape == (3,) and isinstance(w, torch.nn.Parameter)
    assert_close(w.detach(), torch.full((3,), 2.0))
    r = torch.arange(6.0).to("zyx")
    r.resize_(2, 2)
    assert_close(r, torch.arange(4.0).reshape(2, 2))
    r.resize_(3, 3)
    assert_close(r[:1], torch.tensor([[0.0, 1.0, 2.0]]))
    s = torch.empty(0, device="zyx")
    src = torch.arange(5.0).to("zyx")
    s.set_(src)
    src[0] = 9
    assert_close(s, torch.tensor([9.0, 1, 2, 3, 4]))
    f = torch.empty(2, 3, device="zyx").fill_(1.5)
    assert_close(f, torch.full((2, 3), 1.5))
    assert_close(d, d.cpu())


def test_version_counter_and_inplace_autograd_error():
    for dev in ("cpu", "zyx"):
        x = torch.randn(3, device=dev, requires_grad=True)
        y = x * 1
        v0 = y._version
        y.add_(1)
        assert y._version == v0 + 1
        y[0] = 2
        assert y._version == v0 + 2
        a = torch.randn(3, device=dev, requires_grad=True)
        b = a.sigmoid()
        c = b * 2
        b.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            c.sum().backward()
        # a view bumps the version of its base too
        base = torch.randn(4, device=dev, requires_grad=True).exp()
        out = base.sin()
        base[1:].add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_inplace_on_view_autograd():
    def fn(x):
        x = x.clone().requires_grad_(True)
        y = x * 2
        y[:, 1].mul_(3)
        y.t()[0].add_(1)
        y.sum().backward()
        return y.detach(), x.grad
    _both(fn, _base())


def test_save_load_roundtrip():
    t = torch.randn(3, 4).to("zyx")
    view = t[1:, ::2]
    buf = io.BytesIO()
    torch.save({"t": t, "v": view, "i": torch.arange(3).to("zyx")}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["t"].device.type == "zyx"
    assert_close(loaded["t"], t.cpu())
    assert_close(loaded["v"], view.cpu())
    assert_close(loaded["i"], torch.arange(3))
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["t"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["t"], t.cpu())


@pytest.mark.parametrize("map_location", [None, "cpu", "zyx"])
def test_save_keeps_views_of_one_storage_shared(map_location):
    """zyx tensors saved as views of one storage are written as one storage and load (on zyx, or
    on the CPU) as views of one storage, as CPU tensors do: same strides and offsets, and a write
    through one loaded view shows in the others."""

    def save_load(device):
        base = torch.arange(12.0, device=device)
        saved = {"base": base, "rows": base[2:8].view(2, 3), "t": base.view(3, 4).t(),
                 "odd": base[1::3], "other": torch.ones(2, device=device)}
        buf = io.BytesIO()
        torch.save(saved, buf)
        buf.seek(0)
        loaded = torch.load(buf, map_location=map_location)
        loaded["base"][3] = 100.0
        loaded["t"][0, 2] = -1.0
        return buf.getbuffer().nbytes, loaded

    from torch_zyx.integration import device_guard
    from torch_zyx.record import tensor

    if map_location == "zyx" and not device_guard.native_hooks():
        # Without the C++ hooks no zyx storage can be made: a clear error, not a crash.
        with pytest.raises(RuntimeError, match="C\\+\\+ device hooks"):
            save_load("zyx")
        return
    zyx_bytes, zyx = save_load("zyx")
    cpu_bytes, cpu = save_load("cpu")
    assert abs(zyx_bytes - cpu_bytes) < 200  # one storage written, not one per view
    for key, value in cpu.items():
        assert zyx[key].device.type == (map_location or "zyx"), key
        assert zyx[key].stride() == value.stride() and zyx[key].storage_offset() == value.storage_offset()
        torch.testing.assert_close(zyx[key].cpu(), value.cpu())  # (value: on zyx for "zyx")
    assert not tensor._saved and not tensor._from_host_storages  # nothing kept after the save and the load


@pytest.mark.parametrize("location", ["zyx", "zyx:0", "device", "dict", "function"])
def test_load_cpu_checkpoint_to_zyx(location):
    """torch.load(map_location=...) of a CPU checkpoint gives zyx tensors, views with their
    strides, every dtype (it crashed the process: a zyx storage had no allocator)."""
    from torch_zyx.integration import device_guard

    if not device_guard.native_hooks():
        pytest.skip("zyx storages need zyx's C++ hooks (no C++ compiler, or ZYX_NATIVE=0)")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.arange(12.0).reshape(3, 4)
    saved = {"x": x, "view": x[1:, ::2], "empty": torch.empty(0, 5), "half": x.half(),
             "long": torch.arange(5), "bool": torch.tensor([True, False]), "scalar": torch.tensor(3.5),
             **model.state_dict()}
    buf = io.BytesIO()
    torch.save(saved, buf)
    buf.seek(0)
    map_location = {"device": torch.device("zyx"), "dict": {"cpu": "zyx:0"},
                    "function": lambda storage, where: storage.to(device="zyx")}.get(location, location)
    loaded = torch.load(buf, map_location=map_location)
    for key, value in saved.items():
        assert loaded[key].device.type == "zyx", key
        assert loaded[key].stride() == value.stride() and torch.equal(loaded[key].cpu(), value), key
    copy_ = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).to("zyx")
    copy_.load_state_dict({k: v for k, v in loaded.items() if k[0].isdigit()})
    torch.testing.assert_close(copy_(x.to("zyx")).cpu(), model(x).detach())
    storage = torch.UntypedStorage(8, device="zyx")
    storage.copy_(torch.arange(8, dtype=torch.uint8).untyped_storage())
    assert storage.device.type == "zyx" and storage.cpu().tolist() == list(range(8))
    with torch.zyx.device("zyx:0"):
        assert torch.zyx.current_device() == 0


def test_load_to_zyx_keeps_views_of_one_storage_shared():
    """Tensors saved as views of one storage (tied weights, slices) load under
    map_location="zyx" as views of one zyx storage: a write through one shows in the others."""
    from torch_zyx.integration import device_guard

    if not device_guard.native_hooks():
        pytest.skip("zyx storages need zyx's C++ hooks (no C++ compiler, or ZYX_NATIVE=0)")
    base = torch.arange(12.0)
    saved = {"base": base, "rows": base[2:8].view(2, 3), "t": base.view(3, 4).t(), "other": torch.ones(2)}
    buf = io.BytesIO()
    torch.save(saved, buf)
    buf.seek(0)
    cpu, zyx = torch.load(buf), None
    buf.seek(0)
    zyx = torch.load(buf, map_location="zyx")
    for key, value in cpu.items():
        assert zyx[key].stride() == value.stride() and zyx[key].storage_offset() == value.storage_offset()
    for loaded in (cpu, zyx):
        loaded["base"][3] = 100.0
        loaded["t"][0, 2] = -1.0
    for key, value in cpu.items():
        torch.testing.assert_close(zyx[key].cpu(), value)


def test_storage_queries():
    """is_set_to and _has_same_storage_numel (forward AD asks the latter of primal and tangent)."""
    a = torch.ones(3, 4, device="zyx")
    assert a.is_set_to(a) and a.is_set_to(a.view(3, 4))
    assert not a.is_set_to(a[1:]) and not a.is_set_to(a.t())
    assert not a.is_set_to(torch.ones(3, 4, device="zyx"))
    same_numel = torch.ops.aten._has_same_storage_numel
    assert same_numel(a, a[1:]) and same_numel(a, a + 1) and not same_numel(a, torch.ones(5, device="zyx"))


def test_operands_on_another_device_raise_as_on_cuda():
    a = torch.ones(3, device="zyx")
    for other in (torch.ones(3), torch.ones(1)):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at "
                                               "least two devices, zyx:0 and cpu!"):
            a + other
    assert_close(a * torch.tensor(2.0), torch.full((3,), 2.0))  # a 0-d CPU tensor is a scalar


def test_deepcopy_tensor_parameter_module():
    import copy

    model = torch.nn.Linear(4, 3).to("zyx")
    model.weight.grad = torch.ones(3, 4, device="zyx")
    clone = copy.deepcopy(model)
    assert clone.weight.device.type == "zyx" and isinstance(clone.weight, torch.nn.Parameter)
    assert clone.weight.requires_grad and clone.weight is not model.weight
    assert_close(clone.weight, model.weight.cpu())
    assert_close(clone.weight.grad, torch.ones(3, 4))
    with torch.no_grad():
        clone.weight.add_(1)  # the copy owns its values
    assert_close(model.weight, clone.weight.cpu() - 1)
    shared = torch.randn(5).to("zyx")
    pair = copy.deepcopy([shared, shared])  # the memo keeps aliasing
    assert pair[0] is pair[1]
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(torch.randn(2, device="zyx", requires_grad=True) * 2)


# Views whose metadata the dispatcher computes itself (ops/core/movement.py) rather than through
# PyTorch's meta tensors: sizes, strides and offsets must be PyTorch's, errors too.
VIEW_METADATA = {
    "view": lambda x: x.view(3, 8), "view_infer": lambda x: x.view(-1, 2, 1),
    "view_1": lambda x: x[0:1].view(1, 1, 6), "t": lambda x: x.t(), "t_1d": lambda x: x[0].t(),
    "transpose_neg": lambda x: x.unsqueeze(1).transpose(-1, 0), "permute": lambda x: x[None].permute(2, 0, 1),
    "unsqueeze_end": lambda x: x.t().unsqueeze(-1), "unsqueeze_0d": lambda x: x[1, 2].unsqueeze(0),
    "squeeze": lambda x: x[:1, None, 2:3].squeeze(), "squeeze_dims": lambda x: x[:1, None].squeeze((0, 1)),
    "squeeze_dim_kept": lambda x: x.squeeze(1), "expand": lambda x: x[:, :1].expand(2, -1, 5),
    "expand_same_1": lambda x: x[:1].expand(1, 1, 6), "select_neg": lambda x: x.t().select(1, -2),
    "slice_step": lambda x: x[:, 1::2][1:-1], "slice_clamp": lambda x: x[-100:100, 7:2],
    "slice_end": lambda x: x[:, 5:], "narrow": lambda x: x.narrow(1, 2, 3),
    "detach": lambda x: x.t().detach(),
    "view_noncontiguous": lambda x: x.t().view(24), "select_oob": lambda x: x.select(0, 4),
    "transpose_oob": lambda x: x.transpose(0, 2), "permute_repeat": lambda x: x.permute(0, 0),
    "expand_bad": lambda x: x.expand(3, 6), "squeeze_repeat": lambda x: x.squeeze((1, 1)),
}


@pytest.mark.parametrize("name", list(VIEW_METADATA))
def test_view_metadata_matches_cpu(name):
    fn = VIEW_METADATA[name]
    base = _base()[:, :6]
    results = []
    for x in (base, base.to("zyx")):
        try:
            v = fn(x)
            results.append((tuple(v.shape), v.stride(), v.storage_offset()))
        except (RuntimeError, IndexError) as e:
            results.append(type(e))
    assert results[0] == results[1]


def test_repeated_scalar_operands_keep_promotion():
    # The binary fast path remembers its last scalar operand per op: equal scalars of another
    # class (2, 2.0, True), tensors of another dtype with the same shape (metadata), and a
    # storage overwritten through a view of another shape must each take their own path.
    def fn(i, f, d):
        out = []
        for s in (2, 2.0, True, 2, 2.0, 2):
            out += [i * s, f * s, d * s, (i * s) * s, (f + s) + s]
        v = f.view(2, 3)
        v.add_(1)
        out += [f * 2, f * 2, v * 2]
        return out

    i = torch.arange(6)
    _both(fn, i, i.float() * 0.5 - 1, i.double() * 0.25 + 2)


def test_live_lazy_values_are_realized_together_and_dead_ones_never():
    import torch_zyx

    base = torch.ones(1000, device="zyx")
    torch.zyx.synchronize()
    allocated = []
    for keep in (True, False):
        torch_zyx.reset_counters()
        a = base * 3
        b = base * 4
        if not keep:
            del a
        assert b.cpu()[0].item() == 4.0
        allocated.append(torch_zyx.counters()["bytes_allocated"])
    assert allocated == [8000, 4000]  # both outputs when ``a`` lives, only ``b``'s when it died


def test_inplace_on_a_realized_tensor_is_realized_by_synchronize():
    from torch_zyx.record.pending import pending_storages

    x = torch.zeros(5, device="zyx")
    x.cpu()
    x.add_(1)  # a realized storage given a lazy value again
    assert x._storage in pending_storages()
    torch.zyx.synchronize()
    assert x._storage.value.op == "BUFFER" and not pending_storages()
    assert x.cpu().tolist() == [1.0] * 5


# --------------------------------------------- index values checked on the device (checks.py)
# Each case runs on x = arange(6).reshape(2, 3) with index tensors made by ``T`` on x's device;
# out-of-range entries raise CPU torch's exception with its message, at the realization.
INDEX_VALUE_CASES = {
    "gather above": lambda x, T: torch.gather(x, 1, T([[0, 5], [1, 2]])),
    "gather negative": lambda x, T: torch.gather(x, 1, T([[0, -1], [1, 2]])),
    "gather first of several": lambda x, T: torch.gather(x, 1, T([[7, 5], [1, -2]])),
    "gather in range": lambda x, T: torch.gather(x, 1, T([[0, 2], [1, 2]])),
    "gather 0-d": lambda x, T: torch.gather(x[0, 1], 0, T(1)),
    "index_select above": lambda x, T: torch.index_select(x, 0, T([2])),
    "index_select negative": lambda x, T: torch.index_select(x, 0, T([-1])),
    "index_select 0-d": lambda x, T: torch.index_select(x[0, 1], 0, T([1])),
    "index_select dim 1": lambda x, T: torch.index_select(x, 1, T([4], dtype=torch.int32)),
    "index_select dim 1 negative": lambda x, T: torch.index_select(x, 1, T([-1])),
    "index_select int32 negative": lambda x, T: torch.index_select(x, 0, T([-1], dtype=torch.int32)),
    "index above": lambda x, T: x[T([3])],
    "index negative in range": lambda x, T: x[T([-1])],
    "index negative below": lambda x, T: x[T([-3])],
    "index second dim": lambda x, T: x[T([0]), T([4])],
    "index first dim first": lambda x, T: x[T([1, 5]), T([0, 9])],
    "index mask": lambda x, T: x[x > 2],
    "embedding above": lambda x, T: F.embedding(T([9]), x),
    "embedding negative": lambda x, T: F.embedding(T([-1]), x),
    "take above": lambda x, T: torch.take(x, T([7])),
    "take negative in range": lambda x, T: torch.take(x, T([-6])),
    "take negative below": lambda x, T: torch.take(x, T([-7])),
    "scatter above": lambda x, T: torch.zeros_like(x).scatter(1, T([[3]]), 1.0),
    "scatter_add above": lambda x, T: torch.zeros_like(x).scatter_add(1, T([[3]]), x[:1, :1]),
    "scatter_reduce above": lambda x, T: x[0].scatter_reduce(0, T([5]), x[0, :1], "sum"),
    "scatter reduce= above": lambda x, T: torch.zeros_like(x).scatter(1, T([[3]]), x[:1, :1], reduce="add"),
    "embedding_bag above": lambda x, T: F.embedding_bag(T([0, 7]), x, T([0])),
    "take_along_dim above": lambda x, T: torch.take_along_dim(x, T([[0, 5]]), 1),
    "index_put above": lambda x, T: torch.zeros_like(x[0]).index_put_((T([5]),), x[0, 1]),
    "index_put negative in range": lambda x, T: torch.zeros_like(x[0]).index_put_((T([-1]),), x[0, 1]),
    "index_add above": lambda x, T: torch.zeros_like(x[0]).index_add_(0, T([5]), x[0, :1]),
    "index_add negative": lambda x, T: torch.zeros_like(x[0]).index_add_(0, T([-1]), x[0, :1]),
    "index_copy above": lambda x, T: torch.zeros_like(x[0]).index_copy_(0, T([5]), x[0, :1]),
    "index_copy negative": lambda x, T: torch.zeros_like(x[0]).index_copy_(0, T([-1]), x[0, :1]),
    "index_fill above": lambda x, T: x.index_fill(1, T([5]), 1.0),
    "index_fill negative in range": lambda x, T: x.index_fill(1, T([0, -1]), 1.0),
    "index_reduce above": lambda x, T: x[0].index_reduce(0, T([5]), x[0, :1], "prod"),
    "put above": lambda x, T: torch.zeros_like(x[0]).put_(T([5]), x[0, :1]),
    "put negative in range": lambda x, T: torch.zeros_like(x[0]).put_(T([-1]), x[0, :1]),
    "nll_loss above": lambda x, T: F.nll_loss(x, T([0, 3])),
    "nll_loss negative": lambda x, T: F.nll_loss(x, T([0, -1])),
    "nll_loss ignored": lambda x, T: F.nll_loss(x, T([0, -100])),
    "cross_entropy above": lambda x, T: F.cross_entropy(x, T([0, 3])),
    "nll_loss spatial above": lambda x, T: F.nll_loss(x.reshape(1, 3, 2, 1), T([[[0], [3]]])),
}


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("name", INDEX_VALUE_CASES)
def test_index_values_are_checked_like_cpu(name):
    fn = INDEX_VALUE_CASES[name]
    x = torch.arange(6.0).reshape(2, 3)
    try:
        expected, cpu_error = fn(x, torch.tensor), None
    except (IndexError, RuntimeError) as error:
        cpu_error = error
    zyx_x = x.to("zyx")

    def on_device(values, dtype=None):
        return torch.tensor(values, dtype=dtype, device="zyx")

    if cpu_error is None:
        assert_close(fn(zyx_x, on_device), expected)
        return
    with pytest.raises(type(cpu_error)) as zyx_error:
        fn(zyx_x, on_device).cpu()
    assert str(zyx_error.value) == str(cpu_error)


def test_index_error_surfaces_at_the_next_synchronization_once():
    x = torch.arange(6.0, device="zyx")
    y = x[torch.tensor([7], device="zyx")]  # recorded: nothing is computed, nothing raised
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 6"):
        torch.zyx.synchronize()
    # Raised once; the device goes on.
    assert x[torch.tensor([-1], device="zyx")].item() == 5.0
    del y
    # A result dropped at once still had a bad index: not raised by the values that do not
    # depend on it, but by the next synchronization.
    x[torch.tensor([9], device="zyx")]
    assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    with pytest.raises(IndexError, match="index 9 "):
        torch.zyx.synchronize()
    # Of two bad ops, the one recorded first is the one reported.
    a = torch.gather(x, 0, torch.tensor([8], device="zyx"))
    b = torch.gather(x, 0, torch.tensor([6], device="zyx"))
    with pytest.raises(RuntimeError, match="index 8 is out of bounds"):
        (a + b).cpu()
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_index_error_belongs_to_the_values_computed_from_the_bad_op():
    """Realized in one graph with unrelated work, a failed check raises at reads of the op's
    result and of values computed from it (then or later), not at reads of the others."""
    w = torch.randn(10, 3, device="zyx")
    bad = w[torch.tensor([1, 12], device="zyx")]
    unrelated = w.sum(0) * 2
    assert unrelated.cpu().shape == (3,)  # realizes bad too, in the same graph
    for read in (lambda t: t.cpu(), lambda t: t[0].tolist(), lambda t: (t.sum() + 1).item()):
        with pytest.raises(IndexError, match="index 12 is out of bounds for dimension 0 with size 10"):
            read(bad)
    divided = torch.arange(6, device="zyx") // torch.tensor([1, 0, 1, 1, 1, 1], device="zyx")
    assert (w + 1).cpu().shape == (10, 3)  # computes divided too: its buffer holds the error
    later = divided * 2  # computed from that buffer
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        later.cpu()
    assert (w * 2).cpu().shape == (10, 3)
    # The errors go with the values that hold them (a raised error does not keep them alive).
    del bad, divided, later
    gc.collect()
    assert not pending.poisoned
    # A large result read straight into the CPU tensor (transfer.py's direct read-back).
    rows = torch.arange(30000, device="zyx") % 12
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 10"):
        (w[rows] * 2).cpu()
    torch.zyx.synchronize()  # nothing left over


def _expanded(v):
    return v[:3][None].expand(3, 3)


def _ints(values, like):
    return torch.tensor(values, device=like.device)


# Writes whose destination overlaps itself or an input, each run on a fresh arange(12.) (CPU
# torch 2.13 refuses many with "unsupported operation: ..."; zyx must refuse the same ones and
# compute the others as CPU torch does).
OVERLAP_CASES = {
    # the destination's own elements overlap (an expanded tensor)
    "expanded add_": lambda v: _expanded(v).add_(1),
    "expanded relu_": lambda v: _expanded(v).relu_(),
    "expanded lerp_": lambda v: _expanded(v).lerp_(torch.ones_like(v[:9]).view(3, 3), 0.5),
    "expanded copy_": lambda v: _expanded(v).copy_(torch.ones_like(v[:9]).view(3, 3)),
    "expanded clamp_": lambda v: _expanded(v).clamp_(0, 1),
    "expanded div_ tensor": lambda v: _expanded(v).div_(v[3:6] + 1),
    "expanded mm out": lambda v: torch.mm(v[:9].view(3, 3), v[:9].view(3, 3), out=_expanded(v.clone())),
    "expanded cumsum_": lambda v: _expanded(v).cumsum_(0),
    "expanded scatter_": lambda v: _expanded(v).scatter_(1, _ints([[0], [1], [2]], v), 1.0),
    "expanded fill_": lambda v: (_expanded(v).fill_(2), v)[1],
    "expanded zero_": lambda v: (_expanded(v).zero_(), v)[1],
    "expanded uniform_": lambda v: _expanded(v).uniform_(),
    "expanded normal_": lambda v: _expanded(v).normal_(),
    "expanded bernoulli_": lambda v: _expanded(v).bernoulli_(0.5),
    "expanded random_": lambda v: _expanded(v).random_(0, 4),
    "expanded fill_ tensor": lambda v: _expanded(v).fill_(torch.tensor(2.0)),
    # ... and the writes ATen lets an expanded destination take, element by element: a shared
    # location ends with the last value written to it (deprecated for the masked/indexed ones)
    "expanded index_put_ first row": lambda v: (_expanded(v).index_put_((_ints([0], v),), torch.tensor(3.0)),
                                                v)[1],
    "expanded index_put_ rows": lambda v: (_expanded(v).index_put_((_ints([0, 2], v),),
                                                                   v[6:12].view(2, 3) * 2), v)[1],
    "expanded index_put_ element": lambda v: (_expanded(v).index_put_((_ints([1], v), _ints([2], v)),
                                                                      torch.tensor(-1.0)), v)[1],
    "expanded masked_fill_ per row": lambda v: (_expanded(v).masked_fill_(
        torch.tensor([[True, False, False], [False, False, False], [False, False, True]], device=v.device),
        5.0), v)[1],
    "expanded masked_fill_ NaN kept": lambda v: (v.fill_(float("nan")), _expanded(v).masked_fill_(
        torch.tensor([[True, False, False]] + [[False] * 3] * 2, device=v.device), 1.0), v)[2],
    "expanded index_fill_": lambda v: (_expanded(v).index_fill_(1, _ints([1], v), 8.0), v)[1],
    "expanded 2 axes index_put_": lambda v: (v[:1].view(1, 1).expand(2, 3).index_put_(
        (_ints([1], v), _ints([2], v)), torch.tensor(9.0)), v)[1],
    "expanded tril_": lambda v: (_expanded(v).tril_(), v)[1],
    # an input partly overlaps the destination
    "shift by setitem": lambda v: v.__setitem__(slice(1, None), v[:-1]),
    "shift by copy_": lambda v: v[1:].copy_(v[:-1]),
    "sub_ shifted": lambda v: v[1:].sub_(v[:-1]),
    "pow_ shifted": lambda v: v[1:].pow_(v[:-1] / 10),
    "add_ broadcast row of self": lambda v: v.view(3, 4).add_(v[:4]),
    "add_ 0-d view of self": lambda v: v.add_(v[0]),
    "add out shifted": lambda v: torch.add(v[1:5], v[1:5], out=v[:4]),
    "clamp out shifted": lambda v: torch.clamp(v[:4], 0, 1, out=v[2:6]),
    "same span, other strides": lambda v: v.view(3, 4).add_(v.view(4, 3).t()),
    "copy_ transposed self": lambda v: v.view(3, 4).copy_(v.view(4, 3).t()),
    "index_put_ values of self": lambda v: v.index_put_((_ints([4, 5], v),), v[:2]),
    "index_copy_ of self": lambda v: v.index_copy_(0, _ints([4, 5], v), v[:2]),
    "index_add_ of self": lambda v: v.index_add_(0, _ints([0, 1], v), v[:2]),
    "scatter_ of self": lambda v: v.scatter_(0, _ints([4, 5], v), v[:2]),
    "cumsum out shifted": lambda v: torch.cumsum(v[:5], 0, out=v[2:7]),
    "cat out over its inputs": lambda v: torch.cat([v[:2], v[2:4]], out=v[1:5]),
    "cat out exactly its inputs": lambda v: torch.cat([v[:2], v[2:4]], out=v[:4]),
    "index_select out of self": lambda v: torch.index_select(v[:4], 0, _ints([0, 1], v), out=v[3:5]),
    # gather checks its out= once resized to the result (it overlaps the input only then);
    # index_select checks it as given
    "gather out resized over its input": lambda v: torch.gather(v[1:], 0, _ints([0, 1], v), out=v[:1]),
    "index_select out resized over its input": lambda v: torch.index_select(v[2:], 0, _ints([0, 1], v),
                                                                            out=v[:1]),
    # allowed: exactly the same elements, disjoint parts, spans ATen does not judge, no check.
    # (Reductions and matmuls into an output that partly overlaps their input are allowed as well;
    # CPU torch's results there depend on its kernels' order, zyx computes the values as if the
    # input were copied first: not compared.)
    "add_ self": lambda v: v.add_(v),
    "add out exactly the input": lambda v: torch.add(v, 1, out=v),
    "mul_ other row": lambda v: v.view(3, 4)[0].mul_(v.view(3, 4)[1]),
    "add_ non-dense halves": lambda v: v.view(3, 4)[:, :2].add_(v.view(3, 4)[:, 1:3]),
    "masked_fill_ by own mask": lambda v: v.masked_fill_(v > 5, 0.0),
}


@pytest.mark.filterwarnings("ignore:Use of")
@pytest.mark.parametrize("name", OVERLAP_CASES)
def test_overlapping_writes_like_cpu(name):
    fn = OVERLAP_CASES[name]
    cpu = torch.arange(12.0)
    try:
        result, cpu_error = fn(cpu), None
    except RuntimeError as error:
        cpu_error = error
    zyx = torch.arange(12.0, device="zyx")
    if cpu_error is None:
        zyx_result = fn(zyx)
        assert_close(zyx, cpu, equal_nan=True)
        if isinstance(result, torch.Tensor):
            assert_close(zyx_result, result, equal_nan=True)
        return
    with pytest.raises(RuntimeError) as zyx_error:
        fn(zyx)
    assert str(zyx_error.value) == str(cpu_error)
    assert_close(zyx, torch.arange(12.0))  # nothing was written


def test_expanded_masked_writes_warn_as_on_cpu():
    for device in ("cpu", "zyx"):
        x = torch.zeros(3, device=device).expand(2, 3)
        with pytest.warns(UserWarning, match="Use of index_put_ on expanded tensors is deprecated"):
            x.index_put_((torch.tensor([0], device=device),), torch.tensor(1.0, device=device))
        with pytest.warns(UserWarning, match="Use of masked_fill_ on expanded tensors is deprecated"):
            x.masked_fill_(torch.ones(2, 3, dtype=torch.bool, device=device), 2.0)
        assert x.cpu().tolist() == [[2.0] * 3] * 2


# out= tensors of a dtype the op cannot write into: ATen's error, raised before anything runs.
OUT_DTYPE_CASES = {
    "gather": lambda x, out: torch.gather(x, 1, torch.zeros_like(out, dtype=torch.long), out=out),
    "multinomial": lambda x, out: torch.multinomial(x.abs() + 1, 2, out=out),
    "aminmax": lambda x, out: torch.aminmax(x, dim=1, out=(out, out.clone())),
}


@pytest.mark.parametrize("name", OUT_DTYPE_CASES)
def test_out_dtype_errors_like_cpu(name):
    fn = OUT_DTYPE_CASES[name]
    x = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(RuntimeError) as cpu_error:
        fn(x, torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError) as zyx_error:
        fn(x.to("zyx"), torch.zeros(2, 2, dtype=torch.float64, device="zyx"))
    assert str(zyx_error.value) == str(cpu_error.value)


def test_inference_mode_views_of_normal_tensors_like_cpu():
    """In inference mode, a view of a tensor made outside it is a normal tensor (CPU torch's rule):
    writing through it (a KV cache filled in an inference-mode generation loop) bumps the
    base's version; fresh results are inference tensors."""
    results = {}
    for device in ("cpu", "zyx"):
        cache = torch.zeros(2, 6, 3, device=device)
        with torch.inference_mode():
            for step in range(3):
                cache[:, step] = torch.full((2, 3), float(step + 1), device=device)
            view, fresh = cache[:, :3], cache[:, :3] * 2
            flags = (view.is_inference(), fresh.is_inference(), cache.transpose(0, 1).is_inference())
        results[device] = (cache, cache._version, flags)
    assert_close(results["zyx"][0], results["cpu"][0])
    assert results["zyx"][1:] == results["cpu"][1:]


FLATTEN_VIEWS = {
    "transposed": lambda t: t.transpose(0, 1),
    "permuted": lambda t: t.permute(2, 0, 1),
    "sliced": lambda t: t[:, 1:],
    "stepped": lambda t: t[:, :, ::2],
    "expanded": lambda t: t[:1].expand(3, 3, 4),
    "contiguous": lambda t: t,
}


@pytest.mark.parametrize("view", FLATTEN_VIEWS)
@pytest.mark.parametrize("dims", [(0, -1), (0, 1), (1, 2), (2, 2)])
def test_inference_mode_flatten_like_cpu(view, dims):
    """flatten reaches the device itself below autograd (inference mode, decompositions): a view
    where the flattened axes are one run in memory, else a copy, as reshape (a transposed
    matrix flattened as a view of its storage read the storage in memory order)."""
    results = {}
    for device in ("cpu", "zyx"):
        with torch.inference_mode():
            x = torch.arange(24.0, device=device).reshape(2, 3, 4)
            flat = FLATTEN_VIEWS[view](x).flatten(*dims)
            before = flat.clone()
            x.add_(100)  # seen through a view, not by a copy
        results[device] = (before, flat, flat.stride())
    assert_close(results["zyx"][:2], results["cpu"][:2])
    assert results["zyx"][2] == results["cpu"][2]


@pytest.mark.parametrize("size, step", [(3, 2), (2, 3), (4, 1), (3, 3)])
def test_unfold_backward_like_cpu(size, step):
    """Tensor.unfold's gradient (PyTorch's decomposition flattens an unfolded index: overlapping
    windows indexed the storage past its end)."""
    x = torch.randn(10, 3)
    grads = {}
    for device in ("cpu", "zyx"):
        leaf = x.to(device).requires_grad_()
        out = leaf.unfold(0, size, step)
        weight = torch.arange(out.numel(), dtype=torch.float32).reshape(out.shape).to(device)
        (grads[device],) = torch.autograd.grad((out * weight).sum(), leaf)
    assert_close(grads["zyx"], grads["cpu"])


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.float16])
def test_inference_mode_square_dtype_like_cpu(dtype):
    """square reaches the device itself below autograd; ATen computes it as pow(x, 2), so a bool
    tensor squares to int64 (zyx kept bool), and square_ of one raises."""
    x = torch.tensor([[1, 0, 1], [0, 1, 1]]).to(dtype)
    with torch.inference_mode():
        cpu, zyx = torch.square(x.t()), torch.square(x.to("zyx").t())
    assert zyx.dtype == cpu.dtype
    assert_close(zyx, cpu)
    if dtype == torch.bool:
        with torch.inference_mode(), pytest.raises(RuntimeError, match="can't be cast to the desired output"):
            x.to("zyx").square_()
