"""Operand panels for matmul-shaped reduces: a graph rewrite run before kernelizing.

A matmul is recorded as ``sum_k(A[..., m, 1, k] * B[..., 1, n, k])`` (``ops/linalg/matmul.py``).
Lowering computes it in register tiles of ``rows x cols`` outputs (a ``MatmulTile``, chosen
per device; ``codegen/lower_loops.py``): every step of the k loop reads ``rows`` values of A
and ``cols`` values of B. Read in place, those come from as many rows of a row-major
operand, a large power-of-two stride apart (``W^T`` in a forward linear, ``dY^T`` in a
weight gradient, plain ``B`` with 2048 columns): every k step touches new cache lines that map
to the same few cache sets, and the matmul runs at memory latency (1-6 GFLOP/s on a 2-core
EPYC, against 25-40 once packed).

So, as BLAS GEMMs do, an operand read often enough is first copied into panels: A as
``[m / rows, k, rows]``, B as ``[n / cols, k, cols]``. The tile's k loop then reads each
operand as one sequential stream. An A whose rows already lie in memory along k is read in
place (its rows are as many sequential streams); a computed A
(a ReLU's gradient) is stored once first rather than recomputed for every tile column. The
copy is a small kernel of its own (O(mk + kn) against the matmul's O(mnk)): the packed value
is *pinned* (the kernelizer stores it), and the matmul reads it back through a permute and a
reshape, which lowering turns into index arithmetic (the panel index and the lane within the
panel fall out of the tile's indices). Elementwise work around the reduce (bias, activation)
still fuses into the matmul.
"""

from __future__ import annotations

from typing import NamedTuple

from . import graph as g
from .graph import Node


class MatmulTile(NamedTuple):
    """The register tile of matmul-shaped reduces: output rows x columns per loop iteration.

    Its accumulators (rows x cols / lanes vectors) must hide the FMA latency without spilling:
    4 x 16 is 8 AVX2 registers of 16; with 512-bit vectors 4 x 16 is only 4 (half the FMA rate)
    and 8 x 32 is 16 of 32 (runtime/cpu.py chooses it there: 1024^3 matmul 205 -> 333 GFLOP/s
    on 2 Xeon cores). Outputs that the tile does not divide fall back to 16 columns, 4 rows."""

    rows: int = 4
    cols: int = 16

    def columns(self, n: int) -> int:
        """The tile columns for ``n`` output columns (0: untiled)."""
        return next((c for c in (self.cols, 16) if n % c == 0), 0)

    def panel_rows(self, m: int) -> int:
        """The rows of A's panels (and of the tile) for ``m`` output rows (0: A not packed)."""
        return next((r for r in (self.rows, 4) if m % r == 0), 0)

    def tile_rows(self, m: int) -> int:
        """The tile rows for ``m`` output rows (two where four do not divide: a weight
        gradient of 10 outputs; each loaded column vector then feeds two accumulators)."""
        return self.panel_rows(m) or (2 if m % 2 == 0 else 1)


DEFAULT_TILE = MatmulTile()
# An operand is packed when every element is read by at least this many 4 x 16 tiles (its
# reuse; counted in the default tile whatever the device's: read in place, a larger tile
# still touches as many cache lines per k step. Counted in 8 x 32 tiles, two matmuls of a
# 256-token transformer's attention backward went unpacked and ran at 54 and 100 GFLOP/s: the
# layer's kernels took 172 instead of 162 ms a step on 2 Xeon cores)...
PACK_MIN_REUSE = 16
# ...and the reduced axis is at least this long (shorter rows fit in a few cache lines).
PACK_MIN_K = 32


def pack_matmul_operands(roots: list[Node], tile: MatmulTile | None = DEFAULT_TILE,
                         order: list[Node] | None = None) -> tuple[list[Node], frozenset[int]]:
    """The graph with the operands of large matmul-shaped reduces read from panels for the
    device's ``tile``, and the ids of the packed values (the kernelizer stores each; they live
    as long as the roots). ``tile`` None: nothing packed (GPUs stage operand tiles in shared
    memory instead, codegen/lower_tiles.py). ``order``: ``toposort(roots)`` where the caller has
    it; the roots themselves come back when nothing was packed (graph.rewrite_bottom_up)."""
    if tile is None:
        return roots, frozenset()
    pinned: set[int] = set()

    def pack(node: Node) -> Node:
        return _packed_reduce(node, pinned, tile)

    return g.rewrite_bottom_up(roots, pack, g.REDUCE, order), frozenset(pinned)


def _packed_reduce(node: Node, pinned: set[int], tile: MatmulTile) -> Node:
    rop, axes = node.arg
    src = node.srcs[0]
    nd = len(src.shape)
    if rop != "sum" or nd < 3 or axes != (nd - 1,) or src.op != "BINARY" or src.arg != "mul":
        return node
    m, n, k = src.shape[-3:]
    # Lowering tiles only outputs whose last axis splits into whole tile columns.
    cols, rows = tile.columns(n), tile.panel_rows(m)
    if not cols or k < PACK_MIN_K:
        return node
    operands = list(src.srcs)
    changed = False
    for i, operand in enumerate(operands):
        parts = _operand(operand, src.shape)
        if parts is None:
            continue
        casts, y = parts
        if y.shape[-2] == 1 and y.shape[-3] == m and rows and n // DEFAULT_TILE.cols >= PACK_MIN_REUSE:
            # A, broadcast along n. A computed value is stored first (once, not once per
            # tile column; its other readers, a transposed copy for a weight gradient, read
            # it too). Then it is read in place when its rows lie in memory as they are: the
            # tile's rows are as many sequential streams.
            base = _view_base(y)
            if base.op in g.ELEMENTWISE:
                pinned.add(id(base))
            if _stride(y, nd - 1, pinned) == 1:
                continue
            y = _panels(y, nd - 3, rows, pinned)
        elif y.shape[-3] == 1 and y.shape[-2] == n and m // DEFAULT_TILE.rows >= PACK_MIN_REUSE:
            y = _panels(y, nd - 2, cols, pinned)  # B, broadcast along m
        else:
            continue
        value = g.expand(y, src.shape)
        for dtype in reversed(casts):
            value = g.cast(value, dtype)
        operands[i] = value
        changed = True
    if not changed:
        return node
    return g.reduce("sum", g.binary("mul", operands[0], operands[1]), axes)


