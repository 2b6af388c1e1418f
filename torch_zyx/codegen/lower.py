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
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from ..lazy.kernelize import ScheduledKernel
from ..lazy.panels import PANEL_COLS, PANEL_ROWS
from . import symbolic as sym
from .ir import Instr, LoopKernel
from .symbolic import Expr

_REDUCE_INIT = {"sum": 0, "prod": 1}
# The register tile of matmul-shaped reduces; large matmuls read operands packed to match it.
_UPCAST_INNER = PANEL_COLS
_UPCAST_OUTER = PANEL_ROWS
# Elementwise kernels whose last axis is at least this long loop over rows, then columns.
_ROW_LOOP_MIN = 64
# Cache line bytes: copies read whole lines of their source (``line_tile``).
_LINE_BYTES = 64
# Elementwise loop nests: leading axes join the outer (threaded) loop up to this many iterations.
_MIN_OUTER = 16


@dataclass(frozen=True)
class LoweringOptions:
    """What the target device offers, chosen by the executor per device (the CPU: defaults)."""

    group_size: int = 0  # work items per grouped reduce (a power of two); 0: no grouped reduces
    few_group_size: int = 0  # group size when outputs <= few_outputs (a full sum: one group)
    few_outputs: int = 0
    group_min_reduce: int = 256  # reduced elements per output from which to group
    group_max_outputs: int = 0  # group only while outputs are this few (else one item each)
    # Elementwise kernels with long rows loop over columns inside one item: good for CPU
    # loops, but GPU work items side by side would then read memory a row apart.
    row_loops: bool = True


class Index:
    """Where one lane of a node is read: per-axis index expressions and/or the flat index."""

    __slots__ = ("_dims", "_linear", "shape", "valid")

    def __init__(self, shape, dims=None, linear=None, valid: Expr = sym.TRUE):
        self.shape, self._dims, self._linear, self.valid = tuple(shape), dims, linear, valid

    @property
    def dims(self) -> tuple[Expr, ...]:
        if self._dims is None:
            strides = g.contiguous_strides(self.shape)
            self._dims = tuple(sym.mod(sym.div(self._linear, st), sz) if sz > 1 else sym.Num(0)
                               for st, sz in zip(strides, self.shape))
        return self._dims

    @property
    def linear(self) -> Expr:
        if self._linear is None:
            total: Expr = sym.Num(0)
            for d, st in zip(self.dims, g.contiguous_strides(self.shape)):
                total = sym.add(total, sym.mul(d, st))
            self._linear = total
        return self._linear

    def key(self) -> tuple:
        return (tuple(d.key for d in self.dims), self.valid.key)


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


