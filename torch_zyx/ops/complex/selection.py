"""More complex data movement through the real view (as creation.py's index/gather/scatter):
``put``, ``masked_scatter`` and ``nonzero_static``.

Lowerings of the complex table (ops/complex/base.py). A complex element is two adjacent parts of
the real view, so a flat index i becomes the part indices 2i and 2i + 1, and a mask over
elements becomes one over both parts; the real lowerings then move the parts.
"""

from __future__ import annotations

import torch

from ..registry import aten
from .base import register_complex
from .creation import _complex_result, _like, _real_view


@register_complex(aten.put.default)
def put(x, index, source, accumulate=False):
    if not x.is_complex():
        raise NotImplementedError
    parts = aten.stack.default([aten.mul.Scalar(index, 2), aten.add.Scalar(aten.mul.Scalar(index, 2), 1)], -1)
    real = _real_view(x).reshape(-1)
    src = _real_view(_like(source, x)).reshape(-1)
    out = aten.put.default(real, parts.reshape(-1), src, accumulate)
    return _complex_result(out.view(x.shape + (2,)))


@register_complex(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    if not x.is_complex():
        raise NotImplementedError
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    real = _real_view(x.expand(shape))
    both = mask.expand(shape).unsqueeze(-1).expand(*shape, 2)
    out = aten.masked_scatter.default(real, both, _real_view(_like(source, x)))
    return _complex_result(out)


@register_complex(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    if not x.is_complex():
        raise NotImplementedError
    return aten.nonzero_static.default(aten.ne.Scalar(x, 0), size=size, fill_value=fill_value)
