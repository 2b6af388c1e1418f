"""Storages of zyx tensors against CPU torch: ``data_ptr()``, ``untyped_storage()``, ``storage()``,
``set_`` to a storage or a tensor, ``is_set_to``, and code that groups tensors by storage pointer
(safetensors' ``storage_ptr``/``storage_size``, torch.save, tied weights).

Each relation is checked on CPU tensors and on zyx tensors by the same code, so zyx must give what
CPU torch gives: pointers of views differ by their offsets, tensors of different storages never
share one, writes through a tensor set to a storage show in the others. zyx's pointers address its
home buffers (record/pinned.py), which must keep their address across lazy in-place writes.
"""

import ctypes
import io
import warnings

import pytest
import torch

import torch_zyx  # noqa: F401
from torch_zyx.integration import device_guard

pytestmark = pytest.mark.usefixtures("no_fallback")

DEVICES = ["cpu", "zyx"]

needs_hooks = pytest.mark.skipif(
    not device_guard.native_hooks(), reason="zyx's C++ device hooks are not loaded (no C++ compiler, or "
    "ZYX_NATIVE=0): storage copies (UntypedStorage.copy_, .cpu()) need their patched copy_ and allocator")


def storage_ptr(t: torch.Tensor) -> int:
    """safetensors' ``storage_ptr``."""
    try:
        return t.untyped_storage().data_ptr()
    except NotImplementedError:  # (safetensors catches every exception here)
        return typed_storage(t).data_ptr()


def typed_storage(t: torch.Tensor):
    """``t.storage()`` (its deprecation warning is given once per process, so not asserted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return t.storage()


def storage_size(t: torch.Tensor) -> int:
    """safetensors' ``storage_size``."""
    return t.untyped_storage().nbytes()


def end_ptr(t: torch.Tensor) -> int:
    """safetensors' ``_end_ptr``."""
    return t.view(-1)[-1].data_ptr() + t.element_size() if t.nelement() else t.data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_view_pointers_and_sizes(device):
    t = torch.arange(24, dtype=torch.float32, device=device).reshape(4, 6)
    base = t.data_ptr()
    assert base != 0 and t.untyped_storage().data_ptr() == base
    assert t[1].data_ptr() - base == 6 * 4
    assert t[:, 2:].data_ptr() - base == 2 * 4
    assert t.t().data_ptr() == base and t.view(-1)[5:].data_ptr() - base == 20
    assert t[2:].untyped_storage().data_ptr() == base
    assert t[2:].storage_offset() == 12
    assert t.untyped_storage().nbytes() == 96 and t[3:].untyped_storage().nbytes() == 96
    assert t.untyped_storage().size() == 96
    assert t.untyped_storage().device == t.device
    typed = typed_storage(t[1:])
    assert typed.data_ptr() == base and typed.size() == 24 and typed.dtype == torch.float32
    half = t.view(torch.int16)
    assert half.data_ptr() == base and half[0, 3:].data_ptr() - base == 6
    assert half.untyped_storage().data_ptr() == base
    assert end_ptr(t[1:3]) - base == 18 * 4
    assert t.untyped_storage() is t[1:].untyped_storage()


@pytest.mark.parametrize("device", DEVICES)
def test_distinct_storages_distinct_pointers(device):
    a = torch.ones(16, device=device)
    tensors = [a, a.clone(), a + 0, a * 1, torch.ones(16, device=device), a.detach(), a[:8].clone()]
    pointers = [storage_ptr(x) for x in tensors]
    assert pointers[5] == pointers[0]  # (detach shares the storage)
    distinct = pointers[:5] + pointers[6:]
    assert len(set(distinct)) == len(distinct)
    assert all(p for p in pointers)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_storage(device):
    e = torch.empty(0, device=device)
    assert e.data_ptr() == 0 and e.untyped_storage().data_ptr() == 0 and e.untyped_storage().nbytes() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_pointer_stable_across_writes(device):
    """A storage keeps its address through in-place writes, realizations and clones of it (zyx
    writes each new value into the storage's home), and the address holds the current value."""
    t = torch.arange(8, dtype=torch.float32, device=device)
    before = t.data_ptr()
    assert t.data_ptr() == before and t.untyped_storage().data_ptr() == before
    t.add_(1)
    assert t.data_ptr() == before
    kept = t.clone()  # (zyx: shares the buffer until one is written)
    t.mul_(2)
    t[3] = -5
    assert t.data_ptr() == before and kept.data_ptr() != before
    t.copy_(torch.full((8,), 7.0))
    assert t.data_ptr() == before
    assert t.cpu().tolist() == [7.0] * 8 and kept.cpu().tolist() == [float(i + 1) for i in range(8)]
    if device == "cpu" or torch.zyx.get_device_name().startswith("cpu"):
        # (host memory: the address holds the values; on a GPU backend it is device memory)
        assert ctypes.c_float.from_address(t.data_ptr() + 4).value == 7.0
        t.sub_(3)
        torch.zyx.synchronize() if device == "zyx" else None
        assert t.data_ptr() == before
        assert ctypes.c_float.from_address(before + 8).value == 4.0


