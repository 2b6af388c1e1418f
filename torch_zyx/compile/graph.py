"""One FX graph compiled into zyx plans: traced once on placeholders, launched per call.

The compile layer (above dispatch). ``CompiledGraph(gm)`` is what the Dynamo backend returns for
each (forward or backward) graph AOTAutograd gives it. At the first call with a given binding
(the inputs' devices, dtypes, shapes, strides, offsets and aliasing, and the values of integer
inputs), the graph runs once through zyx's own dispatch on placeholder tensors: zyx tensors
whose storages hold ``BUFFER`` nodes of ``SlotBuffer``s instead of memory. What it records is
the whole graph as lazy nodes; the executor kernelizes it once into a plan (fusion decides the
kernels over the whole graph). A call then only binds the inputs' buffers to the plan's slots,
launches the plan's kernels and wraps the outputs: no per-op dispatch, lowering, graph building
or schedule lookup.

Inputs on a zyx device bind their storages' buffers. torch's own tensors bind their memory
(``ExternalBuffer``): CPU tensors on zyx's CPU backend, ``cuda`` tensors on zyx's CUDA device of
the same GPU, ordered after and before the work of torch's current stream there. The outputs
are tensors of the inputs' device that the kernels wrote in place, so a model compiled with
``backend="zyx"`` never copies.

A graph that needs a value while it is traced (a data-dependent shape, ``item()``, an op zyx
runs on the CPU) cannot be one plan: it runs op by op through zyx's dispatch instead, as in
eager mode, counted in ``counters()["compile_fallbacks"]`` (``ZYX_CPU_FALLBACK=0`` raises).
"""

from __future__ import annotations

import itertools
import logging
import math
import weakref
from collections import OrderedDict

import torch
from torch._higher_order_ops.effects import with_effects
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..config import CONFIG, DEBUG_SCHEDULE
from ..counters import bump
from ..execute.contexts import devices
from ..execute.realize import build_plan, launch_plan, plan_steps
from ..lazy import graph as g
from ..lazy.kernelize import GraphSignature
from ..memory.buffer import Buffer, ExternalBuffer
from ..memory.events import wait_all
from ..record import random
from ..record.checks import IndexCheck, add_checks
from ..record.pending import TracingRealization, tracing
from ..record.tensor import Storage, ZyxTensor, meta
from ..record.transfer import ZYX_TO_TORCH, zdtype

log = logging.getLogger("torch_zyx")

# Plans kept per compiled graph, least recently used dropped: one per binding (a dimension that
# changes from call to call gets one plan per size, up to this many).
MAX_PLANS = 8
# Memory a kernel may read or write in place: the LLVM renderer assumes 64-byte aligned buffers
# (codegen/llvm.py), the CUDA one 16-byte aligned vector loads; other CPU storages are copied
# into the pool (a ``cuda`` tensor's allocation is always aligned: torch's allocator gives 512).
ALIGNMENT = 64

_slot_ids = itertools.count()


class SlotBuffer:
    """What a placeholder's ``BUFFER`` node holds while a graph is traced: a plan slot's dtype and
    size, no memory. Reading it is a value needed at trace time."""

    __slots__ = ("__weakref__", "device", "dtype", "id", "numel")

    def __init__(self, device, dtype, numel: int):
        self.id = -1 - next(_slot_ids)
        self.device, self.dtype, self.numel = device, dtype, numel

    @property
    def raw(self):
        raise TracingRealization("zyx: a compiled graph read an input's values while it was traced")

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


