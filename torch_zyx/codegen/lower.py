"""Lowering: one scheduled kernel (AST of lazy nodes) → loop IR.

Stage 4 of the flow. Views become symbolic index arithmetic (``symbolic``), padding becomes
masks, reduces become inner loops with accumulators. Elementwise kernels iterate over the flat
output index (views of the same layout then cancel to that index, so the loop vectorizes);
kernels with reduces iterate over the output dims, may compute several neighbouring outputs
per iteration ("upcast", the register tile of matmul-shaped reduces), and loop over the
reduced axes inside. The outermost loop is what the runtime splits across threads.

Devices with work groups (``LoweringOptions.group_size``) get grouped reduces for long
reductions with few outputs: one work group per output, each item accumulates a strided part
of the reduced range (neighbouring items read neighbouring elements), then a tree reduction in
group-shared memory with barriers; every item reads the result, one item stores.

This module holds the emission of values and reduces and the choice of kernel structure;
row kernels live in ``lower_rows``, loop order and tiling by memory layout in ``lower_loops``,
scatter kernels in ``lower_scatter``, block-tiled matmuls in ``lower_tiles``, fused attention
in ``lower_attention``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..lazy.kernelize import ScheduledKernel
from ..lazy.panels import DEFAULT_TILE, MatmulTile
from . import symbolic as sym
from .index import Index
from .ir import Instr, LoopKernel
from .lower_attention import ATTENTION, AttentionLowering, AttentionTile, keeps_attention
from .lower_loops import LoopNestLowering
from .lower_rows import RowLowering
from .lower_scatter import ScatterLowering
from .lower_tiles import BlockTile, BlockTileLowering, MmaTile
from .symbolic import Expr

_REDUCE_INIT = {"sum": 0, "prod": 1}
# Elementwise kernels whose last axis is at least this long loop over rows, then columns.
_ROW_LOOP_MIN = 64
# Work per element of a permuting copy (``lower_runs``), in the scalar operations a launch's
# work counts: its elements move one by one (scalar stores a line apart, or scalar loads), not
# a vector at a time as in elementwise loops, so a chunk of it takes several times as long and
# the launch shares it out more finely. The panels of a 512x512 matmul operand (1 MB) went to 2
# threads of the 16-core host in 86-185 us, to 8 in 31-74 us with this (linear 256x512x512
# there: 0.57-0.68 -> 0.35-0.37 ms per call, medians; on 2 cores the chunks are smaller).
_PERMUTED_WORK = 4


@dataclass(frozen=True)
class LoweringOptions:
    """What the target device offers, chosen by the executor per device (the CPU: defaults)."""

    group_size: int = 0  # work items per grouped reduce (a power of two); 0: no grouped reduces
    few_group_size: int = 0  # group size when outputs <= few_outputs (a full sum: one group)
    few_outputs: int = 0
    group_min_reduce: int = 256  # reduced elements per output from which to group
    group_max_outputs: int = 0  # group only while outputs are this few (else one item each)
    # Bytes of group-shared memory a group may use (0: no bound). Each grouped reduce has its own
    # shared array of one element per item: a kernel of many reduces gets smaller groups.
    local_memory: int = 0
    # Elementwise kernels with long rows loop over columns inside one item: good for CPU
    # loops, but GPU work items side by side would then read memory a row apart.
    row_loops: bool = True
    # The register tile of matmul-shaped reduces (lazy/panels.py packs operands to match it).
    matmul_tile: MatmulTile = DEFAULT_TILE
    # Row kernels compute the next row's first reduces (those reading only the row: layer
    # norm's statistics, softmax's maximum) while they store this one (``lower_rows``): CPU
    # loops, whose outer range is a chunk of rows. Not where each outer iteration is its own
    # work item.
    pipeline_rows: bool = False
    # Elementwise kernels over a flat index compute this many neighbouring elements per outer
    # iteration (GPUs: the renderer then moves them with one vector load or store per buffer,
    # and each thread has that many loads in flight). 1: one element per iteration.
    vector_width: int = 1
    # Matmul-shaped kernels as block tiles staged in group-shared memory (GPUs; ``lower_tiles``),
    # the first of these that gives each of the device's ``compute_units`` a group. (): none.
    block_tiles: tuple[BlockTile, ...] = ()
    compute_units: int = 1
    # The input dtypes (names) of the device's tensor-core products, and the tiles of those
    # matmuls (``lower_tiles``; the renderer's ``FRAGMENT`` and ``MMA``). (): none.
    tensor_cores: tuple[str, ...] = ()
    mma_tiles: tuple[MmaTile, ...] = ()
    # Bytes of group-shared memory a block-tiled matmul or fused attention group may use (past
    # ``local_memory``: the renderer's dynamic shared memory); 0: ``local_memory``.
    tile_local_memory: int = 0
    # Blocks of 16-bit operands read in place go to shared memory by asynchronous copies
    # (``ASYNC_COPY``: CUDA's cp.async, sm_80 on), not through registers.
    async_copies: bool = False
    # The blocks of fused attention kernels (``lower_attention``; None: its default).
    attention_tile: AttentionTile | None = None

    @property
    def tile_budget(self) -> int:
        """Bytes of group-shared memory a block tile or fused attention group may use (0: no
        bound)."""
        return self.tile_local_memory or self.local_memory


def _reduce_init(op: str, dtype) -> object:
    if op in _REDUCE_INIT:
        return dtypes.python_value(dtype, _REDUCE_INIT[op])
    if dtype.is_float:
        return float("-inf") if op == "max" else float("inf")
    if dtype.kind == "b":
        return op == "min"
    bits = dtype.itemsize * 8
    if dtype.kind == "u":
        return 0 if op == "max" else (1 << bits) - 1
    return -(1 << (bits - 1)) if op == "max" else (1 << (bits - 1)) - 1


def _has_reduce(node: Node, seen: set) -> bool:
    if id(node) in seen:
        return False
    seen.add(id(node))
    return node.op == "REDUCE" or any(_has_reduce(s, seen) for s in node.srcs)


def _reduce_size(node: Node, seen: set) -> int:
    """Largest product of reduced extents along any path (the inner work per output)."""
    if id(node) in seen:
        return 1
    seen.add(id(node))
    inner = max((_reduce_size(s, seen) for s in node.srcs), default=1)
    if node.op == "REDUCE":
        src = node.srcs[0]
        return inner * math.prod(src.shape[a] for a in node.arg[1])
    return inner


class Lowerer(RowLowering, LoopNestLowering, ScatterLowering, BlockTileLowering, AttentionLowering):
    def __init__(self, kernel: ScheduledKernel, name: str, buffer_dtypes: list,
                 options: LoweringOptions | None = None):
        self.kernel = kernel
        self.options = options or LoweringOptions()
        self.group = 0  # work items per group while lowering a grouped kernel
        self.lid = sym.Var("lid", 0, 0)
        # Column-tiled grouped kernels (``lower_grouped_columns``): a group computes ``tile``
        # neighbouring outputs, item ``lid`` the output ``column`` with ``reduce_lanes`` items
        # each (``reduce_lane`` its place among them). Otherwise one output per group: every
        # item is a reduce lane (``lid``).
        self.tile = 1
        self.column: Expr = sym.Num(0)
        self.reduce_lane: sym.Var | None = None
        self.reduce_lanes = 0
        self.reduce_depth = 0
        self.name = name
        self.buffer_dtypes = buffer_dtypes
        self.instrs: list[Instr] = []
        self.scopes: list[dict] = [{}]
        self.var_count = 0
        self.plain_loops = False  # set for upcast kernels: no loop vectorizing or unrolling
        self.stand_ins = 0  # names for loop variables stood in for while hoisting reduces
        # Row kernels: reduce id → (its source, output slot, the kernel's lane) when the row's
        # output holds that source between the reduce's loop and the store loop (``row_stash``).
        self.stash: dict[int, tuple] = {}
        self.stashed: list[tuple] = []
        self.items_store = False  # grouped row kernels: every item stores its own elements
        self.flops = 0  # arithmetic per outer iteration, over all its lanes
        self.row_flops = 0  # row kernels: the arithmetic of the reduces run once per row
        self.lanes = 1  # outputs per outer iteration (the register tile)
        self.reduce_below: dict[int, bool] = {}  # node id → whether a reduce is under it
        # Block-tiled matmuls (``lower_tiles``): (the reduce, its value for the lane being stored).
        self.block_value: tuple[Node, int] | None = None

    # ------------------------------------------------------------------ instruction helpers

    def add(self, op: str, dtype, srcs: tuple[int, ...] = (), arg=None, pure: bool = True) -> int:
        key = (op, dtype, srcs, arg.key if isinstance(arg, Expr) else arg) if pure else None
        if key is not None:
            for scope in reversed(self.scopes):
                if key in scope:
                    return scope[key]
        self.instrs.append(Instr(op, dtype, srcs, arg))
        index = len(self.instrs) - 1
        if key is not None:
            self.scopes[-1][key] = index
        return index

    def const(self, value, dtype) -> int:
        return self.add("CONST", dtype, (), dtypes.python_value(dtype, value))

    def index(self, expr: Expr) -> int:
        return self.add("INDEX", dtypes.int64, (), expr)

    def new_var(self, size: int) -> sym.Var:
        self.var_count += 1
        return sym.Var(f"r{self.var_count}", 0, size - 1)

    def open_range(self, var: sym.Var, start, end, vectorize: bool = True) -> int:
        # In an upcast kernel the lanes are the vector (SLP): letting LLVM also vectorize,
        # unroll and interleave the loops multiplies a 64-lane body and its compile time
        # (a matmul+bias+relu kernel: 4.5 s to 1.2 s) for no speed.
        vectorize = vectorize and not self.plain_loops
        rng = self.add("RANGE", dtypes.int64, (), (var.name, start, end, vectorize), pure=False)
        self.scopes.append({})
        return rng

    def close_range(self, rng: int) -> None:
        self.scopes.pop()
        self.add("ENDRANGE", None, (rng,), pure=False)

    def open_if(self, cond: Expr) -> int:
        block = self.add("IF", None, (self.index(cond),), pure=False)
        self.scopes.append({})
        return block

    def close_if(self, block: int) -> None:
        self.scopes.pop()
        self.add("ENDIF", None, (block,), pure=False)

    # ------------------------------------------------------------------ emission

    def has_reduce(self, node: Node) -> bool:
        found = self.reduce_below.get(id(node))
        if found is None:
            found = node.op == "REDUCE" or any(self.has_reduce(s) for s in node.srcs)
            self.reduce_below[id(node)] = found
        return found

    def emit(self, node: Node, lanes: list[Index]) -> list[int]:
        # Each lane of a node is emitted once (a reduce used twice in one kernel, the mean and
        # variance of layer norm, runs once; lanes a broadcast makes equal share one value).
        out: list = [None] * len(lanes)
        todo: dict[tuple, list[int]] = {}  # memo key -> positions of the lanes still to emit
        for i, lane in enumerate(lanes):
            key = ("node", id(node), lane.key())
            found = None
            for scope in reversed(self.scopes):
                if key in scope:
                    found = scope[key]
                    break
            if found is None:
                todo.setdefault(key, []).append(i)
            else:
                out[i] = found
        if todo:
            # All lanes go down together: a reduce below then gets the whole register tile
            # (one loop for all its outputs), not one loop per lane (matmul + bias was 64
            # scalar loops, 50x slower).
            missing = [lanes[positions[0]] for positions in todo.values()]
            if node.op == "REDUCE":
                values = self.emit_reduce(node, missing)
            else:
                values = self.emit_lanes(node, missing)
            for (key, positions), value in zip(todo.items(), values):
                self.scopes[-1][key] = value
                for i in positions:
                    out[i] = value
        return out

    def emit_lanes(self, node: Node, lanes: list[Index]) -> list[int]:
        """``node`` at distinct lanes, none emitted yet."""
        op, arg = node.op, node.arg
        if op in ("CONST", "LOAD", "RANDOM", "IOTA"):
            return [self.emit_leaf(node, lane) for lane in lanes]
        if op in g.MOVEMENT:
            values = self.emit(node.srcs[0], [self.move(node, lane) for lane in lanes])
            if op != "PAD":
                return values
            out = []
            for lane, value in zip(lanes, values):
                valid = self.pad_valid(node, lane)
                if valid.key != sym.TRUE.key:
                    zero = self.const(0, node.dtype)
                    value = self.add("WHERE", node.dtype, (self.index(valid), value, zero))
                out.append(value)
            return out
        if op == "GATHER":
            return self.emit_gather(node, lanes)
        # Operands holding a reduce first: values computed before its loop would stay live
        # across it (a ReLU mask loaded for a 64-lane tile spilled and broke the tile's SLP).
        order = sorted(range(len(node.srcs)), key=lambda i: not self.has_reduce(node.srcs[i]))
        per_src: list = [None] * len(node.srcs)
        for i in order:
            per_src[i] = self.emit(node.srcs[i], lanes)
        self.flops += len(lanes)
        if op in ("CAST", "BITCAST", "WHERE"):
            return [self.add(op, node.dtype, srcs) for srcs in zip(*per_src)]
        if arg == "add" and node.dtype.is_float and any(src.op == "PAD" for src in node.srcs):
            return [self.sum_of_pads(node, lane, *srcs) for lane, srcs in zip(lanes, zip(*per_src))]
        return [self.add("ALU", node.dtype, srcs, arg) for srcs in zip(*per_src)]

    def sum_of_pads(self, node: Node, lane: Index, a: int, b: int) -> int:
        """``a + b`` where an operand is a PAD: where one is padding the sum is the other operand
        exactly, as a copy (a concatenation is a sum of pads, and ``x + 0`` is not ``x`` for -0
        or a signalling NaN). Renderers may not fold ``x + 0`` themselves (C compilers keep IEEE
        semantics; the LLVM one's adds allow it)."""
        first, second = (self.pad_valid(src, lane) if src.op == "PAD" else sym.TRUE for src in node.srcs)
        if sym.disjoint(first, second):  # a concatenation: one operand or the other, never both
            return self.add("WHERE", node.dtype, (self.index(first), a, b))
        total = self.add("ALU", node.dtype, (a, b), "add")
        if second.key != sym.TRUE.key:
            total = self.add("WHERE", node.dtype, (self.index(second), total, a))
        if first.key != sym.TRUE.key:
            total = self.add("WHERE", node.dtype, (self.index(first), total, b))
        return total

    def emit_leaf(self, node: Node, idx: Index) -> int:
        op, arg = node.op, node.arg
        if op == "CONST":
            return self.const(arg, node.dtype)
        if op == "LOAD":
            buf = self.add("BUF", node.dtype, (), arg)
            if idx.valid.key == sym.TRUE.key:
                return self.add("LOAD", node.dtype, (buf, self.index(idx.linear)))
            return self.add("LOAD", node.dtype, (buf, self.index(idx.linear), self.index(idx.valid)))
        if op == "RANDOM":
            return self.emit_random(node, idx)
        return self.index(idx.linear)  # IOTA

    def emit_gather(self, node: Node, lanes: list[Index]) -> list[int]:
        """``GATHER`` at ``lanes``: each lane's index value, clamped into the table's axis (a bad
        entry raises through the checks of its op, never reads outside the table), becomes an
        index variable (``DEFINE``) standing for the lane's position along that axis."""
        table, index = node.srcs
        axis = node.arg
        table_lanes = []
        for lane, position in zip(lanes, self.emit(index, lanes)):
            dims = list(lane.dims)
            dims[axis] = self.data_position(position, table.shape[axis])
            table_lanes.append(Index(table.shape, tuple(dims), valid=lane.valid))
        return self.emit(table, table_lanes)

    def data_position(self, position: int, extent: int) -> sym.Var:
        """The int64 value ``position`` clamped into [0, extent) as an index variable."""
        low = self.add("ALU", dtypes.int64, (position, self.const(0, dtypes.int64)), "max")
        clamped = self.add("ALU", dtypes.int64, (low, self.const(extent - 1, dtypes.int64)), "min")
        self.var_count += 1
        var = sym.Var(f"g{self.var_count}", 0, extent - 1)
        self.add("DEFINE", dtypes.int64, (clamped,), var.name, pure=False)
        return var

    def pad_valid(self, node: Node, idx: Index) -> Expr:
        src = node.srcs[0]
        conds = []
        for d, (before, _after), size in zip(idx.dims, node.arg, src.shape):
            conds.append(sym.ge(d, before))
            conds.append(sym.lt(d, before + size))
        return sym.and_(*conds)

    def move(self, node: Node, idx: Index) -> Index:
        """The index into ``node``'s source for output index ``idx``."""
        op, arg, src = node.op, node.arg, node.srcs[0]
        if op == "RESHAPE":
            if idx._linear is None and _is_unit_reshape(src.shape, node.shape):
                dims = iter(d for d, s in zip(idx.dims, node.shape) if s != 1)
                return Index(src.shape, tuple(next(dims) if s != 1 else sym.Num(0) for s in src.shape),
                             valid=idx.valid)
            return Index(src.shape, linear=idx.linear, valid=idx.valid)
        if op == "PERMUTE":
            dims: list[Expr] = [sym.Num(0)] * len(arg)
            for i, axis in enumerate(arg):
                dims[axis] = idx.dims[i]
            return Index(src.shape, tuple(dims), valid=idx.valid)
        if op == "EXPAND":
            dims = tuple(sym.Num(0) if s == 1 else d for d, s in zip(idx.dims, src.shape))
            return Index(src.shape, dims, valid=idx.valid)
        if op == "PAD":
            dims = tuple(sym.add(d, sym.Num(-before)) for d, (before, _a) in zip(idx.dims, arg))
            valid = sym.and_(idx.valid, self.pad_valid(node, idx))
            # Out-of-range lanes read element 0 (masked), so clamp the symbolic range.
            return Index(src.shape, tuple(_clamp(d, s) for d, s in zip(dims, src.shape)), valid=valid)
        if op == "SHRINK":
            dims = tuple(sym.add(d, sym.Num(begin)) for d, (begin, _e) in zip(idx.dims, arg))
            return Index(src.shape, dims, valid=idx.valid)
        if op == "FLIP":
            dims = tuple(sym.add(sym.mul(d, -1), sym.Num(s - 1)) if i in arg else d
                         for i, (d, s) in enumerate(zip(idx.dims, node.shape)))
            return Index(src.shape, dims, valid=idx.valid)
        if op == "STRIDED":
            shape, strides, offset = arg
            if strides == g.contiguous_strides(shape):
                linear = sym.add(idx.linear, sym.Num(offset))
            else:
                linear = sym.Num(offset)
                for d, st in zip(idx.dims, strides):
                    linear = sym.add(linear, sym.mul(d, st))
            return Index(src.shape, linear=linear, valid=idx.valid)
        raise NotImplementedError(op)

    def emit_reduce(self, node: Node, lanes: list[Index]) -> list[int]:
        if self.block_value is not None and node is self.block_value[0]:
            return [self.block_value[1]] * len(lanes)
        if self.group and self.reduce_depth == 0:
            return [self.emit_group_reduce(node, lanes[0])]
        self.reduce_depth += 1
        try:
            return self.emit_loop_reduce(node, lanes)
        finally:
            self.reduce_depth -= 1

    def emit_loop_reduce(self, node: Node, lanes: list[Index]) -> list[int]:
        return self.emit_loop_reduces([(node, lanes)])[0]

    def emit_loop_reduces(self, members: list[tuple[Node, list[Index]]]) -> list[list[int]]:
        """Reduces over ranges of the same extents in one loop nest, each with accumulators of
        its own (``members``: (reduce, its lanes); none may use another's result)."""
        first = members[0][0]
        vars_ = [self.new_var(first.srcs[0].shape[axis]) for axis in first.arg[1]]
        accs, src_lanes = [], []
        for node, lanes in members:
            axes = node.arg[1]
            accs.append([self.new_acc(node) for _ in lanes])
            mine = []
            for lane in lanes:
                dims = list(lane.dims)
                for axis, var in zip(axes, vars_):
                    dims[axis] = var
                mine.append(Index(node.srcs[0].shape, tuple(dims), valid=lane.valid))
            src_lanes.append(mine)
        # Reduces inside these that do not depend on their loop (softmax's max inside the sum
        # of exp(x - max)) run once before it, not once per iteration.
        inner = frozenset(var.name for var in vars_)
        seen: dict = {}
        for (node, _lanes), mine in zip(members, src_lanes):
            for lane in mine:
                self.hoist(node.srcs[0], lane, inner, seen)
        n_lanes = sum(len(lanes) for _node, lanes in members)
        ranges = []
        for var in vars_:
            # With several lanes the lanes are the vector (SLP); vectorizing the reduce loop
            # itself would gather strided operands instead.
            vectorize = all(len(lanes) == 1 for _node, lanes in members)
            ranges.append(self.open_range(var, 0, var.vmax + 1, vectorize=vectorize))
        before = self.flops
        for (node, lanes), mine, cells in zip(members, src_lanes, accs):
            axes = node.arg[1]
            values = self.emit(node.srcs[0], mine)
            stash = self.stash.get(id(node))
            if stash is not None and len(lanes) == 1:
                self.stash_row(stash, axes, vars_, mine[0], values[0])
            for acc, value in zip(cells, values):
                self.accumulate(node, acc, value)
        self.flops = before + (self.flops - before + n_lanes) * math.prod(var.vmax + 1 for var in vars_)
        for rng in reversed(ranges):
            self.close_range(rng)
        return [[self.add("ACC_GET", node.dtype, (acc,), pure=False) for acc in cells]
                for (node, _lanes), cells in zip(members, accs)]

    def new_acc(self, node: Node) -> int:
        """An accumulator cell for the reduce ``node``, holding its initial value."""
        return self.add("ACC", node.dtype, (), _reduce_init(node.arg[0], node.dtype), pure=False)

    def accumulate(self, node: Node, acc: int, value: int) -> None:
        """Fold ``value`` into the accumulator ``acc`` of the reduce ``node``."""
        current = self.add("ACC_GET", node.dtype, (acc,), pure=False)
        update = self.add("ALU", node.dtype, (current, value), "r" + node.arg[0], pure=False)
        self.add("ACC_SET", None, (acc, update), pure=False)

    def emit_group_reduce(self, node: Node, lane: Index) -> int:
        """The reduce of one output by the whole work group (see the module docstring)."""
        rop, axes = node.arg
        src, dtype, group, lid = node.srcs[0], node.dtype, self.group, self.lid
        rlane, lanes = self.reduce_lane or lid, self.reduce_lanes or group
        total = math.prod(src.shape[a] for a in axes)
        step = self.new_var(-(-total // lanes))
        # Reduce lane ``rlane`` takes elements rlane, rlane + lanes, ...: with one output per group
        # a group reads contiguous memory; in a column tile each reduce lane reads ``tile``
        # neighbouring outputs' elements side by side.
        flat = sym.add(sym.mul(step, lanes), rlane)
        dims = list(lane.dims)
        inner = 1
        for n, axis in enumerate(reversed(axes)):
            size = src.shape[axis]
            part = sym.div(flat, inner)
            # The outermost axis needs no wrap: the tail guard keeps ``flat`` below ``total``.
            dims[axis] = sym.Num(0) if size == 1 else part if n == len(axes) - 1 else sym.mod(part, size)
            inner *= size
        src_lane = Index(src.shape, tuple(dims), valid=lane.valid)
        # Reduces inside this one that do not depend on its elements run first, each by the
        # whole group (softmax's max before the sum of exp(x - max)).
        self.hoist(src, src_lane, frozenset((step.name, rlane.name)), {})
        acc = self.new_acc(node)
        rng = self.open_range(step, 0, -(-total // lanes))
        tail = self.open_if(sym.lt(flat, total)) if total % lanes else None
        self.reduce_depth += 1
        (value,) = self.emit(src, [src_lane])
        self.reduce_depth -= 1
        self.accumulate(node, acc, value)
        if tail is not None:
            self.close_if(tail)
        self.close_range(rng)
        self.flops += 1
        # Tree reduction in shared memory (element lid = reduce lane * tile + column):
        # log2(reduce lanes) halving steps, a barrier after each; the column's result ends at
        # element ``column``.
        shared = self.add("LOCAL", dtype, (), group, pure=False)
        mine = self.index(lid)
        self.add("STORE", None, (shared, mine, self.add("ACC_GET", dtype, (acc,), pure=False)), pure=False)
        self.add("BARRIER", None, (), pure=False)
        half = lanes // 2
        while half >= 1:
            block = self.open_if(sym.lt(rlane, half))
            a = self.add("LOAD", dtype, (shared, mine), pure=False)
            b = self.add("LOAD", dtype, (shared, self.index(sym.add(lid, sym.Num(half * self.tile)))),
                         pure=False)
            self.add("STORE", None, (shared, mine, self.add("ALU", dtype, (a, b), "r" + rop, pure=False)),
                     pure=False)
            self.close_if(block)
            self.add("BARRIER", None, (), pure=False)
            half //= 2
        return self.add("LOAD", dtype, (shared, self.index(self.column)), pure=False)

    def emit_random(self, node: Node, idx: Index) -> int:
        """Counter-based uniform [0, 1): splitmix64(seed ^ (offset + flat index))."""
        u64 = dtypes.uint64
        seed = self.add("PARAM", u64, (), node.arg[0])
        offset = self.add("PARAM", u64, (), node.arg[1])
        counter = self.add("ALU", u64, (offset, self.add("CAST", u64, (self.index(idx.linear),))), "add")
        z = self.add("ALU", u64, (counter, self.add("ALU", u64, (seed, self.const(0x9E3779B97F4A7C15, u64)),
                                                     "mul")), "xor")
        z = self.add("ALU", u64, (z, self.const(0x9E3779B97F4A7C15, u64)), "add")
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            z = self.add("ALU", u64, (z, self.add("ALU", u64, (z, self.const(shift, u64)), "shr")), "xor")
            z = self.add("ALU", u64, (z, self.const(mult, u64)), "mul")
        z = self.add("ALU", u64, (z, self.add("ALU", u64, (z, self.const(31, u64)), "shr")), "xor")
        top = self.add("ALU", u64, (z, self.const(40, u64)), "shr")
        as_float = self.add("CAST", dtypes.float32, (top,))
        return self.add("ALU", dtypes.float32, (as_float, self.const(2.0 ** -24, dtypes.float32)), "mul")

    # ------------------------------------------------------------------ kernel structure

    def lower(self) -> LoopKernel:
        kernel = self.kernel
        shape = kernel.stores[0].value.shape
        view = kernel.stores[0].view
        if view is not None and view[0] == "scatter":
            global_size, work = self.lower_scatter(kernel.stores[0])
            return LoopKernel(self.name, self.instrs, len(kernel.slots), self.buffer_dtypes, global_size,
                              work=work, bytes=work * kernel.stores[0].value.dtype.itemsize, flops=work)
        values = [s.value for s in kernel.stores]
        if values[0].op == ATTENTION:
            groups, items = self.lower_attention()
            nbytes = sum(s.value.numel * s.value.dtype.itemsize for s in kernel.stores)
            return LoopKernel(self.name, self.instrs, len(kernel.slots), self.buffer_dtypes, groups,
                              work=self.flops * groups, bytes=nbytes, flops=self.flops * groups,
                              group_size=items)
        seen: set = set()
        reduces = any(_has_reduce(v, seen) for v in values)
        numel = math.prod(shape)
        inner_work = max(_reduce_size(v, set()) for v in values)
        block = self.block_matmul(shape, values) if reduces else None
        if block is not None:
            global_size, group_size = self.lower_block_matmul(shape, *block)
        else:
            global_size, group_size, inner_work = self.lower_by_structure(shape, values, reduces, inner_work)
        nbytes = sum(numel * s.value.dtype.itemsize for s in kernel.stores)
        return LoopKernel(self.name, self.instrs, len(kernel.slots), self.buffer_dtypes, global_size,
                          work=numel * inner_work, bytes=nbytes,
                          flops=self.flops * numel // self.lanes + self.row_flops * global_size,
                          group_size=group_size if group_size > 1 else 0)

    def lower_by_structure(self, shape: tuple[int, ...], values: list[Node], reduces: bool,
                           inner_work: int) -> tuple[int, int, int]:
        """The kernel's loops for the structure its values call for (grouped, row, permuting,
        register-tiled or flat; module docstring): (outer iterations, items per group, work per
        output)."""
        opts = self.options
        numel = math.prod(shape)
        group_size = 0
        if reduces and opts.group_size > 1 and inner_work >= opts.group_min_reduce \
                and numel <= opts.group_max_outputs:
            group_size = opts.few_group_size if numel <= opts.few_outputs else opts.group_size
        split = self.row_split(shape) if reduces and not group_size else 0
        reduce_count = sum(1 for n in g.toposort(values) if n.op == "REDUCE") if reduces else 0
        if split:
            # Row reduces run once per row, each one pass over it (not nested products): the
            # work per output is about one step per reduce, plus the store.
            inner_work = 1 + reduce_count
        layout = self.axis_runs(shape) if not reduces and opts.row_loops else None
        tile = self.column_tile(shape, values) if group_size > 1 else 1
        if tile > 1:
            # The widest groups: each column of the tile then has that many reduce lanes.
            group_size = self.fit_group(reduce_count, max(group_size, opts.few_group_size))
        if group_size >= 2 * tile > 2:
            global_size = self.lower_grouped_columns(shape, group_size, tile)
        elif group_size > 1:
            group_size = self.fit_group(reduce_count, group_size)
            global_size = self.lower_grouped(shape, group_size)
        elif split and not opts.row_loops and opts.group_size > 1:
            group_size = self.fit_group(reduce_count, opts.group_size)
            global_size = self.lower_grouped_rows(shape, split, group_size)
        elif split:
            global_size = self.lower_rows(shape, split)
        elif layout is not None and len(layout[0]) >= 2:  # two runs or more
            global_size = self.lower_runs(shape, *layout)
            inner_work = _PERMUTED_WORK
        elif not reduces and opts.row_loops and len(shape) >= 2 and shape[-1] >= _ROW_LOOP_MIN \
                and numel > shape[-1]:
            global_size = self.lower_rows(shape, len(shape) - 1)
        elif not reduces:
            global_size = self.lower_flat(shape)
        else:
            global_size = self.lower_reduce_kernel(shape)
        return global_size, group_size, inner_work

    def lower_flat(self, shape: tuple[int, ...]) -> int:
        """An elementwise kernel over the flat output index, ``vector_width`` neighbouring
        elements per outer iteration when the size allows."""
        numel = math.prod(shape)
        width = self.options.vector_width
        if width <= 1 or numel % width or numel < 2 * width:
            width = 1
        var = sym.Var("gidx", 0, max(numel // width - 1, 0))
        rng = self.open_range(var, "start", "end")
        first = Index(shape, linear=sym.mul(var, width))
        if width > 1 and shape[-1] % width == 0:
            # Lane j's index along the last axis is lane 0's plus j (lane 0's is a multiple of
            # the width), so reads through a broadcast or a view of the same last axis stay
            # neighbouring elements the renderer can move as one vector.
            lanes = [Index(shape, first.dims[:-1] + (sym.add(first.dims[-1], sym.Num(j)),),
                           linear=sym.add(first.linear, sym.Num(j))) for j in range(width)]
        else:
            lanes = [Index(shape, linear=sym.add(first.linear, sym.Num(j))) for j in range(width)]
        self.lanes = width
        self.emit_stores(lanes)
        self.close_range(rng)
        return numel // width

    def fit_group(self, reduces: int, group: int) -> int:
        """``group`` halved until the shared arrays of the kernel's ``reduces`` (one element of
        at most 8 bytes per item each) fit in ``LoweringOptions.local_memory``."""
        budget = self.options.local_memory
        if not budget:
            return group
        while group > 2 and reduces * 8 * group > budget:
            group //= 2
        return group

    def lower_grouped(self, shape: tuple[int, ...], group: int) -> int:
        """One work group per output (flat index), reduces split across its items."""
        numel = math.prod(shape)
        self.group = group
        var = sym.Var("gidx", 0, max(numel - 1, 0))
        rng = self.open_range(var, "start", "end")
        self.lid = sym.Var("lid", 0, group - 1)
        self.add("SPECIAL", dtypes.int64, (), (self.lid.name, "lid"), pure=False)
        self.emit_stores([Index(shape, linear=var)])
        self.close_range(rng)
        return numel

    def lower_grouped_columns(self, shape: tuple[int, ...], group: int, tile: int) -> int:
        """One work group per ``tile`` neighbouring outputs (``column_tile``): item ``lid`` is
        column ``lid % tile`` and reduce lane ``lid // tile``, so the items of a warp read
        neighbouring elements of one row of the reduced range (a sum over rows reads memory
        coalesced, where one group per output would read it a row apart)."""
        numel = math.prod(shape)
        self.group, self.tile, self.reduce_lanes = group, tile, group // tile
        var = sym.Var("gidx", 0, numel // tile - 1)
        rng = self.open_range(var, "start", "end")
        self.lid = sym.Var("lid", 0, group - 1)
        self.add("SPECIAL", dtypes.int64, (), (self.lid.name, "lid"), pure=False)
        # Variables of their own (not expressions of lid): reduces that depend on the column
        # only, not the reduce lane, are then hoisted out of the reduce loops (``hoist``).
        self.column = self.define("col", sym.mod(self.lid, tile), tile)
        self.reduce_lane = self.define("rlane", sym.div(self.lid, tile), group // tile)
        self.emit_stores([Index(shape, linear=sym.add(sym.mul(var, tile), self.column))])
        self.close_range(rng)
        return numel // tile

    def define(self, name: str, value: Expr, extent: int) -> sym.Var:
        """The index ``value`` (in [0, extent)) as the index variable ``name``."""
        var = sym.Var(name, 0, extent - 1)
        self.add("DEFINE", dtypes.int64, (self.index(value),), var.name, pure=False)
        return var

    def column_tile(self, shape: tuple[int, ...], values: list[Node]) -> int:
        """Outputs per group for a grouped kernel whose memory reads move one element per step
        along the outputs' last axis (a sum over the rows of a row-major matrix, ``x.sum(0)``):
        32, halved down to 8 (a 32-byte sector of float) while that leaves fewer groups than
        the device has compute units. 1: one output per group (reads along a reduced axis)."""
        if not shape or shape[-1] % 8:
            return 1
        column = sym.Var("col", 0, shape[-1] - 1)
        dims = tuple(sym.Num(0) for _ in shape[:-1]) + (column,)
        steps: list = []
        seen: set = set()
        for value in values:
            self.read_steps(value, Index(shape, dims), column, steps, seen)
        if not steps or any(step not in (0, 1) for step in steps) or 1 not in steps:
            return 1
        numel = math.prod(shape)
        tile = 32
        while tile > 8 and (shape[-1] % tile or numel // tile < self.options.few_outputs):
            tile //= 2
        return tile

    def read_steps(self, node: Node, idx: Index, var: sym.Var, steps: list, seen: set) -> None:
        """Append to ``steps`` how far each memory read under ``node`` (read at ``idx``) moves
        when ``var`` grows by one (None: not a constant step), reduced axes at their start."""
        key = (id(node), idx.key())
        if key in seen:
            return
        seen.add(key)
        op = node.op
        if op == "LOAD":
            linear = idx.linear
            step = sym.add(sym.substitute(linear, var, sym.add(var, sym.Num(1))), sym.mul(linear, -1))
            steps.append(step.value if isinstance(step, sym.Num) else None)
        elif op in g.MOVEMENT:
            self.read_steps(node.srcs[0], self.move(node, idx), var, steps, seen)
        elif op == "REDUCE":
            src = node.srcs[0]
            dims = tuple(sym.Num(0) if axis in node.arg[1] else d for axis, d in enumerate(idx.dims))
            self.read_steps(src, Index(src.shape, dims, valid=idx.valid), var, steps, seen)
        elif op == "GATHER":
            steps.append(None)
        else:
            for src in node.srcs:
                self.read_steps(src, idx, var, steps, seen)

    def emit_stores(self, lanes: list[Index]) -> None:
        for store in self.kernel.stores:
            slot = self.kernel.slots.index(("tmp", store.target))
            buf = self.add("BUF", store.value.dtype, (), slot)
            values = self.emit(store.value, lanes)
            # In a grouped kernel every item holds the result; the first one stores it (the
            # first reduce lane of each column in a column tile).
            single = self.open_if(sym.lt(self.reduce_lane or self.lid, 1)) \
                if self.group and not self.items_store else None
            for lane, value in zip(lanes, values):
                if store.view is None:
                    target = lane.linear
                else:
                    _shape, strides, offset = store.view
                    target = sym.Num(offset)
                    for d, st in zip(lane.dims, strides):
                        target = sym.add(target, sym.mul(d, st))
                self.add("STORE", None, (buf, self.index(target), value), pure=False)
            if single is not None:
                self.close_if(single)


def _is_unit_reshape(src_shape, shape) -> bool:
    return [s for s in src_shape if s != 1] == [s for s in shape if s != 1]


def _clamp(d: Expr, size: int) -> Expr:
    if 0 <= d.vmin and d.vmax < size:
        return d
    # A masked lane may compute an out-of-range index; the LOAD's mask guards the access.
    return d


def kept_composites(options: LoweringOptions):
    """The predicate the kernelizer's rewrite takes (``kernelize``'s ``keep``): the composite
    nodes this device's kernels compute whole (fused attention on tensor cores), or None."""
    if not options.tensor_cores:
        return None
    return functools.partial(keeps_attention, tensor_cores=options.tensor_cores,
                             local_memory=options.tile_budget)


def lower(kernel: ScheduledKernel, name: str, buffer_dtypes: list,
          options: LoweringOptions | None = None) -> LoopKernel:
    return Lowerer(kernel, name, buffer_dtypes, options).lower()
