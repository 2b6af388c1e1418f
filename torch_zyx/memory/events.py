"""Events and the per-buffer event table (the ASYNC EVENT RULES of seeds/000_*.txt).

Every launch records one event keyed by the set of buffers it touches. Anything that reuses,
frees or reads one of those buffers first takes (removes) the events whose key contains it
and waits on them. A taken event is consumed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class Event:
    """Completion of asynchronous device work; ``wait`` blocks until it is done.

    A lock held from creation until ``set``: waiting is acquiring it. Every launch makes one,
    and a ``threading.Event`` (a Condition around a lock, in Python) cost ~12 us to make and
    set on a slow VM, ~10% of a realization's own time."""

    __slots__ = ("_done", "_error", "_keepalive", "_lock")

    def __init__(self, keepalive=None):
        self._done = False
        self._error: BaseException | None = None
        # Host memory that must outlive the work (async host→pool copies).
        self._keepalive = keepalive
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self, error: BaseException | None = None) -> None:
        if self._done:
            return
        self._error = error
        self._keepalive = None
        self._done = True
        try:
            self._lock.release()
        except RuntimeError:  # two threads finished it at once (OpenCL status polls)
            pass

    def is_done(self) -> bool:
        return self._done

    def wait(self) -> None:
        if not self._done:
            with self._lock:  # released by set(); passed on to any other waiter
                pass
        if self._error is not None:
            raise self._error


_COMPLETED = Event()
_COMPLETED.set()


def completed() -> Event:
    """An event that is already done (shared: nothing ever sets it again)."""
    return _COMPLETED


def wait_all(events: Iterable[Event]) -> None:
    for event in events:
        event.wait()


class EventTable:
    """``frozenset(buffer ids) → Event``: pending work per set of touched buffers."""

    def __init__(self):
        self._events: dict[frozenset, Event] = {}
        # Re-entrant: a garbage-collected Buffer's __del__ can call take() while this thread
        # already holds the lock (GC runs at any allocation), which deadlocked a plain Lock.
        self._lock = threading.RLock()

    # Every walk over the table walks a copy (``dict.copy`` clones without running Python
    # code): the garbage collector can run at any allocation inside a walk, and a Buffer it
    # frees calls ``take`` re-entrantly on this thread, whose ``_prune`` deletes entries; a
    # walk over the live dict then fails with "dictionary changed size during iteration".

    def _prune(self) -> None:
        """Forget completed events (lock held): only pending work needs waiting on."""
        events = self._events
        for key, event in events.copy().items():
            if event.is_done() and events.get(key) is event:
                del events[key]

    def record(self, buffer_ids: Iterable[int], event: Event) -> None:
        if event.is_done():
            # Nothing to wait for (a small CPU launch runs before returning). An event under
            # the same key needs no superseding either: the launch waited on it before running.
            return
        key = frozenset(buffer_ids)
        with self._lock:
            self._prune()
            # A pending event under the same key is superseded: the new work waited on it
            # (its launch took it), so waiting on the new event covers both.
            self._events[key] = event

    def take(self, buffer_ids: Iterable[int]) -> list[Event]:
        """The pending events of every key that touches one of ``buffer_ids``.

        Unlike the seeds' table, a taken event stays until it completes: a kernel's event
        covers all its buffers, and freeing or reading one of them must not hide the pending
        work from the others (``synchronize`` or a later read of another buffer of the same
        kernel would otherwise not wait).
        """
        events = self._events
        if not events:  # nothing pending on this device (every launch and free asks)
            return []
        wanted = set(buffer_ids)
        out = []
        with self._lock:
            # One walk both forgets the completed events (``_prune``) and collects the rest.
            for key, event in events.copy().items():
                if event.is_done():
                    if events.get(key) is event:
                        del events[key]
                elif not wanted.isdisjoint(key):
                    out.append(event)
        return out

    def take_all(self) -> list[Event]:
        if not self._events:
            return []
        with self._lock:
            self._prune()
            return list(self._events.values())
