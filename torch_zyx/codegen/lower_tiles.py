"""Lowering of matmul-shaped kernels on devices with work groups: block tiles staged in
group-shared memory.

A kernel whose only reduce is a matmul (``sum_k(A[..., m, 1, k] * B[..., 1, n, k])``,
lazy/panels.py), with the elementwise work around it (bias, activation, residual: the
epilogue), runs as one work group per block of ``bm x bn`` outputs. Per step of ``bk`` along
k, the group's items copy the A block (``bm x bk``) and the B block (``bk x bn``) into shared
memory, each element computed once (an operand may be an expression: a ReLU's gradient, a
transposed view read in place) and read by neighbouring items at neighbouring addresses, along
whichever axis the operand is contiguous in memory. After a barrier each item accumulates its
register tile of ``tm x tn`` outputs from shared memory. Item (r, c) of the group's
``(bm / tm) x (bn / tn)`` grid owns ``tm / 4`` runs of four neighbouring rows, 4r.. and
4r + bm / (tm / 4).. (each run one vector load from shared memory: a quarter of the load
instructions), and likewise columns; a tile narrower than four owns rows r, r + bm / tm, ....
The items of a warp read neighbouring shared words (no bank conflicts). Blocks at the edges
mask their loads (zero products) and their stores. The shared blocks have two stages: a step's
products read one while the next step's blocks go into the other (one barrier per step).

Half and bfloat16 products on devices with tensor cores (``LoweringOptions.tensor_cores``) take
``MmaTile``s instead: both blocks are held as the dtype is stored (16 bits; ``_PackedBlock``),
and each warp of the group owns a ``bm / warps_m x bn / warps_n`` part of the
block, computed as 16 x 8 tiles by the warp-wide ``MMA`` instruction (fp32 accumulation) over
the ``FRAGMENT``s of 16 x 16 A tiles and 16 x 8 B tiles it reads from shared memory. Its lane
``l`` holds the outputs at rows ``l / 4`` and ``l / 4 + 8`` and columns ``2 (l % 4)`` and
``2 (l % 4) + 1`` of each tile (the ``mma.m16n8k16`` layout). Where an operand is a buffer read
in place (movement only, runs of eight elements contiguous and 16-byte aligned, no masked edge)
and the device copies asynchronously (``LoweringOptions.async_copies``), its blocks go from
global to shared memory by ``ASYNC_COPY`` (``cp.async``): no registers hold the next step's
block, and each copy moves 16 bytes.

A mixin of ``lower.Lowerer``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..lazy.panels import matmul_operands, read_stride
from . import symbolic as sym
from .index import Index
from .symbolic import Expr


class BlockTile(NamedTuple):
    """Outputs per work group (``bm x bn``), the k step staged per barrier (``bk``) and the
    register tile of each item (``tm x tn``)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def items(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


class MmaTile(NamedTuple):
    """Outputs per work group (``bm x bn``) of a tensor-core matmul, the k step staged per
    barrier (``bk``, a multiple of 16) and its warps (``warps_m x warps_n``), each owning a
    ``bm / warps_m x bn / warps_n`` part of the outputs (multiples of 16 x 8)."""

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int

    @property
    def items(self) -> int:
        return 32 * self.warps_m * self.warps_n


# Largest first: a kernel takes the first tile that still gives every compute unit a group
# (a 256x512 forward linear has 32 blocks of 64 x 64 but 128 of 32 x 32), else the last. An
# item's tm x tn products per k take tm + tn shared loads: 8 x 8 is 4 multiply-adds a load.
GPU_TILES = (BlockTile(128, 128, 8, 8, 8), BlockTile(64, 64, 16, 4, 4), BlockTile(32, 32, 16, 2, 2))
# Shared blocks per operand: a step reads one while the next step's are stored into the other.
STAGES = 2
# Tensor-core tiles, chosen as GPU_TILES are: 8 warps of 64 x 32 outputs (4 x 4 products of
# 16 x 8 per 16 of k, 64 accumulators per lane), a k step of 64 (two stages: 74 KiB of dynamic
# shared memory; H100, bf16 4096^3: 0.631 ms against 0.667 with a step of 32 and 0.714 with
# 128 x 256 blocks), then the same with a step of 32 (within 48 KiB), or 4 warps of 32 x 32.
GPU_MMA_TILES = (MmaTile(128, 128, 64, 2, 4), MmaTile(128, 128, 32, 2, 4), MmaTile(64, 64, 32, 2, 2))
# Shared rows of a packed block are bk + 8 elements apart: the 8 rows a fragment load reads
# (lanes l / 4) then start 16 bytes apart modulo the 128 bytes of the banks (no conflicts).
_PACKED_PAD = 8
# Output rows, columns and reduced length from which a matmul is block tiled (a narrower one,
# a 10-class classifier head, keeps the loop lowering: most of a block would be masked).
MIN_SIDE = 32


class BlockTileLowering:
    """Block-tiled matmul kernels for ``lower.Lowerer`` (emission and loop helpers there)."""

    def block_matmul(self, shape: tuple[int, ...], values: list[Node]) -> tuple | None:
        """(tile, reduce, A, B) when this kernel is lowered as block tiles, else None."""
        tiles = self.options.block_tiles
        if not tiles or len(shape) < 2:
            return None
        reduces = [n for n in g.toposort(values) if n.op == "REDUCE"]
        if len(reduces) != 1:
            return None
        reduce = reduces[0]
        operands = matmul_operands(reduce)
        src = reduce.srcs[0]
        if operands is None or tuple(shape) not in (src.shape[:-1], reduce.shape):
            return None
        a, b = operands
        m, n, k = src.shape[-3:]
        if min(m, n, k) < MIN_SIDE or not all(self._epilogue_of(v, reduce, shape, {}) for v in values):
            return None
        batch = math.prod(src.shape[:-3])
        budget = self.options.tile_budget or 1 << 30
        narrow_a, narrow_b = _narrow(a), _narrow(b)
        if narrow_a.dtype == narrow_b.dtype and narrow_a.dtype.name in self.options.tensor_cores:
            a, b = narrow_a, narrow_b
            # (Upper bound: a block held k by k pads its width rather than k.)
            item = a.dtype.itemsize
            fitting = [t for t in self.options.mma_tiles
                       if STAGES * (t.bm + t.bn + _PACKED_PAD) * (t.bk + _PACKED_PAD) * item <= budget]
        else:
            # Both blocks with their padded pitch, in the type shared arrays hold (float for half).
            element = max(src.dtype.itemsize, 4)
            fitting = [t for t in tiles if STAGES * (t.bm + t.bn + 8) * t.bk * element <= budget]
        if not fitting:
            return None
        units = self.options.compute_units
        tile = next((t for t in fitting if batch * -(-m // t.bm) * -(-n // t.bn) >= units), fitting[-1])
        return (tile, reduce, a, b)

    def _epilogue_of(self, node: Node, reduce: Node, shape: tuple[int, ...], seen: dict) -> bool:
        """Whether ``node`` reads ``reduce`` only through elementwise ops and the reshape that
        drops its reduced axis, if any (each output then uses the reduce at its own position)."""
        found = seen.get(id(node))
        if found is None:
            if node is reduce:
                found = reduce.shape == shape
            elif not self.has_reduce(node):
                found = True
            elif node.op in g.ELEMENTWISE:
                found = all(self._epilogue_of(s, reduce, shape, seen) for s in node.srcs)
            else:
                found = node.op == "RESHAPE" and node.srcs[0] is reduce and node.shape == shape
            seen[id(node)] = found
        return found

    def lower_block_matmul(self, shape: tuple[int, ...], tile: BlockTile | MmaTile, reduce: Node, a: Node,
                           b: Node) -> tuple[int, int]:
        """(work groups, items per group) of the block-tiled kernel (module docstring)."""
        src = reduce.srcs[0]
        nd = len(src.shape)
        m_size, n_size, k_size = src.shape[-3:]
        # The output is the reduce's shape ([..., m, n, 1]) or that without its reduced axis.
        kept = len(shape) == nd
        batch_shape = shape[:nd - 3]
        m_blocks, n_blocks = -(-m_size // tile.bm), -(-n_size // tile.bn)
        blocks = math.prod(batch_shape) * m_blocks * n_blocks
        items = tile.items
        self.group, self.items_store = items, True
        var = sym.Var("gidx", 0, blocks - 1)
        rng = self.open_range(var, "start", "end")
        self.lid = sym.Var("lid", 0, items - 1)
        self.add("SPECIAL", dtypes.int64, (), (self.lid.name, "lid"), pure=False)
        n_block = self.define("nblk", sym.mod(var, n_blocks), n_blocks)
        m_block = self.define("mblk", sym.mod(sym.div(var, n_blocks), m_blocks), m_blocks)
        batch_dims: list[Expr] = []
        inner = m_blocks * n_blocks
        for size in reversed(batch_shape):
            batch_dims.insert(0, sym.mod(sym.div(var, inner), size) if size > 1 else sym.Num(0))
            inner *= size
        m0, n0 = sym.mul(m_block, tile.bm), sym.mul(n_block, tile.bn)
        mma = isinstance(tile, MmaTile)
        # The outputs the item holds (accumulators made before the k loop).
        owned = self._warp_tile(tile, reduce) if mma else self._item_tile(tile, reduce)
        block_of = _PackedBlock if mma else _Block
        a_block = block_of(self, a, tile, tile.bm, m0, m_size, batch_dims, nd - 3)
        b_block = block_of(self, b, tile, tile.bn, n0, n_size, batch_dims, nd - 2)
        blocks_of = (a_block, b_block)
        # Two stages of shared blocks: step s reads stage s % 2 while its items store step s + 1's
        # blocks (loaded into registers before its products, so that their latency passes behind
        # them) into the other, then one barrier. Step 0 is staged before the loop, and the last
        # step runs after it: the loop's loads then never pass the end of k, and need no masks
        # (which would keep them from being vector loads) where k is a multiple of the step.
        steps = -(-k_size // tile.bk)
        any_step = sym.Var("kstep", 0, steps - 1)
        copied = [mma and blk.copies_async(any_step) for blk in blocks_of]
        self.stage_blocks(blocks_of, copied, sym.Num(0), sym.Num(0))
        if steps > 1:
            k_step = self.new_var(steps - 1)
            k_range = self.open_range(k_step, 0, steps - 1)
            following = self.stage_blocks(blocks_of, copied, sym.add(k_step, sym.Num(1)),
                                          sym.mod(sym.add(k_step, sym.Num(1)), 2), later=True)
            self._step(tile, reduce, src.dtype, owned, a_block, b_block, sym.mod(k_step, 2))
            self.finish_staging(blocks_of, copied, following, sym.mod(sym.add(k_step, sym.Num(1)), 2))
            self.close_range(k_range)
        self._step(tile, reduce, src.dtype, owned, a_block, b_block, sym.Num((steps - 1) % 2))

        epilogue = self.flops
        cells = owned.cells
        for (row, col), cell in cells:
            m, n = sym.add(m0, row), sym.add(n0, col)
            bounds = ([sym.lt(m, m_size)] if m_size % tile.bm else []) + \
                ([sym.lt(n, n_size)] if n_size % tile.bn else [])
            inside = sym.and_(*bounds) if bounds else sym.TRUE
            guard = self.open_if(inside) if inside.key != sym.TRUE.key else None
            self.block_value = (reduce, self.add("ACC_GET", reduce.dtype, (cell,), pure=False))
            dims = (*batch_dims, m, n, sym.Num(0)) if kept else (*batch_dims, m, n)
            self.emit_stores([Index(shape, dims)])
            if guard is not None:
                self.close_if(guard)
        self.block_value = None
        self.close_range(rng)
        # Per output: a multiply and an add per k, and the epilogue's share.
        self.flops = 2 * k_size + (self.flops - epilogue) // len(cells)
        return blocks, items

    def stage_blocks(self, blocks: tuple, copied: list[bool], k_step: Expr, stage: Expr,
                     later: bool = False) -> list:
        """Step ``k_step``'s blocks toward the shared blocks of ``stage``: asynchronous copies
        issued (``copied``), the others' values loaded into registers. Not ``later`` (before the
        first step): everything stored and a barrier. Returns the loaded values by block (for
        ``finish_staging`` once the current step's products are issued)."""
        values = []
        for blk, asynchronous in zip(blocks, copied):
            if asynchronous:
                blk.copy_async(k_step, stage)
                values.append(None)
            else:
                values.append(blk.load(k_step))
        if any(copied):
            self.add("ASYNC_COMMIT", None, (), pure=False)
        if not later:
            self.finish_staging(blocks, copied, values, stage)
        return values

    def finish_staging(self, blocks: tuple, copied: list[bool], values: list, stage: Expr) -> None:
        """The registers of ``stage_blocks`` stored into ``stage``, the copies waited for, then
        one barrier: the blocks are complete for every item."""
        for blk, asynchronous, loaded in zip(blocks, copied, values):
            if not asynchronous:
                blk.store(loaded, stage)
        if any(copied):
            self.add("ASYNC_WAIT", None, (), 0, pure=False)
        self.add("BARRIER", None, (), pure=False)

    def _item_tile(self, tile: BlockTile, reduce: Node) -> _Owned:
        """The item's register tile: ``_owned`` rows and columns of the block."""
        item_rows, item_cols = tile.bm // tile.tm, tile.bn // tile.tn
        col = self.define("col", sym.mod(self.lid, item_cols), item_cols)
        row = self.define("row", sym.div(self.lid, item_cols), item_rows)
        rows, cols = _owned(row, tile.tm, item_rows), _owned(col, tile.tn, item_cols)
        accs = [[self.new_acc(reduce) for _ in range(tile.tn)] for _ in range(tile.tm)]
        cells = [((rows[i], cols[j]), accs[i][j]) for i in range(tile.tm) for j in range(tile.tn)]
        return _Owned(cells, (rows, cols, accs))

    def _step(self, tile: BlockTile | MmaTile, reduce: Node, dtype, owned: _Owned, a_block: _Block,
              b_block: _Block, stage: Expr) -> None:
        """One k step's products from the blocks of ``stage``."""
        if isinstance(tile, MmaTile):
            self._mma_step(tile, owned, a_block, b_block, stage)
        else:
            self._register_step(tile, reduce, dtype, owned, a_block, b_block, stage)

    def _register_step(self, tile: BlockTile, reduce: Node, dtype, owned: _Owned, a_block: _Block,
                       b_block: _Block, stage: Expr) -> None:
        """One k step's products of the item's register tile, in a loop over the step's k."""
        rows, cols, accs = owned.layout
        kk = self.new_var(tile.bk)
        kk_range = self.open_range(kk, 0, tile.bk)
        a_values = [a_block.read(kk, r, stage) for r in rows]
        b_values = [b_block.read(kk, c, stage) for c in cols]
        for i, a_value in enumerate(a_values):
            for j, b_value in enumerate(b_values):
                product = self.add("ALU", dtype, (a_value, b_value), "mul")
                self.accumulate(reduce, accs[i][j], product)
        self.close_range(kk_range)

    def _warp_tile(self, tile: MmaTile, reduce: Node) -> _Owned:
        """The outputs the item holds of its warp's part of the block: four of each 16 x 8
        tensor-core tile (module docstring)."""
        warp_rows, warp_cols = tile.bm // tile.warps_m, tile.bn // tile.warps_n
        lane, warp = sym.mod(self.lid, 32), sym.div(self.lid, 32)
        group = self.define("lgrp", sym.div(lane, 4), 8)
        pair = self.define("lpair", sym.mul(sym.mod(lane, 4), 2), 7)
        row0 = sym.mul(sym.div(warp, tile.warps_n), warp_rows)
        col0 = sym.mul(sym.mod(warp, tile.warps_n), warp_cols)
        accs = [[[self.new_acc(reduce) for _ in range(4)] for _ in range(warp_cols // 8)]
                for _ in range(warp_rows // 16)]
        cells = [((sym.add(row0, sym.add(group, sym.Num(16 * i + 8 * (r // 2)))),
                   sym.add(col0, sym.add(pair, sym.Num(8 * j + r % 2)))), acc)
                 for i, row_accs in enumerate(accs) for j, tile_accs in enumerate(row_accs)
                 for r, acc in enumerate(tile_accs)]
        return _Owned(cells, (row0, col0, group, pair, accs))

    def _mma_step(self, tile: MmaTile, owned: _Owned, a_block: _PackedBlock, b_block: _PackedBlock,
                  stage: Expr) -> None:
        """One k step's tensor-core products of the item's warp, 16 of k at a time: each 16 x 16
        A fragment and 16 x 8 B fragment read once, each pair's product accumulated. A lane
        reads its fragments from its row (A) or column (B) ``l / 4`` of the tile, at k
        ``2 (l % 4)`` (the format reads the rest of its part from there)."""
        row0, col0, group, pair, accs = owned.layout
        for k16 in range(0, tile.bk, 16):
            kk = sym.add(pair, sym.Num(k16))
            a_fragments = [a_block.fragment("a", sym.add(row0, sym.add(group, sym.Num(16 * i))), kk, stage)
                           for i in range(len(accs))]
            b_fragments = [b_block.fragment("b", sym.add(col0, sym.add(group, sym.Num(8 * j))), kk, stage)
                           for j in range(len(accs[0]))]
            for i, a_fragment in enumerate(a_fragments):
                for j, b_fragment in enumerate(b_fragments):
                    self.add("MMA", a_block.operand.dtype, (a_fragment, b_fragment, *accs[i][j]), pure=False)


class _Owned(NamedTuple):
    """The outputs one item holds: ((row, column) in the block, accumulator) each, and the layout
    its k steps use."""

    cells: list
    layout: tuple


class _Block:
    """One operand's block in shared memory: ``width`` positions from ``start`` along ``axis``
    (of ``extent``) by ``bk`` along k, element ``kk * pitch + position``."""

    def __init__(self, lowerer: BlockTileLowering, operand: Node, tile: BlockTile, width: int,
                 start: Expr, extent: int, batch_dims: list[Expr], axis: int):
        self.lowerer, self.operand, self.tile = lowerer, operand, tile
        self.width, self.start, self.extent = width, start, extent
        self.batch_dims, self.axis = batch_dims, axis
        nd = len(operand.shape)
        # Neighbouring items take neighbouring k where the operand is contiguous along k (a
        # row-major x, a Linear weight), else neighbouring positions (a transposed operand).
        self.along_k = read_stride(operand, nd - 1) == 1 or read_stride(operand, axis) != 1
        self.shared = self.allocate()

    def allocate(self) -> int:
        """The shared array of both stages (``pitch`` and ``size``, one stage's elements, set)."""
        # Along k, the items' stores land a pitch apart: four words more than the block's width
        # spread them over the shared memory banks (and keep rows aligned for vector loads).
        self.pitch = self.width + 4 if self.along_k else self.width
        self.size = self.tile.bk * self.pitch
        return self.lowerer.add("LOCAL", self.operand.dtype, (), STAGES * self.size, pure=False)

    def load(self, k_step: Expr) -> list[tuple[Expr, int]]:
        """This item's elements of step ``k_step``'s block: (shared position, value) pairs."""
        low, tile, width = self.lowerer, self.tile, self.width
        items = tile.items
        out = []
        for r in range(width * tile.bk // items):
            element = sym.add(low.lid, sym.Num(r * items))
            if self.along_k:
                position, kk = sym.div(element, tile.bk), sym.mod(element, tile.bk)
            else:
                position, kk = sym.mod(element, width), sym.div(element, width)
            out.append((sym.add(sym.mul(kk, self.pitch), position), self.value(position, k_step, kk)))
        return out

    def index_of(self, position: Expr, k_step: Expr, kk: Expr) -> Index:
        """Where the operand is read for ``position`` of the block and ``kk`` of step ``k_step``
        (``valid``: inside the operand)."""
        operand, tile = self.operand, self.tile
        shape = operand.shape
        nd = len(shape)
        other = nd - 2 if self.axis == nd - 3 else nd - 3
        at, k = sym.add(self.start, position), sym.add(sym.mul(k_step, tile.bk), kk)
        valid = sym.and_(*([sym.lt(at, self.extent)] if self.extent % self.width else []),
                         sym.lt(k, shape[-1]))
        dims: list[Expr] = [*self.batch_dims, sym.Num(0), sym.Num(0), k]
        dims[self.axis], dims[other] = at, sym.Num(0)
        return Index(shape, tuple(dims), valid=valid)

    def value(self, position: Expr, k_step: Expr, kk: Expr) -> int:
        """The operand at ``position`` of the block and ``kk`` of step ``k_step`` (zero outside
        the operand)."""
        low, operand = self.lowerer, self.operand
        index = self.index_of(position, k_step, kk)
        (value,) = low.emit(operand, [index])
        if index.valid.key != sym.TRUE.key:
            # Masked loads read zeros, but an expression of them need not be zero (exp(0)).
            zero = low.const(0, operand.dtype)
            value = low.add("WHERE", operand.dtype, (low.index(index.valid), value, zero))
        return value

    def store(self, values: list[tuple[Expr, int]], stage: Expr) -> None:
        """``load``'s pairs into the shared block of ``stage``."""
        low = self.lowerer
        start = sym.mul(stage, self.size)
        for position, value in values:
            low.add("STORE", None, (self.shared, low.index(sym.add(start, position)), value), pure=False)

    def read(self, kk: Expr, position: Expr, stage: Expr) -> int:
        """The element at ``position`` of step ``kk`` of the shared block of ``stage``."""
        low = self.lowerer
        index = low.index(sym.add(sym.mul(stage, self.size), sym.add(sym.mul(kk, self.pitch), position)))
        return low.add("LOAD", self.operand.dtype, (self.shared, index), pure=False)


class _PackedBlock(_Block):
    """One operand's block for tensor-core products: ``width`` positions from ``start`` along
    ``axis`` by ``bk`` along k, held as the dtype is stored (16 bits). An operand contiguous
    along k is held position by position (element ``position * pitch + kk``: the pairs of
    neighbouring k that fragments hold are neighbours in memory), another one k by k (element
    ``kk * pitch + position``, read by the transposed fragments "at", "bt"), so that either way
    an item stores the four neighbours it loaded as one vector and the warp's stores cover
    whole rows (no bank conflicts)."""

    stages = STAGES

    def layout(self) -> None:
        """``pitch`` and ``size`` (one stage's elements) of the shared block."""
        self.pitch = (self.tile.bk if self.along_k else self.width) + _PACKED_PAD
        self.size = (self.width if self.along_k else self.tile.bk) * self.pitch

    def allocate(self) -> int:
        self.layout()
        return self.lowerer.add("LOCAL", self.operand.dtype, (), (self.stages * self.size, "stored"),
                                pure=False)

    def load(self, k_step: Expr) -> list[tuple[Expr, int]]:
        """This item's elements of step ``k_step``'s block: runs of four neighbours along the
        axis the operand is contiguous in (a vector load each where the renderer finds them
        aligned), neighbouring items taking neighbouring runs."""
        out = []
        for position, kk in self.runs(4):
            for e in range(4):
                if self.along_k:
                    at, k = position, sym.add(kk, sym.Num(e))
                else:
                    at, k = sym.add(position, sym.Num(e)), kk
                out.append((self.element(at, k), self.value(at, k_step, k)))
        return out

    def runs(self, width: int) -> list[tuple[Expr, Expr]]:
        """(position, kk) of the first element of each of this item's runs of ``width``
        neighbours along the operand's contiguous axis, neighbouring items taking neighbouring
        runs (numbered along that axis first: the index algebra then keeps each run's start a
        visible multiple of ``width``)."""
        low, tile = self.lowerer, self.tile
        across_count = tile.bk // width if self.along_k else self.width // width
        out = []
        for r in range(self.width * tile.bk // (width * tile.items)):
            run = sym.add(low.lid, sym.Num(r * tile.items))
            across, along = sym.div(run, across_count), sym.mul(sym.mod(run, across_count), width)
            out.append((across, along) if self.along_k else (along, across))
        return out

    def copies_async(self, k_step: Expr) -> bool:
        """Whether this block's steps go to shared memory by ``ASYNC_COPY``: the device has
        them, the operand is a buffer read in place whose runs of eight elements (16 bytes) are
        contiguous and aligned, and no element of a block is masked."""
        low, tile = self.lowerer, self.tile
        if not low.options.async_copies or self.operand.dtype.itemsize != 2:
            return False
        run_axis = tile.bk if self.along_k else self.width
        if (self.width * tile.bk) % (_COPY * tile.items) or run_axis % _COPY:
            return False
        for position, kk in self.runs(_COPY):
            first = _leaf(low, self.operand, self.index_of(position, k_step, kk))
            if first is None or first[1].valid.key != sym.TRUE.key:
                return False
            if not sym.multiple_of(first[1].linear, _COPY):
                return False
            if self.along_k:
                position_last, kk_last = position, sym.add(kk, sym.Num(_COPY - 1))
            else:
                position_last, kk_last = sym.add(position, sym.Num(_COPY - 1)), kk
            last = _leaf(low, self.operand, self.index_of(position_last, k_step, kk_last))
            span = None if last is None else sym.add(last[1].linear, sym.mul(first[1].linear, -1))
            if span is None or span.key != sym.Num(_COPY - 1).key:
                return False
        return True

    def copy_async(self, k_step: Expr, stage: Expr) -> None:
        """Step ``k_step``'s block into the shared block of ``stage`` by ``ASYNC_COPY`` (the
        caller commits and waits)."""
        low = self.lowerer
        start = sym.mul(stage, self.size)
        for position, kk in self.runs(_COPY):
            load, index = _leaf(low, self.operand, self.index_of(position, k_step, kk))
            buf = low.add("BUF", load.dtype, (), load.arg)
            target = low.index(sym.add(start, self.element(position, kk)))
            low.add("ASYNC_COPY", load.dtype, (self.shared, target, buf, low.index(index.linear)), _COPY,
                    pure=False)

    def element(self, position: Expr, kk: Expr) -> Expr:
        """Where ``position`` at ``kk`` is held in the shared block."""
        if self.along_k:
            return sym.add(sym.mul(position, self.pitch), kk)
        return sym.add(sym.mul(kk, self.pitch), position)

    def fragment(self, kind: str, position: Expr, kk: Expr, stage: Expr) -> int:
        """The lane's ``kind`` ("a" or "b") fragment of the tile whose row (A) or column (B)
        ``position`` the lane reads, from ``kk`` on, in the block of ``stage``."""
        low = self.lowerer
        kind = kind if self.along_k else kind + "t"
        index = low.index(sym.add(sym.mul(stage, self.size), self.element(position, kk)))
        return low.add("FRAGMENT", self.operand.dtype, (self.shared, index), (kind, self.pitch), pure=False)


# Elements of one asynchronous copy (16 bytes of a 16-bit dtype).
_COPY = 8


def _leaf(lowerer, node: Node, index: Index) -> tuple[Node, Index] | None:
    """The buffer ``LOAD`` that ``node`` reads in place at ``index`` (through movement ops
    without padding) and where it reads it; None for anything computed."""
    while node.op in g.MOVEMENT and node.op != "PAD":
        index = lowerer.move(node, index)
        node = node.srcs[0]
    return (node, index) if node.op == "LOAD" else None


def _narrow(operand: Node) -> Node:
    """``operand`` without the casts that widen a half or bfloat16 value to a wider float (exact:
    tensor cores take the narrow value and accumulate in float)."""
    while (operand.op == "CAST" and operand.dtype.is_float and operand.srcs[0].dtype.name in _HALVES
           and operand.dtype.itemsize > operand.srcs[0].dtype.itemsize):
        operand = operand.srcs[0]
    return operand


_HALVES = ("float16", "bfloat16")


def _owned(item: Expr, count: int, items: int) -> list[Expr]:
    """The ``count`` positions (rows or columns of its block) that the item at ``item`` of
    ``items`` along that side owns: runs of four neighbours, ``4 * items`` apart, or for fewer
    than four positions every ``items``-th one."""
    if count % 4:
        return [sym.add(item, sym.Num(items * i)) for i in range(count)]
    start = sym.mul(item, 4)
    return [sym.add(start, sym.Num(4 * items * (i // 4) + i % 4)) for i in range(count)]
