"""The counter-based random generator's state: (seed, next counter) per device.

A random op of n elements takes counters [offset, offset + n) and hashes (seed, counter) in
the kernel (lazy RANDOM node), so drawing numbers is free until realized and fuses with
its consumers. ``manual_seed`` resets the counter: runs are reproducible.
"""

from __future__ import annotations

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


def get_state(index: int = 0) -> bytes:
    seed, offset = _get(index)
    return struct.pack("<QQ", seed, offset)


def set_state(data: bytes, index: int = 0) -> None:
    seed, offset = struct.unpack("<QQ", bytes(data))
    _state[index] = [seed, offset]