@pytest.mark.parametrize("device", DEVICES)
def test_set_storage_shares_memory(device):
    t = torch.arange(10, dtype=torch.float32, device=device)
    x = torch.empty(0, device=device).set_(t.untyped_storage())
    assert x.shape == (10,) and x.data_ptr() == t.data_ptr() and x.is_set_to(t)
    x[0] = 50
    assert t[0].item() == 50
    v = torch.empty(0, device=device).set_(t.untyped_storage(), 2, (2, 2), (1, 2))
    assert v.stride() == (1, 2) and v.storage_offset() == 2 and v.data_ptr() - t.data_ptr() == 8
    assert not v.is_set_to(t)
    v.fill_(-1)
    assert t.cpu().tolist() == [50, 1, -1, -1, -1, -1, 6, 7, 8, 9]
    t.mul_(2)
    assert v.cpu().tolist() == [[-2, -2], [-2, -2]]
    i = torch.empty(0, dtype=torch.int32, device=device).set_(t.untyped_storage(), 1, (2,), (1,))
    assert i.data_ptr() - t.data_ptr() == 4
    assert i.cpu().tolist() == torch.tensor([2.0, -2.0]).view(torch.int32).tolist()
    t.set_(t.untyped_storage())  # (the call of the issue: it raised on zyx)
    assert t.shape == (10,) and t.is_set_to(x)


@pytest.mark.parametrize("device", DEVICES)
def test_set_storage_typed_and_grown(device):
    t = torch.zeros(4, device=device)
    typed = typed_storage(t)
    x = torch.empty(0, device=device).set_(typed)
    x[1] = 3
    assert t[1].item() == 3
    # A view past the storage's end grows it (CPU reallocates, and so does zyx)
    g = torch.empty(0, device=device).set_(t.untyped_storage(), 0, (6,), (1,))
    assert g.shape == (6,) and g.untyped_storage().nbytes() == 24
    assert g.cpu()[:4].tolist() == [0, 3, 0, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_set_tensor_and_is_set_to(device):
    t = torch.arange(6.0, device=device).reshape(2, 3)
    x = torch.empty(0, device=device).set_(t)
    assert x.is_set_to(t) and t.is_set_to(x) and x.data_ptr() == t.data_ptr()
    assert not t[1].is_set_to(t) and not t.clone().is_set_to(t)
    x.add_(1)
    assert t.cpu().tolist() == [[1, 2, 3], [4, 5, 6]]
    assert storage_ptr(x) == storage_ptr(t) and storage_size(x) == storage_size(t)


def test_set_errors_as_cpu():
    """The errors of ``set_`` are CPU torch's (type and message)."""
    cases = [
        lambda d: torch.empty(0, device=d).set_(torch.zeros(4, device=d).untyped_storage(), -1, (2,), (1,)),
        lambda d: torch.empty(0, device=d).set_(torch.zeros(4, device=d).untyped_storage(), 0, (2,), (1, 1)),
    ]
    for make in cases:
        with pytest.raises(Exception) as on_cpu:
            make("cpu")
        with pytest.raises(type(on_cpu.value)) as on_zyx:
            make("zyx")
        assert str(on_zyx.value) == str(on_cpu.value)
    with pytest.raises(RuntimeError, match="Attempted to set the storage of a tensor on device \"zyx:0\" to "
                       "a storage on different device \"cpu\""):
        torch.empty(0, device="zyx").set_(torch.zeros(4).untyped_storage())


@pytest.mark.parametrize("device", DEVICES)
def test_tied_weights_grouped_by_storage(device):
    """transformers' ``id_tensor_storage`` and safetensors' shared-tensor search group a state dict
    by (device, storage pointer, storage size): tied weights fall in one group, the rest alone."""
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=True))
    model[1].weight = model[0].weight
    model = model.to(device)
    state = model.state_dict()
    groups: dict[tuple, list[str]] = {}
    for name, tensor in state.items():
        groups.setdefault((tensor.device, storage_ptr(tensor), storage_size(tensor)), []).append(name)
    assert sorted(sorted(names) for names in groups.values()) == [["0.weight", "1.weight"], ["1.bias"]]
    # safetensors' _find_shared_tensors also compares where each tensor ends
    a, b = state["0.weight"], state["1.weight"]
    assert (a.data_ptr(), end_ptr(a)) == (b.data_ptr(), end_ptr(b))
    assert end_ptr(a) - storage_ptr(a) == storage_size(a)


@pytest.mark.parametrize("device", DEVICES)
def test_save_load_shared_storage(device):
    t = torch.arange(12.0, device=device)
    buffer = io.BytesIO()
    torch.save({"a": t, "b": t[4:].view(2, 4), "c": t.clone()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    a, b, c = loaded["a"], loaded["b"], loaded["c"]
    assert a.device == t.device and b.storage_offset() == 4
    assert storage_ptr(a) == storage_ptr(b) != storage_ptr(c)
    assert b.data_ptr() - a.data_ptr() == 16
    b[0, 0] = 100
    assert a[4].item() == 100 and c[4].item() == 4


@needs_hooks
@pytest.mark.parametrize("device", DEVICES)
def test_storage_copies(device):
    t = torch.arange(4, dtype=torch.float32, device=device)
    t.add_(1)  # (zyx: a lazy value, which the copy must see)
    host = t.untyped_storage().cpu()
    assert torch.empty(0).set_(host).tolist() == [1, 2, 3, 4]
    t.untyped_storage().copy_(torch.full((4,), 9.0).untyped_storage())
    assert t.cpu().tolist() == [9.0] * 4


def test_pointer_after_release_not_shared():
    """A live storage's address is never another live storage's, also after buffers return to
    the pool and are handed out again."""
    live = {}
    for i in range(20):
        x = torch.full((64,), float(i), device="zyx")
        live[x.data_ptr()] = x
        (x * 2).sum().item()  # (temporaries come and go from the pool)
        if i % 3 == 0:
            del live[x.data_ptr()]
    assert len(live) == len({x.data_ptr() for x in live.values()}) == 13
    for pointer, x in live.items():
        assert x.data_ptr() == pointer