class _Binding:
    """How one call's arguments map to a traced graph (its key in ``CompiledGraph.plans``)."""

    @staticmethod
    def key(args) -> tuple:
        parts = []
        seen: dict[int, int] = {}
        for i, a in enumerate(args):
            if a.__class__ is ZyxTensor or isinstance(a, ZyxTensor):
                # (the metadata zyx keeps on the tensor: cheaper than asking for sizes and strides)
                storage = a._storage
                parts.append((storage.device, storage.dtype, a._zmeta or meta(a), storage.numel,
                              seen.setdefault(id(storage), i)))
            elif isinstance(a, torch.Tensor):
                cpu = a.is_cpu
                if not (cpu or a.is_cuda):
                    raise NotImplementedError(f"zyx: a compiled graph given a {a.device.type} tensor")
                if cpu and a.dim() == 0 and _beside_device_tensors(args):
                    parts.append(("s", a.dtype))  # a CPU scalar beside device tensors (_Plan.run)
                    continue
                untyped = a.untyped_storage()
                ptr = untyped.data_ptr()
                # (torch.Size is a tuple: hashable as it is)
                parts.append((a.device, a.dtype, a.shape, a.stride(), a.storage_offset(), untyped.nbytes(),
                              seen.setdefault(ptr, i), ptr % ALIGNMENT == 0))
            elif isinstance(a, (int, float, bool)) or a is None:
                parts.append(("v", type(a), a))
            else:
                raise NotImplementedError(f"zyx: a compiled graph input of type {type(a).__name__}")
        return tuple(parts)


def _beside_device_tensors(args) -> bool:
    """Whether ``args`` hold a zyx or ``cuda`` tensor: a 0-d CPU tensor beside them is a scalar
    (an optimizer's step count) copied to the device, as torch's kernels read it."""
    return any(isinstance(b, ZyxTensor) or (isinstance(b, torch.Tensor) and b.is_cuda) for b in args)


