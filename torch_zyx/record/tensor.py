"""The torch-facing tensor model: ``ZyxTensor`` wrappers over shared, lazily valued storages.

Stage 1 support (DESIGN.md "Tensors, storages, views, mutation"). A ``ZyxTensor`` is a
wrapper subclass; PyTorch keeps its sizes, strides and offset. Every tensor points at a
``Storage`` shared by all its views; the storage holds the *current lazy value* of its flat
contents. Reading a tensor is a strided view node on that value; writing (in-place, ``out=``)
replaces the value by "old value with this view's region overwritten".
"""

from __future__ import annotations

import copy
import math
import weakref

import torch

from .. import dtypes
from ..config import CONFIG
from ..lazy import graph as g
from ..lazy.graph import Node
from . import pinned
from .checks import bind_unbound, unbound
from .complex import ComplexStorage
from .pending import (
    is_lazy,
    list_pending,
    pending_list,
    poisoned,
    raise_poisoned,
    realize_all,
    realize_over_limit,
    sweep_pending,
    sweep_threshold,
)
from .transfer import TORCH_TO_ZYX, ZYX_TO_TORCH, from_cpu, host_view, storage_to_cpu, to_cpu
from .transfer import _realized as realized


class Storage:
    """Flat contents shared by every view: a lazy ``value`` node of shape (numel,).

    A storage filled whole by one node (an op's fresh result, a full in-place overwrite) keeps
    that node as ``shaped`` and builds the flat ``value`` (a RESHAPE of it) only when something
    needs it: reading the tensor itself returns ``shaped``, so recording a chain of ops builds
    no RESHAPE node per op.
    """

    # (``__weakref__``: torch.save keeps a weak reference to the storages it saves, _saved_view)
    __slots__ = ("__weakref__", "_shaped", "_value", "device", "dtype", "numel")

    def __init__(self, value: Node | None, device, shaped: Node | None = None):
        if shaped is None:
            self._value = value
            self._shaped = None
            self.dtype = value.dtype
            self.numel = value.shape[0]
        else:
            self._value = None
            self._shaped = shaped
            self.dtype = shaped.dtype
            self.numel = math.prod(shaped.shape)
        self.device = device
        if is_lazy(value if shaped is None else shaped):
            list_pending(self)

    @property
    def value(self) -> Node:
        value = self._value
        if value is None:
            value = self._value = g.flat(self._shaped)
        return value

    @value.setter
    def value(self, value: Node) -> None:
        self._value = value
        self._shaped = None
        if is_lazy(value):
            list_pending(self)  # (again, if it is listed already: see _take_pending)

    @property
    def shaped(self) -> Node | None:
        """The node whose row-major contents are the whole storage, when there is one."""
        return self._shaped

    def assign(self, node: Node) -> None:
        """Make ``node`` (``numel`` elements of the storage's dtype) the whole contents."""
        self._value = None
        self._shaped = node
        if is_lazy(node):
            list_pending(self)  # (again, if it is listed already: see _take_pending)

    def realize(self):
        """The buffer holding this storage's contents (computing pending work).

        Every pending storage of the device is realized with it, in one graph: a training
        step's parameters, gradients and optimizer state then become buffers at the step's
        ``loss.item()``, so graphs never grow across steps and each step has the same shape
        (one schedule-cache hit instead of an ever longer chain of recomputation).
        """
        # (asked of the node stored, as realize_all does: ``value`` would build a flat RESHAPE of
        # a lazy ``shaped`` only for the realization to drop it)
        if is_lazy(self._shaped or self._value):
            realize_all(self.device, self)
        buffer = self.value.arg
        if poisoned:  # (values computed from an input that failed a check: checks.py)
            raise_poisoned(buffer)
        return buffer


