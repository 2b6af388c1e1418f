"""Dispatch: aten calls on zyx tensors → lowerings, decompositions or (last resort) the CPU.

Stage 1 of the flow. ``ZyxTensor.__torch_dispatch__`` lands here. Order of resolution:
  1. a lowering registered for the exact overload (``ops.registry.LOWERINGS``);
  2. in-place (``op_``) and ``out=`` forms of a lowered functional op: compute, then write
     into the destination's storage region (tensor.write);
  3. the op's own CompositeImplicitAutograd kernel, else a PyTorch decomposition
     (``torch._decomp``) into ops that are lowered, else (a custom op outside aten) its
     device-generic CompositeExplicitAutograd kernel;
  4. CPU fallback: copy inputs to CPU, run there, copy results back — counted, warned once,
     or ``NotImplementedError`` when ``ZYX_CPU_FALLBACK=0``.
This module also registers the factory kernels that never reach the Python key.
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch
from torch._decomp import decomposition_table
from torch.utils._pytree import tree_map

from .config import CONFIG
from .counters import bump
from .ops import argument_checks, complex, registry, unsigned
from .ops.complex.base import check_complex32, is_complex
from .record import overlap, random
from .record.complex import complex32_seen
from .record.pending import defer_error, reraise_deferred
from .record.tensor import ZyxTensor, read, set_dispatcher, wrap, write
from .record.transfer import complex_seen, from_cpu, to_cpu

log = logging.getLogger("torch_zyx")
aten = torch.ops.aten
_LOWERING_OF = registry.LOWERINGS.by_name  # overload._name → lowering (see registry.LoweringTable)
_PAIR_OF = registry.LOWERINGS.pairs  # overload._name → its lowering's two-operand form
_COMPLEX_OF = complex.COMPLEX.by_name  # the lowerings of ops involving complex values (ops/complex/)
_warned: set[str] = set()

# Ops whose decomposition is worse than the CPU (none yet) or wrong for us are skipped here.
_NO_DECOMPOSE: set = set()


@functools.cache
def _functional_of(func):
    """The functional overload computing what in-place/out ``func`` writes, or None."""
    schema = func._schema
    name = schema.name.split("::")[-1]
    if func._overloadname == "out" or any(a.is_out for a in schema.arguments):
        base = name
    elif name.endswith("_") and not name.endswith("__"):
        base = name[:-1]
    else:
        return None
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    wanted = [a.name for a in schema.arguments if not a.is_out]
    if base != name:  # in-place: same arguments, usually the same overload name
        # (not always: floor_divide_.Tensor computes floor_divide.default)
        candidates = [func._overloadname] + packet.overloads()
    else:
        candidates = packet.overloads()
    for overload in candidates:
        candidate = getattr(packet, overload, None)
        if candidate is None or candidate._schema.is_mutable:
            continue
        names = [a.name for a in candidate._schema.arguments]
        if names == wanted:
            return candidate
    return None


@functools.cache
def _out_names(func) -> frozenset:
    """Names of ``func``'s out= arguments (walking a schema costs ~3 us: once per op)."""
    return frozenset(a.name for a in func._schema.arguments if a.is_out)


def _out_args(func, kwargs):
    return [kwargs[a.name] for a in func._schema.arguments if a.is_out and a.name in kwargs]


def _resize_out(dst, value, stacklevel: int = 5) -> None:
    """Resize an ``out`` tensor to ``value``'s shape when they differ, as ATen does (warning
    when it had elements, at the user's call: ``stacklevel`` frames up)."""
    if isinstance(dst, ZyxTensor) and tuple(dst.shape) != tuple(value.shape):
        if dst.numel() != 0:
            warnings.warn("An output with one or more elements was resized since it had shape "
                          f"{list(dst.shape)}, which does not match the required output shape "
                          f"{list(value.shape)}.", UserWarning, stacklevel=stacklevel)
        dst.resize_(value.shape)


def _assign(dst, value) -> None:
    """Write ``value`` (tensor) into ``dst``, resizing an empty or differently shaped ``out``."""
    if isinstance(dst, ZyxTensor):
        _resize_out(dst, value)
        if value.dtype != dst.dtype and not torch.can_cast(value.dtype, dst.dtype):
            raise argument_checks.cast_error(value.dtype, dst.dtype)
        write(dst, read(value))
    else:
        dst.copy_(value)


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    """``ZyxTensor.__torch_dispatch__``: ``dispatch`` with the registered-lowering case inline
    (every recorded op goes through here, one Python call less per op)."""
    if unsigned.SEEN[0]:
        unsigned.check(func, args, kwargs)
    if complex_seen[0] and complex.involved(args, kwargs):
        return _dispatch_complex(func, args, kwargs or {})
    if not kwargs and len(args) == 2:
        pair = _PAIR_OF.get(func._name)
        if pair is not None:
            try:
                return pair(args[0], args[1])
            except NotImplementedError as exc:
                reraise_deferred(exc)
                return _dispatch_unlowered(func, args, {})
    lowering = _LOWERING_OF.get(func._name)
    if lowering is not None:
        try:
            return lowering(*args, **kwargs) if kwargs else lowering(*args)
        except NotImplementedError as exc:
            reraise_deferred(exc)
    return _dispatch_unlowered(func, args, kwargs or {})


