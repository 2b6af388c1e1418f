"""Home buffers: the fixed memory behind a zyx storage's ``data_ptr()``.

zyx never writes a buffer in place: an in-place op gives its storage a new lazy value, and the
realization computes it into a new buffer (the old one goes back to the pool when nothing holds
it). PyTorch's contract is CUDA's: ``untyped_storage().data_ptr()`` is an address that stays the
same while the storage lives, and memory written through it is what the tensors read. So the
first time a storage's address is asked (``ZyxTensor.data_ptr``, ``untyped_storage``) it gets a
*home*: a pool buffer of its own, registered here for the storage's lifetime, whose address is the
answer from then on. Whenever the storage's value becomes another buffer afterwards (a realization
of a lazy write: ``pending._realize_all`` calls ``settle``; a value assigned as a buffer, such as
a copy from the CPU: the next address query calls ``settle``), that buffer is copied into the home
and the storage's value becomes the home again. One device copy per realization that changes a
pinned storage is the price; storages whose address was never asked pay nothing.

A home is zyx's immutable-buffer world meeting memory written in place, so it is overwritten only
when no lazy value or other storage still reads it (a clone shares its source's buffer until one
of them is written; a lazy value computed later from the old contents holds it). When one does,
the old contents move first: they are copied into a new buffer, and the two buffers' memory is
swapped, so the holders' ``Buffer`` object keeps the old bytes at the new address while the home
address, now under a new ``Buffer`` object of the storage's, takes the new value. The address
therefore never changes while the storage lives; its bytes are the storage's value as of the last
realization or address query (a value assigned without a realization, ``x.copy_(cpu_tensor)``,
reaches them at the next query).
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from ..dtypes import uint8
from ..lazy import graph as g
from ..memory.buffer import Buffer

# id(storage) -> (weak reference to the storage, its home Buffer). The entry goes when the
# storage dies (the reference's callback), and with it the last reference to the home, which
# then returns to its pool after its pending work.
homes: dict[int, tuple] = {}

_getrefcount = sys.getrefcount


def _entry_refs(entry: tuple) -> int:
    """References to ``entry[1]``, read with no local variable holding it."""
    return _getrefcount(entry[1])


# References to a home held by its ``homes`` entry alone (the entry's and getrefcount's argument's:
# measured, not assumed). More: a ``BUFFER`` node (a storage's value or a lazy graph) holds it.
_ALONE = _entry_refs((None, object()))


class _Holder:
    __slots__ = ("_value",)


def _value_refs(storage) -> int:
    return _getrefcount(storage._value)


def _probe_node_refs() -> int:
    """References to a ``BUFFER`` node that one storage alone holds (with the node table's, if
    it keeps one), measured on a probe node."""
    holder = _Holder()
    holder._value = g.buffer(_Holder(), uint8, 1)
    return _value_refs(holder)


_node_alone: list[int] = []


def _held_by_others(storage) -> bool:
    """Whether anything but ``storage`` holds the ``BUFFER`` node that is its value."""
    if not _node_alone:
        _node_alone.append(_probe_node_refs())
    return _value_refs(storage) > _node_alone[0]


def copy_buffer(dst, src) -> None:
    """Copy ``src``'s bytes into ``dst`` (two buffers of one device, as many bytes), after the
    work pending on either; later users of either wait for the copy through the event table."""
    device = dst.device
    pool, nbytes, ids = device.pool, dst.nbytes, [src.id, dst.id]
    if not nbytes:
        return
    wait = device.events.take(ids)
    if getattr(pool, "host_memory", False):  # (the CPU backend: a blocking memmove)
        pool.pool_to_host(src.raw, dst.raw.ptr, nbytes, wait)
    elif hasattr(pool, "pool_to_pool"):  # (CUDA: a copy on the device's stream)
        device.events.record(ids, pool.pool_to_pool(src.raw, pool, nbytes, dst.raw, wait))
    else:  # (OpenCL: through the host)
        staged = np.empty(nbytes, dtype=np.uint8)
        pool.pool_to_host(src.raw, staged.ctypes.data, nbytes, wait)
        device.events.record([dst.id], pool.host_to_pool(staged.ctypes.data, nbytes, staged, dst.raw, []))


def address_of(buffer) -> int:
    """The address of a home: host memory on the CPU backend, device memory on CUDA; an OpenCL
    buffer has none, so its ``cl_mem`` handle stands for it (unique and stable, not an address
    to dereference)."""
    raw = buffer.raw
    ptr = getattr(raw, "ptr", None)
    return ptr if ptr is not None else raw.mem.int_ptr


def _forget(key: int):
    return lambda _ref: homes.pop(key, None)


def home(storage, buffer) -> Buffer:
    """The home of ``storage`` (a ``tensor.Storage`` just realized into ``buffer``): made on the
    first call, with ``buffer``'s contents; the current value is brought into it on later ones."""
    key = id(storage)
    entry = homes.get(key)
    if entry is not None and entry[0]() is storage:
        settle(storage, buffer)
        return homes[key][1]
    if type(buffer) is not Buffer or _held_by_others(storage):
        # Memory the storage does not own alone (a clone's shared buffer, a compiled graph's
        # slot): a copy of its own becomes the home, so no other tensor shares its address.
        own = Buffer(storage.device, storage.dtype, storage.numel)
        copy_buffer(own, buffer)
        storage._value, storage._shaped = g.buffer(own, storage.dtype, storage.numel), None
        buffer = own
    homes[key] = (weakref.ref(storage, _forget(key)), buffer)
    return buffer


def settle(storage, buffer) -> None:
    """``storage``, which has a home, now holds ``buffer``: bring it into the home (see the
    module's docstring), so its address keeps its value."""
    key = id(storage)
    entry = homes.get(key)
    if entry is None or entry[0]() is not storage:
        return
    if entry[1] is buffer:
        return
    if buffer.numel != entry[1].numel:
        # Grown or shrunk (``resize_``, which reallocates on the CPU too): a new home of the new
        # size, so the address changes here, and only here.
        del homes[key]
        home(storage, buffer)
        return
    if _entry_refs(entry) > _ALONE:
        # The old contents are still read (a clone, a lazy value): they move to a new buffer,
        # which the holders' Buffer object takes over, and the home address gets a new Buffer.
        old = entry[1]
        moved = Buffer(old.device, old.dtype, old.numel)
        copy_buffer(moved, old)
        old.raw, moved.raw = moved.raw, old.raw
        entry = homes[key] = (entry[0], moved)
    target = entry[1]
    copy_buffer(target, buffer)
    storage._value, storage._shaped = g.buffer(target, storage.dtype, storage.numel), None
