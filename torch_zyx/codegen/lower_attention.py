"""Lowering of fused attention kernels: scaled dot-product attention with an online softmax on
tensor cores, no score matrix in memory.

A kernel that stores an ``ATTENTION`` composite (lazy/composite.py: the attention ``[..., L,
Dv]`` and, when stored too, its rows' log-sum-exp ``[..., L]``; the kernelizer keeps the node
whole where ``keeps_attention`` says so) runs one work group per block of ``bm`` query rows of
one batch entry, ``bm / 16`` warps of 16 rows each. The group stages its query block in shared
memory once, and each warp keeps its rows' fragments of it in registers. Then, per block of
``bn`` keys (two shared stages, as in lower_tiles: the next block is loaded into registers
while this one's products run, one barrier per step):

  scores  S = Q K^T on the tensor cores (16 x 8 tiles, float accumulators: lane l holds rows
          l / 4 and l / 4 + 8, columns 2 (l % 4) and + 1 of each), scaled by ``scale * log2 e``
          and masked (keys past the end, and for causal attention keys after the query);
  softmax each row's running maximum m (the four lanes of a row exchange theirs with warp
          shuffles), p = 2^(S - m), the running sum l and the output rescaled by 2^(m_old - m);
  output  O += P V on the tensor cores: the lane's outputs of two neighbouring score tiles are
          exactly its part of the A fragment of the product with the next 16 keys (``PACK``).

At the end each lane's partial row sums are added across its row's lanes, the outputs divided
by them and stored, and the log-sum-exp (m + log2 l, in natural units) stored by the first lane
of each row. Causal groups skip the key blocks wholly after their last query row. Half and
bfloat16 inputs (``LoweringOptions.tensor_cores``), head sizes that are multiples of 16 up to
``MAX_HEAD``.

A mixin of ``lower.Lowerer``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import dtypes
from ..lazy.graph import Node
from ..lazy.panels import read_stride
from . import symbolic as sym
from .index import Index
from .lower_tiles import _PACKED_PAD, _PackedBlock
from .symbolic import Expr

ATTENTION = "ATTENTION"


class AttentionTile(NamedTuple):
    """A fused attention kernel's blocks: ``row_tiles`` 16-row tiles of queries per warp,
    ``warps`` warps per group (a group's query block is ``16 * row_tiles * warps`` rows) and
    ``keys`` keys per step. Each key fragment read from shared memory serves every row tile."""

    row_tiles: int
    keys: int
    warps: int

    @property
    def rows(self) -> int:
        return 16 * self.row_tiles * self.warps


# Heads up to 64: 256 query rows per group of 8 warps (32 a warp), 64 keys a step (per lane 64
# score, 64 output and 32 query-fragment registers; H100, 8x16x1024x64 bf16: 0.307 ms, against
# 0.317 with 4 warps and 0.413 with 16 rows a warp). Larger heads hold twice the outputs and
# query fragments: 16 rows a warp. The first tile whose blocks fit the shared memory is taken.
TILES = (AttentionTile(row_tiles=2, keys=64, warps=8), AttentionTile(row_tiles=2, keys=64, warps=4),
         AttentionTile(row_tiles=2, keys=32, warps=4))
LARGE_HEAD_TILES = (AttentionTile(row_tiles=1, keys=64, warps=8),
                    AttentionTile(row_tiles=1, keys=32, warps=4))


def shared_bytes(tile: AttentionTile, depth: int, depth_v: int) -> int:
    """Group-shared memory of a kernel with ``tile``'s blocks: two stages of the key and value
    blocks, the query block in the key block's arrays when it fits there (it is read into
    registers before the first keys are staged), else beside them (16-bit elements)."""
    keys = 2 * tile.keys * (depth + _PACKED_PAD)
    queries = tile.rows * (depth + _PACKED_PAD)
    return 2 * (keys + 2 * tile.keys * (depth_v + _PACKED_PAD) + (0 if queries <= keys else queries))


def attention_tile(depth: int, depth_v: int, budget: int) -> AttentionTile | None:
    """The first of ``TILES`` (``LARGE_HEAD_TILES`` for heads past 64) whose blocks fit
    ``budget`` bytes of shared memory (0: no bound)."""
    tiles = TILES if max(depth, depth_v) <= 64 else LARGE_HEAD_TILES
    return next((t for t in tiles if not budget or shared_bytes(t, depth, depth_v) <= budget), None)
# Head sizes (D and Dv) the fused kernel takes: the outputs (Dv / 8 x 4 floats a lane) and the
# query fragments (D / 16 x 4 registers) stay in registers.
MAX_HEAD = 128


def keeps_attention(node: Node, tensor_cores: tuple[str, ...], local_memory: int = 0) -> bool:
    """Whether a device with tensor-core products of ``tensor_cores`` and ``local_memory`` bytes
    of shared memory a group runs the ``ATTENTION`` node ``node`` as one fused kernel (else
    the kernelizer expands it)."""
    if node.op != ATTENTION:
        return False
    q, k, v, _scale = node.srcs
    heads = (q.shape[-1], v.shape[-1])
    return (q.dtype.name in tensor_cores and k.dtype is q.dtype and v.dtype is q.dtype
            and all(h % 16 == 0 and 16 <= h <= MAX_HEAD for h in heads)
            and q.shape[-2] > 0 and k.shape[-2] > 0
            and attention_tile(*heads, local_memory) is not None)


class _Shape(NamedTuple):
    """What a packed block reads of its lowering's tile: k per block and the group's items."""

    bk: int
    items: int


class _HeadBlock(_PackedBlock):
    """A block of one attention operand (``[..., rows, columns]``) held as stored in shared
    memory: ``width`` rows or columns from ``start`` (the ``position`` axis) by ``bk`` along the
    other axis (the products' k), from ``k_start`` on."""

    def __init__(self, lowerer, operand: Node, width: int, bk: int, items: int, batch_dims: list[Expr],
                 position_axis: int, stages: int, allocate: bool = True):
        self.lowerer, self.operand, self.tile = lowerer, operand, _Shape(bk, items)
        self.width, self.batch_dims = width, batch_dims
        nd = len(operand.shape)
        self.axis, self.k_axis = position_axis, (nd - 1 if position_axis == nd - 2 else nd - 2)
        self.extent, self.k_extent = operand.shape[self.axis], operand.shape[self.k_axis]
        # As in lower_tiles: held position by position where the operand is contiguous along k.
        self.along_k = read_stride(operand, self.k_axis) == 1 or read_stride(operand, self.axis) != 1
        self.stages = stages
        self.start: Expr = sym.Num(0)
        self.k_start: Expr = sym.Num(0)
        self.layout()
        # (Not ``allocate``: the caller gives it an array, maybe another block's while unused.)
        self.shared = self.allocate() if allocate else -1

    def index_of(self, position: Expr, k_step: Expr, kk: Expr) -> Index:
        """Where the operand is read for ``position`` (from ``start``) and ``kk`` (from
        ``k_start``; ``valid``: inside the operand)."""
        at, k = sym.add(self.start, position), sym.add(self.k_start, kk)
        valid = sym.and_(sym.lt(at, self.extent), sym.lt(k, self.k_extent))
        dims = [*self.batch_dims, sym.Num(0), sym.Num(0)]
        dims[self.axis], dims[self.k_axis] = at, k
        return Index(self.operand.shape, tuple(dims), valid=valid)


class AttentionLowering:
    """Fused attention kernels for ``lower.Lowerer`` (emission and loop helpers there)."""

    def lower_attention(self) -> tuple[int, int]:
        """(work groups, items per group) of the kernel storing the ``ATTENTION`` outputs
        (module docstring)."""
        stores = {store.value.arg[1]: store for store in self.kernel.stores}
        node = self.kernel.stores[0].value
        causal = bool(node.arg[0])
        q, k, v, scale = node.srcs
        *batch_shape, length, depth = q.shape
        keys, depth_v = k.shape[-2], v.shape[-1]
        nd = len(q.shape)
        budget = self.options.tile_budget
        tile = self.options.attention_tile or attention_tile(depth, depth_v, budget)
        if budget and shared_bytes(tile, depth, depth_v) > budget:  # (an autotuner's choice)
            raise ValueError(f"zyx: attention tile {tile} needs more than {budget} bytes of shared memory")
        bm, bn, tiles = tile.rows, tile.keys, tile.row_tiles
        items = 32 * tile.warps
        m_blocks, steps = -(-length // bm), -(-keys // bn)
        groups = math.prod(batch_shape) * m_blocks
        self.group, self.items_store = items, True
        f32 = dtypes.float32
        var = sym.Var("gidx", 0, groups - 1)
        rng = self.open_range(var, "start", "end")
        self.lid = sym.Var("lid", 0, items - 1)
        self.add("SPECIAL", dtypes.int64, (), (self.lid.name, "lid"), pure=False)
        m_block = self.define("mblk", sym.mod(var, m_blocks), m_blocks)
        batch_dims: list[Expr] = []
        inner = m_blocks
        for size in reversed(batch_shape):
            batch_dims.insert(0, sym.mod(sym.div(var, inner), size) if size > 1 else sym.Num(0))
            inner *= size
        lane, warp = sym.mod(self.lid, 32), sym.div(self.lid, 32)
        group = self.define("lgrp", sym.div(lane, 4), 8)
        pair = self.define("lpair", sym.mul(sym.mod(lane, 4), 2), 7)
        m0 = sym.mul(m_block, bm)
        row0 = sym.mul(warp, 16 * tiles)
        # The lane's query rows in the whole sequence: h = 2 i (its row l / 4 of row tile i) and
        # 2 i + 1 (that row + 8).
        rows = [sym.add(m0, sym.add(row0, sym.add(group, sym.Num(16 * (h // 2) + 8 * (h % 2)))))
                for h in range(2 * tiles)]

        k_block = _HeadBlock(self, k, bn, depth, items, batch_dims, nd - 2, stages=2)
        v_block = _HeadBlock(self, v, depth_v, bn, items, batch_dims, nd - 1, stages=2)
        # The query block, once (in the key block's arrays where it fits: a barrier then keeps
        # the first keys from overwriting it before every warp has read it); each warp's
        # fragments of its rows stay in registers.
        q_block = _HeadBlock(self, q, bm, depth, items, batch_dims, nd - 2, stages=1, allocate=False)
        borrowed = q_block.size <= 2 * k_block.size and q_block.pitch == k_block.pitch
        q_block.shared = k_block.shared if borrowed else q_block.allocate()
        q_block.start = m0
        zero_step = sym.Num(0)  # (blocks here are placed by ``start``, ``k_start``)
        self.stage_blocks((q_block,), [q_block.copies_async(zero_step)], zero_step, zero_step)
        q_fragments = [[q_block.fragment("a", sym.add(row0, sym.add(group, sym.Num(16 * i))),
                                         sym.add(pair, sym.Num(k16)), sym.Num(0))
                        for k16 in range(0, depth, 16)] for i in range(tiles)]
        if borrowed:
            self.add("BARRIER", None, (), pure=False)

        (scale_value,) = self.emit(scale, [Index(scale.shape, ())])
        scale_value = self.add("CAST", f32, (scale_value,))
        log2e = self.add("ALU", f32, (scale_value, self.const(math.log2(math.e), f32)), "mul")
        zero, minus_inf = self.const(0.0, f32), self.const(float("-inf"), f32)
        row_max = [self.add("ACC", f32, (), float("-inf"), pure=False) for _ in rows]
        row_sum = [self.add("ACC", f32, (), 0.0, pure=False) for _ in rows]
        outs = [[[self.add("ACC", f32, (), 0.0, pure=False) for _ in range(4)] for _ in range(depth_v // 8)]
                for _ in range(tiles)]
        scores = [[[self.add("ACC", f32, (), 0.0, pure=False) for _ in range(4)] for _ in range(bn // 8)]
                  for _ in range(tiles)]

        def at_step(step: Expr) -> None:
            k_block.start, v_block.k_start = sym.mul(step, bn), sym.mul(step, bn)

        def needed(step: Expr) -> int | None:
            """An IF around a causal group's steps: the block's first key up to its last row."""
            if not causal:
                return None
            return self.open_if(sym.lt(sym.add(sym.mul(step, bn), sym.mul(m0, -1)), bm))

        def step_products(step: Expr, stage: Expr) -> None:
            self.attention_step(step, stage, causal, keys, bn, rows, group, pair, q_block, k_block,
                                v_block, q_fragments, scores, outs, row_max, row_sum, log2e, zero, minus_inf)

        # Key and value blocks: two stages, step s + 1's staged (asynchronous copies where the
        # operand allows, as lower_tiles does) while step s's products run.
        blocks = (k_block, v_block)
        at_step(sym.Var("kstep", 0, steps - 1))
        copied = [blk.copies_async(zero_step) for blk in blocks]
        at_step(zero_step)
        self.stage_blocks(blocks, copied, zero_step, zero_step)
        if steps > 1:
            step = self.new_var(steps - 1)
            k_range = self.open_range(step, 0, steps - 1)
            guard = needed(step)
            at_step(sym.add(step, sym.Num(1)))
            following_stage = sym.mod(sym.add(step, sym.Num(1)), 2)
            following = self.stage_blocks(blocks, copied, zero_step, following_stage, later=True)
            at_step(step)
            step_products(step, sym.mod(step, 2))
            self.finish_staging(blocks, copied, following, following_stage)
            if guard is not None:
                self.close_if(guard)
            self.close_range(k_range)
        last = sym.Num(steps - 1)
        guard = needed(last)
        at_step(last)
        step_products(last, sym.Num((steps - 1) % 2))
        if guard is not None:
            self.close_if(guard)

        # Row sums over the row's four lanes, then the outputs and the log-sum-exp.
        totals = []
        for h in range(len(rows)):
            total = self.add("ACC_GET", f32, (row_sum[h],), pure=False)
            for mask in (1, 2):
                other = self.add("SHUFFLE", f32, (total,), ("xor", mask))
                total = self.add("ALU", f32, (total, other), "add")
            totals.append(total)
        out_shape = q.shape[:-1] + (depth_v,)
        if 0 in stores:
            target = self.add("BUF", node.dtype, (), self.kernel.slots.index(("tmp", stores[0].target)))
            inverse = [self.add("ALU", f32, (total,), "recip") for total in totals]
            for i, u, r, acc in _cells(outs):
                row, col = rows[2 * i + r // 2], sym.add(pair, sym.Num(8 * u + r % 2))
                value = self.add("ACC_GET", f32, (acc,), pure=False)
                value = self.add("ALU", f32, (value, inverse[2 * i + r // 2]), "mul")
                value = self.add("CAST", node.dtype, (value,))
                position = Index(out_shape, (*batch_dims, row, col)).linear
                guard = self.open_if(sym.lt(row, length)) if length % bm else None
                self.add("STORE", None, (target, self.index(position), value), pure=False)
                if guard is not None:
                    self.close_if(guard)
        if 1 in stores:
            target = self.add("BUF", f32, (), self.kernel.slots.index(("tmp", stores[1].target)))
            ln2 = self.const(math.log(2.0), f32)
            for h in range(len(rows)):
                m = self.add("ACC_GET", f32, (row_max[h],), pure=False)
                m = self.add("WHERE", f32, (self.add("ALU", dtypes.bool_, (m, minus_inf), "eq"), zero, m))
                lse = self.add("ALU", f32, (m, self.add("ALU", f32, (totals[h],), "log2")), "add")
                lse = self.add("ALU", f32, (lse, ln2), "mul")
                position = Index(q.shape[:-1], (*batch_dims, rows[h])).linear
                first = sym.lt(pair, 1)
                guard = self.open_if(sym.and_(first, sym.lt(rows[h], length)) if length % bm else first)
                self.add("STORE", None, (target, self.index(position), lse), pure=False)
                self.close_if(guard)
        self.close_range(rng)
        batch = math.prod(batch_shape)
        self.flops = 2 * batch * length * keys * (depth + depth_v) // (2 if causal else 1) // groups
        return groups, items

    def attention_step(self, step: Expr, stage: Expr, causal: bool, keys: int, bn: int, rows: list[Expr],
                       group: Expr, pair: Expr, q_block: _HeadBlock, k_block: _HeadBlock, v_block: _HeadBlock,
                       q_fragments: list, scores: list, outs: list, row_max: list, row_sum: list,
                       log2e: int, zero: int, minus_inf: int) -> None:
        """One block of keys: its scores, the online softmax's update and its product with V
        (``scores``, ``outs``: accumulators by row tile, 16 x 8 tile and output of the tile)."""
        f32, bool_ = dtypes.float32, dtypes.bool_
        mma_dtype = q_block.operand.dtype
        for _i, _t, _r, acc in _cells(scores):
            self.add("ACC_SET", None, (acc, zero), pure=False)
        for kq in range(len(q_fragments[0])):
            kk = sym.add(pair, sym.Num(16 * kq))
            for t in range(bn // 8):
                k_fragment = k_block.fragment("b", sym.add(group, sym.Num(8 * t)), kk, stage)
                for i, tile_scores in enumerate(scores):
                    self.add("MMA", mma_dtype, (q_fragments[i][kq], k_fragment, *tile_scores[t]), pure=False)
        # Scaled (log2 units) and masked scores, by row tile, 16 x 8 tile and output of the tile.
        first_key = sym.mul(step, bn)
        values = [[[None] * 4 for _ in range(bn // 8)] for _ in scores]
        for i, t, r, acc in _cells(scores):
            x = self.add("ALU", f32, (self.add("ACC_GET", f32, (acc,), pure=False), log2e), "mul")
            key = sym.add(first_key, sym.add(pair, sym.Num(8 * t + r % 2)))
            bounds = ([sym.lt(key, keys)] if keys % bn else []) + \
                ([sym.lt(sym.add(key, sym.mul(rows[2 * i + r // 2], -1)), 1)] if causal else [])
            if bounds:
                x = self.add("WHERE", f32, (self.index(sym.and_(*bounds)), x, minus_inf))
            values[i][t][r] = x
        corrections, shifts = [], []
        for h in range(len(rows)):
            i, half = divmod(h, 2)
            mine = [tile_values[r] for tile_values in values[i] for r in (2 * half, 2 * half + 1)]
            top = mine[0]
            for x in mine[1:]:
                top = self.add("ALU", f32, (top, x), "max")
            for mask in (1, 2):
                top = self.add("ALU", f32, (top, self.add("SHUFFLE", f32, (top,), ("xor", mask))), "max")
            old = self.add("ACC_GET", f32, (row_max[h],), pure=False)
            new = self.add("ALU", f32, (old, top), "max")
            self.add("ACC_SET", None, (row_max[h], new), pure=False)
            # A row with every key so far masked shifts by 0 (its exponentials are 0 either way).
            shift = self.add("WHERE", f32, (self.add("ALU", bool_, (new, minus_inf), "eq"), zero, new))
            shifts.append(shift)
            corrections.append(self.add("ALU", f32, (self.add("ALU", f32, (old, shift), "sub"),), "exp2"))
        partial = [None] * len(rows)
        probabilities = [[[None] * 4 for _ in range(bn // 8)] for _ in scores]
        for i, tile_values in enumerate(values):
            for t, four in enumerate(tile_values):
                for r, x in enumerate(four):
                    h = 2 * i + r // 2
                    p = self.add("ALU", f32, (self.add("ALU", f32, (x, shifts[h]), "sub"),), "exp2")
                    partial[h] = p if partial[h] is None else self.add("ALU", f32, (partial[h], p), "add")
                    probabilities[i][t][r] = p
        for h in range(len(rows)):
            total = self.add("ACC_GET", f32, (row_sum[h],), pure=False)
            total = self.add("ALU", f32, (total, corrections[h]), "mul")
            total = self.add("ALU", f32, (total, partial[h]), "add")
            self.add("ACC_SET", None, (row_sum[h], total), pure=False)
        for i, _u, r, acc in _cells(outs):
            value = self.add("ACC_GET", f32, (acc,), pure=False)
            value = self.add("ALU", f32, (value, corrections[2 * i + r // 2]), "mul")
            self.add("ACC_SET", None, (acc, value), pure=False)
        for c in range(bn // 16):
            p_fragments = [self.add("PACK", mma_dtype, (*tile_p[2 * c], *tile_p[2 * c + 1]), "a", pure=False)
                           for tile_p in probabilities]
            kk = sym.add(pair, sym.Num(16 * c))
            for u in range(len(outs[0])):
                v_fragment = v_block.fragment("b", sym.add(group, sym.Num(8 * u)), kk, stage)
                for i, p_fragment in enumerate(p_fragments):
                    self.add("MMA", mma_dtype, (p_fragment, v_fragment, *outs[i][u]), pure=False)


def _cells(accumulators: list) -> list[tuple]:
    """(row tile, 16 x 8 tile, output of the tile, accumulator) of each accumulator."""
    return [(i, t, r, acc) for i, tiles in enumerate(accumulators) for t, four in enumerate(tiles)
            for r, acc in enumerate(four)]
