"""Gradient scaling for mixed precision: the two ops ``torch.amp.GradScaler("zyx")`` calls.

``_amp_foreach_non_finite_check_and_unscale_`` multiplies every gradient by the inverse scale
and sets ``found_inf`` to 1 when any of them holds an inf or a NaN; ``_amp_update_scale_``
then backs the scale off after a non-finite step or grows it after ``growth_interval`` finite
ones. Both stay on the device as lazy values (no read-back per step), computed as CUDA's
kernels compute them: the unscale in float32 for half gradients, the scale update's products
in double before the float32 store.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, write
from ..nn.functional import _acc_dtype
from ..registry import aten, register


def _scalar(node: Node) -> Node:
    """A one-element tensor's value as a 0-d node."""
    return g.reshape(node, ())


@register(aten._amp_foreach_non_finite_check_and_unscale_.default)
def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    inv = _scalar(g.cast(read(inv_scale), dtypes.float32))
    found = _scalar(read(found_inf))
    for grad in grads:
        node = read(grad)
        if node.numel == 0:
            continue
        value = g.cast(node, _acc_dtype(node.dtype))
        any_bad = g.reduce("max", g.unary("not", g.finite(value)), tuple(range(len(node.shape))))
        found = g.binary("max", found, g.cast(g.reshape(any_bad, ()), found.dtype))
        factor = g.reshape(g.cast(inv, value.dtype), (1,) * len(value.shape))
        scaled = g.binary("mul", value, g.expand(factor, value.shape))
        write(grad, g.cast(scaled, node.dtype))
    write(found_inf, g.reshape(found, read(found_inf).shape))


@register(aten._amp_update_scale_.default)
def update_scale_(scale, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                  growth_interval):
    current = _scalar(read(scale))
    tracker = _scalar(read(growth_tracker))
    found = g.binary("ne", _scalar(read(found_inf)), g.const(0, read(found_inf).dtype, ()))
    wide = g.cast(current, dtypes.float64)
    backed_off = g.cast(g.binary("mul", wide, g.const(float(scale_backoff_factor), dtypes.float64, ())),
                        current.dtype)
    grown = g.cast(g.binary("mul", wide, g.const(float(scale_growth_factor), dtypes.float64, ())),
                   current.dtype)
    successful = g.binary("add", tracker, g.const(1, tracker.dtype, ()))
    grow = g.binary("eq", successful, g.const(int(growth_interval), tracker.dtype, ()))
    kept_or_grown = g.where(g.binary("and", grow, g.finite(grown)), grown, current)
    new_scale = g.where(found, backed_off, g.where(grow, kept_or_grown, current))
    zero = g.const(0, tracker.dtype, ())
    new_tracker = g.where(found, zero, g.where(grow, zero, successful))
    write(scale, g.reshape(new_scale, read(scale).shape))
    write(growth_tracker, g.reshape(new_tracker, read(growth_tracker).shape))
    return scale
