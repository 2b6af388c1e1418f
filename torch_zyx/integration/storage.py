"""zyx storages: a zyx tensor's ``untyped_storage()``, and what ``torch.load(..., map_location="zyx")``
builds.

Part of registering the device (``torch_zyx._register``) and of recording (``set_`` to a
storage). A zyx tensor keeps its data in zyx's pools; its ``untyped_storage()`` (record/tensor.py
``torch_storage``) is a storage over its home buffer (record/pinned.py) that carries the tensor's
``Storage`` as ``_zyx``, whose current value may be lazy, so copies from or into it go through
zyx (``storage_to_cpu``, a lazy write), never its raw memory. ``torch.load`` with a zyx map location
moves each saved storage with ``storage.to(device)`` and then rebuilds every tensor on it as
``torch.empty(0, device="zyx").set_(storage, offset, size, stride)``. Here:

- a storage moved to zyx (``storage.to(device="zyx")``) is an ``UntypedStorage``
  on zyx, host memory from device_hooks.cpp's allocator; ``UntypedStorage.copy_`` with a zyx
  storage on either side copies host memory (ATen's storage copy goes through tensors of both
  storages, and a zyx tensor cannot alias one);
- ``set_`` of a zyx tensor to such a storage (ops/core/storage_views.py) copies its bytes into a
  zyx buffer once per storage object (record/tensor.py ``storage_from_host``): the tensors torch.load
  sets to one storage (views of one tensor, tied weights) view one zyx storage, as they shared
  memory when saved.
"""

from __future__ import annotations

import ctypes

import torch

from ..record.transfer import storage_to_cpu

_untyped_copy = torch.UntypedStorage.copy_


def _host_address(storage: torch.UntypedStorage) -> tuple[int, object]:
    """Where the bytes of ``storage`` are in host memory (and what keeps them alive): host zyx
    and CPU storages in place, a zyx tensor's storage (its memory is a pool's, maybe a GPU's, and
    its current value may be lazy) and another device's through a CPU copy."""
    own = getattr(storage, "_zyx", None)
    if own is not None:
        values = storage_to_cpu(own)
        return values.data_ptr(), values
    if storage.device.type not in ("zyx", "cpu"):
        storage = storage.cpu()
    return storage.data_ptr(), storage


def copy_(self, source, non_blocking=None):
    """``UntypedStorage.copy_`` with zyx storages on either side: a copy of host memory (ATen's
    storage copy makes tensors of both storages, and a zyx tensor cannot alias one)."""
    if self.device.type != "zyx" and source.device.type != "zyx":
        return _untyped_copy(self, source, non_blocking)
    if self.nbytes() != source.nbytes():
        raise RuntimeError("size does not match")
    if self.device.type != "zyx" and self.device.type != "cpu":
        staged = torch.UntypedStorage(self.nbytes())
        copy_(staged, source)
        return _untyped_copy(self, staged, non_blocking)
    address, _alive = _host_address(source)
    if getattr(self, "_zyx", None) is not None:
        # A zyx tensor's storage: written as its tensors are (a lazy write of its bytes), so
        # they see it, and its address gets it at the next realization.
        if self.nbytes():
            staged = torch.empty(self.nbytes(), dtype=torch.uint8)
            ctypes.memmove(staged.data_ptr(), address, self.nbytes())
            torch.empty(0, dtype=torch.uint8, device=self.device).set_(self).copy_(staged)
        return self
    if self.nbytes():
        ctypes.memmove(self.data_ptr(), address, self.nbytes())
    return self


def install() -> None:
    """Let storage copies reach zyx storages (after the backend set-up, and only with zyx's C++
    hooks, whose allocator gives zyx storages their memory)."""
    torch.UntypedStorage.copy_ = copy_


def _refuse_without_hooks(_storage, location: str):
    """torch.load's deserializer for zyx locations when zyx's C++ hooks are not loaded: PyTorch
    would make a zyx storage with the device's allocator, which only the hooks register (without
    one it dereferences a null allocator and the process dies), so this says what to do instead."""
    if location == "zyx" or location.startswith("zyx:"):
        raise RuntimeError(
            f"torch.load(map_location={location!r}) needs zyx's C++ device hooks (not loaded: "
            "ZYX_NATIVE=0, or no C++ compiler; see the log at INFO level); load with "
            "map_location='cpu' and move the tensors with .to('zyx')")


def refuse_loads() -> None:
    """Register ``_refuse_without_hooks`` ahead of PyTorch's own PrivateUse1 deserializer."""
    torch.serialization.register_package(19, lambda _storage: None, _refuse_without_hooks)