class _Plan:
    """A traced graph's plan and how to bind a call to it and read its results.

    ``bound``: the torch device (``cpu``, ``cuda:N``) whose tensors the call binds in place and
    returns, or None for zyx tensors."""

    def __init__(self, device, bound: torch.device | None, plan, sig, slot_of_input: list, outputs: list,
                 spec, random_counts: list[int], checks: list, mutated: list):
        self.device, self.bound = device, bound
        self.plan, self.sig = plan, sig
        # Per sig.buffers entry: the input index whose storage it is, or None (a constant's buffer).
        self.slot_of_input = slot_of_input
        # Per flat output: ("value", python value) | ("input", input index, meta) |
        # ("root", root index, meta) where meta = (shape, strides, offset).
        self.outputs, self.spec = outputs, spec
        self.random_counts = random_counts
        # (root index of its first position, root index of its index values, error, message, numel)
        self.checks = checks
        # (input index, root index): inputs the graph wrote (their storages take the root's value).
        self.mutated = mutated
        n_in = len(sig.buffers)
        self.constants = [device.constant(dtype, values)
                          for dtype, values in zip(sig.scalar_dtypes, sig.scalar_values)]
        self.temps = [(n_in + i, dtype, numel) for i, (dtype, numel) in enumerate(plan.temps)]
        self.root_temp = {slot: k for k, slot in enumerate(plan.root_slots) if slot >= n_in}
        # The results' container when it is a flat tuple or list (built directly: tree_unflatten
        # costs microseconds a call), and per output whether it is its root's whole flat tensor
        # in order (returned as it is, or viewed, rather than through as_strided).
        self.container = _flat_container(spec)
        numel_of = {self.root_temp[slot]: numel for slot, _dtype, numel in self.temps
                    if slot in self.root_temp}
        self.whole = [out[0] == "root" and _is_whole(out[2], numel_of.get(out[1])) for out in outputs]
        # Pool bytes a call allocates for its outputs (torch tensors': fresh torch tensors instead).
        self.output_bytes = 0 if bound is not None else sum(
            dtype.itemsize * numel for slot, dtype, numel in self.temps if slot in self.root_temp)
        self.scratch: dict | None = None  # slot -> Buffer, from the first call on
        self.fixed = [None if index is not None else buffer
                      for index, buffer in zip(slot_of_input, sig.buffers)]
        # A plan of torch ``cuda`` tensors launched straight on torch's stream, decided at the
        # first call: a _StreamLaunch, False (the general path), or None (not decided yet).
        self.on_stream: _StreamLaunch | bool | None = \
            None if bound is not None and bound.type == "cuda" else False

    def run(self, args: list):
        on_stream = self.on_stream
        if on_stream is None:
            on_stream = self.on_stream = _StreamLaunch.of(self, args) or False
        if on_stream:
            return on_stream.run(self, args)
        device, plan, bound = self.device, self.plan, self.bound
        buffers: list = []
        for index, fixed in zip(self.slot_of_input, self.fixed):
            if index is None:
                buffers.append(fixed)
                continue
            a = args[index]
            if isinstance(a, ZyxTensor):
                buffers.append(a._storage.realize())
            elif bound is not None and a.device == bound:
                buffers.append(_tensor_memory(device, a))
            else:
                # A CPU scalar beside device tensors (an optimizer's step count): its value of this
                # call, copied to the device (8 bytes) rather than baked into the plan.
                buffer = Buffer(device, zdtype(a.dtype), 1)
                buffer.write_from_host(a.data_ptr(), a, fresh=True)
                buffers.append(buffer)
        outputs_torch: dict[int, torch.Tensor] = {}
        scratch = self.scratch
        if scratch is None:
            # The temporaries no output escapes with live from call to call: the event table
            # orders a call's kernels after the previous call's uses of each (ASYNC EVENT RULES),
            # so reusing them is safe and saves an allocation and a free per kernel per call.
            scratch = self.scratch = {slot: Buffer(device, dtype, numel) for slot, dtype, numel in self.temps
                                      if slot not in self.root_temp}
            bump("bytes_allocated", sum(b.nbytes for b in scratch.values()))
        for slot, dtype, numel in self.temps:
            buffer = scratch.get(slot)
            if buffer is not None:
                buffers.append(buffer)
            elif bound is not None:
                flat = torch.empty(numel, dtype=ZYX_TO_TORCH[dtype], device=bound)
                outputs_torch[self.root_temp[slot]] = flat
                buffers.append(ExternalBuffer.over(device, dtype, numel, flat.data_ptr(), flat))
            else:
                buffers.append(Buffer(device, dtype, numel))
        buffers.extend(self.constants)
        if self.output_bytes:
            bump("bytes_allocated", self.output_bytes)
        random_args = []
        for count in self.random_counts:
            random_args.extend(random.draw(device.index, count))
        if bound is not None and bound.type == "cuda":
            # In the order of torch's current stream: after what wrote the inputs, before what
            # reads the outputs (or reuses the inputs' memory once freed).
            stream = torch.cuda.current_stream(bound).cuda_stream
            device.pool.follow(stream)
            launch_plan(plan, device, buffers, random_args)
            device.pool.lead(stream, device.events.take([b.id for b in buffers]))
        else:
            launch_plan(plan, device, buffers, random_args)
        roots = [buffers[i] for i in plan.root_slots]
        if bound is not None:
            if bound.type == "cpu":
                # The caller may read the results or change the inputs as soon as this returns.
                wait_all(device.events.take([b.id for b in buffers]))
                device.settle()
            for f, i, error, message, numel in self.checks:
                # As CPU torch's kernels check: raised by the call that read the bad entry (on a
                # GPU this reads the result back: a synchronization, only in graphs that index).
                position = int(_cpu_copy(device, roots[f])[0])
                if position < numel:
                    value = int(_cpu_copy(device, roots[i])[position])
                    raise error(message.format(index=value, position=position))
            for input_index, k in self.mutated:
                dst = args[input_index]
                src = outputs_torch.get(k)
                if src is None:
                    src = _cpu_copy(device, roots[k])
                dst.untyped_storage().copy_(src.untyped_storage())
        else:
            device.settle()
            for input_index, k in self.mutated:
                target = args[input_index]
                if not isinstance(target, ZyxTensor):  # a CPU scalar
                    target.copy_(_cpu_copy(device, roots[k]).view(()))
                    continue
                storage = target._storage
                storage._value = g.buffer(roots[k], storage.dtype, storage.numel)
                storage._shaped = None
            if self.checks:
                add_checks([IndexCheck(device, g.buffer(roots[i], roots[i].dtype, numel),
                                       g.buffer(roots[f], roots[f].dtype, 1), error, message)
                            for f, i, error, message, numel in self.checks])
        return self.results(args, outputs_torch, roots)

    def results(self, args: list, outputs_torch: dict, roots: list | None):
        """The call's outputs (as the traced graph returned them): Python values, views of the
        inputs, and views of the roots (``outputs_torch``' tensors for bound torch tensors)."""
        device, bound = self.device, self.bound
        storages: dict[int, object] = {}
        flat = []
        for out, whole in zip(self.outputs, self.whole):
            kind = out[0]
            if kind == "value":
                flat.append(out[1])
            elif kind == "input":
                _, index, (shape, strides, offset) = out
                flat.append(args[index].as_strided(shape, strides, offset))
            else:
                _, k, (shape, strides, offset) = out
                if bound is not None:
                    base = outputs_torch.get(k)
                    if base is None:  # a root that is an input's buffer
                        base = _cpu_copy(device, roots[k]).to(bound)
                    if whole:
                        flat.append(base if len(shape) == 1 else base.view(shape))
                    else:
                        flat.append(base.as_strided(shape, strides, offset))
                    continue
                storage = storages.get(k)
                if storage is None:
                    buffer = roots[k]
                    storage = storages[k] = Storage(g.buffer(buffer, buffer.dtype, buffer.numel), device)
                flat.append(ZyxTensor(storage, shape, strides, offset))
        container = self.container
        if container is list:
            return flat
        return tuple(flat) if container is tuple else tree_unflatten(flat, self.spec)