class ReinterpretedStorage:
    """A storage's bytes read as another dtype: the storage of ``Tensor.view(dtype)``.

    It has ``Storage``'s surface in its own dtype, so the tensor model reads and writes a dtype
    view as any other view (a tensor's dtype stays its storage's), while the contents stay in
    ``base`` alone: reading ``value`` bitcasts the base's current value, and a value written is
    bitcast back into it, so writes through either tensor reach the other. ``numel`` follows
    the base's: the whole elements of this dtype its bytes hold.
    """

    __slots__ = ("__weakref__", "base", "device", "dtype")
    _shaped = None  # never one node of its shape: reads go through ``value`` (fast paths decline)

    def __init__(self, base: Storage, dtype):
        self.base, self.dtype, self.device = base, dtype, base.device

    @property
    def numel(self) -> int:
        return self.base.numel * self.base.dtype.itemsize // self.dtype.itemsize

    @numel.setter
    def numel(self, numel: int) -> None:
        # (resize_ sets it after assigning the grown value, which grew the base: see ``value``)
        assert numel <= self.numel

    @property
    def value(self) -> Node:
        base = self.base
        value = base.value
        ratio = self.dtype.itemsize // base.dtype.itemsize
        if ratio > 1 and base.numel % ratio:
            # (the bytes of a last, partial element of this dtype: no view can reach them)
            value = g.shrink(value, ((0, base.numel - base.numel % ratio),))
        return g.bitcast(value, self.dtype)

    @value.setter
    def value(self, value: Node) -> None:
        base = self.base
        whole = self.dtype.itemsize >= base.dtype.itemsize
        if value.op == "SETVIEW" and whole and value.srcs[0] is self.value:
            # A region of whole base elements: written into the base as a region of its own (each
            # element of this dtype ``ratio`` of the base's), without bitcasting the whole
            # storage there and back.
            shape, strides, offset = value.arg
            ratio = self.dtype.itemsize // base.dtype.itemsize
            part = value.srcs[1]
            if ratio > 1:
                part = g.reshape(part, (*shape, 1))
                shape, strides, offset = (*shape, ratio), (*(s * ratio for s in strides), 1), offset * ratio
            base.value = g.setview(base.value, g.bitcast(part, base.dtype), shape, strides, offset)
            return
        size = base.dtype.itemsize
        extra = -(value.shape[0] * self.dtype.itemsize) % size
        if extra:  # (grown by resize_ to part of a base element: its other bytes are zero)
            value = g.pad(value, ((0, extra // self.dtype.itemsize),))
        flat = g.bitcast(value, base.dtype)
        numel = flat.shape[0]
        if numel >= base.numel:
            base.numel = numel  # (resize_ grows a view's storage: the base's, as on CPU)
            base.value = flat
        else:
            base.value = g.setview(base.value, flat, (numel,), (1,), 0)

    # (what code reading a storage's current node asks: ``storage._shaped or storage._value``)
    _value = value

    @property
    def shaped(self) -> None:
        return None

    def assign(self, node: Node) -> None:
        """Make ``node`` (``numel`` elements of this dtype) the whole contents."""
        self.value = g.flat(node)

    def realize(self):
        """The base's buffer (these bytes, in the base's dtype)."""
        return self.base.realize()


# One ReinterpretedStorage per (base, dtype) while a tensor holds it, so that two dtype views of
# one storage share their storage object as they share their memory (the overlap checks and
# is_set_to compare storages): (id of the base, dtype) -> it. The entry dies with it, and the
# base outlives it (it holds the base), so an id here is never another storage's.
_reinterpreted: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def reinterpreted(storage, dtype):
    """``storage`` (a Storage, or a ReinterpretedStorage of one) read as ``dtype``: the storage of
    a dtype view of a tensor of it."""
    if storage.dtype is dtype:
        return storage
    base = getattr(storage, "base", storage)
    if base.dtype is dtype:
        return base
    key = (id(base), dtype)
    view = _reinterpreted.get(key)
    if view is None:
        if dtype.kind == "c":  # (pairs of the part dtype: record/complex.py)
            view = ComplexStorage(base, dtype, reinterpreted(base, dtypes.COMPLEX_PART[dtype]))
        else:
            view = ReinterpretedStorage(base, dtype)
        _reinterpreted[key] = view
    return view


# The wrapper's own storage is a placeholder (data lives in ``Storage``); it is declared huge so
# in-place metadata changes (resize_, as_strided_, set_) always pass PyTorch's bounds check.
_VIRTUAL_STORAGE_BYTES = 1 << 50

_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass

# zyx device index → its torch.device (making a torch.device costs about a microsecond).
_torch_devices: dict[int | None, torch.device] = {}


# zyx device (a runtime's DeviceContext) → its torch.device, for ``wrap``.
_torch_of: dict[object, torch.device] = {}


def _torch_device(index) -> torch.device:
    device = _torch_devices.get(index)
    if device is None:
        device = _torch_devices[index] = torch.device("zyx", index)
    return device


class ZyxTensor(torch.Tensor):
    """A tensor on a ``zyx`` device. Its data lives in ``_storage`` (lazy until realized)."""

    # Every tensor is made by ``ZyxTensor``, ``wrap`` or ``wrap_like``, which set both. They are
    # ``__dict__`` entries, not slots: torch.utils.swap_tensors, which integration/module_conversion.py uses
    # to keep a module's parameter objects through model.to("zyx"), refuses classes whose slots
    # differ (a Parameter has none). Slots were no faster on the recording bench (5.0-7.0 against
    # 5.0-5.9 us per op on the 2-core box, four runs each, alternating).
    _storage: Storage
    # (shape, strides, offset, dense) as PyTorch holds them (see ``meta``); None: not known yet.
    _zmeta: tuple | None

    @staticmethod
    def __new__(cls, storage: Storage, shape, strides, offset: int, requires_grad: bool = False):
        shape, strides = tuple(shape), tuple(strides)
        zmeta = make_meta(shape, strides, offset)
        dtype, device = ZYX_TO_TORCH[storage.dtype], _torch_device(storage.device.index)
        if zmeta[3]:  # contiguous from 0: _make_wrapper_subclass's defaults (cheaper than passing them)
            out = _make_wrapper_subclass(cls, shape, dtype=dtype, device=device, requires_grad=requires_grad,
                                         storage_size=_VIRTUAL_STORAGE_BYTES)
        else:
            out = _make_wrapper_subclass(cls, shape, strides=strides, storage_offset=offset, dtype=dtype,
                                         device=device, requires_grad=requires_grad,
                                         storage_size=_VIRTUAL_STORAGE_BYTES)
        out._storage = storage
        out._zmeta = zmeta
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Replaced by dispatch.torch_dispatch when torch_zyx.dispatch is imported (dispatch is the
        # stage before this one and registers itself: see ``set_dispatcher``). Importing
        # torch_zyx imports it, so a zyx tensor never meets this one.
        raise RuntimeError(f"zyx: {func} reached a zyx tensor before torch_zyx.dispatch was loaded")

    def __repr__(self, *, tensor_contents=None) -> str:
        # Formatted from a CPU copy exactly as CPU tensors are; torch adds device='zyx:N'.
        if tensor_contents is None and self.numel() > 0:
            cpu = to_cpu(self)
            tensor_contents = torch._tensor_str._tensor_str(cpu, len("tensor("))
        text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        prefix = type(self).__name__ + "("
        return "tensor(" + text[len(prefix):] if text.startswith(prefix) else text

    # ``x.data = y`` swaps the TensorImpl's metadata in C++ (shallow_copy_from) without telling
    # Python, so the new storage must be carried over here or reads would see the old one.
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new) -> None:
        torch._C.TensorBase.data.__set__(self, new)
        if isinstance(new, ZyxTensor):
            self._storage = new._storage
        self._zmeta = None  # the metadata was copied from ``new``: read it again when needed

    def __reduce_ex__(self, proto):
        # The wrapper's own storage is a placeholder, so pickling saves a CPU tensor with the
        # storage's values (a plain tensor torch.save knows) and rebuilds it on zyx when loaded.
        state = {k: v for k, v in self.__dict__.items() if k not in _NOT_STATE}
        return (_rebuild_zyx, (_saved_view(self), self.device.index or 0, self.requires_grad, state))

    def __deepcopy__(self, memo):
        # torch's own deepcopy would copy ``__dict__`` and with it the Storage's lazy nodes
        # (interned, not copyable); a device clone is the copy, Python attributes (``_is_param``
        # of parameters, user attributes) are deep-copied, and ``.grad`` comes along as on CPU.
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol at the moment.  If you were attempting to "
                               "deepcopy a module, this may be because of a torch.nn.utils."
                               "weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key not in _NOT_STATE:
                new.__dict__[key] = copy.deepcopy(value, memo)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new

    # PyTorch's storage contract, as CUDA tensors keep it: ``data_ptr()`` is the address of the
    # tensor's first element in device memory (the storage's home, record/pinned.py, plus the
    # offset), stable while the storage lives; ``untyped_storage()`` is a storage over that
    # memory, which ``set_`` maps back to this tensor's ``Storage`` (views share it). Both realize
    # the pending value, as the address must hold it.
    def data_ptr(self) -> int:
        storage = self._storage
        address = storage_address(storage)
        return address + self.storage_offset() * self.element_size() if address else 0

    def untyped_storage(self) -> torch.UntypedStorage:
        return torch_storage(self._storage)

    def tolist(self):
        # torch refuses ``tolist`` on wrapper subclasses; the CPU copy has the same values.
        return to_cpu(self).tolist()

    def numpy(self, *, force: bool = False):
        # As for CUDA tensors: only ``force=True`` copies to the host (torch's own message for
        # a wrapper subclass names the subclass, not the device).
        if not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                            "copy the tensor to host memory first.")
        return to_cpu(self.detach()).numpy(force=True)

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # AOTAutograd (torch.compile(backend="zyx"), compile/) traced the graph with plain fake
        # tensors of the zyx device, so it expects plain tensors as the backward's tangents: a
        # zyx tensor is one, with nothing to coerce.
        return self

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)


# Attributes of a tensor's ``__dict__`` that describe its device data, not user state: pickling
# and deep copies leave them to the new tensor.
_NOT_STATE = frozenset({"_storage", "_zmeta"})


# id(base Storage) -> (weak reference to it, weak reference to its torch.UntypedStorage): the same
# object for every ``untyped_storage()`` while both live (ids, hashes and ``is`` agree, as on CPU).
_torch_storages: dict[int, tuple] = {}


def storage_address(storage) -> int:
    """The address of the memory of ``storage`` (of its base's, for a dtype view): its home, made
    (and the pending value realized and brought into it) here; 0 for a storage of no bytes, as on
    CPU."""
    base = getattr(storage, "base", storage)
    if not base.numel:
        return 0
    return pinned.address_of(pinned.home(base, realized(base)))


def torch_storage(storage) -> torch.UntypedStorage:
    """The ``torch.UntypedStorage`` over ``storage``'s memory (its base's bytes): a zyx storage
    whose ``data_ptr()`` is ``storage_address`` and whose ``_zyx`` is the base ``Storage``, which it
    keeps alive (and with it the memory), so ``set_`` to it views that storage."""
    base = getattr(storage, "base", storage)
    address = storage_address(base)
    nbytes = base.numel * base.dtype.itemsize
    key = id(base)
    known = _torch_storages.get(key)
    if known is not None and known[0]() is base:
        untyped = known[1]()
        if untyped is not None and untyped.data_ptr() == address and untyped.nbytes() == nbytes:
            return untyped
    untyped = torch._C._construct_storage_from_data_pointer(address, _torch_device(base.device.index), nbytes)
    untyped._zyx = base
    _torch_storages[key] = (weakref.ref(base, lambda _ref: _torch_storages.pop(key, None)),
                            weakref.ref(untyped))
    return untyped


def set_dispatcher(fn) -> None:
    """Make ``fn(cls, func, types, args=(), kwargs=None)`` ZyxTensor's ``__torch_dispatch__``
    (called by torch_zyx.dispatch: calling it directly saves a Python call and an import per op)."""
    ZyxTensor.__torch_dispatch__ = classmethod(fn)




def _target_of(origin: str):
    """Where ``torch.load``'s ``map_location`` sends a tensor saved from ``origin`` ("zyx:N")."""
    location = torch.serialization._serialization_tls.map_location
    if location is None:
        return origin
    if isinstance(location, dict):
        return location.get(origin, origin)
    if callable(location):
        placed = location(torch.UntypedStorage(0), origin)
        return origin if placed is None else str(placed.device)
    return str(location)


# Views of one storage are saved as views of one CPU storage and loaded as views of one zyx
# storage, as CPU tensors are (torch.save writes a storage once; a write through one loaded view
# shows in the others). Within one save, a zyx storage's CPU copy is found again here: id ->
# (weak reference to the storage, weak reference to the first CPU view of its copy). The save's
# CPU tensors live as long as its pickler (which holds what it pickled); the entry goes with
# them, so no later save finds it. (A load finds its CPU storages' zyx copies in
# ``_from_host_storages``.)
_saved: dict[int, tuple] = {}


def _cpu_view(storage: torch.UntypedStorage, t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``storage`` with ``t``'s dtype, shape, strides and offset."""
    return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()))


