"""Resampling lowerings with static interpolation weights: anti-aliased bilinear and bicubic
resizing (forward and backward), and the backward of the plain linear and nearest modes.

The weights of a resize along one axis depend only on the sizes, so each axis is a small
(n_out, n_in) weight matrix built from IOTA arithmetic (a triangle or Keys cubic filter widened
by the downscale factor, each row normalized), applied as a broadcast multiply and a reduce:
the 2-d resize is two such passes (width, then height, as ATen's separable kernel). The
backward applies the transposed matrices.
"""

from __future__ import annotations

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..expr import Ex, where
from ..registry import aten, register

_F64 = dtypes.float64


def _triangle(distance: Ex) -> Ex:
    """The bilinear filter at ``distance`` (>= 0): 1 - d inside the unit interval, else 0."""
    return Ex(g.binary("max", (1.0 - distance).node, distance.full(0.0).node))


def _keys_cubic(distance: Ex) -> Ex:
    """The anti-aliased bicubic filter (Keys, a = -0.5, as PIL and ATen's aa kernels) at ``distance``."""
    a = -0.5
    d = distance
    near = ((a + 2) * d - (a + 3)) * d * d + 1.0
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return where(d < 1.0, near, where(d < 2.0, far, 0.0))


# interpolation mode → (filter, its support in input pixels at scale 1: interp_size / 2)
_AA_FILTERS = {"bilinear": (_triangle, 1.0), "bicubic": (_keys_cubic, 2.0)}


def _aa_weights(n_in: int, n_out: int, align_corners: bool, scale_factor, mode: str = "bilinear") -> Node:
    """(n_out, n_in) float64 anti-aliased weights (ATen's rule: support = half-width x max(scale,
    1), window [trunc(center - support + .5), trunc(center + support + .5)), rows summing to 1)."""
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        scale = 1.0 / scale_factor if scale_factor else n_in / n_out
    kernel, half_width = _AA_FILTERS[mode]
    support = half_width * max(scale, 1.0)
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    shape = (n_out, n_in)

    def c(v):
        return g.const(v, _F64, shape)

    o = g.expand(g.reshape(g.cast(g.iota((n_out,)), _F64), (n_out, 1)), shape)
    j = g.expand(g.reshape(g.cast(g.iota((n_in,)), _F64), (1, n_in)), shape)
    center = g.binary("mul", g.binary("add", o, c(0.5)), c(scale))
    lo = g.binary("max", g.unary("trunc", g.binary("add", g.binary("sub", center, c(support)), c(0.5))),
                  c(0.0))
    hi = g.binary("min", g.unary("trunc", g.binary("add", g.binary("add", center, c(support)), c(0.5))),
                  c(float(n_in)))
    inside = g.binary("and", g.binary("le", lo, j), g.binary("lt", j, hi))
    dist = g.unary("abs", g.binary("mul", g.binary("add", g.binary("sub", j, center), c(0.5)), c(inv)))
    w = g.where(inside, kernel(Ex(dist)).node, c(0.0))
    total = g.expand(g.reduce("sum", w, (1,)), shape)
    return g.where(g.binary("eq", total, c(0.0)), w, g.binary("div", w, total))


def _apply(x: Node, axis: int, weights: Node) -> Node:
    """Contract ``x``'s ``axis`` (n_in) with weights (n_out, n_in) → that axis becomes n_out."""
    n_out, n_in = weights.shape
    nd = len(x.shape)
    moved = g.permute(x, tuple(i for i in range(nd) if i != axis) + (axis,))
    lead = moved.shape[:-1]
    wide = lead + (n_out, n_in)
    prod = g.binary("mul", g.expand(g.reshape(moved, lead + (1, n_in)), wide),
                    g.expand(g.reshape(g.cast(weights, x.dtype), (1,) * len(lead) + (n_out, n_in)), wide))
    out = g.reshape(g.reduce("sum", prod, (len(wide) - 1,)), lead + (n_out,))
    back = list(range(nd - 1))
    back.insert(axis, nd - 1)
    return g.permute(out, tuple(back))


def _compute(node: Node) -> Node:
    return g.cast(node, dtypes.float32) if node.dtype in (dtypes.float16, dtypes.bfloat16) else node


def _aa_forward(mode: str):
    def lowering(x, output_size, align_corners, scales_h=None, scales_w=None):
        if x.dim() != 4:
            raise RuntimeError(f"Expected 4D input tensor, but got {x.dim()}D")
        if not x.dtype.is_floating_point:
            raise NotImplementedError  # uint8 images: ATen's fixed-point kernel (the CPU's)
        node = _compute(read(x))
        (h, w), (ho, wo) = x.shape[2:], tuple(output_size)
        node = _apply(node, 3, _aa_weights(w, wo, align_corners, scales_w, mode))
        node = _apply(node, 2, _aa_weights(h, ho, align_corners, scales_h, mode))
        return wrap(g.cast(node, zdtype(x.dtype)), x._storage.device)
    return lowering


