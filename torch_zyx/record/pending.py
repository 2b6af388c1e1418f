"""Pending work of the lazy graph: the storages waiting for a realization, the errors deferred to
it, and ``realize_all``, which realizes them together.

Stage 1 → 2 of the flow (docs/architecture.md, "Realization"): ops record nodes and list the storages they
give lazy values (tensor.py ``wrap``/``write``); a read, ``synchronize`` or the pending-graph
limit calls ``realize_all``, which hands every pending storage of a device, with its pending
index checks (checks.py), to the executor (execute/realize.py) as one graph and stores the buffers it
returns.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from typing import TYPE_CHECKING

import torch

from ..lazy import graph as g
from ..lazy.graph import Node
from .checks import pending_checks, restore_checks, take_checks, unbound
from .pinned import homes
from .pinned import settle as settle_home

if TYPE_CHECKING:
    from .tensor import Storage


# One realization at a time: threads record at once (between bytecodes, under the GIL), but a
# realization takes every thread's pending storages, fills the shared plan and program caches
# and compiles (LLVM disposing an engine while another thread compiled segfaulted), launches
# and joins its kernels. Re-entrant: a failed check realizes its entry inside. Storages are
# appended to ``pending_list`` by any thread at any time; only holders of this lock take them
# out, and only the ones they saw (an append landing between a copy and a clear was lost: its
# storage was never realized).
_realizing = threading.RLock()

# Storages given a lazy value since the last realization, in the order they got it: a stable
# order keeps graph signatures equal from one training step to the next (so the schedule cache
# hits). Held strongly, not by weak references: making a weak reference cost ~0.5 us per
# recorded op on the 2-core box, and a storage's death ~0.3 us more with one. A storage that
# no tensor holds any more is found by its reference count when the list is taken (see
# ``_take_pending``) and simply dropped then; until that moment it keeps its lazy value (and
# whatever that references) alive. The list is taken at every realization and whenever it
# doubles (``sweep_threshold``), so the ones kept are at most as many as the live ones. Storages
# holding realized buffers are never listed: dropping a tensor frees its buffer at once.
pending_list: list[Storage] = []
sweep_threshold = {"at": 4096}
_getrefcount = sys.getrefcount


def is_lazy(node: Node) -> bool:
    """Whether a storage holding ``node`` (its flat value or whole shaped contents) needs a
    realization: anything but a buffer (or a buffer reshaped)."""
    op = node.op
    return op != "BUFFER" and (op != "RESHAPE" or node.srcs[0].op != "BUFFER")


def list_pending(storage: Storage) -> None:
    pending = pending_list
    pending.append(storage)
    if len(pending) > sweep_threshold["at"]:
        sweep_pending()


def sweep_pending() -> None:
    with _realizing:
        live = _take_pending()
        pending_list[:0] = live
        sweep_threshold["at"] = max(4096, 2 * len(live))


def _reference_counts(storages: list) -> list[int]:
    return [_getrefcount(s) for s in storages]


# The count ``_reference_counts`` gives for an object that only its list holds (the list's
# reference, the loop variable's and getrefcount's argument's: measured, not assumed).
_UNHELD = _reference_counts([object()])[0]


def _take_pending() -> list[Storage]:
    """Empty ``pending_list`` (``_realizing`` held); its storages that something else still holds
    and whose value is still lazy, each once, oldest first."""
    seen = len(pending_list)
    listed = list(dict.fromkeys(pending_list[:seen]))  # (first listing first: the storage's age)
    del pending_list[:seen]  # (not clear(): another thread may have appended one since)
    counts = _reference_counts(listed)
    return [s for s, count in zip(listed, counts) if count > _UNHELD and is_lazy(s._shaped or s._value)]


def pending_storages() -> list[Storage]:
    """Storages with unrealized values, oldest first (a stable order keeps graph signatures equal)."""
    sweep_pending()
    return list(pending_list)


# Errors raised where raising would abort the process (inside autograd's engine: see
# dispatch.cpu_fallback), kept to be raised at the next realization or read outside it.
deferred_errors: list[BaseException] = []


def defer_error(error: BaseException) -> None:
    # Marked: raised later from inside a lowering (a read realizing the storage), a deferred
    # NotImplementedError must leave the op, not read as the lowering declining (dispatch.py).
    error.zyx_deferred = True
    deferred_errors.append(error)


def unsupported(message: str) -> NotImplementedError:
    """The NotImplementedError CPU torch raises for a dtype its kernel lacks, marked to leave the
    op: raised by a lowering, it refuses the op instead of declining it (to a decomposition or
    the CPU fallback, which would compute something where CPU torch raises)."""
    error = NotImplementedError(message)
    error.zyx_final = True
    return error


def reraise_deferred(exc: NotImplementedError) -> None:
    """A lowering raising NotImplementedError declines the op, unless the error is a deferred
    one (``defer_error``) surfacing at a read inside it or a refusal (``unsupported``): those
    leave the op."""
    if getattr(exc, "zyx_deferred", False) or getattr(exc, "zyx_final", False):
        raise exc


# Buffers whose values were computed from an input that failed a check (checks.py): id(buffer) →
# (a weak reference whose callback drops the entry when the buffer dies, the error reading it
# raises: ``Storage.realize``); a value computed from such a buffer later inherits it. A plain
# dict: every read asks whether it is empty (a WeakKeyDictionary's __len__ is a Python call).
poisoned: dict[int, tuple] = {}


def _poison(buffer, error: BaseException) -> None:
    """Mark ``buffer`` (first error kept) until it dies."""
    key = id(buffer)
    if key not in poisoned:
        poisoned[key] = (weakref.ref(buffer, lambda _ref, key=key: poisoned.pop(key, None)), error)


def _error_of(buffer) -> BaseException | None:
    entry = poisoned.get(id(buffer))
    return entry[1] if entry is not None else None


def _raised_copy(error: BaseException) -> BaseException:
    """A new exception like the stored ``error``: raising the stored one would hang the frames of
    its raise (holding the poisoned buffers) on it, and so keep those buffers alive forever."""
    return type(error)(*error.args)
# Errors of failed checks none of whose values was realized (all dropped): the next
# ``synchronize`` raises them.
_orphans: list[BaseException] = []
# ``realize_all``'s reader when nothing is read (the pending-graph limit): no error raised then.
BACKGROUND = object()


def raise_poisoned(buffer) -> None:
    """Raise the error of a failed check ``buffer``'s value was computed from, if any."""
    error = _error_of(buffer)
    if error is not None:
        defer_error(_raised_copy(error))
        raise_deferred()