def _saved_view(t: ZyxTensor) -> torch.Tensor:
    """What torch.save writes for ``t``: a view of the CPU copy of its whole storage, the same
    copy for every tensor of that storage in one save."""
    storage = t._storage
    storage = getattr(storage, "base", storage)  # (a dtype view is saved as a view of its base's bytes)
    key = id(storage)
    entry = _saved.get(key)
    first = entry[1]() if entry is not None and entry[0]() is storage else None
    if first is not None:
        return _cpu_view(first.untyped_storage(), t)
    view = _cpu_view(storage_to_cpu(storage).untyped_storage(), t)
    _saved[key] = (weakref.ref(storage), weakref.ref(view, lambda _ref: _saved.pop(key, None)))
    return view


# Host storage -> the zyx Storage holding a copy of its bytes, while the storage object lives
# (id -> (weak reference, device, Storage)): torch.load keeps one Python object per saved
# storage while it rebuilds the tensors on it, so the tensors rebuilt on one storage (views of one
# tensor, tied weights) share one zyx Storage, as they shared theirs when saved.
_from_host_storages: dict[int, tuple] = {}


def storage_from_host(source: torch.UntypedStorage, dtype: torch.dtype,
                      device) -> Storage | ReinterpretedStorage:
    """The zyx Storage on ``device`` holding the bytes of host storage ``source`` (a CPU storage,
    or a zyx one: integration/storage.py) as ``dtype``, the same one for every call while ``source`` lives
    (read as another dtype, a ``ReinterpretedStorage`` of it)."""
    key = id(source)
    known = _from_host_storages.get(key)
    if known is not None and known[0]() is source and known[1] is device:
        # (a tensor of another dtype on the same bytes, saved from a dtype view: a dtype view again)
        return reinterpreted(known[2], TORCH_TO_ZYX[dtype])
    storage = Storage(from_cpu(host_view(source, dtype), device), device)
    _from_host_storages[key] = (weakref.ref(source, lambda _ref: _from_host_storages.pop(key, None)), device,
                                storage)
    return storage