class _StreamLaunch:
    """A plan of torch ``cuda`` tensors alone launched on torch's current stream, as torch's own
    kernels are: no events, no buffer objects, one driver call per kernel. The inputs' and the
    fresh outputs' addresses go into a list of the plan's device pointers where the temporaries
    and constants have theirs.

    Ordering: torch's stream orders the launches after what wrote the inputs and before what
    reads the outputs. The plan's own memory (temporaries reused from call to call, constants)
    is ordered by it as long as calls stay on one stream; a call on another stream first waits
    for the previous one's. The first call waits for zyx's pending writes of the constants,
    and the plan's memory goes back to zyx's pool only after its last stream's work is done."""

    def __init__(self, plan: _Plan, steps: tuple, inputs: list, outputs: list, pointers: list):
        self.steps, self.kernels = steps, len(plan.plan.launches)
        self.inputs = inputs  # (pointer slot, argument index)
        self.outputs = outputs  # (pointer slot, root index, numel, torch dtype)
        self.pointers = pointers  # per slot: the device pointer, or 0 where a call binds one
        self.index = plan.bound.index
        self.stream: int | None = None  # the stream of the last call
        self.pending: list = []  # zyx's events the first call waits for

    @classmethod
    def of(cls, plan: _Plan, args: list) -> _StreamLaunch | None:
        """The stream launch of ``plan`` for calls bound as ``args`` are, or None when the plan
        needs the general path: kernels launched one by one (``ZYX_DEBUG``), CPU scalars among
        the inputs, checks of index values, or a result that is an input's buffer."""
        device, bound = plan.device, plan.bound
        steps = None if CONFIG.debug else plan_steps(plan.plan, device)
        if steps is None or plan.checks:
            return None
        out_temps = plan.root_temp
        wanted = {out[1] for out in plan.outputs if out[0] == "root"} | {k for _, k in plan.mutated}
        if not wanted <= set(out_temps.values()):
            return None
        inputs, pointers = [], []
        for slot, (index, fixed) in enumerate(zip(plan.slot_of_input, plan.fixed)):
            if index is None:
                pointers.append(fixed.raw.ptr)
                continue
            a = args[index]
            if not (isinstance(a, torch.Tensor) and a.device == bound):
                return None
            inputs.append((slot, index))
            pointers.append(0)
        outputs, scratch = [], []
        for slot, dtype, numel in plan.temps:
            k = out_temps.get(slot)
            if k is None:
                buffer = Buffer(device, dtype, numel)
                scratch.append(buffer)
                pointers.append(buffer.raw.ptr)
            else:
                outputs.append((slot, k, numel, ZYX_TO_TORCH[dtype]))
                pointers.append(0)
        bump("bytes_allocated", sum(b.nbytes for b in scratch))
        pointers.extend(c.raw.ptr for c in plan.constants)
        launch = cls(plan, steps, inputs, outputs, pointers)
        held = [*scratch, *plan.constants, *(f for f in plan.fixed if f is not None)]
        # The constants' and fixed buffers' writes pending on zyx's stream come first.
        launch.pending = device.events.take([b.id for b in held])
        weakref.finalize(plan, _StreamLaunch._release, device.pool, launch, held).atexit = False
        return launch

    @staticmethod
    def _release(pool, launch: _StreamLaunch, held: list) -> None:
        """(The plan died.) Its memory goes back to the pool once its last stream's work is done."""
        if launch.stream is not None:
            try:
                pool.finish(launch.stream)
            except Exception as exc:  # noqa: BLE001  (a dead context at exit: nothing to order)
                log.debug("zyx: finishing a compiled graph's stream: %s", exc)
        held.clear()

    def run(self, plan: _Plan, args: list):
        pointers = self.pointers.copy()
        for slot, index in self.inputs:
            pointers[slot] = args[index].untyped_storage().data_ptr()
        made: dict[int, torch.Tensor] = {}
        device = plan.device
        for slot, k, numel, dtype in self.outputs:
            flat = made[k] = torch.empty(numel, dtype=dtype, device=plan.bound)
            pointers[slot] = flat.data_ptr()
        stream = _current_stream(self.index)
        if stream != self.stream:
            pool = device.pool
            if self.stream is None:
                pool.lead(stream, self.pending)
                self.pending = []
            else:
                pool.chain(self.stream, stream)
            self.stream = stream
        random_args = []
        for count in plan.random_counts:
            random_args.extend(random.draw(device.index, count))
        device.runtime.run_steps_on(stream, self.steps, pointers, random_args)
        bump("kernels_launched", self.kernels)
        for input_index, k in plan.mutated:
            args[input_index].untyped_storage().copy_(made[k].untyped_storage())
        return plan.results(args, made, None)


