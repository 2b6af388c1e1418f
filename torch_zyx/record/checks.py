"""Index bounds (and integer divisors) checked on the device: what ATen checks on the host before
an indexing op, or in its kernels before an integer division.

Stage 1 (recording) and the realization trigger. An op whose result depends on the values of
an index tensor (gather, index_select, ``x[idx]``, embedding, scatter, index_put_, nll_loss's
targets...) cannot look at those values while it records: they may not be computed yet. The
lowering records a check instead (``check_index``): an int64 scalar computed on the device with
the graph (one reduction), the flat position of the first entry outside the valid range.
``pending.realize_all`` realizes the pending checks of a device with its pending storages, reads
the positions back and raises CPU torch's exception, with CPU torch's message, for the first
check that failed, in the order they were recorded (the bad entry itself is computed and read
only then). Integer divisions by a tensor record a check of their divisors the same way
(``check_nonzero``): the division itself divides by 1 where a divisor is 0 (ops/math/elementwise.py).

As with CUDA's device-side asserts, the error surfaces at a later read, not at the op itself, and
the op's result is undefined (an out-of-range entry selects nothing). It belongs to the op's
result (the storage its lowering produces next: ``bind_unbound``, called by tensor.py's ``wrap``
and ``write``) and the values computed from it or from the checked input (``source``): a
realization binds a failed check's error to the buffers of those values (``pending.poisoned``),
and reading one of them (``.cpu()``, ``.item()``, printing), or a value computed from them later,
raises it. ``torch.zyx.synchronize()`` raises it too, and is what raises a failure whose results
were all dropped. Unrelated values realized with them in one graph read as usual.
"""

from __future__ import annotations

import weakref

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node

int64 = dtypes.int64


class IndexCheck:
    """A pending check: ``first`` is an int64 node of shape (1,), the flat position of the first
    entry of ``index`` (flat, ``numel`` entries) outside the range, ``numel`` if none. ``source``
    is the checked input as the op reads it: the values that read it own the error (None: the
    next read raises it, whatever it reads: a compiled graph's call, whose values are buffers)."""

    __slots__ = ("device", "error", "first", "index", "message", "numel", "owners", "source")

    def __init__(self, device, index: Node, first: Node, error: type, message: str,
                 source: Node | None = None):
        self.device, self.index, self.first, self.numel = device, index, first, index.shape[0]
        self.error, self.message = error, message
        self.source = source
        self.owners: list = []  # weak references to the storages of the op's result

    def entry(self, position: int) -> Node:
        """The entry at ``position`` (shape (1,)): realized only for a check that failed, so a
        passing check costs one reduction."""
        return g.shrink(self.index, ((position, position + 1),))

    def failure(self, position: int, value: int) -> BaseException:
        """The exception CPU torch raises for the entry ``value`` at ``position``."""
        return self.error(self.message.format(index=value, position=position))


_pending: list[IndexCheck] = []
# Checks recorded by the op being recorded, until its result's storage exists.
unbound: list[IndexCheck] = []


def check_index(index: Node, low: int, high: int, device, error: type, message: str,
                ignore: int | None = None) -> None:
    """Record that every entry of the int64 node ``index`` lies in [low, high), or equals
    ``ignore`` when that is given. ``message`` is CPU torch's, with ``{index}`` standing for the
    first entry outside the range and ``{position}`` for its flat position."""
    numel = index.numel
    if numel == 0:
        return
    flat = g.reshape(index, (numel,))
    shape = (numel,)
    below = g.binary("lt", flat, g.const(low, int64, shape))
    above = g.unary("not", g.binary("lt", flat, g.const(high, int64, shape)))
    bad = g.binary("or", below, above)
    if ignore is not None:
        bad = g.binary("and", bad, g.binary("ne", flat, g.const(ignore, int64, shape)))
    _record(flat, bad, device, error, message, index)


def check_nonzero(divisor: Node, device) -> None:
    """Record that no entry of the integer node ``divisor`` is 0: ATen's integer division raises
    RuntimeError("ZeroDivisionError") where a divisor is (its kernels check as they divide)."""
    zero = g.binary("eq", divisor, g.const(0, divisor.dtype, divisor.shape))
    check_never(zero, device, RuntimeError, "ZeroDivisionError", divisor)


def check_never(bad: Node, device, error: type, message: str, source: Node) -> None:
    """Record that no entry of the bool node ``bad`` holds: a check CPU torch makes of an op's
    input ``source``'s values (integer divisors, multinomial's probabilities), raised as
    ``error(message)``."""
    numel = bad.numel
    if numel == 0:
        return
    flat = g.reshape(bad, (numel,))
    _record(g.cast(flat, int64), flat, device, error, message, source)


def _record(flat: Node, bad: Node, device, error: type, message: str, source: Node) -> None:
    """A pending check of the int64 entries ``flat``: the first position where ``bad`` holds."""
    shape = flat.shape
    first = g.reduce("min", g.where(bad, g.iota(shape), g.const(shape[0], int64, shape)), (0,))
    check = IndexCheck(device, flat, first, error, message, source)
    _pending.append(check)
    unbound.append(check)


def bind_unbound(storage) -> None:
    """The checks recorded since the last result belong to ``storage`` (the op's result)."""
    ref = weakref.ref(storage)
    for check in unbound:
        check.owners.append(ref)
    unbound.clear()


def take_checks(device=None) -> list[IndexCheck]:
    """The pending checks of ``device`` (all when None), oldest first, no longer pending."""
    if not _pending:
        return []
    # Only the checks seen here are taken out: another thread may append one meanwhile.
    seen = _pending[:]
    if device is None:
        del _pending[:len(seen)]
        return seen
    _pending[:len(seen)] = [check for check in seen if check.device is not device]
    return [check for check in seen if check.device is device]


def pending_checks() -> list[IndexCheck]:
    """The list of pending checks itself, oldest first (record/pending.py ``tracing`` takes those
    a traced graph recorded out of it)."""
    return _pending


def add_checks(checks: list[IndexCheck]) -> None:
    """Make ``checks`` pending after those recorded so far (a compiled graph's call)."""
    _pending.extend(checks)


def restore_checks(checks: list[IndexCheck]) -> None:
    """Make ``checks`` pending again, before those recorded since (a realization that failed)."""
    _pending[:0] = checks