def _rebuild_zyx(cpu: torch.Tensor, index: int, requires_grad: bool, state: dict):
    """Inverse of ``ZyxTensor.__reduce_ex__`` (registered as a safe global for weights_only)."""
    target = torch.device(_target_of(f"zyx:{index}"))
    if isinstance(cpu, ZyxTensor):
        # A zyx map_location moved the saved storage to zyx before this rebuild (torch.load maps
        # storages, then rebuilds the views on them: set_ to the zyx storage, one zyx Storage
        # per saved one), so the views already share their storage.
        out = cpu if cpu.device == target else cpu.to(target)
    elif target.type == "zyx":
        out = torch.empty(0, dtype=cpu.dtype, device=target)
        storage = storage_from_host(cpu.untyped_storage(), cpu.dtype, out._storage.device)
        restride(out, storage, tuple(cpu.shape), tuple(cpu.stride()), cpu.storage_offset())
    else:
        out = cpu.to(target)
    if requires_grad:
        out.requires_grad_(True)
    if state and isinstance(out, ZyxTensor):
        out.__dict__.update(state)
    return out


torch.serialization.add_safe_globals([_rebuild_zyx])


# ------------------------------------------------------------------------------- metadata
# A tensor's (shape, strides, offset) live in its TensorImpl, but reading them from Python costs
# ~0.6 us per accessor on a subclass, three per read. So every tensor also carries them as
# ``_zmeta`` = (shape, strides, offset, dense), set where it is made (``wrap``, ``ZyxTensor``)
# and where its metadata changes in place (``restride``: resize_, as_strided_, set_, t_, ...;
# the ``data`` setter). ``dense``: offset 0 and contiguous strides.