def _stream_object_handle(index: int) -> int:
    """torch's current stream of GPU ``index`` (a CUstream as an int)."""
    return torch.cuda.current_stream(index).cuda_stream


# A CUDA build of torch answers in one C call (what Inductor's generated code asks).
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_object_handle)


def _flat_container(spec) -> type | None:
    """``tuple`` or ``list`` when the pytree ``spec`` is one of leaves only, else None."""
    if spec.type not in (tuple, list):
        return None
    children = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
    return spec.type if all(child.is_leaf() for child in children) else None


def _is_whole(meta: tuple, numel: int | None) -> bool:
    """Whether an output of geometry ``meta`` (shape, strides, offset) is the whole of a flat
    tensor of ``numel`` elements in row-major order."""
    shape, strides, offset = meta
    if offset or numel is None or math.prod(shape) != numel:
        return False
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def _tensor_memory(device, t: torch.Tensor):
    """The torch tensor ``t``'s whole storage as a buffer of ``device`` (zyx's CPU device for a CPU
    tensor, its CUDA device of that GPU for a ``cuda`` one): its own memory, or a pool copy of a
    CPU storage not aligned as the kernels assume (``torch.frombuffer`` of odd memory; torch's
    allocator aligns to 64 bytes). A plan is never traced for unaligned ``cuda`` memory."""
    untyped = t.untyped_storage()
    dtype = zdtype(t.dtype)
    numel = untyped.nbytes() // dtype.itemsize
    ptr = untyped.data_ptr()
    if ptr % ALIGNMENT:
        buffer = Buffer(device, dtype, numel)
        if numel:
            buffer.write_from_host(ptr, untyped, fresh=True)
        return buffer
    return ExternalBuffer.over(device, dtype, numel, ptr, untyped)


def _cpu_copy(device, buffer) -> torch.Tensor:
    flat = torch.empty(buffer.numel, dtype=ZYX_TO_TORCH[buffer.dtype])
    if buffer.numel:
        device.pool.pool_to_host(buffer.raw, flat.data_ptr(), buffer.nbytes, device.events.take([buffer.id]))
    return flat


# A compiled graph runs below the dispatch modes AOTAutograd's runtime wrapper pushes (its check
# of custom ops' aliasing, _AnalyzeCustomOpInputOutputMode): such a mode declines zyx tensors, and
# a higher-order operator then returns that NotImplemented instead of asking the tensor
# subclass (torch/_ops.py), which broke every graph with an effect token (linalg's error checks).


@with_effects.py_impl(ZyxTensor)
def _with_effects_on_zyx(token, op, *args, **kwargs):
    """``with_effects`` (an op with side effects in a functional graph, ordered by a token) on zyx
    tensors: the op, and the token passed on (zyx runs a graph's ops in recorded order)."""
    out = op(*args, **kwargs)
    return (token, *out) if isinstance(out, tuple) else (token, out)


