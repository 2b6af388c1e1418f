"""The counter-based random generator's state: (seed, next counter) per device.

A random op of n elements takes counters [offset, offset + n) and hashes (seed, counter) in
the kernel (lazy RANDOM node), so drawing numbers is free until realized and fuses with
its consumers. ``manual_seed`` resets the counter: runs are reproducible. A
``torch.Generator(device="zyx")`` passed to a random op holds its own (seed, counter) pair
(device_hooks.cpp): its seed is ``initial_seed()`` and its counter ``get_offset()``.
"""

from __future__ import annotations

import contextlib
import struct

_state: dict[int, list[int]] = {}
DEFAULT_SEED = 67280421310721


def _get(index: int) -> list[int]:
    return _state.setdefault(index, [DEFAULT_SEED, 0])


def manual_seed(seed: int, index: int = 0) -> None:
    _state[index] = [int(seed) & ((1 << 64) - 1), 0]


def seed_of(index: int = 0) -> int:
    return _get(index)[0]


def take(index: int, count: int) -> tuple[int, int]:
    state = _get(index)
    seed, offset = state
    state[1] = offset + max(int(count), 1)
    return seed, offset


# The generator of the random op being decomposed (dispatch.py), for the random ops it records.
_scoped: list = []


@contextlib.contextmanager
def drawing_from(generator):
    """Random ops recorded inside draw from ``generator`` (when they were given none)."""
    _scoped.append(generator)
    try:
        yield
    finally:
        _scoped.pop()


def draw(index: int, count: int, generator=None) -> tuple[int, int]:
    """(seed, first counter) of ``count`` fresh counters of device ``index``'s state, or of
    ``generator`` when a random op was given one (or is part of an op given one)."""
    if generator is None:
        if not _scoped:
            return take(index, count)
        generator = _scoped[-1]
    if generator.device.type != "zyx":
        raise RuntimeError(f"Expected a 'zyx' device type for generator but found '{generator.device.type}'")
    offset = generator.get_offset()
    generator.set_offset(offset + max(int(count), 1))
    return generator.initial_seed(), offset


def get_state(index: int = 0) -> bytes:
    seed, offset = _get(index)
    return struct.pack("<QQ", seed, offset)


def set_state(data: bytes, index: int = 0) -> None:
    seed, offset = struct.unpack("<QQ", bytes(data))
    _state[index] = [seed, offset]