# shape → the metadata of a contiguous tensor of that shape (bounded like contiguous_strides).
_dense_metas: dict[tuple[int, ...], tuple] = {}


def make_meta(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> tuple:
    """``_zmeta`` of a tensor with these (tuple) sizes, strides and offset."""
    return (shape, strides, offset, offset == 0 and strides == g.contiguous_strides(shape))


def _dense_meta(shape: tuple[int, ...]) -> tuple:
    cached = _dense_metas.get(shape)
    if cached is None:
        if len(_dense_metas) >= 4096:
            _dense_metas.clear()
        cached = _dense_metas[shape] = (shape, g.contiguous_strides(shape), 0, True)
    return cached


def meta(t: ZyxTensor) -> tuple:
    """(shape, strides, offset, dense) of ``t`` as tuples (``t.shape``, ``t.stride()``, ...)."""
    cached = t._zmeta
    if cached is None:
        cached = t._zmeta = make_meta(tuple(t.shape), tuple(t.stride()), t.storage_offset())
    return cached


def restride(t: ZyxTensor, storage: Storage, size, strides, offset: int) -> None:
    """Give ``t`` new sizes/strides/offset (and storage) in place, keeping the Python object."""
    from torch.utils._mode_utils import no_dispatch

    size, strides = tuple(size), tuple(strides)
    t._storage = storage
    with no_dispatch():
        torch.Tensor.as_strided_(t, size, strides, offset)
    t._zmeta = make_meta(size, strides, offset)


# ------------------------------------------------------------------------------- reading


def read(t: ZyxTensor) -> Node:
    """The lazy value of ``t`` in its logical shape."""
    try:
        storage = t._storage
    except AttributeError:
        # Another device's tensor among a zyx op's operands: ATen's error, not this one.
        device = getattr(t, "device", None)
        if device is None:
            raise
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                           f"devices, zyx and {device}!") from None
    shape, strides, offset, dense = t._zmeta or meta(t)
    shaped = storage._shaped
    if dense and shaped is not None and shape == shaped.shape:
        return shaped  # the whole storage, as it was stored (what strided(flat(shaped)) gives)
    if storage.__class__ is ComplexStorage:
        return storage.read(shape, strides, offset, dense)  # (pairs: shape (*shape, 2))
    return g.strided(storage.value, shape, strides, offset)