def _device_for(bound: torch.device):
    """The zyx device that runs a graph of torch ``bound`` tensors in their memory: the CPU
    backend for CPU tensors, the CUDA device of the same GPU for ``cuda`` ones (None if absent)."""
    for context in devices():
        if bound.type == "cpu" and context.runtime.renderer == "llvm":
            return context
        runtime = context.runtime
        if bound.type == "cuda" and runtime.renderer == "cuda" and runtime.ordinal == bound.index:
            return context
    return None


class CompiledGraph:
    """The callable a compiled FX graph becomes (boxed: called with the list of arguments)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str = "graph"):
        self.gm, self.name = gm, name
        # AOTAutograd calls a function with this attribute with the argument list. An instance
        # attribute: the wrappers it puts around the backward copy ``__dict__``, not the class.
        self._boxed_call = True
        self.plans: OrderedDict[tuple, _Plan | None] = OrderedDict()
        if CONFIG.debug & DEBUG_SCHEDULE:
            print(f"zyx compile {name}: FX graph\n{gm.graph}")

    def __call__(self, args: list):
        key = _Binding.key(args)
        plan = self.plans.get(key, False)
        if plan is False:
            plan = self._trace(args)
            self.plans[key] = plan
            if len(self.plans) > MAX_PLANS:
                self.plans.popitem(last=False)
        else:
            self.plans.move_to_end(key)
        if plan is None:
            return self._eager(args)
        return plan.run(args)

    def _device_of(self, args):
        """The zyx device a call runs on and the torch device whose tensors it binds (or None)."""
        device = bound = None
        scalars_beside = _beside_device_tensors(args)
        for a in args:
            if not isinstance(a, torch.Tensor):
                continue
            if scalars_beside and a.device.type == "cpu" and a.dim() == 0:
                continue
            if isinstance(a, ZyxTensor):
                if bound is not None:
                    raise RuntimeError(f"zyx: a compiled graph given both zyx and {bound.type} tensors")
                if device is not None and a._storage.device is not device:
                    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least "
                                       f"two devices, zyx:{device.index} and zyx:{a._storage.device.index}!")
                device = a._storage.device
            else:
                if device is not None and bound is None:
                    raise RuntimeError(f"zyx: a compiled graph given both zyx and {a.device.type} tensors")
                if bound is not None and a.device != bound:
                    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least "
                                       f"two devices, {bound} and {a.device}!")
                bound = a.device
        if bound is not None:
            device = _device_for(bound)
        elif device is None:
            device = devices()[0]
        return device, bound

    def _trace(self, args) -> _Plan | None:
        device, bound = self._device_of(args)
        if device is None:
            backend = "CPU" if bound.type == "cpu" else "CUDA"
            log.warning("zyx: %s: %s tensors need zyx's %s backend (not in ZYX_BACKENDS); it runs "
                        "op by op on the %s", self.name, bound.type, backend, backend)
            return None
        if bound is not None and bound.type == "cuda" and any(
                isinstance(a, torch.Tensor) and a.is_cuda and a.untyped_storage().data_ptr() % ALIGNMENT
                for a in args):
            return self._cannot_trace("a cuda tensor's memory is not 64-byte aligned")
        if any(isinstance(a, torch.Tensor) and a.is_complex() for a in args):
            return self._op_by_op("complex inputs")
        slot_of_input, placeholders, storage_of = [], [], {}
        slot_input: dict[int, int] = {}  # id(SlotBuffer) -> input index
        input_storages: dict[int, int] = {}  # id(placeholder Storage) -> input index
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                placeholders.append(a)
                continue
            if isinstance(a, ZyxTensor):
                key, dtype, numel = ("z", id(a._storage)), a._storage.dtype, a._storage.numel
            elif a.device == bound:
                untyped = a.untyped_storage()
                key, dtype = ("t", untyped.data_ptr(), a.dtype), zdtype(a.dtype)
                numel = untyped.nbytes() // dtype.itemsize
            else:  # a CPU scalar beside device tensors
                key, dtype, numel = ("s", i), zdtype(a.dtype), 1
            storage = storage_of.get(key)
            if storage is None:
                slot = SlotBuffer(device, dtype, numel)
                storage = storage_of[key] = Storage(g.buffer(slot, dtype, numel), device)
                slot_input[id(slot)] = i
                input_storages[id(storage)] = i
            original = ZyxTensor(storage, a.shape, a.stride(), a.storage_offset())
            placeholders.append(original)
        initial = {sid: (storage_of[k]._shaped or storage_of[k]._value)
                   for k in storage_of for sid in [id(storage_of[k])]}
        traced_checks: list = []
        try:
            with torch.no_grad(), _disable_current_modes(), tracing(traced_checks):
                result = self.gm(*placeholders)
        except TracingRealization as exc:
            return self._cannot_trace(exc)
        flat, spec = tree_flatten(result)
        roots: list = []
        root_of: dict[int, int] = {}

        def root(node) -> int:
            k = root_of.get(id(node))
            if k is None:
                k = root_of[id(node)] = len(roots)
                roots.append(node)
            return k

        outputs = []
        for out in flat:
            if not isinstance(out, torch.Tensor):
                outputs.append(("value", out))
                continue
            if not isinstance(out, ZyxTensor):
                return self._cannot_trace(f"an output on {out.device}")
            if out.is_complex():
                return self._op_by_op("complex outputs")
            storage = out._storage
            meta = (tuple(out.shape), out.stride(), out.storage_offset())
            node = storage._shaped or storage._value
            index = input_storages.get(id(storage))
            if index is not None and node is initial[id(storage)]:
                outputs.append(("input", index, meta))
            else:
                outputs.append(("root", root(node), meta))
        mutated = []
        for key, storage in storage_of.items():
            node = storage._shaped or storage._value
            if node is not initial[id(storage)]:
                mutated.append((input_storages[id(storage)], root(node)))
        checks = [(root(check.first), root(check.index), check.error, check.message, check.numel)
                  for check in traced_checks]
        if roots:
            sig = GraphSignature(roots)
            plan = build_plan(device, roots, sig)
        else:  # every output is an input or a Python value
            sig, plan = _EmptySignature(), _EmptyPlan()
        bump("compiled_plans")
        for buffer in sig.buffers:
            slot_of_input.append(slot_input.get(id(buffer)) if isinstance(buffer, SlotBuffer) else None)
        # Each call draws fresh counters for every random node (the traced ones drew once).
        random_counts = [math.prod(node.shape) for node in sig.order if node.op == "RANDOM"]
        if CONFIG.debug & DEBUG_SCHEDULE:
            print(f"zyx compile {self.name}: plan of {len(plan.launches)} kernels over "
                  f"{len(slot_of_input)} bound buffers and {len(plan.temps)} temporaries "
                  f"({f'{bound} tensors on ' if bound is not None else ''}zyx:{device.index})")
        return _Plan(device, bound, plan, sig, slot_of_input, outputs, spec, random_counts, checks, mutated)

    def _cannot_trace(self, reason) -> None:
        if not CONFIG.cpu_fallback:
            raise NotImplementedError(f"zyx: {self.name} cannot be compiled into one plan ({reason}) and "
                                      "ZYX_CPU_FALLBACK=0") from (reason if isinstance(reason, Exception) else None)
        log.warning("zyx: %s cannot be compiled into one plan (%s); it runs op by op", self.name, reason)

    def _op_by_op(self, reason: str) -> None:
        """A graph that runs op by op through zyx's own lowerings (a plan binds buffers of real
        dtypes: complex tensors are pairs of them, record/complex.py), as eager code would."""
        log.info("zyx: %s runs op by op on zyx (%s)", self.name, reason)

    def _eager(self, args):
        """The graph op by op: through zyx's dispatch for zyx tensors (each op lowered, or run on
        the CPU and counted, as in eager mode), by torch for its own tensors."""
        bump("compile_fallbacks")
        with torch.no_grad(), _disable_current_modes():
            return self.gm(*args)


class _EmptyPlan:
    """The plan of a graph whose outputs are all inputs or Python values: nothing to launch."""

    launches = temps = root_slots = tracked = programs = ()
    steps = None  # (launch_plan: no runtime steps)
    quick_runs = None  # (no programs to optimize)


class _EmptySignature:
    buffers = order = scalar_dtypes = scalar_values = ()