def dispatch(func, args, kwargs):
    if unsigned.SEEN[0]:
        unsigned.check(func, args, kwargs)
    if complex_seen[0] and complex.involved(args, kwargs):
        return _dispatch_complex(func, args, kwargs)
    lowering = _LOWERING_OF.get(func._name)
    if lowering is not None:
        try:
            return lowering(*args, **kwargs)
        except NotImplementedError as exc:
            reraise_deferred(exc)
    return _dispatch_unlowered(func, args, kwargs)


def _dispatch_complex(func, args, kwargs):
    """``dispatch`` for an op involving complex values: their own lowering (ops/complex/), else
    steps 2-4 (a decomposition's ops come back here; the CPU fallback copies pairs)."""
    if complex32_seen[0]:
        check_complex32(func, args, kwargs)  # (CPU torch's few ComplexHalf kernels)
    lowering = _COMPLEX_OF.get(func._name)
    if lowering is None and not any(is_complex(a) for a in args):
        # Real tensors with a complex Python number (index_fill(..., 1j)): the real lowering
        # raises CPU torch's error, or declines; PyTorch's reference of such an op would
        # call the op again, round and round.
        lowering = _LOWERING_OF.get(func._name)
    if lowering is not None:
        try:
            return lowering(*args, **kwargs)
        except NotImplementedError as exc:
            reraise_deferred(exc)
    return _unlowered(func, args, kwargs)


def _dispatch_unlowered(func, args, kwargs):
    """Steps 2-4 of the module docstring: ``func`` has no lowering, or its lowering declined."""
    if complex_seen[0] and complex.involved(args, kwargs):
        # (a real lowering met a complex dtype and declined: ``transfer.zdtype``)
        return _dispatch_complex(func, args, kwargs)
    return _unlowered(func, args, kwargs)