def raise_deferred() -> None:
    if torch._C._current_autograd_node() is None:
        error = deferred_errors[0]
        deferred_errors.clear()
        raise error


def realize_all(device=None, reader=None) -> None:
    """Realize every pending storage (of ``device`` only, when given) together, with the index
    checks pending there (checks.py). ``reader``: the storage being read, whose failed checks
    raise (those of other values stay with their buffers); None: a synchronization, which raises
    every failure; ``BACKGROUND``: raise nothing."""
    if _tracing[0]:
        raise TracingRealization("zyx: a value was needed while a compiled graph was traced")
    with _realizing:
        _realize_all(device, reader=reader)


def realize_into(storage: Storage, buffer) -> bool:
    """``realize_all(storage.device)``, with ``storage``'s value written into ``buffer`` (memory
    the caller owns: transfer.py's read-back into a CPU tensor) instead of a pool buffer, where
    the plan allows (the value is computed by a kernel and is no other storage's). Then the
    storage keeps its lazy value and True is returned; else it holds a pool buffer as usual."""
    if _tracing[0]:
        raise TracingRealization("zyx: a value was needed while a compiled graph was traced")
    with _realizing:
        return _realize_all(storage.device, (storage, buffer), reader=storage)


def realize_over_limit() -> None:
    """The pending graph grew past ``ZYX_MAX_PENDING`` nodes: realize it, except while a graph is
    traced (a compiled graph becomes one plan, whatever its size)."""
    if _tracing[0]:
        g.PendingCounter.count = 0
        return
    realize_all(reader=BACKGROUND)


class TracingRealization(RuntimeError):
    """A value was needed while a compiled graph was recorded on placeholders (a data-dependent
    shape, ``item()``, an op run on the CPU): the graph cannot be one plan."""


# Nesting depth of ``tracing``.
_tracing = [0]


@contextlib.contextmanager
def tracing(traced_checks: list):
    """Record a compiled graph on placeholder buffers (compile/graph.py): realizations raise
    ``TracingRealization``, the pending-graph limit is off, and on exit the storages listed and
    the index checks recorded inside leave the pending work (they belong to the traced graph:
    the checks are appended to ``traced_checks``)."""
    with _realizing:
        before = {id(s) for s in pending_list}
        checks_before = len(pending_checks())
        _tracing[0] += 1
        try:
            yield
        finally:
            _tracing[0] -= 1
            recorded = pending_checks()
            traced_checks.extend(recorded[checks_before:])
            del recorded[checks_before:]
            unbound.clear()  # (the traced graph's checks: its calls make their own)
            pending_list[:] = [s for s in pending_list if id(s) in before]
            g.PendingCounter.count = 0


