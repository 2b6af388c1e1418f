"""Lowering of loop nests by memory layout: the order and tiling of a kernel's loops from the
strides its loads and stores walk.

Matmul-shaped reduces compute a register tile of outputs per iteration with the column
blocks outermost (``lower_reduce_kernel``); elementwise kernels whose loads do not cancel to
the flat output index (permuting copies, broadcasts) loop once per run of axes that every
access walks as one range, with source cache lines read whole (``lower_runs``,
``line_tile``). A mixin of ``lower.Lowerer``.
"""

from __future__ import annotations

import itertools
import math

from ..lazy import graph as g
from ..lazy.graph import Node
from . import symbolic as sym
from .index import Index
from .symbolic import Expr

# Cache line bytes: copies read whole lines of their source (``line_tile``).
_LINE_BYTES = 64
# Elementwise loop nests: leading axes join the outer (threaded) loop up to this many iterations.
_MIN_OUTER = 16


class LoopNestLowering:
    """Loop order by layout for ``lower.Lowerer`` (which provides emission and the loop helpers)."""

    def lower_reduce_kernel(self, shape: tuple[int, ...]) -> int:
        axes = [i for i, s in enumerate(shape) if s > 1]
        factors = {a: 1 for a in axes}
        # Neighbouring outputs along the last axis become lanes (one vector) only where the
        # reduce reads them from neighbouring elements: a matmul's B, a sum over rows (a bias
        # gradient). Reduces that read along their own loop (a sum over each row) keep one
        # output per iteration and let LLVM vectorize the reduce loop instead.
        # The register tile is the device's (LoweringOptions.matmul_tile); large matmuls read
        # their operands packed to match it (lazy/panels.py).
        tile = self.options.matmul_tile
        cols = tile.columns(shape[axes[-1]]) if axes else 0
        if cols and self.reads_along(shape, axes[-1]):
            factors[axes[-1]] = cols
            rows = tile.tile_rows(shape[axes[-2]]) if len(axes) >= 2 else 1
            if rows > 1:
                factors[axes[-2]] = rows
        dims_base: dict[int, Expr] = {}
        ranges = []
        global_size = 1
        loop_order = list(axes)
        self.plain_loops = any(f > 1 for f in factors.values())
        if len(axes) >= 2 and factors[axes[-1]] > 1:
            # Matmul-shaped: walk column blocks outermost so one block of the right operand
            # (K x tile columns) stays in cache while every row block streams past it.
            loop_order = [axes[-1]] + axes[:-1]
        elif len(axes) >= 2 and shape[axes[-1]] > shape[axes[-2]] and self.reused_along(shape, axes[-2]):
            # One output per iteration (a small-batch x @ W^T: dot products): the wider operand,
            # read again for every row, is walked once in the outer loop while the narrow one
            # stays in cache (8 rows x 2048 columns: W streamed once, not 8 times).
            loop_order = [axes[-1]] + axes[:-1]
        # The outer (parallel) range: the first axes in loop order, joined into one flat index.
        # Work items side by side (GPUs, ``row_loops`` off) take one output (tile) each; CPU
        # loops join leading axes until there are enough iterations to share among threads. The
        # first axis alone gave a GPU 8 work items for 8 x 512 outputs (an FFT stage: 120 ms).
        steps = [shape[axis] // factors[axis] for axis in loop_order]
        joined = len(loop_order) if not self.options.row_loops else min(1, len(loop_order))
        while joined < len(loop_order) and math.prod(steps[:joined]) < _MIN_OUTER:
            joined += 1
        if joined:
            global_size = math.prod(steps[:joined])
            var = self.new_var(global_size)
            ranges.append(self.open_range(var, "start", "end"))
            inner = 1
            for axis, count in reversed(list(zip(loop_order[:joined], steps[:joined]))):
                position = sym.div(var, inner) if inner > 1 else var
                if inner * count < global_size:
                    position = sym.mod(position, count)
                dims_base[axis] = sym.mul(position, factors[axis])
                inner *= count
        for axis, count in zip(loop_order[joined:], steps[joined:]):
            var = self.new_var(count)
            ranges.append(self.open_range(var, 0, count))
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
        consecutive outputs along ``axis`` (stride 1, with every other index at 0) and moves
        along the reduce: an operand streamed by the reduce loop (a matmul's B). A load the
        reduce does not move (an embedding's token ids under a layer norm of the gathered rows)
        is one value per output, and lanes along it only bloat the kernel (a register tile of
        256 layer-norm rows made 22,000 instructions running at 2 GFLOP/s)."""
        return any(in_reduce and _stride(expr, axis) == 1 and _moves_in_reduce(expr)
                   for expr, in_reduce in self.load_indices(shape))

    def reused_along(self, shape: tuple[int, ...], axis: int) -> bool:
        """Whether some load inside a reduce of this kernel reads the same elements for every
        output along ``axis`` (stride 0 there: a matmul's B seen from its rows)."""
        return any(in_reduce and _stride(expr, axis) == 0 for expr, in_reduce in self.load_indices(shape))

    def axis_runs(self, shape: tuple[int, ...]) -> tuple[list[list[int]], list[dict]] | None:
        """The output axes (size > 1) of an elementwise kernel in runs that every load and store
        walks as one flat range (each axis's stride is the next one's times its size), and each
        load's stride per axis (at the origin). A load index that is not affine in the output
        axes (a view that splits a merged axis again divides by its size) makes every axis a
        run of its own: the divisions that only outer axes feed then run once per outer
        iteration. None for fewer than two axes or an empty output."""
        axes = [a for a, s in enumerate(shape) if s > 1]
        if len(axes) < 2 or 0 in shape:
            return None
        exprs = [expr for expr, _in_reduce in self.load_indices(shape)]
        loads = [{a: _stride(expr, a) for a in axes} for expr in exprs]
        if not all(_affine(expr) for expr in exprs):
            return [[a] for a in axes], loads
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
        # A run split into blocks: the block loop goes just outside the innermost loop
        # (``line_tile``) or, for a transposing copy on CPU loops, innermost (``transpose_tile``;
        # a GPU's neighbouring items would then read a line apart).
        tile, at = self.line_tile(shape, nest, loads), len(plan) - 1
        if tile is None and self.options.row_loops:
            tile, at = self.transpose_tile(shape, nest, loads), len(plan)
        if tile is not None:
            n, block = tile
            plan[n] = (n, extents[n] // block, block)
            plan.insert(at, (n, block, 1))
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

    def transpose_tile(self, shape: tuple[int, ...], nest: list[list[int]],
                       loads: list[dict]) -> tuple | None:
        """(run, block) for a transposing copy: the innermost loop reads a new source cache line
        every step (a transpose, a weight packed into panels across its rows) while an outer run
        walks those lines along; ``block`` steps of that run (a line's worth) then become the
        innermost loop, so each source line is read whole at once and the stores fill ``block``
        lines in turn. A 256 x 4096 float transpose in a transformer's backward ran at 1.4 GB/s.
        None: no such run."""
        itemsize = self.kernel.stores[0].value.dtype.itemsize
        last = nest[-1][-1]
        line = _LINE_BYTES // itemsize
        # (loads that stay put in the innermost loop, a scalar parameter, do not count)
        moving = [st for st in loads if st[last] != 0]
        strided = [st for st in moving if st[last] * itemsize >= _LINE_BYTES]
        if len(nest) < 2 or not strided or len(strided) != len(moving) or line < 2:
            return None
        for n in range(len(nest) - 2, -1, -1):
            if all(st[nest[n][-1]] == 1 for st in strided):
                block = math.gcd(line, math.prod(shape[a] for a in nest[n]))
                return (n, block) if block >= 4 else None
        return None

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
            elif node.op == "GATHER":
                # The table's position along the gathered axis comes from data: a variable of
                # its own, so the other axes still show their strides.
                table, index = node.srcs
                dims = list(idx.dims)
                dims[node.arg] = sym.Var(f"p{len(seen)}_g", 0, table.shape[node.arg] - 1)
                walk(table, Index(table.shape, tuple(dims), valid=idx.valid), in_reduce)
                walk(index, idx, in_reduce)
            else:
                for src in node.srcs:
                    walk(src, idx, in_reduce)

        lane = Index(shape, tuple(out_vars))
        for store in self.kernel.stores:
            walk(store.value, lane, False)
        # ``walk`` holds itself through its closure: a reference cycle that would keep this
        # lowerer, its kernel and the graph's buffers alive until the garbage collector runs.
        walk = None
        return found


def _affine(e: Expr) -> bool:
    """Whether an index expression is a sum of multiples of variables (no division or mask)."""
    if isinstance(e, (sym.Num, sym.Var)):
        return True
    if isinstance(e, sym.Sum):
        return all(_affine(t) for t in e.terms)
    return isinstance(e, sym.Mul) and _affine(e.x)


def _moves_in_reduce(expr: Expr) -> bool:
    """Whether a ``load_indices`` index changes with some reduce variable (named ``p...``)."""
    names: set[str] = set()

    def collect(e: Expr) -> None:
        if isinstance(e, sym.Var):
            names.add(e.name)
        elif isinstance(e, sym.Sum):
            for term in e.terms:
                collect(term)
        elif not isinstance(e, sym.Num):
            collect(e.x)

    collect(expr)
    at_zero = _evaluate(expr, {})
    return any(_evaluate(expr, {name: 1}) != at_zero for name in names if name.startswith("p"))


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
