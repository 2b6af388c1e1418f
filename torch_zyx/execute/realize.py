"""Realization: run the kernelizer, codegen and runtime for lazy values that must exist now.

The executor between the lazy graph and the devices (contexts.py). ``realize(roots)`` looks the graph's
structure up in the schedule cache (building kernels and programs only on a miss), binds the
graph's buffers and random seeds, allocates temporaries from the device pool, launches every
kernel with the events of the buffers it touches (ASYNC EVENT RULES) and returns one buffer
per root. Nothing here knows about torch.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time

from .. import dtypes
from ..codegen.generalize import generalize
from ..codegen.lower import kept_composites, lower
from ..config import CONFIG, DEBUG_LAUNCHES, DEBUG_PERF, DEBUG_SCHEDULE
from ..counters import bump
from ..lazy import graph as g
from ..lazy.graph import Node
from ..lazy.kernelize import GraphSignature, Schedule, kernelize
from ..memory.buffer import Buffer, ConstantBuffer
from . import autotune
from .cache import BoundedCache
from .contexts import DeviceContext

log = logging.getLogger("torch_zyx")


class Plan:
    """A cached schedule with its compiled programs, and what a realization of it needs ready
    (every realization of the key pays for what is computed here otherwise).

    A realization's buffers form one list: the graph's input buffers (``sig.buffers``), then
    the temporaries, then one scalar buffer per scalar group; ``launches`` refer to them by
    index: (program, loop IR, slot indices, indices of the slots the event table tracks (not
    the scalar buffers: see ConstantBuffer), random parameter indices)."""

    def __init__(self, schedule: Schedule, programs: list, kernels_ir: list, n_inputs: int,
                 n_scalars: int = 0, literals: list | None = None, lower_keys: list | None = None):
        self.schedule = schedule
        self.programs = programs
        self.kernels_ir = kernels_ir
        self.temps = schedule.temps
        self.temp_bytes = sum(dtype.itemsize * numel for dtype, numel in schedule.temps)
        self.n_inputs, self.n_scalars = n_inputs, n_scalars
        self.lower_keys = lower_keys
        # Per kernel: its literals' buffer where its program is size-generic (codegen/generalize.py),
        # else None. Those buffers follow the scalar buffers in a realization's list.
        self.literals = literals or [None] * len(programs)
        self.literal_buffers = [buffer for buffer in self.literals if buffer is not None]
        self._set_launches()
        # Root ref < 0: input buffer -1 - ref.
        self.root_slots = tuple(-1 - ref if ref < 0 else n_inputs + ref for ref in schedule.root_temps)
        # Launches so far while a program is still compiled unoptimized (``launch_plan``).
        self.quick_runs = 0 if any(getattr(p, "quick", False) for p in programs) else None

    def _set_launches(self) -> None:
        schedule, n_inputs = self.schedule, self.n_inputs
        first = {"in": 0, "tmp": n_inputs, "scalars": n_inputs + len(schedule.temps)}
        literal_slot = first["scalars"] + self.n_scalars
        self.launches = []
        for kernel, program, loop, literals in zip(schedule.kernels, self.programs, self.kernels_ir,
                                                   self.literals):
            slots = tuple(first[kind] + ref for kind, ref in kernel.slots)
            if literals is not None:
                slots += (literal_slot,)
                literal_slot += 1
            tracked = tuple(first[kind] + ref for kind, ref in kernel.slots if kind != "scalars")
            self.launches.append((program, loop, slots, tracked, tuple(kernel.params)))
        # The launches as one call of the device's runtime (``plan_steps``, ``run_steps``), when
        # it takes them so; found at the first launch. They then wait for the events of all the
        # buffers they touch and record one event for all of them.
        self.steps: tuple | None | object = _UNKNOWN
        self.tracked = tuple(sorted({i for launch in self.launches for i in launch[3]}))

    def runs_to_specialize(self) -> int:
        """Launches after which ``specialize`` pays: ``QUICK_RUNS``, doubled for every
        ``SIZES_PER_DOUBLING`` sizes a size-generic program of the plan was specialized for
        already. Sizes that keep changing (a loop over shapes run a few times) then compile a
        bounded number of optimized programs instead of one per size and kernel; a training
        loop's few sizes per program specialize at ``QUICK_RUNS`` as before."""
        made = max((_specializations.get(program.name, 0) for program, literals
                    in zip(self.programs, self.literals) if literals is not None), default=0)
        return QUICK_RUNS << min(made // SIZES_PER_DOUBLING, 30)

    def specialize(self, device: DeviceContext) -> None:
        """The plan's quick programs optimized: its size-generic ones replaced by programs of
        their own sizes (compiled with the passes), the others compiled again with the passes."""
        for k, literals in enumerate(self.literals):
            if literals is None:
                self.programs[k].upgrade()
            else:
                generic_name = self.programs[k].name
                _specializations[generic_name] = _specializations.get(generic_name, 0) + 1
                loop = self.kernels_ir[k]
                self.programs[k] = _program(device, loop, specializing=True)
                # Later plans with this kernel take the specialized program at once.
                if self.lower_keys is not None:
                    _lowered[self.lower_keys[k]] = (loop, self.programs[k], None)
        self.literals = [None] * len(self.programs)
        self.literal_buffers = []
        self._set_launches()  # (the steps held the unoptimized entry addresses)


_UNKNOWN = object()
# Launches of a plan after which its unoptimized (quick) programs are compiled optimized: a plan
# run once or twice (a new shape, a test) never pays the optimizer, one in a loop does from its
# third run (the benchmarks' warm-up runs it that often).
QUICK_RUNS = 3
# Sizes a size-generic program is specialized for before the runs that ask for one more double
# (``Plan.runs_to_specialize``).
SIZES_PER_DOUBLING = 8
# (device, slot dtypes, stores' ASTs) → (loop IR, program): lowering is the costly part of a miss.
_lowered: dict[tuple, tuple] = BoundedCache(2 * CONFIG.cache_entries)
_plans: dict[tuple, Plan] = BoundedCache(CONFIG.cache_entries)
# Size-generic program name → how many specialized programs were compiled from it.
_specializations: dict[str, int] = BoundedCache(2 * CONFIG.cache_entries)


def _build_plan(device: DeviceContext, roots: list[Node], sig: GraphSignature, generic: bool = True) -> Plan:
    """``generic``: kernels the runtime compiles quick may take size-generic programs (see
    codegen/generalize.py), whose literals' buffers the plan holds."""
    bump("kernelizer_runs")
    # Block-tiled matmuls stage their operands in shared memory: no packed panels to read.
    lowering = device.lowering
    schedule = kernelize(roots, sig, None if lowering.block_tiles else lowering.matmul_tile,
                         kept_composites(lowering))
    programs, kernels_ir, literals, lower_keys = [], [], [], []
    for k_index, kernel in enumerate(schedule.kernels):
        dtypes_ = []
        for kind, ref in kernel.slots:
            if kind == "in":
                dtypes_.append(sig.buffers[ref].dtype)
            elif kind == "scalars":
                dtypes_.append(sig.scalar_dtypes[ref])
            else:
                dtypes_.append(schedule.temps[ref][0])
        if CONFIG.debug & DEBUG_SCHEDULE:
            print(f"zyx schedule kernel {k_index}: shape {kernel.shape}, slots {kernel.slots}, "
                  f"stores {[s.target for s in kernel.stores]}")
            for store in kernel.stores:
                print(f"    store t{store.target} view={store.view} <- {_ast_text(store.value)}")
        # Nodes are hash-consed, so the same kernel in another graph (the next training step
        # in one realization, or a new graph shape) has the very same AST objects: lower once.
        lower_key = (device.index, tuple(dtypes_), len(kernel.slots), tuple(
            (kernel.slots.index(("tmp", st.target)), st.value, st.view) for st in kernel.stores))
        cached = _lowered.get(lower_key)
        if cached is None or (cached[2] is not None and not generic):
            cached = _lowered[lower_key] = _lowered_kernel(device, kernel, dtypes_, sig, schedule, generic)
        loop, program, values = cached
        programs.append(program)
        kernels_ir.append(loop)
        literals.append(None if values is None else _literal_buffer(device, values))
        lower_keys.append(lower_key)
    return Plan(schedule, programs, kernels_ir, len(sig.buffers), len(sig.scalar_dtypes), literals,
                lower_keys)


def _lowered_kernel(device: DeviceContext, kernel, dtypes_: list, sig: GraphSignature, schedule: Schedule,
                    generic: bool) -> tuple:
    """(loop IR, program, literal values or None) of one scheduled kernel. A kernel the runtime
    compiles quick (little work) takes a size-generic program where it has literals to read
    (``generalize``): kernels that differ only in sizes then share one program and one compile."""
    if CONFIG.autotune:
        loop, source = autotune.tuned(device, kernel, dtypes_, sig, schedule)
    else:
        loop = lower(kernel, "zyx_kernel", dtypes_, device.lowering)
        source = None
    quick_compile = getattr(device.runtime, "quick_compile", None)
    quick = bool(quick_compile and quick_compile(loop.work, loop.global_size))
    if quick and generic and source is None:
        general = generalize(loop)
        if general is not None:
            generic_loop, values = general
            program = _program(device, generic_loop, quick=True)
            loop.name = generic_loop.name
            return loop, program, values
    return loop, _program(device, loop, source, quick=quick), None


def _program(device: DeviceContext, loop, source: str | None = None, quick: bool = False,
             specializing: bool = False):
    """The device's program for ``loop`` (rendered here unless ``source`` is given), named after
    its source so that identical kernels of different graphs share one program; ``loop.name``
    is set to that name."""
    if source is None:
        loop.name = "zyx_kernel"
        source = device.render(loop, **device.render_options)
    loop.name = "k_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    # "zyx_kernel(" names the kernel in every renderer's output (LLVM "@zyx_kernel(", C "zyx_kernel(").
    return device.program(loop.name, source.replace("zyx_kernel(", f"{loop.name}("), quick=quick,
                          specializing=specializing)


def _literal_buffer(device: DeviceContext, values: tuple) -> ConstantBuffer:
    """The int64 ``values`` of a size-generic kernel's literals on ``device``."""
    return ConstantBuffer(device, dtypes.int64, struct.pack(f"<{len(values)}q", *values))


def _ast_text(node: Node, depth: int = 0) -> str:
    if depth > 6:
        return "..."
    if not node.srcs:
        return f"{node.op}({node.arg})"
    inner = ", ".join(_ast_text(s, depth + 1) for s in node.srcs)
    return f"{node.op}[{node.arg}]({inner})" if node.arg is not None else f"{node.op}({inner})"


def _launch_debugged(program, loop, args: list, params: list, wait: list, debug: int):
    """``program.launch`` with what ``ZYX_DEBUG`` asks to show about it (launches, perf)."""
    perf = debug & DEBUG_PERF
    start = time.perf_counter() if perf else 0.0
    event = program.launch(args, params, loop.global_size, loop.work, wait)
    if debug & DEBUG_LAUNCHES:
        print(f"zyx launch {program.name} global={loop.global_size} buffers={[b.id for b in args]}")
    if perf:
        event.wait()
        elapsed = time.perf_counter() - start
        print(f"zyx perf {program.name}: {elapsed * 1e6:9.1f} us  "
              f"{loop.flops / elapsed / 1e9:8.2f} GFLOP/s "
              f"{loop.bytes / elapsed / 1e9:8.2f} GB/s")
    return event


def realize(roots: list[Node], device: DeviceContext, outputs: dict | None = None) -> list[Buffer]:
    """Buffers holding the values of ``roots`` (flat nodes), computing what is needed.

    ``outputs``: root position → memory the caller owns (an ``ExternalBuffer`` of the root's
    dtype and size) that the plan writes the root's value into instead of a temporary, where a
    kernel of the plan computes that value and no other root shares it (else a temporary as
    usual: the caller compares what is returned)."""
    for root in roots:
        if root.op != "BUFFER":
            break
    else:
        return [r.arg for r in roots]
    bump("realizations")
    g.PendingCounter.count = 0
    sig = GraphSignature(roots)
    # Plans hold compiled programs, so the same graph on another device is another plan.
    plan_key = (device.index, sig.key)
    plan = _plans.get(plan_key)
    if plan is None:
        bump("schedule_cache_misses")
        plan = _build_plan(device, roots, sig)
        _plans[plan_key] = plan
    else:
        bump("schedule_cache_hits")
    # This realization's buffers, in the order the plan's indices expect (see Plan).
    own = _own_outputs(plan, outputs, len(sig.buffers)) if outputs else {}
    buffers = sig.buffers + [own.get(j) or Buffer(device, dtype, numel) for j, (dtype, numel)
                             in enumerate(plan.temps)]
    if plan.temp_bytes:
        bump("bytes_allocated", plan.temp_bytes - sum(b.nbytes for b in own.values()))
    for dtype, values in zip(sig.scalar_dtypes, sig.scalar_values):
        buffers.append(device.constant(dtype, values))
    buffers.extend(plan.literal_buffers)
    launch_plan(plan, device, buffers, sig.random_args)
    return [buffers[i] for i in plan.root_slots]


def _own_outputs(plan: Plan, outputs: dict, n_inputs: int) -> dict:
    """Temporary index → the caller's buffer standing in for it (see ``realize``)."""
    own = {}
    for position, buffer in outputs.items():
        slot = plan.root_slots[position]
        temp = slot - n_inputs
        if temp < 0 or plan.root_slots.count(slot) > 1 or plan.temps[temp] != (buffer.dtype, buffer.numel):
            continue
        own[temp] = buffer
    return own


def build_plan(device: DeviceContext, roots: list[Node], sig: GraphSignature) -> Plan:
    """A plan for ``roots`` on ``device`` outside the schedule cache (a compiled graph keeps its
    own: compile/plan.py)."""
    return _build_plan(device, roots, sig, generic=False)


def plan_steps(plan: Plan, device: DeviceContext) -> tuple | None:
    """``plan``'s launches as one call of ``device``'s runtime (its ``plan_steps``), or None when
    it launches them one by one."""
    steps = plan.steps
    if steps is _UNKNOWN:
        find = getattr(device.runtime, "plan_steps", None)
        steps = plan.steps = find([(program, loop, slots, params) for program, loop, slots, _tracked, params
                                   in plan.launches]) if find else None
    return steps


def launch_plan(plan: Plan, device: DeviceContext, buffers: list, random_args: list) -> None:
    """Launch every kernel of ``plan`` over ``buffers`` (the inputs, temporaries and scalar
    buffers in the plan's order), each after the events of the buffers it touches and recording
    its own for them (ASYNC EVENT RULES)."""
    events = device.events
    debug = CONFIG.debug
    if plan.quick_runs is not None:
        plan.quick_runs += 1
        if plan.quick_runs >= QUICK_RUNS and plan.quick_runs >= plan.runs_to_specialize():
            # A plan that keeps running (a training step, a loop): its kernels optimized now.
            plan.specialize(device)
            plan.quick_runs = None
    steps = plan_steps(plan, device)
    if steps is not None and not debug:
        # One event for the plan: the launches run in order (one stream, or one after the other
        # on this thread), so the last one's completion covers every buffer they touch.
        ids = [buffers[i].id for i in plan.tracked]
        event = device.runtime.run_steps(steps, [b.raw.ptr for b in buffers], random_args, events.take(ids))
        events.record(ids, event)
        bump("kernels_launched", len(plan.launches))
        return
    for program, loop, slots, tracked, params in plan.launches:
        ids = [buffers[i].id for i in tracked]
        wait = events.take(ids)
        if debug:
            event = _launch_debugged(program, loop, [buffers[i] for i in slots],
                                     [random_args[p] for p in params] if params else [], wait, debug)
        else:
            event = program.launch([buffers[i] for i in slots],
                                   [random_args[p] for p in params] if params else [],
                                   loop.global_size, loop.work, wait)
        events.record(ids, event)
    bump("kernels_launched", len(plan.launches))