def _realize_all(device, into: tuple | None = None, reader=None) -> bool:
    if deferred_errors:
        raise_deferred()
    if reader is None and _orphans:
        error = _orphans[0]
        _orphans.clear()
        raise error
    g.PendingCounter.count = 0
    storages = _take_pending()
    g.file_unfiled()  # (the nodes of the dead ones among them are freed now)
    # Listed again until realized: an error below leaves them pending, as they are.
    pending_list[:0] = storages
    by_device: dict[int, list[Storage]] = {}
    for storage in storages:
        if device is None or storage.device is device:
            by_device.setdefault(storage.device.index, []).append(storage)
    index_checks = take_checks(device)
    checks_of: dict[int, list] = {}
    for check in index_checks:
        checks_of.setdefault(check.device.index, []).append(check)
        by_device.setdefault(check.device.index, [])
    if not by_device:
        return False
    realize = _realize[0]
    if realize is None:
        from ..execute.realize import realize  # (the executor is loaded on first use)

        _realize[0] = realize
    devices = []
    found = []  # (check, the buffer of its first bad position)
    realized: list[tuple[Storage, Node, object]] = []  # (storage, root, buffer) while checks are pending
    into_buffer = None if into is None else into[1]
    direct = False
    rehomed: list[tuple[Storage, object]] = []  # (storage with a home, its new buffer): pinned.py
    try:
        for index, group in by_device.items():
            checks = checks_of.get(index, ())
            context = group[0].device if group else checks[0].device
            devices.append(context)
            # A storage filled whole by one node is realized from that node (the kernelizer
            # stores a root contiguous in any shape): no flat RESHAPE node to build and free.
            roots = [s._shaped or s._value for s in group] + [check.first for check in checks]
            outputs = {i: into_buffer for i, s in enumerate(group) if s is into[0]} if into else None
            inherited = [_poisoned_input(root) for root in roots[:len(group)]] if poisoned else ()
            buffers = realize(roots, context, outputs)
            for buffer, error in zip(buffers, inherited):
                if error is not None:
                    _poison(buffer, error)
            if checks:
                realized.extend(zip(group, roots, buffers))
            for storage, root, buffer in zip(group, roots, buffers):
                if buffer is into_buffer:
                    direct = True  # (its value stays lazy: a later realization computes it again)
                    continue
                if (storage._shaped or storage._value) is not root:
                    # Written by another thread while this realization ran (its optimizer step
                    # on a parameter taken here): the new value, built on the old one, stays.
                    continue
                # (not ``value =``: that would list the storage again)
                storage._value = g.buffer(buffer, storage.dtype, storage.numel)
                storage._shaped = None
                if homes and id(storage) in homes:
                    rehomed.append((storage, buffer))
            found.extend(zip(checks, buffers[len(group):]))
        # The realized graph is dropped here, while the last kernel may still run (see ``settle``
        # below), not after the join: the storages hold buffers now, and dropping a layer norm's
        # graph took ~1.8 us on the 2-core box warm, several times that with cold caches.
        roots = buffers = None
        # Unlisted now that they hold buffers (a listed storage would keep its buffer alive).
        seen = len(pending_list)
        pending_list[:seen] = [s for s in pending_list[:seen] if is_lazy(s._shaped or s._value)]
    except BaseException:
        restore_checks(index_checks)
        raise
    finally:
        # The bookkeeping above ran while the last kernel may still run (runtime ``settle``).
        for context in devices:
            context.settle()
    for storage, buffer in rehomed:
        # (after the launches: the value is copied into the storage's home, whose address
        # user code holds; pinned.py)
        settle_home(storage, buffer)
    if found:
        _bind_failed_checks(found, realized, reader)
    if direct and poisoned:
        # (read straight into the caller's memory, the storage keeps its lazy value: that memory
        # is what holds the error; any other read asks in Storage.realize)
        raise_poisoned(into_buffer)
    return direct


def _bind_failed_checks(found: list, realized: list, reader) -> None:
    """Each failed check of ``found`` poisons the buffers just computed from its input; a check
    of a compiled graph's call (no input known) raises at once, as a failure nobody's value holds
    does at a synchronization (``reader`` None)."""
    first_error = None
    for check, buffer in found:
        position = _read_int64(check.device, buffer)
        if position >= check.numel:
            continue
        value = _read_int64(check.device, _realize[0]([check.entry(position)], check.device)[0])
        error = check.failure(position, value)
        if check.source is None:
            defer_error(error)
            continue
        results = {id(ref()) for ref in check.owners}
        # The op's results, and the values whose graph holds one of them or the checked input.
        read = {id(check.source)} | {id(root) for storage, root, _out in realized if id(storage) in results}
        owners = [out for storage, root, out in realized if id(storage) in results or _reads(root, read)]
        for out in owners:
            _poison(out, error)
        if not owners:
            _orphans.append(error)
        first_error = first_error or error
    if reader is BACKGROUND:
        return
    if deferred_errors:
        raise_deferred()
    elif reader is None and first_error is not None:
        _orphans.clear()
        defer_error(_raised_copy(first_error))
        raise_deferred()


def _reads(root: Node, nodes: set[int]) -> bool:
    """Whether ``root``'s graph contains one of the nodes whose ids are ``nodes``."""
    return any(id(node) in nodes for node in g.toposort([root]))


def _poisoned_input(root: Node):
    """The error of a poisoned buffer ``root``'s graph reads, or None."""
    return next((_error_of(node.arg) for node in g.toposort([root])
                 if node.op == "BUFFER" and id(node.arg) in poisoned), None)


def _read_int64(device, buffer) -> int:
    """The first int64 of ``buffer``, once the work pending on it is done."""
    value = torch.empty(1, dtype=torch.int64)
    device.pool.pool_to_host(buffer.raw, value.data_ptr(), 8, device.events.take([buffer.id]))
    return int(value)


_realize: list = [None]
