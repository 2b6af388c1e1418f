"""Kernelizer: a lazy graph → an ordered list of kernels, by zyx's fusion rules.

Stage 3 of the flow. It decides where values are stored (kernel boundaries) and builds each
kernel's AST: a small graph of the same ``Node`` type whose leaves are ``LOAD`` (a kernel
buffer slot) and ``RANDOM`` (seed/offset taken from kernel parameters). ASTs never mention
real buffers, so the same graph shape gives the same kernels, which the schedule cache reuses.
Float constants other than a few structural values (0, ±1, 2, 0.5, ±inf, nan) are scalar
parameters too: the signature keys them by position and kernels load them from a small
buffer holding the realization's values (kept per device for values seen again), so a
learning rate that changes every step (LR schedulers, SGD's ``alpha=-lr``) reuses the same
schedule and programs instead of compiling new ones.

Fusion rules (DESIGN.md "Kernelizer", after seeds/003 ``Kernelizer`` and seeds/000
``duplicate_or_store``/``add_store``):
  * elementwise ops join the kernel of their inputs; a binary op on two kernels merges them;
  * movement ops become index arithmetic; a movement after a reduce (other than adding or
    removing size-1 axes) first stores the reduce's value, as does an expand or growing pad
    of an expensive computed value;
  * a reduce appends to its input's kernel (elementwise work before and after it fuses);
  * a gather (data-dependent read) fuses like a movement whose position is a value: its table
    and index are stored first when they hold a reduce (or the table is costly); a scatter
    (data-dependent write) is stored like a strided write, its entries and index fused into
    its kernel;
  * a reduce over trailing axes broadcast back over them ("row reduce": softmax's max and sum,
    layer norm's statistics) is not stored: its consumers over the same rows share its kernel,
    where lowering runs it once per row before the row's elementwise loop (one kernel for
    softmax, like ATen's row kernels). It is stored after all when a reduce over a row axis,
    a reduce of another shape in the same value, or a row reduce of another row split would
    otherwise recompute it per element;
  * a value used several times is duplicated when cheap and stored when it follows a reduce
    (values after row reduces are duplicated: the row reduce runs once per row anyway);
  * kernels with the same iteration space and no dependency between them merge into one
    kernel that stores several outputs (up to MAX_MERGED_STORES);
  * large matmuls read their operands from panel copies (``panels.py``), stored first;
  * an attention node a device computes whole (composite.ATTENTION, kept by the rewrite) is a
    kernel of its own: its operands fuse into it as a reduce's do (movement and elementwise
    work read in place), and its two outputs (the attention, the log-sum-exp) share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import composite
from . import graph as g
from .graph import Node
from .panels import DEFAULT_TILE, MatmulTile, matmul_operands, pack_matmul_operands

# A computed value expanded (broadcast) is recomputed per output element; past this many
# arithmetic ops it is cheaper to store it once.
_EXPAND_RECOMPUTE_OPS = 3
# The longest chain of nodes one kernel computes without a store in between. Lowering and
# rendering walk a kernel's expression recursively; past this depth (a long loop recorded with
# no realization) the value is stored and the chain continues in the next kernel.
_MAX_FUSED_DEPTH = 160
# Row reduces fuse into their consumers only over at least this many rows (the rows are what
# runs in parallel), or when the whole value is small enough to run on one thread anyway.
_ROW_FUSE_MIN_ROWS = 16
_ROW_FUSE_SMALL = 1 << 15
# Independent kernels of one iteration space merge into one kernel of at most this many stores.
# Without a bound, thousands of same-shape results realized together (a list of small tensors
# moved to zyx and scaled) became one kernel whose compile time grew with the square of its
# buffers (each access is marked not to alias every other buffer): 1000 stores took 18 s.
MAX_MERGED_STORES = 32


# Float constants kept in the code (structural values that lowering and LLVM fold): others are
# scalar parameters, loaded at run time (nodes_py.is_scalar_param).
INLINE_FLOATS = frozenset((0.0, 1.0, -1.0, 2.0, 0.5))
# Nodes that write into a copy of their first source (a strided region, scattered entries):
# always stored, in place when nothing else reads that source.
_WRITES = ("SETVIEW", "SCATTER")


@dataclass
class KernelStore:
    target: int  # temp index written
    value: Node  # AST of the stored value
    # None: contiguous; (shape, strides, offset): a strided region (SETVIEW); ("scatter", (axis,
    # combine), index AST, target shape): ``value`` combined or written where ``index`` points.
    view: tuple | None = None


@dataclass
class ScheduledKernel:
    stores: list[KernelStore]
    # ("in", i) input buffer i, ("tmp", j) temp j, ("scalars", k) the graph's k-th scalar group
    slots: list[tuple[str, int]]
    params: list[int]  # indices into the graph's random parameters
    depends: set[int] = field(default_factory=set)  # indices of earlier kernels
    # 0: no reduce outside other reduces; k > 0: its reduces are row reduces over axes >= k
    # (lowered as rows); -1: reduces computed per output (they cannot share a kernel with rows).
    fusion: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        store = self.stores[0]
        return store.value.shape


@dataclass
class Schedule:
    kernels: list[ScheduledKernel]
    temps: list[tuple]  # (dtype, numel) of each temp buffer
    root_temps: list[int]  # temp index (or -1 - input index) holding each root
    last_use: dict[int, int]  # temp index → index of the last kernel that touches it


def is_trivial_reshape(node: Node) -> bool:
    """A reshape that only inserts or removes size-1 axes (no index arithmetic)."""
    src = node.srcs[0]
    return [s for s in node.shape if s != 1] == [s for s in src.shape if s != 1]


class GraphSignature:
    """The structure of a graph with buffers, random seeds and scalar parameters abstracted to
    positions: the schedule cache's ``key``, and what a realization binds to those positions
    (``buffers``, ``random_args``, the scalar groups ``scalar_dtypes``/``scalar_values`` and
    ``scalar_slot``, which maps a ``CONST`` node's id to (group, index)).

    Nodes are numbered in breadth-first discovery order from the roots (``order``), and the key
    lists each node's (op, arg, source numbers, dtype, shape) in that order: a complete
    description of the graph, so equal keys mean equal structure. It is written as a byte string
    of numbers (values by their numbers in the node table's register: nodes_py.signature), which
    keeps its hash and compares as one memcmp; the earlier tuple of tuples cost a realization of
    a layer norm ~5 us in hashing and comparing on the 2-core box. The numbering needs no
    topological order, which lets one visit per node number its sources on the spot (a
    sources-first walk visits most nodes twice); it depends only on the structure (roots and
    source order), so the same structure always gets the same key. Every realization pays for
    this walk: the node table's ``signature`` does it (in C where built; nodes_py.py is the
    reference)."""

    # Slots: small graphs (a training step's many realizations) pay mostly for the setup here.
    __slots__ = ("buffers", "key", "order", "random_args", "scalar_dtypes", "scalar_slot",
                 "scalar_values")

    def __init__(self, roots: list[Node]):
        (self.order, self.key, self.buffers, self.random_args, self.scalar_dtypes,
         self.scalar_values, self.scalar_slot) = g.nodes.signature(roots, INLINE_FLOATS)


class Kernelizer:
    def __init__(self, roots: list[Node], signature: GraphSignature, pinned: frozenset = frozenset(),
                 merge_matmuls: bool = True, order: list[Node] | None = None):
        self.roots = roots
        self.sig = signature
        self.pinned = pinned  # ids of values that must be stored (matmul operand panels)
        # Whether a kernel with a matmul-shaped reduce may merge with another of its shape: not
        # on devices that lower each matmul as block tiles of its own (lower_tiles.py takes a
        # kernel of one reduce; two merged matmuls ran as a plain loop on 32 threads: 0.75 s).
        self.merge_matmuls = merge_matmuls
        # The graph actually kernelized: the signature's graph after rewrites (the cache key
        # stays the signature's, the rewrites are deterministic).
        self.order = g.toposort(roots) if order is None else order
        self.rc: dict[int, int] = {}
        for node in self.order:
            for src in node.srcs:
                self.rc[id(src)] = self.rc.get(id(src), 0) + 1
        for root in roots:
            self.rc[id(root)] = self.rc.get(id(root), 0) + 1
        # Values read by something other than elementwise ops (movement, reduce, a store), and
        # those readers (None: a root).
        self.read_by_non_elementwise: set[int] = {id(r) for r in roots}
        self.non_elementwise_readers: dict[int, list] = {id(r): [None] for r in roots}
        for node in self.order:
            if node.op not in g.ELEMENTWISE:
                for s in node.srcs:
                    self.read_by_non_elementwise.add(id(s))
                    self.non_elementwise_readers.setdefault(id(s), []).append(node)
        self.stored: set[int] = set()
        # Per value, its reduces not stored: ``direct`` those computed at the value's own index,
        # ``row_reduces`` the row expands (id → (expand node, k)) its row reduces come through.
        self.direct: dict[int, bool] = {}
        self.row_reduces: dict[int, dict[int, tuple[Node, int]]] = {}
        self.alu_ops: dict[int, int] = {}
        # Per value, its longest chain of nodes down to a stored value or a leaf.
        self.depth: dict[int, int] = {}

    # ------------------------------------------------------------------ decide stores

    def _mark_store(self, node: Node, root: bool = False) -> None:
        cheap_leaf = node.op in ("CONST", "IOTA") and not root
        if node.op == "BUFFER" or cheap_leaf or id(node) in self.stored:
            return
        self.stored.add(id(node))
        self.direct[id(node)] = False
        self.row_reduces[id(node)] = {}
        self.alu_ops[id(node)] = 0

    def _rows(self, node: Node) -> dict[int, tuple[Node, int]]:
        """The row expands still fused into ``node`` (the source of one may be stored since)."""
        return {key: (e, k) for key, (e, k) in self.row_reduces.get(id(node), {}).items()
                if id(e.srcs[0]) not in self.stored}

    def _has_reduce(self, node: Node) -> bool:
        return self.direct.get(id(node), False) or bool(self._rows(node))

    def _unfuse(self, rows) -> None:
        for expand, _k in rows:
            self._mark_store(expand.srcs[0])

    def _row_split(self, node: Node) -> int:
        """For an EXPAND of a value with reduces: ``k`` when it broadcasts exactly the axes from
        ``k`` on, sized 1 in the value (a row reduce broadcast over its rows); 0 otherwise."""
        src = node.srcs[0]
        if not self.direct[id(src)] or self._rows(src):
            return 0
        grown = [i for i, (a, b) in enumerate(zip(src.shape, node.shape)) if a != b]
        if not grown:
            return 0
        k = grown[0]
        if k == 0 or any(src.shape[i] != 1 for i in range(k, len(src.shape))):
            return 0
        rows = math.prod(node.shape[:k])
        if rows < _ROW_FUSE_MIN_ROWS and node.numel > _ROW_FUSE_SMALL:
            return 0
        return k

    def _summarize(self, node: Node, row_split: int) -> None:
        """``direct``/``row_reduces`` of ``node`` from its sources not stored."""
        srcs = [s for s in node.srcs if id(s) not in self.stored]
        if node.op == "REDUCE":
            self.direct[id(node)], self.row_reduces[id(node)] = True, {}
        elif row_split:
            self.direct[id(node)], self.row_reduces[id(node)] = False, {id(node): (node, row_split)}
        else:
            self.direct[id(node)] = any(self.direct[id(s)] for s in srcs)
            rows: dict[int, tuple[Node, int]] = {}
            for s in srcs:
                rows.update(self._rows(s))
            self.row_reduces[id(node)] = rows

    def decide_stores(self) -> None:
        # A root that only reshapes a value stores that value: a contiguous buffer reshapes for free.
        root_ids = {id(_unreshaped(r)) for r in self.roots}
        for node in self.order:
            srcs = node.srcs
            row_split = 0
            if node.op in g.MOVEMENT:
                src = srcs[0]
                trivial = node.op == "RESHAPE" and is_trivial_reshape(node)
                if node.op == "EXPAND" and self._has_reduce(src):
                    row_split = self._row_split(node)
                if trivial:
                    # Axis numbers change: the row split would no longer say which axes are rows.
                    self._unfuse(self._rows(src).values())
                if row_split:
                    pass  # the row reduce stays in its consumers' kernel, once per row
                elif self._has_reduce(src) and not trivial:
                    self._mark_store(src)
                grows = node.op == "EXPAND" or (node.op == "PAD" and node.numel > src.numel)
                if grows and not row_split and self.alu_ops[id(src)] > _EXPAND_RECOMPUTE_OPS:
                    self._mark_store(src)
            elif node.op == "REDUCE":
                # A reduce over a row axis of a row reduce's broadcast would recompute that row
                # reduce per element it reads: store the row reduce (layer norm's mean read by
                # the weight gradient's sum over rows).
                axes = node.arg[1]
                self._unfuse(v for v in self._rows(srcs[0]).values() if min(axes) < v[1])
            elif node.op == "GATHER":
                # The table is read at positions known only when the kernel runs, and the
                # index once per output: a reduce under either would run per gathered element
                # (and a row reduce's rows would not line up), so both are stored first; a
                # costly table too, since entries may repeat (as for an expand).
                for src in srcs:
                    if self._has_reduce(src):
                        self._mark_store(src)
                if self.alu_ops[id(srcs[0])] > _EXPAND_RECOMPUTE_OPS:
                    self._mark_store(srcs[0])
            elif node.op == "SCATTER":
                # Its kernel reads the entries and their positions one axis step at a time (see
                # codegen/lower_scatter.py): a reduce in them is computed before.
                for src in srcs[1:]:
                    if self._has_reduce(src):
                        self._mark_store(src)
            elif node.op == composite.ATTENTION:
                # (Its kernel reads each operand element once per block: a reduce under one
                # would run per element read.)
                for src in srcs:
                    if self._has_reduce(src):
                        self._mark_store(src)
            elif node.op in g.ELEMENTWISE:
                rows = {}
                for src in srcs:
                    if id(src) not in self.stored:
                        rows.update(self._rows(src))
                direct = any(self.direct[id(s)] for s in srcs if id(s) not in self.stored)
                # One kernel computes either per-output reduces or row reduces of one row split.
                if direct:
                    self._unfuse(rows.values())
                elif rows:
                    top = max(k for _e, k in rows.values())
                    self._unfuse(v for v in rows.values() if v[1] != top)
            for src in srcs:
                # A reduce result used several times is stored, unless every user is
                # elementwise or a row expand: then all uses read it at the same index, in
                # kernels of the same shape that merge, where lowering computes the reduce once.
                # Values after row reduces are recomputed instead (the row reduce itself runs
                # once per row).
                if (self.rc[id(src)] > 1 and self.direct.get(id(src))
                        and id(src) in self.read_by_non_elementwise
                        and not all(r is not None and r.op == "EXPAND" and self._row_split(r)
                                    for r in self.non_elementwise_readers[id(src)])):
                    self._mark_store(src)
            if node.op in _WRITES or node.op == composite.ATTENTION:
                self._mark_store(node)
            self._summarize(node, row_split)
            own = 1 if node.op in g.ELEMENTWISE or node.op in ("REDUCE", "RANDOM") else 0
            self.alu_ops[id(node)] = own + sum(self.alu_ops[id(s)] for s in srcs if id(s) not in self.stored)
            depth = 1 + max((self.depth[id(s)] for s in srcs if id(s) not in self.stored), default=0)
            self.depth[id(node)] = depth
            if id(node) in root_ids:
                self._mark_store(node, root=True)
            elif id(node) in self.pinned or (depth > _MAX_FUSED_DEPTH and node.op not in g.MOVEMENT):
                self._mark_store(node)

    def fusion_of(self, node: Node) -> int:
        """``ScheduledKernel.fusion`` of a kernel storing ``node`` (see there)."""
        if self.direct_final.get(id(node)):
            return -1
        rows = self.rows_final.get(id(node))
        return max((k for _e, k in rows.values()), default=0) if rows else 0

    def final_summaries(self) -> None:
        """Reduce summaries with every store decided (stores made late change earlier ones)."""
        self.direct_final: dict[int, bool] = {}
        self.rows_final: dict[int, dict] = {}
        for node in self.order:
            srcs = [s for s in node.srcs if id(s) not in self.stored]
            if node.op == "REDUCE":
                direct, rows = True, {}
            elif node.op == "EXPAND" and self.row_reduces.get(id(node), {}).get(id(node)) \
                    and id(node.srcs[0]) not in self.stored:
                direct, rows = False, {id(node): self.row_reduces[id(node)][id(node)]}
            else:
                direct = any(self.direct_final[id(s)] for s in srcs)
                rows = {}
                for s in srcs:
                    rows.update(self.rows_final[id(s)])
            self.direct_final[id(node)], self.rows_final[id(node)] = direct, rows

    # ------------------------------------------------------------------ build kernels

    def _scalar_load(self, node: Node, slot) -> Node:
        """The scalar parameter ``node`` read from its group's buffer, broadcast to its shape."""
        group, index = self.sig.scalar_slot[id(node)]
        count = len(self.sig.scalar_values[group])
        load = Node("LOAD", slot(("scalars", group)), (), node.dtype, (count,))
        one = g.reshape(g.shrink(load, ((index, index + 1),)), (1,) * len(node.shape))
        return g.expand(one, node.shape)

    def build(self) -> Schedule:
        self.decide_stores()
        self.final_summaries()
        input_pos = {id(b): i for i, b in enumerate(self.sig.buffers)}
        temp_of: dict[int, int] = {}
        temps: list[tuple] = []
        producer: dict[int, int] = {}  # temp → kernel index that last wrote it
        kernels: list[ScheduledKernel] = []
        attention_kernels: dict[tuple, int] = {}  # (sources, causal) → its kernel's index
        random_pos: dict[int, int] = {}
        ri = 0
        for node in self.sig.order:  # parameter positions follow the signature's order
            if node.op == "RANDOM":
                random_pos[id(node)] = ri
                ri += 2

        def new_kernel(stores_spec: list[tuple[int, Node, tuple | None]], fusion: int) -> ScheduledKernel:
            slots: list[tuple[str, int]] = []
            slot_of: dict[tuple[str, int], int] = {}
            params: list[int] = []
            memo: dict[int, Node] = {}
            depends: set[int] = set()

            def slot(ref: tuple[str, int]) -> int:
                if ref not in slot_of:
                    slot_of[ref] = len(slots)
                    slots.append(ref)
                    if ref[0] == "tmp" and ref[1] in producer:
                        depends.add(producer[ref[1]])
                return slot_of[ref]

            def ast(node: Node, top: bool = False) -> Node:
                if id(node) in memo:
                    return memo[id(node)]
                if node.op == "BUFFER":
                    out = Node("LOAD", slot(("in", input_pos[id(node.arg)])), (), node.dtype, node.shape)
                elif id(node) in self.stored and not top:
                    load = Node("LOAD", slot(("tmp", temp_of[id(node)])), (), node.dtype, (node.numel,))
                    out = g.reshape(load, node.shape)
                elif node.op == "CONST" and id(node) in self.sig.scalar_slot:
                    out = self._scalar_load(node, slot)
                elif node.op == "RANDOM":
                    pos = len(params)
                    params.extend((random_pos[id(node)], random_pos[id(node)] + 1))
                    out = Node("RANDOM", (pos, pos + 1), (), node.dtype, node.shape)
                else:
                    srcs = tuple(ast(s) for s in node.srcs)
                    out = Node(node.op, node.arg, srcs, node.dtype, node.shape)
                memo[id(node)] = out
                return out

            stores = []
            for target, value, view in stores_spec:
                slot(("tmp", target))
                if view is not None and view[0] == "scatter":
                    view = (view[0], view[1], ast(view[2]), view[3])
                stores.append(KernelStore(target, ast(value, top=view is None and id(value) in self.stored
                                                      and temp_of.get(id(value)) == target), view))
            # ``ast`` holds itself through its closure: a reference cycle that would keep the
            # kernelizer and the graph's buffers (device memory) alive until the garbage
            # collector runs, after ``del`` of the last tensor using them.
            ast = None
            return ScheduledKernel(stores, slots, params, depends, fusion)

        def emit(kernel: ScheduledKernel, merge: bool) -> None:
            index = len(kernels)
            if merge and kernel.stores[0].view is None:
                alone = not self.merge_matmuls and _has_matmul(kernel)
                for k_index in range(len(kernels) - 1, -1, -1):
                    other = kernels[k_index]
                    if (other.stores[0].view is None and other.shape == kernel.shape
                            and composite.ATTENTION not in (other.stores[0].value.op,
                                                            kernel.stores[0].value.op)
                            and not alone and (self.merge_matmuls or not _has_matmul(other))
                            and len(other.stores) + len(kernel.stores) <= MAX_MERGED_STORES
                            and all(d < k_index for d in kernel.depends) and k_index not in kernel.depends
                            and not _writes_loaded(other, kernel)
                            and (other.fusion == kernel.fusion or 0 in (other.fusion, kernel.fusion))):
                        _merge_into(other, kernel)
                        other.fusion = other.fusion or kernel.fusion
                        for store in kernel.stores:
                            producer[store.target] = k_index
                        return
                    if k_index in kernel.depends:
                        break
            kernels.append(kernel)
            for store in kernel.stores:
                producer[store.target] = index

        for node in self.order:
            if id(node) not in self.stored:
                continue
            if node.op in _WRITES:
                base, value = node.srcs[0], node.srcs[-1]
                if id(base) in self.stored and base.op in _WRITES and self.rc[id(base)] == 1:
                    temp = temp_of[id(base)]  # scatter in place: nobody else reads the old value
                else:
                    temp = len(temps)
                    temps.append((node.dtype, node.numel))
                    emit(new_kernel([(temp, base, None)], self.fusion_of(base)), merge=True)
                temp_of[id(node)] = temp
                if node.op == "SETVIEW":
                    view = node.arg
                else:  # entries combined or written in place (codegen/lower_scatter.py)
                    view = ("scatter", node.arg, node.srcs[1], node.shape)
                emit(new_kernel([(temp, value, view)], self.fusion_of(value)), merge=False)
                continue
            temp = len(temps)
            temps.append((node.dtype, node.numel))
            temp_of[id(node)] = temp
            kernel = new_kernel([(temp, node, None)], self.fusion_of(node))
            if node.op == composite.ATTENTION:
                # The other output of the same attention joins its kernel (one pass computes both).
                call = (node.srcs, node.arg[0])
                if call in attention_kernels:
                    k_index = attention_kernels[call]
                    _merge_into(kernels[k_index], kernel)
                    producer[temp] = k_index
                    continue
                attention_kernels[call] = len(kernels)
            emit(kernel, merge=True)

        root_temps = []
        for root in self.roots:
            root = _unreshaped(root)
            if root.op == "BUFFER":
                root_temps.append(-1 - input_pos[id(root.arg)])
            else:
                root_temps.append(temp_of[id(root)])
        last_use: dict[int, int] = {}
        for k_index, kernel in enumerate(kernels):
            for kind, ref in kernel.slots:
                if kind == "tmp":
                    last_use[ref] = k_index
        return Schedule(kernels, temps, root_temps, last_use)


def _has_matmul(kernel: ScheduledKernel) -> bool:
    """Whether one of ``kernel``'s stored values has a matmul-shaped reduce."""
    return any(node.op == "REDUCE" and matmul_operands(node) is not None
               for node in g.toposort([store.value for store in kernel.stores]))


def _unreshaped(node: Node) -> Node:
    while node.op == "RESHAPE":
        node = node.srcs[0]
    return node


def _writes_loaded(first: ScheduledKernel, second: ScheduledKernel) -> bool:
    """Whether ``second`` loads a temp that ``first`` writes (then they cannot share a kernel)."""
    written = {s.target for s in first.stores}
    loaded = {ref for kind, ref in second.slots if kind == "tmp"} - {s.target for s in second.stores}
    return not written.isdisjoint(loaded)


def _merge_into(kernel: ScheduledKernel, other: ScheduledKernel) -> None:
    """Append ``other``'s stores to ``kernel``, renumbering ``other``'s slots and params."""
    slot_map: dict[int, int] = {}
    for i, ref in enumerate(other.slots):
        if ref in kernel.slots:
            slot_map[i] = kernel.slots.index(ref)
        else:
            slot_map[i] = len(kernel.slots)
            kernel.slots.append(ref)
    param_base = len(kernel.params)
    kernel.params.extend(other.params)
    memo: dict[int, Node] = {}

    def renumber(node: Node) -> Node:
        if id(node) in memo:
            return memo[id(node)]
        if node.op == "LOAD":
            out = Node("LOAD", slot_map[node.arg], (), node.dtype, node.shape)
        elif node.op == "RANDOM":
            out = Node("RANDOM", (node.arg[0] + param_base, node.arg[1] + param_base), (),
                       node.dtype, node.shape)
        else:
            out = Node(node.op, node.arg, tuple(renumber(s) for s in node.srcs), node.dtype, node.shape)
        memo[id(node)] = out
        return out

    for store in other.stores:
        kernel.stores.append(KernelStore(store.target, renumber(store.value), store.view))
    kernel.depends |= other.depends


# A reduce of at least this many elements into at most SPLIT_MAX_OUTPUTS outputs is split in
# two: partial reduces over SPLIT_GROUPS groups (parallel over threads or work groups), then
# a short reduce of the partials. Without it one thread (or one work group) does all the work.
SPLIT_MIN_EXTENT = 1 << 15
SPLIT_MAX_OUTPUTS = 16
SPLIT_GROUPS = 256


def _split_reduce(node: Node) -> Node:
    rop, axes = node.arg
    src = node.srcs[0]
    extent = math.prod(src.shape[a] for a in axes)
    if extent < SPLIT_MIN_EXTENT or node.numel > SPLIT_MAX_OUTPUTS:
        return node
    groups = SPLIT_GROUPS
    while extent % groups:
        groups //= 2
    if groups < 16:
        return node
    keep = [i for i in range(len(src.shape)) if i not in axes]
    kept = tuple(src.shape[i] for i in keep)
    flat = g.reshape(g.permute(src, tuple(keep) + tuple(axes)), kept + (groups, extent // groups))
    partial = g.reduce(rop, flat, (len(keep) + 1,))
    # The permute after the partial reduce is a movement after a reduce: the partials are
    # stored, so the two stages are two kernels.
    swapped = g.permute(partial, tuple(range(len(keep))) + (len(keep) + 1, len(keep)))
    total = g.reduce(rop, swapped, (len(keep) + 1,))
    return g.reshape(total, node.shape)


def rewrite(roots: list[Node], keep=None, order: list[Node] | None = None) -> list[Node]:
    """The graph rewrites applied before kernelizing: composites expanded into primitives
    (lazy/composite.py) unless ``keep`` (the device's choice) keeps one whole, then large reduces
    split (each a pass, sources before users; the second sees the reduces the first made).
    ``order``: ``toposort(roots)`` where the caller has it; ``roots`` itself comes back when no
    pass changed the graph (so that the caller's order still holds)."""
    expanded = g.rewrite_bottom_up(roots, lambda node: composite.expand(node, keep), composite.EXPANDED,
                                   order)
    return g.rewrite_bottom_up(expanded, _split_reduce, g.REDUCE, order if expanded is roots else None)


def kernelize(roots: list[Node], signature: GraphSignature,
              tile: MatmulTile | None = DEFAULT_TILE, keep=None) -> Schedule:
    """The kernels of the graph ``roots`` for a device whose matmul register tile is ``tile``
    (None: matmul operands are read in place, never packed) and that computes the composite
    nodes ``keep`` accepts whole."""
    order = g.toposort(roots)
    rewritten = rewrite(roots, keep, order)
    packed, pinned = pack_matmul_operands(rewritten, tile, order if rewritten is roots else None)
    order = order if packed is roots else None
    return Kernelizer(packed, signature, pinned, merge_matmuls=tile is not None, order=order).build()