def matmul_operands(node: Node) -> tuple[Node, Node] | None:
    """(A, B) of a matmul-shaped reduce ``sum_k(A[..., m, 1, k] * B[..., 1, n, k])``: its two
    operands as the reduce reads them (casts and broadcast to ``[..., m, n, k]`` included), A
    the one broadcast along n; None for any other reduce."""
    rop, axes = node.arg
    src = node.srcs[0]
    nd = len(src.shape)
    if rop != "sum" or nd < 3 or axes != (nd - 1,) or src.op != "BINARY" or src.arg != "mul":
        return None
    first, second = (_operand(operand, src.shape) for operand in src.srcs)
    if first is None or second is None:
        return None
    if first[1].shape[-2] == 1 and second[1].shape[-3] == 1:
        return src.srcs[0], src.srcs[1]
    if second[1].shape[-2] == 1 and first[1].shape[-3] == 1:
        return src.srcs[1], src.srcs[0]
    return None


def read_stride(node: Node, axis: int) -> int | None:
    """How far apart in memory ``node`` reads two neighbours along ``axis`` (None: from different
    values, or not a fixed distance)."""
    return _stride(node, axis, set())


def _operand(node: Node, shape: tuple[int, ...]) -> tuple[list, Node] | None:
    """(casts from the outside in, the value before its broadcast) of a matmul operand
    ``cast(expand(y))``, or None for another shape of expression or a broadcast batch."""
    casts = []
    while node.op == "CAST":
        casts.append(node.dtype)
        node = node.srcs[0]
    if node.op != "EXPAND":
        return None
    y = node.srcs[0]
    if y.shape[:-3] != shape[:-3] or y.op == "CONST":
        return None
    return casts, y


def _view_base(node: Node) -> Node:
    while node.op in g.MOVEMENT:
        node = node.srcs[0]
    return node


def _stride(node: Node, axis: int, stored: set[int]) -> int | None:
    """How far apart in memory ``node`` reads two neighbours along ``axis`` (at the origin),
    following views and elementwise ops down to a buffer or a value stored whole (one in
    ``stored``, a reduce); None when the neighbours come from different values."""
    pos = [0] * len(node.shape)
    first = _position(node, tuple(pos), stored)
    pos[axis] = 1
    second = _position(node, tuple(pos), stored)
    return second[1] - first[1] if first[0] is second[0] else None


def _position(node: Node, pos: tuple[int, ...], stored: set[int]) -> tuple[Node, int]:
    """(the value read, the flat element of it) for element ``pos`` of ``node``."""
    while id(node) not in stored:
        op, arg = node.op, node.arg
        if op in g.MOVEMENT:
            src = node.srcs[0]
            if op == "RESHAPE":
                pos = _unravel(_ravel(pos, node.shape), src.shape)
            elif op == "PERMUTE":
                moved = [0] * len(pos)
                for i, a in enumerate(arg):
                    moved[a] = pos[i]
                pos = tuple(moved)
            elif op == "EXPAND":
                pos = tuple(0 if s == 1 else p for p, s in zip(pos, src.shape))
            elif op == "PAD":
                pos = tuple(p - before for p, (before, _a) in zip(pos, arg))
            elif op == "SHRINK":
                pos = tuple(p + begin for p, (begin, _e) in zip(pos, arg))
            elif op == "FLIP":
                pos = tuple(s - 1 - p if i in arg else p for i, (p, s) in enumerate(zip(pos, node.shape)))
            else:  # STRIDED
                _shape, strides, offset = arg
                pos = (offset + sum(p * st for p, st in zip(pos, strides)),)
            node = src
        elif op in g.ELEMENTWISE:
            # Elementwise work fuses into the reader: follow the first operand that is read
            # from memory (WHERE's condition and constants are not where the data is).
            srcs = node.srcs[1:] if op == "WHERE" else node.srcs
            node = next((s for s in srcs if s.op != "CONST"), srcs[0])
        else:
            break
    return node, _ravel(pos, node.shape)


def _ravel(pos: tuple[int, ...], shape: tuple[int, ...]) -> int:
    flat = 0
    for p, s in zip(pos, shape):
        flat = flat * s + p
    return flat


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    pos = []
    for s in reversed(shape):
        pos.append(flat % s if s else 0)
        flat = flat // s if s else 0
    return tuple(reversed(pos))


def _panels(y: Node, axis: int, width: int, pinned: set[int]) -> Node:
    """``y`` (the k axis last) read back from a stored copy with ``axis`` split into panels of
    ``width`` and the panel lanes innermost: [..., axis / width, k, width]."""
    shape = y.shape
    batch = shape[:-3]
    # The other of the two axes before k is the broadcast one (size 1): dropped here.
    split = batch + (shape[axis] // width, width, shape[-1])
    nb = len(batch)
    order = tuple(range(nb)) + (nb, nb + 2, nb + 1)
    packed = g.permute(g.reshape(y, split), order)
    pinned.add(id(packed))
    # Built directly: the constructor would fold the two permutes into none.
    back = Node("PERMUTE", order, (packed,), packed.dtype, split)
    return g.reshape(back, shape)