class Lowerer:
    def __init__(self, kernel: ScheduledKernel, name: str, buffer_dtypes: list,
                 options: LoweringOptions | None = None):
        self.kernel = kernel
        self.options = options or LoweringOptions()
        self.group = 0  # work items per group while lowering a grouped kernel
        self.lid = sym.Var("lid", 0, 0)
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
        # Operands holding a reduce first: values computed before its loop would stay live
        # across it (a ReLU mask loaded for a 64-lane tile spilled and broke the tile's SLP).
        order = sorted(range(len(node.srcs)), key=lambda i: not self.has_reduce(node.srcs[i]))
        per_src: list = [None] * len(node.srcs)
        for i in order:
            per_src[i] = self.emit(node.srcs[i], lanes)
        self.flops += len(lanes)
        if op in ("CAST", "WHERE"):
            return [self.add(op, node.dtype, srcs) for srcs in zip(*per_src)]
        return [self.add("ALU", node.dtype, srcs, arg) for srcs in zip(*per_src)]

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
            rop, axes = node.arg
            accs.append([self.add("ACC", node.dtype, (), _reduce_init(rop, node.dtype), pure=False)
                         for _ in lanes])
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
            rop, axes = node.arg
            values = self.emit(node.srcs[0], mine)
            stash = self.stash.get(id(node))
            if stash is not None and len(lanes) == 1:
                self.stash_row(stash, axes, vars_, mine[0], values[0])
            for acc, value in zip(cells, values):
                current = self.add("ACC_GET", node.dtype, (acc,), pure=False)
                update = self.add("ALU", node.dtype, (current, value), "r" + rop, pure=False)
                self.add("ACC_SET", None, (acc, update), pure=False)
        self.flops = before + (self.flops - before + n_lanes) * math.prod(var.vmax + 1 for var in vars_)
        for rng in reversed(ranges):
            self.close_range(rng)
        return [[self.add("ACC_GET", node.dtype, (acc,), pure=False) for acc in cells]
                for (node, _lanes), cells in zip(members, accs)]

    def stash_row(self, stash: tuple, axes: tuple[int, ...], vars_: list, src_lane: Index, value: int) -> None:
        """Inside a row reduce's loop: store its source value into the row's output (``row_stash``)."""
        source, slot, lane = stash
        dims = list(lane.dims)
        for axis, var in zip(axes, vars_):
            dims[axis] = var
        # Only where this loop walks the kernel's own row (the store loop reads it back).
        if Index(source.shape, tuple(dims), valid=lane.valid).key() == src_lane.key():
            buf = self.add("BUF", source.dtype, (), slot)
            self.add("STORE", None, (buf, self.index(src_lane.linear), value), pure=False)
            self.stashed.append((source, slot))

    def emit_group_reduce(self, node: Node, lane: Index) -> int:
        """The reduce of one output by the whole work group (see the module docstring)."""
        rop, axes = node.arg
        src, dtype, group, lid = node.srcs[0], node.dtype, self.group, self.lid
        total = math.prod(src.shape[a] for a in axes)
        step = self.new_var(-(-total // group))
        # Item ``lid`` takes elements lid, lid + group, ...: a group reads contiguous memory.
        flat = sym.add(sym.mul(step, group), lid)
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
        self.hoist(src, src_lane, frozenset((step.name, lid.name)), {})
        acc = self.add("ACC", dtype, (), _reduce_init(rop, dtype), pure=False)
        rng = self.open_range(step, 0, -(-total // group))
        tail = self.open_if(sym.lt(flat, total)) if total % group else None
        self.reduce_depth += 1
        (value,) = self.emit(src, [src_lane])
        self.reduce_depth -= 1
        current = self.add("ACC_GET", dtype, (acc,), pure=False)
        self.add("ACC_SET", None, (acc, self.add("ALU", dtype, (current, value), "r" + rop, pure=False)),
                 pure=False)
        if tail is not None:
            self.close_if(tail)
        self.close_range(rng)
        self.flops += 1
        # Tree reduction in shared memory: log2(group) halving steps, a barrier after each.
        shared = self.add("LOCAL", dtype, (), group, pure=False)
        mine = self.index(lid)
        self.add("STORE", None, (shared, mine, self.add("ACC_GET", dtype, (acc,), pure=False)), pure=False)
        self.add("BARRIER", None, (), pure=False)
        half = group // 2
        while half >= 1:
            block = self.open_if(sym.lt(lid, half))
            a = self.add("LOAD", dtype, (shared, mine), pure=False)
            b = self.add("LOAD", dtype, (shared, self.index(sym.add(lid, sym.Num(half)))), pure=False)
            self.add("STORE", None, (shared, mine, self.add("ALU", dtype, (a, b), "r" + rop, pure=False)),
                     pure=False)
            self.close_if(block)
            self.add("BARRIER", None, (), pure=False)
            half //= 2
        return self.add("LOAD", dtype, (shared, self.index(sym.Num(0))), pure=False)

    def hoist(self, node: Node, idx: Index, inner: frozenset, seen: dict, emit: bool = True,
              pending: list | None = None) -> bool:
        """Emit, here (before the loops over the variables named in ``inner`` open), every
        reduce under ``node`` whose index does not use those variables, innermost first; the
        reduce memo then finds them inside the loops. Returns whether every reduce reached
        outside other reduces is such a reduce (``emit`` False: only that answer)."""
        key = (id(node), idx.key())
        if key in seen:
            return seen[key]
        op = node.op
        ok = True
        if op == "REDUCE":
            src = node.srcs[0]
            dims = list(idx.dims)
            names = set(inner)
            for axis in node.arg[1]:
                # A stand-in for the reduce's own loop variable: reduces under this one that
                # use it stay inside its loop.
                self.stand_ins += 1
                var = sym.Var(f"h{self.stand_ins}", 0, src.shape[axis] - 1)
                dims[axis] = var
                names.add(var.name)
            self.hoist(src, Index(src.shape, tuple(dims), valid=idx.valid), frozenset(names), seen, emit,
                       pending)
            ok = not _uses_vars(idx.key(), inner)
            if ok and emit:
                if pending is None:
                    self.emit(node, [idx])
                else:
                    pending.append((node, idx))
        elif op in g.MOVEMENT:
            ok = self.hoist(node.srcs[0], self.move(node, idx), inner, seen, emit, pending)
        elif op not in ("LOAD", "CONST", "IOTA", "RANDOM"):
            results = [self.hoist(s, idx, inner, seen, emit, pending) for s in node.srcs]
            ok = all(results)
        seen[key] = ok
        return ok

    def emit_sibling_reduces(self, pending: list[tuple[Node, Index]]) -> None:
        """Emit hoisted reduces (in dependency order), each run of neighbours over ranges of the
        same extents that do not use one another in one loop (layer norm's sum and sum of
        squares: one pass over the row instead of two)."""
        batches: list[list[tuple[Node, Index]]] = []
        for node, idx in pending:
            last = batches[-1] if batches else None
            if last is not None and not self.group and _extents(node) == _extents(last[0][0]) \
                    and not _depends_on(node, {id(member) for member, _idx in last}):
                last.append((node, idx))
            else:
                batches.append([(node, idx)])
        for batch in batches:
            keys = [("node", id(node), idx.key()) for node, idx in batch]
            todo = [(node, idx) for (node, idx), key in zip(batch, keys) if not self.memoized(key)]
            if len(todo) <= 1:
                for node, idx in todo:
                    self.emit(node, [idx])
                continue
            self.reduce_depth += 1
            values = self.emit_loop_reduces([(node, [idx]) for node, idx in todo])
            self.reduce_depth -= 1
            for (node, idx), (value,) in zip(todo, values):
                self.scopes[-1][("node", id(node), idx.key())] = value

    def memoized(self, key: tuple) -> bool:
        return any(key in scope for scope in self.scopes)

    def row_split(self, shape: tuple[int, ...]) -> int:
        """For a kernel with reduces: the fewest leading output axes ``k`` such that every
        reduce reached outside other reduces depends on axes ``< k`` only (the kernelizer fuses
        row reductions so: softmax, layer norm), with elements left for the inner loops; 0 if
        none (each output computes its own reduces: matmul-shaped kernels)."""
        outer = [sym.Var(f"o{a}", 0, max(s - 1, 0)) for a, s in enumerate(shape)]
        for k in range(1, len(shape)):
            if math.prod(shape[k:]) <= 1 or 0 in shape:
                break
            inner = [sym.Var(f"i{a}", 0, shape[a] - 1) for a in range(k, len(shape))]
            names = frozenset(v.name for v in inner)
            idx = Index(shape, tuple(outer[:k]) + tuple(inner))
            seen: dict = {}
            results = [self.hoist(store.value, idx, names, seen, emit=False) for store in self.kernel.stores]
            if all(results):
                return k
        return 0

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
        values = [s.value for s in kernel.stores]
        seen: set = set()
        reduces = any(_has_reduce(v, seen) for v in values)
        numel = math.prod(shape)
        inner_work = max(_reduce_size(v, set()) for v in values)
        opts = self.options
        group_size = 0
        if reduces and opts.group_size > 1 and inner_work >= opts.group_min_reduce \
                and numel <= opts.group_max_outputs:
            group_size = opts.few_group_size if numel <= opts.few_outputs else opts.group_size
        split = self.row_split(shape) if reduces and not group_size else 0
        if split:
            # Row reduces run once per row, each one pass over it (not nested products): the
            # work per output is about one step per reduce, plus the store.
            inner_work = 1 + sum(1 for n in g.toposort(values) if n.op == "REDUCE")
        layout = self.axis_runs(shape) if not reduces and opts.row_loops else None
        if group_size > 1:
            global_size = self.lower_grouped(shape, group_size)
        elif split and not opts.row_loops and opts.group_size > 1:
            group_size = opts.group_size
            global_size = self.lower_grouped_rows(shape, split, group_size)
        elif split:
            global_size = self.lower_rows(shape, split)
        elif layout is not None and len(layout[0]) >= 2:  # two runs or more
            global_size = self.lower_runs(shape, *layout)
        elif not reduces and opts.row_loops and len(shape) >= 2 and shape[-1] >= _ROW_LOOP_MIN \
                and numel > shape[-1]:
            global_size = self.lower_rows(shape, len(shape) - 1)
        elif not reduces:
            var = sym.Var("gidx", 0, max(numel - 1, 0))
            rng = self.open_range(var, "start", "end")
            lanes = [Index(shape, linear=var)]
            self.emit_stores(lanes)
            self.close_range(rng)
            global_size = numel
        else:
            global_size = self.lower_reduce_kernel(shape)
        nbytes = sum(numel * s.value.dtype.itemsize for s in kernel.stores)
        return LoopKernel(self.name, self.instrs, len(kernel.slots), self.buffer_dtypes, global_size,
                          work=numel * inner_work, bytes=nbytes,
                          flops=self.flops * numel // self.lanes + self.row_flops * global_size,
                          group_size=group_size if group_size > 1 else 0)

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

    def lower_rows(self, shape: tuple[int, ...], split: int) -> int:
        """The kernel as rows (axes before ``split``, split across threads) × inner loops over
        the other axes. Values broadcast along a row (softmax's max, a bias) are
        loop-invariant in the inner loops instead of a division per element; reduces over a
        row (softmax, layer norm) run once per row before the inner loops, each a loop over
        the row of its own, like ATen's row kernels (the row stays in cache between them)."""
        rows = math.prod(shape[:split])
        row = sym.Var("grow", 0, max(rows - 1, 0))
        outer = self.open_range(row, "start", "end")
        inner_vars = [self.new_var(s) if s > 1 else None for s in shape[split:]]
        dims = Index(shape[:split], linear=row).dims + tuple(v if v is not None else sym.Num(0)
                                                            for v in inner_vars)
        width = math.prod(shape[split:])
        linear: Expr = sym.mul(row, width)
        for d, st in zip(dims[split:], g.contiguous_strides(shape[split:])):
            linear = sym.add(linear, sym.mul(d, st))
        lane = Index(shape, dims, linear=linear)
        names = frozenset(v.name for v in inner_vars if v is not None)
        self.stash = self.row_stash(shape, split, lane)
        seen: dict = {}
        pending: list = []
        for store in self.kernel.stores:
            self.hoist(store.value, lane, names, seen, pending=pending)
        self.emit_sibling_reduces(pending)
        self.row_flops, self.flops = self.flops, 0
        ranges = [self.open_range(v, 0, v.vmax + 1) for v in inner_vars if v is not None]
        for source, slot in self.stashed:
            buf = self.add("BUF", source.dtype, (), slot)
            loaded = self.add("LOAD", source.dtype, (buf, self.index(lane.linear)))
            self.scopes[-1][("node", id(source), lane.key())] = loaded
        self.emit_stores([lane])
        for rng in reversed(ranges):
            self.close_range(rng)
        self.close_range(outer)
        return 0 if 0 in shape else rows

    def lower_grouped_rows(self, shape: tuple[int, ...], split: int, group: int) -> int:
        """``lower_rows`` for devices with work groups and no row loops (GPUs): one work group
        per row. Its row reduces are group reduces (neighbouring items read neighbouring
        elements); then item ``lid`` computes and stores elements lid, lid + group, ..."""
        rows = math.prod(shape[:split])
        width = math.prod(shape[split:])
        self.group = group
        row = sym.Var("gidx", 0, max(rows - 1, 0))
        outer = self.open_range(row, "start", "end")
        self.lid = sym.Var("lid", 0, group - 1)
        self.add("SPECIAL", dtypes.int64, (), (self.lid.name, "lid"), pure=False)
        steps = -(-width // group)
        step = self.new_var(steps)
        flat = sym.add(sym.mul(step, group), self.lid)
        cols = Index(shape[split:], linear=flat).dims
        lane = Index(shape, Index(shape[:split], linear=row).dims + cols,
                     linear=sym.add(sym.mul(row, width), flat))
        # The row reduces first, each by the whole group (at top level: every item reaches
        # their barriers).
        seen: dict = {}
        for store in self.kernel.stores:
            self.hoist(store.value, lane, frozenset((step.name, self.lid.name)), seen)
        rng = self.open_range(step, 0, steps)
        tail = self.open_if(sym.lt(flat, width)) if width % group else None
        self.items_store = True
        self.reduce_depth += 1  # anything left to reduce here is a plain loop (no barriers)
        self.emit_stores([lane])
        self.reduce_depth -= 1
        if tail is not None:
            self.close_if(tail)
        self.close_range(rng)
        self.close_range(outer)
        return 0 if 0 in shape else rows

    def row_stash(self, shape: tuple[int, ...], split: int, lane: Index) -> dict[int, tuple]:
        """A row reduce over a costly value that the store also uses at its own index
        (softmax's sum of exp(x - max), then exp(x - max) / sum) writes that value into the
        row's output as it goes; the store loop reads it back instead of computing it again
        (as ATen's softmax does). The row is still in cache, and each output element is read
        before it is overwritten."""
        axes = tuple(range(split, len(shape)))
        for store in self.kernel.stores:
            if store.view is not None:
                continue
            at_lane: set[int] = set()  # values the store reads at its own index
            stack = [store.value]
            while stack:
                node = stack.pop()
                if id(node) not in at_lane:
                    at_lane.add(id(node))
                    if node.op in g.ELEMENTWISE:
                        stack.extend(node.srcs)
            for node in g.toposort([store.value]):
                src = node.srcs[0] if node.op == "REDUCE" else None
                if (src is not None and id(src) in at_lane and node.arg[1] == axes and src.shape == shape
                        and src.dtype == store.value.dtype and _costly(src)):
                    slot = self.kernel.slots.index(("tmp", store.target))
                    return {id(node): (src, slot, lane)}
        return {}

    def lower_reduce_kernel(self, shape: tuple[int, ...]) -> int:
        axes = [i for i, s in enumerate(shape) if s > 1]
        factors = {a: 1 for a in axes}
        # Neighbouring outputs along the last axis become lanes (one vector) only where the
        # reduce reads them from neighbouring elements: a matmul's B, a sum over rows (a bias
        # gradient). Reduces that read along their own loop (a sum over each row) keep one
        # output per iteration and let LLVM vectorize the reduce loop instead.
        if axes and shape[axes[-1]] % _UPCAST_INNER == 0 and self.reads_along(shape, axes[-1]):
            factors[axes[-1]] = _UPCAST_INNER
            if len(axes) >= 2 and shape[axes[-2]] % _UPCAST_OUTER == 0:
                factors[axes[-2]] = _UPCAST_OUTER
        dims_base: dict[int, Expr] = {}
        ranges = []
        global_size = 1
        loop_order = list(axes)
        self.plain_loops = any(f > 1 for f in factors.values())
        if len(axes) >= 2 and factors[axes[-1]] > 1:
            # Matmul-shaped: walk column blocks outermost so one block of the right operand
            # (K x 16) stays in cache while every row block streams past it.
            loop_order = [axes[-1]] + axes[:-1]
        elif len(axes) >= 2 and shape[axes[-1]] > shape[axes[-2]] and self.reused_along(shape, axes[-2]):
            # One output per iteration (a small-batch x @ W^T: dot products): the wider operand,
            # read again for every row, is walked once in the outer loop while the narrow one
            # stays in cache (8 rows x 2048 columns: W streamed once, not 8 times).
            loop_order = [axes[-1]] + axes[:-1]
        for n, axis in enumerate(loop_order):
            steps = shape[axis] // factors[axis]
            var = self.new_var(steps)
            if n == 0:
                ranges.append(self.open_range(var, "start", "end"))
                global_size = steps
            else:
                ranges.append(self.open_range(var, 0, steps))
            dims_base[axis] = sym.mul(var, factors[axis])
        lanes = []
        offsets = [range(factors[a]) for a in axes]
        for combo in itertools.product(*offsets):
            dims = [sym.Num(0)] * len(shape)
            for axis, off in zip(axes, combo):
                dims[axis] = sym.add(dims_base[axis], sym.Num(off))
            lanes.append(Index(shape, tuple(dims)))
        self.lanes = len(lanes)
        self.emit_stores(lanes)
        for rng in reversed(ranges):
            self.close_range(rng)
        # An empty output launches nothing: the loops above skip size-0 axes (they are not > 1),
        # so a (0, N) result would otherwise write N elements into its 0-byte buffer.
        return 0 if 0 in shape else max(global_size, 1)

    def reads_along(self, shape: tuple[int, ...], axis: int) -> bool:
        """Whether some load inside a reduce of this kernel reads consecutive elements for
        consecutive outputs along ``axis`` (stride 1, with every other index at 0)."""
        return any(in_reduce and _stride(expr, axis) == 1 for expr, in_reduce in self.load_indices(shape))

    def reused_along(self, shape: tuple[int, ...], axis: int) -> bool:
        """Whether some load inside a reduce of this kernel reads the same elements for every
        output along ``axis`` (stride 0 there: a matmul's B seen from its rows)."""
        return any(in_reduce and _stride(expr, axis) == 0 for expr, in_reduce in self.load_indices(shape))

    def axis_runs(self, shape: tuple[int, ...]) -> tuple[list[list[int]], list[dict]] | None:
        """The output axes (size > 1) of an elementwise kernel in runs that every load and store
        walks as one flat range (each axis's stride is the next one's times its size), and each
        load's stride per axis, when every load index is affine in the output axes; None
        otherwise (or for an empty output)."""
        axes = [a for a, s in enumerate(shape) if s > 1]
        if len(axes) < 2 or 0 in shape:
            return None
        loads = []
        for expr, _in_reduce in self.load_indices(shape):
            if not _affine(expr):
                return None
            loads.append({a: _stride(expr, a) for a in axes})
        layouts = list(loads)
        for store in self.kernel.stores:
            strides = store.view[1] if store.view is not None else g.contiguous_strides(shape)
            layouts.append({a: strides[a] for a in axes})
        runs = [[axes[0]]]
        for axis in axes[1:]:
            prev = runs[-1][-1]
            if all(st[prev] == st[axis] * shape[axis] for st in layouts):
                runs[-1].append(axis)
            else:
                runs.append([axis])
        return runs, loads

    def lower_runs(self, shape: tuple[int, ...], runs: list[list[int]], loads: list[dict]) -> int:
        """Elementwise kernel as one loop per run of axes (``axis_runs``), in the output's order,
        the outermost split across threads. Each loop steps every index by a constant: a flat
        loop would divide its index back into axes for every element (a permuting copy, such as
        a matmul operand packed into panels, ran at a tenth of memory speed)."""
        # Leading runs join the outer loop until it has iterations enough to share out (its
        # divisions run once per outer iteration).
        outer = list(runs[0])
        rest = list(runs[1:])
        while len(rest) > 1 and math.prod(shape[a] for a in outer) < _MIN_OUTER:
            outer += rest.pop(0)
        nest = [outer, *rest]
        extents = [math.prod(shape[a] for a in run) for run in nest]
        # (run, loop extent, step of the run's flat index per iteration), outermost first.
        plan = [(n, extent, 1) for n, extent in enumerate(extents)]
        tile = self.line_tile(shape, nest, loads)
        if tile is not None:
            n, block = tile
            plan[n] = (n, extents[n] // block, block)
            plan.insert(len(plan) - 1, (n, block, 1))
        flat: list[Expr] = [sym.Num(0)] * len(nest)
        ranges = []
        for i, (n, extent, step) in enumerate(plan):
            var = self.new_var(extent)
            ranges.append(self.open_range(var, "start", "end") if i == 0 else self.open_range(var, 0, extent))
            flat[n] = sym.add(flat[n], sym.mul(var, step))
        dims: list[Expr] = [sym.Num(0)] * len(shape)
        for run, index in zip(nest, flat):
            for axis, d in zip(run, Index(tuple(shape[a] for a in run), linear=index).dims):
                dims[axis] = d
        self.emit_stores([Index(shape, tuple(dims))])
        for rng in reversed(ranges):
            self.close_range(rng)
        return plan[0][1]

    def line_tile(self, shape: tuple[int, ...], nest: list[list[int]], loads: list[dict]) -> tuple | None:
        """(run, block) when the innermost loop reads less than a cache line of each source and
        an outer run continues those lines (a matmul operand packed into 4-wide panels reads 16
        bytes of a row per panel): that run is split and ``block`` of its steps move just outside
        the innermost loop, so each source line is read whole, once, while the stores go to
        ``block`` sequential streams. None: no such run."""
        itemsize = self.kernel.stores[0].value.dtype.itemsize
        last = nest[-1][-1]
        run_elems = math.prod(shape[a] for a in nest[-1])
        if len(nest) < 3 or not loads or run_elems * itemsize >= _LINE_BYTES:
            return None
        if any(st[last] != 1 for st in loads):
            return None
        for n, run in enumerate(nest[:-2]):
            if all(st[run[-1]] == run_elems for st in loads):
                block = math.gcd(_LINE_BYTES // (run_elems * itemsize), math.prod(shape[a] for a in run))
                if block >= 2:
                    return n, block
        return None

    def load_indices(self, shape: tuple[int, ...]) -> list[tuple[Expr, bool]]:
        """The flat index of every load of the kernel (output axis ``a`` as variable ``q{a}``,
        reduce axes as other variables), and whether it is read inside a reduce."""
        out_vars = [sym.Var(f"q{a}", 0, max(s - 1, 0)) for a, s in enumerate(shape)]
        found: list[tuple[Expr, bool]] = []
        seen: set = set()

        def walk(node: Node, idx: Index, in_reduce: bool) -> None:
            key = (id(node), idx.key(), in_reduce)
            if key in seen:
                return
            seen.add(key)
            if node.op == "LOAD":
                found.append((idx.linear, in_reduce))
            elif node.op == "REDUCE":
                src = node.srcs[0]
                dims = list(idx.dims)
                for a in node.arg[1]:
                    dims[a] = sym.Var(f"p{len(seen)}_{a}", 0, src.shape[a] - 1)
                walk(src, Index(src.shape, tuple(dims), valid=idx.valid), True)
            elif node.op in g.MOVEMENT:
                walk(node.srcs[0], self.move(node, idx), in_reduce)
            else:
                for src in node.srcs:
                    walk(src, idx, in_reduce)

        lane = Index(shape, tuple(out_vars))
        for store in self.kernel.stores:
            walk(store.value, lane, False)
        return found

    def emit_stores(self, lanes: list[Index]) -> None:
        for store in self.kernel.stores:
            slot = self.kernel.slots.index(("tmp", store.target))
            buf = self.add("BUF", store.value.dtype, (), slot)
            values = self.emit(store.value, lanes)
            # In a grouped kernel every item holds the result; the first one stores it.
            single = self.open_if(sym.lt(self.lid, 1)) if self.group and not self.items_store else None
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


_CHEAP_UNARY = frozenset({"neg", "abs", "not", "floor", "ceil", "round", "trunc", "isnan"})
_COSTLY_BINARY = frozenset({"pow", "atan2", "div", "idiv", "mod"})


def _costly(node: Node) -> bool:
    """Whether an elementwise value costs more to compute than to read back from cache."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op not in g.ELEMENTWISE:
            continue
        seen.add(id(n))
        if (n.op == "UNARY" and n.arg not in _CHEAP_UNARY) or (n.op == "BINARY" and n.arg in _COSTLY_BINARY):
            return True
        stack.extend(n.srcs)
    return False


def _uses_vars(key: tuple, names: frozenset) -> bool:
    """Whether a symbolic key (``Expr.key`` / ``Index.key``) mentions a variable in ``names``."""
    if not names:
        return False
    if len(key) >= 2 and key[0] == "v" and key[1] in names:
        return True
    return any(isinstance(part, tuple) and _uses_vars(part, names) for part in key)


def _extents(node: Node) -> tuple[int, ...]:
    """The loop extents of a reduce."""
    return tuple(node.srcs[0].shape[a] for a in node.arg[1])


def _depends_on(node: Node, ids: set[int]) -> bool:
    """Whether a node in ``ids`` lies under ``node``."""
    seen: set[int] = set()
    stack = list(node.srcs)
    while stack:
        n = stack.pop()
        if id(n) in ids:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.srcs)
    return False


def _affine(e: Expr) -> bool:
    """Whether an index expression is a sum of multiples of variables (no division or mask)."""
    if isinstance(e, (sym.Num, sym.Var)):
        return True
    if isinstance(e, sym.Sum):
        return all(_affine(t) for t in e.terms)
    return isinstance(e, sym.Mul) and _affine(e.x)


def _stride(expr: Expr, axis: int) -> int:
    """How far ``expr`` (a ``load_indices`` index) moves for one step along output ``axis``."""
    return _evaluate(expr, {f"q{axis}": 1}) - _evaluate(expr, {})


def _evaluate(e: Expr, values: dict[str, int]) -> int:
    """An index expression at a point: the named variables given, every other one 0."""
    if isinstance(e, sym.Num):
        return e.value
    if isinstance(e, sym.Var):
        return values.get(e.name, 0)
    if isinstance(e, sym.Sum):
        return sum(_evaluate(t, values) for t in e.terms)
    if isinstance(e, sym.Mul):
        return _evaluate(e.x, values) * e.factor
    if isinstance(e, sym.Div):
        return _evaluate(e.x, values) // e.divisor
    if isinstance(e, sym.Mod):
        return _evaluate(e.x, values) % e.divisor
    return int(bool(_evaluate(e.x, values) < e.bound)) if isinstance(e, sym.Lt) else 0


def _is_unit_reshape(src_shape, shape) -> bool:
    return [s for s in src_shape if s != 1] == [s for s in shape if s != 1]


def _clamp(d: Expr, size: int) -> Expr:
    if 0 <= d.vmin and d.vmax < size:
        return d
    # A masked lane may compute an out-of-range index; the LOAD's mask guards the access.
    return d


def lower(kernel: ScheduledKernel, name: str, buffer_dtypes: list,
          options: LoweringOptions | None = None) -> LoopKernel:
    return Lowerer(kernel, name, buffer_dtypes, options).lower()
