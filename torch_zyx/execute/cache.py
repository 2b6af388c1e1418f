"""Bounded in-memory caches of the executor: plans, lowered kernels and compiled programs.

A process that runs many different programs (a test suite, shapes that change every step) must
not keep every plan and program it ever built: each cache keeps at most ``limit`` entries and drops
the least recently used one beyond that (``ZYX_CACHE_ENTRIES``; counted as ``cache_evictions``).
A dropped entry is only rebuilt if needed again; whatever still uses it (a plan holding a
program) keeps it alive.
"""

from __future__ import annotations

from collections import OrderedDict

from ..counters import bump

_MISSING = object()


class BoundedCache(OrderedDict):
    """A dict of at most ``limit`` entries; ``get`` and stores count as uses, the least recently
    used entry goes first."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = max(1, limit)

    def get(self, key, default=None):
        value = super().get(key, _MISSING)
        if value is _MISSING:
            return default
        self.move_to_end(key)
        return value

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)
            bump("cache_evictions")
