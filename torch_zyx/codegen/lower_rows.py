"""Lowering of row kernels: reduces over a row (softmax, layer norm) run once per row, before
the loops that store the row.

The kernelizer fuses a row's reduces with the elementwise work that uses them. Lowering finds
the leading output axes every such reduce depends on (``row_split``), emits each reduce once
per row ahead of the inner loops (``hoist``; sibling reduces over the same range share one
loop), and on CPUs lets a reduce write a costly value it computes into the row's output for
the store loop to read back (``row_stash``). CPU loops pipeline the rows: the loop that
stores a row accumulates the next row's first reduces, those reading only the row (layer
norm's sum and sum of squares, softmax's maximum: ``lower_pipelined_rows``). Devices with work
groups run one group per row.
A mixin of ``lower.Lowerer``.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..lazy import graph as g
from ..lazy.graph import Node
from . import symbolic as sym
from .index import Index
from .symbolic import Expr


class RowLowering:
    """Row kernels for ``lower.Lowerer`` (which provides emission and the loop helpers)."""

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

    def lower_rows(self, shape: tuple[int, ...], split: int) -> int:
        """The kernel as rows (axes before ``split``, split across threads) × inner loops over
        the other axes. Values broadcast along a row (softmax's max, a bias) are
        loop-invariant in the inner loops instead of a division per element; reduces over a
        row (softmax, layer norm) run once per row before the inner loops, each a loop over
        the row of its own, like ATen's row kernels (the row stays in cache between them)."""
        rows = math.prod(shape[:split])
        inner_vars = [self.new_var(s) if s > 1 else None for s in shape[split:]]
        if self.options.pipeline_rows and rows >= 2 and 0 not in shape \
                and self.lower_pipelined_rows(shape, split, inner_vars):
            return rows
        row = sym.Var("grow", 0, max(rows - 1, 0))
        outer = self.open_range(row, "start", "end")
        pending = self.row_reduces(shape, split, row, inner_vars)
        self.row_flops, _stores = self.store_row(shape, split, row, inner_vars, pending, None)
        self.close_range(outer)
        return 0 if 0 in shape else rows

    def row_reduces(self, shape: tuple[int, ...], split: int, row: Expr, inner_vars: list) -> list:
        """The reduces a row kernel runs once per row, for row ``row``: (reduce, its index)."""
        lane = _row_lane(shape, split, row, inner_vars)
        names = frozenset(v.name for v in inner_vars if v is not None)
        pending: list = []
        seen: dict = {}
        for store in self.kernel.stores:
            self.hoist(store.value, lane, names, seen, pending=pending)
        return pending

    def lower_pipelined_rows(self, shape: tuple[int, ...], split: int, inner_vars: list) -> bool:
        """``lower_rows`` with the rows pipelined: the loop that stores row r also accumulates
        row r + 1's first reduces, those that read only the row (layer norm's sum and sum of
        squares, all of its reduces; softmax's maximum, not its sum of exp(x - max)). Reading
        the next row then overlaps this row's stores, instead of each row being read in one
        loop and written in another. A chunk of rows [start, end) computes row ``start``'s
        first reduces before its row loop and stores its last row after it; the other reduces
        run per row as in ``lower_rows``. layer norm 1024x4096 on a 2-core Xeon, the whole
        call: 2.3-4.4% faster alternating call by call, 15-20% in blocks of calls. False
        (nothing emitted) where it does not apply."""
        rows = math.prod(shape[:split])
        axes = tuple(range(split, len(shape)))
        row = sym.Var("grow", 0, rows - 2)  # the rows whose next row is stored by this chunk too
        here = self.row_reduces(shape, split, row, inner_vars)
        first = {id(node) for node, _idx in here if not self.has_reduce(node.srcs[0])}
        if not first:
            return False
        for node, _idx in here:
            src = node.srcs[0]
            if id(node) in first and (node.arg[1] != axes or src.shape[split:] != shape[split:]):
                return False
        start = sym.Var("start", 0, rows - 1)
        last_row = sym.add(sym.Var("end", 1, rows), sym.Num(-1))
        at = {name: self.row_reduces(shape, split, r, inner_vars)
              for name, r in (("first", start), ("next", sym.add(row, sym.Num(1))), ("last", last_row))}
        if any([n for n, _i in found] != [n for n, _i in here] for found in at.values()):
            return False
        at["here"] = here
        leading = {name: [m for m in found if id(m[0]) in first] for name, found in at.items()}
        others = {name: [m for m in found if id(m[0]) not in first] for name, found in at.items()}
        # This chunk's first row: its first reduces in one loop, carried into the row loop.
        carried = [self.new_acc(node) for node, _idx in leading["here"]]
        self.reduce_depth += 1
        values = self.emit_loop_reduces([(node, [idx]) for node, idx in leading["first"]])
        self.reduce_depth -= 1
        for cell, (value,) in zip(carried, values):
            self.add("ACC_SET", None, (cell, value), pure=False)
        first_flops, self.flops = self.flops, 0
        outer = self.open_range(row, "start", last_row)
        self.carry_in(leading["here"], carried)
        fresh = [self.new_acc(node) for node, _idx in leading["here"]]

        def next_row() -> None:
            for (node, idx), cell in zip(leading["next"], fresh):
                dims = list(idx.dims)
                for axis, var in zip(axes, inner_vars):
                    dims[axis] = var if var is not None else sym.Num(0)
                src_lane = Index(node.srcs[0].shape, tuple(dims), valid=idx.valid)
                (value,) = self.emit(node.srcs[0], [src_lane])
                self.accumulate(node, cell, value)

        row_flops, stores_flops = self.store_row(shape, split, row, inner_vars, others["here"], next_row)
        self.row_flops = first_flops + row_flops
        for cell, (node, _idx), new in zip(carried, leading["here"], fresh):
            value = self.add("ACC_GET", node.dtype, (new,), pure=False)
            self.add("ACC_SET", None, (cell, value), pure=False)
        self.close_range(outer)
        # The chunk's last row, with the first reduces the row before it computed.
        self.carry_in(leading["last"], carried)
        last_vars = [self.new_var(s) if s > 1 else None for s in shape[split:]]
        self.store_row(shape, split, last_row, last_vars, others["last"], None)
        self.flops = stores_flops
        return True

    def store_row(self, shape: tuple[int, ...], split: int, row: Expr, inner_vars: list, reduces: list,
                  also) -> tuple[int, int]:
        """Row ``row`` of a row kernel: its ``reduces`` (in a pipelined one, those not carried
        in), then the loops storing it, where ``also`` (if given) emits more. Returns the
        arithmetic per row of the reduces and per element of the stores."""
        lane = _row_lane(shape, split, row, inner_vars)
        self.stash = self.row_stash(shape, split, lane)
        self.stashed = []
        self.flops = 0
        self.emit_sibling_reduces(reduces)
        row_flops, self.flops = self.flops, 0
        ranges = [self.open_range(v, 0, v.vmax + 1) for v in inner_vars if v is not None]
        for source, slot in self.stashed:
            buf = self.add("BUF", source.dtype, (), slot)
            loaded = self.add("LOAD", source.dtype, (buf, self.index(lane.linear)))
            self.scopes[-1][("node", id(source), lane.key())] = loaded
        self.emit_stores([lane])
        stores_flops = self.flops
        if also is not None:
            also()
        for rng in reversed(ranges):
            self.close_range(rng)
        self.stash, self.stashed = {}, []
        self.flops = stores_flops  # (what ``also`` adds is counted per row by its caller)
        return row_flops, stores_flops

    def carry_in(self, reduces: list, cells: list[int]) -> None:
        """Let the reduces (each with its index) read their values from ``cells`` here."""
        for (node, idx), cell in zip(reduces, cells):
            value = self.add("ACC_GET", node.dtype, (cell,), pure=False)
            self.scopes[-1][("node", id(node), idx.key())] = value

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

    def stash_row(self, stash: tuple, axes: tuple[int, ...], vars_: list, src_lane: Index,
                  value: int) -> None:
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
        elif op == "GATHER":
            pass  # no reduce under a gather: the kernelizer stores them first
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


def _row_lane(shape: tuple[int, ...], split: int, row: Expr, inner_vars: list) -> Index:
    """Where a row kernel's lane is: row ``row`` (its axes before ``split``), the inner loop
    variables (None for an axis of size 1) along the others."""
    dims = Index(shape[:split], linear=row).dims + tuple(v if v is not None else sym.Num(0)
                                                        for v in inner_vars)
    linear: Expr = sym.mul(row, math.prod(shape[split:]))
    for d, st in zip(dims[split:], g.contiguous_strides(shape[split:])):
        linear = sym.add(linear, sym.mul(d, st))
    return Index(shape, dims, linear=linear)


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