_new_storage = object.__new__
_nodes = g.PendingCounter


def wrap(node: Node, device) -> ZyxTensor:
    """A fresh contiguous tensor holding ``node``."""
    shape = node.shape
    # Storage(None, device, node), inlined: recording makes one per op.
    storage = _new_storage(Storage)
    storage._value = None
    storage._shaped = node
    storage.dtype = dtype = node.dtype
    storage.numel = math.prod(shape)
    storage.device = device
    if unbound:
        bind_unbound(storage)
    if is_lazy(node):
        list_pending(storage)
    if _nodes.count > CONFIG.max_pending:
        realize_over_limit()
    torch_device = _torch_of.get(device) or _torch_of.setdefault(device, _torch_device(device.index))
    # Contiguous with offset 0 are _make_wrapper_subclass's defaults (cheaper than passing them).
    out = _make_wrapper_subclass(ZyxTensor, shape, dtype=ZYX_TO_TORCH[dtype], device=torch_device,
                                 storage_size=_VIRTUAL_STORAGE_BYTES)
    out._storage = storage
    out._zmeta = _dense_metas.get(shape) or _dense_meta(shape)
    return out


def wrap_like(node: Node, like: ZyxTensor) -> ZyxTensor:
    """``wrap(node, device)`` for a ``node`` of the shape of ``like``, a dense tensor that is its
    whole storage (the recording fast paths of ops.fastpath): ``like``'s metadata, device and
    element count are the result's, so none of them is computed again."""
    source = like._storage
    storage = _new_storage(Storage)
    storage._value = None
    storage._shaped = node
    storage.dtype = dtype = node.dtype
    storage.numel = source.numel
    storage.device = device = source.device
    if unbound:
        bind_unbound(storage)
    pending = pending_list  # (an op's fresh node: lazy)
    pending.append(storage)
    if len(pending) > sweep_threshold["at"]:
        sweep_pending()
    if _nodes.count > CONFIG.max_pending:
        realize_over_limit()
    torch_device = _torch_of.get(device) or _torch_of.setdefault(device, _torch_device(device.index))
    out = _make_wrapper_subclass(ZyxTensor, node.shape, dtype=ZYX_TO_TORCH[dtype], device=torch_device,
                                 storage_size=_VIRTUAL_STORAGE_BYTES)
    out._storage = storage
    out._zmeta = like._zmeta
    return out