def _unlowered(func, args, kwargs):
    functional = _functional_of(func)
    if functional is not None and (functional in registry.LOWERINGS or functional in decomposition_table):
        out_names = _out_names(func)
        outs = _out_args(func, kwargs) if out_names else []
        call_kwargs = {k: v for k, v in kwargs.items() if k not in out_names} if kwargs else kwargs
        if outs:
            op_name = func._schema.name.split("::")[-1]
            inputs = (args, tuple(call_kwargs.values())) if call_kwargs else args
            after_resize = overlap.rules_of(func).after_resize
            if not after_resize:
                overlap.check_write(func, outs, inputs)
            # (ATen checks most out= dtype rules before its kernel checks the input dtypes)
            argument_checks.check_out(op_name, args, call_kwargs, outs)
            result = dispatch(functional, args, call_kwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            if after_resize:
                for dst, value in zip(outs, results):
                    _resize_out(dst, value, stacklevel=4)
                overlap.check_write(func, outs, inputs)
            argument_checks.check_out_result(op_name, outs, results)
            for dst, value in zip(outs, results):
                _assign(dst, value)
            return outs[0] if len(outs) == 1 else tuple(outs)
        dst = args[0]
        inputs = (args[1:], tuple(call_kwargs.values())) if call_kwargs else args[1:]
        overlap.check_write(func, (dst,), inputs)
        argument_checks.check_inplace(func._name, args, call_kwargs)
        result = dispatch(functional, args, call_kwargs)
        if dst.__class__ is ZyxTensor and result.__class__ is ZyxTensor:
            same_dtype = dst._storage.dtype is result._storage.dtype  # (a tensor's dtype is its storage's)
        else:
            same_dtype = dst.dtype == result.dtype
        if not same_dtype and not torch.can_cast(result.dtype, dst.dtype):
            raise argument_checks.cast_error(result.dtype, dst.dtype, func._name)
        if result.shape != dst.shape:
            raise RuntimeError(f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
                               f"{list(result.shape)}")
        overlap.write_aliased(func, dst, read(result))
        return dst
    if _has_composite(func):
        # Composite ops (``to.dtype``, ...) normally decompose above us; some still arrive
        # here (under no_grad, from C++ callers): their own decomposition is exact.
        result = func.decompose(*args, **kwargs)
        if result is not NotImplemented:
            return result
    decomposition = decomposition_table.get(func)
    if decomposition is not None and func not in _NO_DECOMPOSE:
        generator = kwargs.get("generator") if kwargs else None
        if generator is None:
            result = decomposition(*args, **kwargs)
        else:
            # PyTorch's random decompositions refuse a generator; the random ops they record
            # draw from it instead of the device's default state.
            call_kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
            with random.drawing_from(generator):
                result = decomposition(*args, **call_kwargs)
        if result is not NotImplemented:
            return result
    if _has_generic_kernel(func):
        # A custom op whose one kernel is written with torch ops for every device
        # (``torch.library.custom_op`` without device types, such as torch 2.13's chunked
        # linear_cross_entropy): it runs on zyx tensors, its torch ops dispatched back here.
        return func.redispatch(_PRIVATEUSE1, *args, **kwargs)
    return cpu_fallback(func, args, kwargs)


_PRIVATEUSE1 = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


@functools.cache
def _has_composite(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


@functools.cache
def _has_generic_kernel(func) -> bool:
    """Whether ``func`` is a custom op (not aten's or prims': their device-generic kernels are
    C++ that may read device memory) with a CompositeExplicitAutograd kernel."""
    if func.namespace in ("aten", "prims"):
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd")


# Whether PyTorch runs zyx's C++ device guard (integration/device_guard.py), set when the
# device is registered: only under it may an error propagate out of a backward node.
_native_guard = False


def set_native_guard(native: bool) -> None:
    """Tell dispatch which device guard PyTorch uses (integration/registration.py)."""
    global _native_guard
    _native_guard = native


def cpu_fallback(func, args, kwargs):
    """Run ``func`` on CPU copies and bring tensor results back to the zyx device."""
    name = str(func)
    dtypes_ = sorted({str(a.dtype) for a in _tensors(args, kwargs)})
    if not CONFIG.cpu_fallback:
        error = NotImplementedError(f"zyx: no lowering for {name} (dtypes {', '.join(dtypes_)}) and "
                                    "ZYX_CPU_FALLBACK=0")
        if _native_guard or torch._C._current_autograd_node() is None:
            raise error
        # Under PyTorch's Python device guard (no C++ compiler, or ZYX_NATIVE=0) an exception
        # inside a backward node run by autograd's engine aborts the process (the guard calls
        # into Python while the error is still set, std::terminate): compute on the CPU and
        # raise at the next realization outside it.
        defer_error(error)
    bump("cpu_fallbacks")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"zyx: {name} has no zyx lowering; it runs on the CPU (counted in "
                      "torch_zyx.counters()['cpu_fallbacks'])", stacklevel=3)
    device = registry.device_of(*args, *kwargs.values())
    cpu_of: dict[int, torch.Tensor] = {}

    def to_host(x):
        if isinstance(x, ZyxTensor):
            if id(x) not in cpu_of:
                cpu_of[id(x)] = to_cpu(x)
            return cpu_of[id(x)]
        return x

    cpu_args = tree_map(to_host, args)
    cpu_kwargs = tree_map(to_host, kwargs)
    result = func(*cpu_args, **cpu_kwargs)
    # Mutated inputs: copy their new contents back.
    for original in _tensors(args, kwargs):
        mutated = isinstance(original, ZyxTensor) and id(original) in cpu_of
        if mutated and _is_mutated(func, original, args, kwargs):
            write(original, from_cpu(cpu_of[id(original)], device))

    def back(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, ZyxTensor):
            for original in _tensors(args, kwargs):
                if id(original) in cpu_of and cpu_of[id(original)] is x:
                    return original
            if x.is_complex():
                return complex.wrap_pairs(from_cpu(x, device), device)
            return wrap(from_cpu(x, device), device)
        return x

    return tree_map(back, result)


def _tensors(args, kwargs):
    out = []
    tree_map(lambda x: out.append(x) if isinstance(x, torch.Tensor) else None, (args, kwargs))
    return out


def _is_mutated(func, tensor, args, kwargs) -> bool:
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        if value is tensor or (isinstance(value, (list, tuple)) and any(v is tensor for v in value)):
            return True
    return False


set_dispatcher(torch_dispatch)


def no_kernel(op, *args, **kwargs):
    """The zyx backend's fallback kernel (registered by ``torch_zyx._register``). Calls on zyx
    tensors never reach it (they go to ``ZyxTensor.__torch_dispatch__`` first); only an op with
    no kernel of zyx's whose arguments name zyx otherwise does, such as a CPU op given a zyx
    generator: that raises PyTorch's message for a generator of another device, anything else
    PyTorch's "no kernel for this backend" error."""
    flat = torch.utils._pytree.tree_leaves((args, kwargs))
    if any(isinstance(a, torch.Generator) and a.device.type == "zyx" for a in flat):
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        raise RuntimeError(f"Expected a '{device}' device type for generator but found 'zyx'")
    raise NotImplementedError(f"Could not run '{op._schema.name}' with arguments from the 'zyx' backend: "
                              "zyx has no kernel for this operator outside calls on zyx tensors.")