def _aa_backward(mode: str):
    def lowering(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        node = _compute(read(grad))
        (h, w), (ho, wo) = tuple(input_size)[2:], tuple(output_size)
        node = _apply(node, 2, g.permute(_aa_weights(h, ho, align_corners, scales_h, mode), (1, 0)))
        node = _apply(node, 3, g.permute(_aa_weights(w, wo, align_corners, scales_w, mode), (1, 0)))
        return wrap(g.cast(node, zdtype(grad.dtype)), grad._storage.device)
    return lowering


for _mode, _forward, _backward in (
        ("bilinear", aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa_backward.default),
        ("bicubic", aten._upsample_bicubic2d_aa.default, aten._upsample_bicubic2d_aa_backward.default)):
    register(_forward)(_aa_forward(_mode))
    register(_backward)(_aa_backward(_mode))


# ------------------------------------------------------------------------------- upsample backward


def _scale(n_in: int, n_out: int, align_corners: bool, scale_factor) -> float:
    """ATen's area_pixel_compute_scale."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale_factor if scale_factor and scale_factor > 0 else n_in / n_out


def _nearest_weights(n_in: int, n_out: int, scale_factor, exact: bool) -> Node:
    """(n_out, n_in) 0/1 matrix: output o reads input min(floor((o + .5?) * scale), n_in - 1)."""
    scale = _scale(n_in, n_out, False, scale_factor)
    f64 = dtypes.float64
    o = g.cast(g.iota((n_out,)), f64)
    if exact:
        o = g.binary("add", o, g.const(0.5, f64, (n_out,)))
    src = g.cast(g.unary("floor", g.binary("mul", o, g.const(scale, f64, (n_out,)))), dtypes.int64)
    src = g.binary("min", src, g.const(n_in - 1, dtypes.int64, (n_out,)))
    shape = (n_out, n_in)
    hit = g.binary("eq", g.expand(g.reshape(src, (n_out, 1)), shape),
                   g.expand(g.reshape(g.iota((n_in,)), (1, n_in)), shape))
    return g.cast(hit, f64)


def _linear_weights(n_in: int, n_out: int, align_corners: bool, scale_factor) -> Node:
    """(n_out, n_in) linear-interpolation weights (ATen's source index rule, edge clamped)."""
    scale = _scale(n_in, n_out, align_corners, scale_factor)
    f64 = dtypes.float64
    o = g.cast(g.iota((n_out,)), f64)
    if align_corners:
        x = g.binary("mul", o, g.const(scale, f64, (n_out,)))
    else:
        x = g.binary("sub", g.binary("mul", g.binary("add", o, g.const(0.5, f64, (n_out,))),
                                     g.const(scale, f64, (n_out,))), g.const(0.5, f64, (n_out,)))
        x = g.binary("max", x, g.const(0.0, f64, (n_out,)))
    i0 = g.binary("min", g.cast(g.unary("trunc", x), dtypes.int64), g.const(n_in - 1, dtypes.int64, (n_out,)))
    i1 = g.binary("min", g.binary("add", i0, g.const(1, dtypes.int64, (n_out,))),
                  g.const(n_in - 1, dtypes.int64, (n_out,)))
    lam = g.binary("sub", x, g.cast(i0, f64))
    shape = (n_out, n_in)
    col = g.expand(g.reshape(g.iota((n_in,)), (1, n_in)), shape)

    def at(i: Node, w: Node) -> Node:
        hit = g.binary("eq", g.expand(g.reshape(i, (n_out, 1)), shape), col)
        return g.where(hit, g.expand(g.reshape(w, (n_out, 1)), shape), g.const(0.0, f64, shape))

    return g.binary("add", at(i0, g.binary("sub", g.const(1.0, f64, (n_out,)), lam)), at(i1, lam))


def _spread_back(grad, input_size, weights: list[Node]):
    """Input gradient of a separable resize: each spatial axis contracted with its transposed
    (n_out, n_in) weight matrix."""
    node = _compute(read(grad))
    nsp = len(weights)
    for i, w in enumerate(weights):
        node = _apply(node, len(node.shape) - nsp + i, g.permute(w, (1, 0)))
    assert node.shape == tuple(input_size)
    return wrap(g.cast(node, zdtype(grad.dtype)), grad._storage.device)


def _nearest_backward(exact: bool):
    def lowering(grad, output_size, input_size, *scales):
        sizes_in = tuple(input_size)[2:]
        weights = [_nearest_weights(n_in, n_out, scales[i] if i < len(scales) else None, exact)
                   for i, (n_in, n_out) in enumerate(zip(sizes_in, output_size))]
        return _spread_back(grad, input_size, weights)

    return lowering


register(aten.upsample_nearest1d_backward.default, aten.upsample_nearest2d_backward.default,
         aten.upsample_nearest3d_backward.default)(_nearest_backward(False))
register(aten._upsample_nearest_exact1d_backward.default, aten._upsample_nearest_exact2d_backward.default,
         aten._upsample_nearest_exact3d_backward.default)(_nearest_backward(True))


@register(aten.upsample_linear1d_backward.default, aten.upsample_bilinear2d_backward.default,
          aten.upsample_trilinear3d_backward.default)
def upsample_linear_backward(grad, output_size, input_size, align_corners, *scales):
    sizes_in = tuple(input_size)[2:]
    weights = [_linear_weights(n_in, n_out, align_corners, scales[i] if i < len(scales) else None)
               for i, (n_in, n_out) in enumerate(zip(sizes_in, output_size))]
    return _spread_back(grad, input_size, weights)