def assign_whole(t: ZyxTensor, node: Node) -> ZyxTensor:
    """``write(t, node)`` for a ``t`` that is its whole storage and a ``node`` of its shape and
    dtype (the in-place fast paths of ops.fastpath): the node becomes the storage's value."""
    t._storage.assign(node)
    if _nodes.count > CONFIG.max_pending:
        realize_over_limit()
    return t


def write(t: ZyxTensor, node: Node) -> None:
    """Overwrite ``t``'s region of its storage with ``node`` (cast and broadcast to ``t``)."""
    storage = t._storage
    if unbound:
        bind_unbound(getattr(storage, "base", storage))  # (the storage a realization computes)
    if storage.__class__ is ComplexStorage:  # (``node``: pairs, record/complex.py)
        storage.write(node, *(t._zmeta or meta(t)))
        if g.PendingCounter.count > CONFIG.max_pending:
            realize_over_limit()
        return
    if node.dtype is not storage.dtype:
        node = g.cast(node, storage.dtype)
    shape, strides, offset, dense = t._zmeta or meta(t)
    if node.shape != shape:
        node = g.expand(g.reshape(node, (1,) * (len(shape) - len(node.shape)) + node.shape), shape)
    numel = math.prod(shape)
    if dense and numel == storage.numel:
        storage.assign(node)
    elif numel == 0:
        return
    else:
        storage.value = g.setview(storage.value, node, shape, strides, offset)
    if g.PendingCounter.count > CONFIG.max_pending:
        realize_over_limit()
