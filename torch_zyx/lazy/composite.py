"""Composite nodes: an op recorded as one node of the lazy graph, expanded into primitive nodes
only when a graph holding it is kernelized.

Stage 2 of the flow (dispatch → **lazy graph** → kernelizer → ...). A layer norm is ~25
primitive nodes, and each costs its recording (a hash-consed node: ~0.2 us on the 2-core box),
the realization's signature walk and, once realized, its release: per call more Python than
the kernel's launch, and a layer norm is recorded at every call of every model that has one.
Recorded as one ``LAYER_NORM`` node, it costs one node; the kernelizer's rewrite
(kernelize.rewrite, on a schedule-cache miss only) replaces it by ``layer_norm_parts``, the
same primitives the statistics-returning form records, so both fuse alike.

The expansion is a function of the node alone (its sources, arg, dtype and shape: what the
signature keys), so graphs with equal signatures expand alike and share one plan. Run-time
scalars (eps) are therefore sources of the composite, CONST nodes the signature numbers as
parameters, never constants made by the expansion: those are keyed by nothing and become
literals of the code (only values fixed by the shape, like 1 / count, may be made there).

  LAYER_NORM  srcs (x, eps[, weight][, bias]), arg (normalized dims, has weight, has bias,
              output: 0 the normalized x, 1 the mean, 2 the reciprocal standard deviation);
              x, eps and the result in the accumulation dtype, eps of the statistics' shape.
              The three outputs of one call expand to one shared graph (hash-consing).
  SOFTMAX     srcs (x,), arg (dim, log): softmax or log-softmax of x (a float dtype, rank >= 1)
  ATTENTION   srcs (q, k, v, scale), arg (causal, output): scaled dot-product attention of
              q [..., L, D], k [..., S, D], v [..., S, Dv] (one float dtype; equal batch dims),
              ``scale`` a float32 scalar; output 0 the attention [..., L, Dv] in q's dtype, 1
              the log-sum-exp of each row's scaled scores [..., L] in float32. ``causal``: key
              j is masked for query i when j > i (the top-left triangle, as PyTorch's
              ``is_causal``). Devices with a fused attention kernel keep it whole
              (``keeps_attention``; codegen/lower_attention.py), others expand it: scores,
              softmax and the product as matmul-shaped reduces and a row softmax.
"""

from __future__ import annotations

import math

from .. import dtypes
from . import graph as g
from .graph import Node

LAYER_NORM = "LAYER_NORM"
SOFTMAX = "SOFTMAX"
ATTENTION = "ATTENTION"


class NormShapes:
    """What layer norm derives from an input shape and a normalized shape (``norm_shapes``)."""

    __slots__ = ("count", "dims", "first_bounds", "param_shape", "stat_shape")

    def __init__(self, shape: tuple, normalized_shape: tuple):
        axis = len(shape) - len(normalized_shape)
        self.dims = tuple(range(axis, len(shape)))
        self.count = math.prod(normalized_shape)
        self.stat_shape = shape[:axis] + (1,) * len(normalized_shape)
        # Each block's first element (the shift of the one-pass variance).
        self.first_bounds = tuple((0, size) for size in shape[:axis]) + ((0, 1),) * len(normalized_shape)
        self.param_shape = (1,) * axis + normalized_shape


# (input shape, normalized shape) -> NormShapes: recording a layer norm again (every step of a
# model) derives nothing again.
_norm_shapes: dict[tuple, NormShapes] = {}


def norm_shapes(shape: tuple, normalized_shape) -> NormShapes:
    key = (shape, tuple(normalized_shape))
    shapes = _norm_shapes.get(key)
    if shapes is None:
        if len(_norm_shapes) >= 256:
            _norm_shapes.clear()
        shapes = _norm_shapes[key] = NormShapes(*key)
    return shapes


def layer_norm_parts(x: Node, eps: Node, weight: Node | None, bias: Node | None,
                     shapes: NormShapes) -> tuple[Node, Node, Node]:
    """Layer norm of ``x`` (in its accumulation dtype, ``eps`` a node of the statistics' shape
    in it) as primitives: the normalized input (scaled and shifted), the mean and the
    reciprocal standard deviation, in ``x``'s dtype."""
    dims, count, stat_shape = shapes.dims, shapes.count, shapes.stat_shape
    # One pass over x (mean and variance reduce together, one kernel): sums of x shifted by
    # the block's first element, which keeps E[d^2] - E[d]^2 free of cancellation when the
    # mean is large compared to the spread.
    shape = x.shape
    first = g.shrink(x, shapes.first_bounds)
    shifted = g.binary("sub", x, g.expand(first, shape))
    inv_count = g.const(1.0 / count, x.dtype, stat_shape)
    shifted_mean = g.binary("mul", g.reduce("sum", shifted, dims), inv_count)
    square_mean = g.binary("mul", g.reduce("sum", g.binary("mul", shifted, shifted), dims), inv_count)
    mean = g.binary("add", first, shifted_mean)
    var = g.binary("max", g.binary("sub", square_mean, g.binary("mul", shifted_mean, shifted_mean)),
                   g.const(0.0, x.dtype, stat_shape))
    diff = g.binary("sub", x, g.expand(mean, shape))
    rstd = g.unary("recip", g.unary("sqrt", g.binary("add", var, eps)))
    out = g.binary("mul", diff, g.expand(rstd, shape))
    if weight is not None:
        out = g.binary("mul", out, g.expand(g.reshape(g.cast(weight, x.dtype), shapes.param_shape), shape))
    if bias is not None:
        out = g.binary("add", out, g.expand(g.reshape(g.cast(bias, x.dtype), shapes.param_shape), shape))
    return out, mean, rstd


def layer_norm(x: Node, eps: Node, weight: Node | None, bias: Node | None, normalized_dims: int,
               output: int = 0) -> Node:
    """``layer_norm_parts``' result ``output`` as one ``LAYER_NORM`` node (the statistics
    take no weight or bias: their nodes are the same with or without)."""
    srcs = (x, eps)
    if output == 0:
        if weight is not None:
            srcs += (weight,)
        if bias is not None:
            srcs += (bias,)
        arg = (normalized_dims, int(weight is not None), int(bias is not None), 0)
        return Node(LAYER_NORM, arg, srcs, x.dtype, x.shape)
    return Node(LAYER_NORM, (normalized_dims, 0, 0, output), srcs, x.dtype, eps.shape)


def softmax_parts(x: Node, dim: int, log: bool) -> Node:
    """Softmax (log-softmax if ``log``) of ``x`` along ``dim`` as primitives: the row's maximum
    (0 where it is not finite) shifted out before the exponentials."""
    m = g.reduce("max", x, (dim,))
    m = g.where(g.finite(m), m, g.const(0.0, m.dtype, m.shape))
    shifted = g.binary("sub", x, g.expand(m, x.shape))
    e = g.unary("exp", shifted)
    s = g.reduce("sum", e, (dim,))
    if log:
        return g.binary("sub", shifted, g.expand(g.unary("log", s), x.shape))
    return g.binary("mul", e, g.expand(g.unary("recip", s), x.shape))


def softmax(x: Node, dim: int, log: bool) -> Node:
    """``softmax_parts`` as one ``SOFTMAX`` node."""
    return Node(SOFTMAX, (dim, int(log)), (x,), x.dtype, x.shape)


def _expand_layer_norm(node: Node) -> Node:
    normalized_dims, has_weight, has_bias, output = node.arg
    x, eps, *params = node.srcs
    weight = params.pop(0) if has_weight else None
    bias = params.pop(0) if has_bias else None
    shapes = norm_shapes(x.shape, x.shape[len(x.shape) - normalized_dims:])
    return layer_norm_parts(x, eps, weight, bias, shapes)[output]


def _expand_softmax(node: Node) -> Node:
    dim, log = node.arg
    return softmax_parts(node.srcs[0], dim, bool(log))


def attention(q: Node, k: Node, v: Node, scale: Node, causal: bool, output: int = 0) -> Node:
    """One ``ATTENTION`` node: the attention (``output`` 0) or its rows' log-sum-exp (1)."""
    if output == 0:
        return Node(ATTENTION, (int(causal), 0), (q, k, v, scale), q.dtype, q.shape[:-1] + v.shape[-1:])
    return Node(ATTENTION, (int(causal), 1), (q, k, v, scale), dtypes.float32, q.shape[:-1])


def causal_keep(shape: tuple[int, ...]) -> Node:
    """True where key ``j`` (the last axis of ``shape``) may be attended from query ``i`` (the
    one before) under PyTorch's ``is_causal``: ``j <= i``, broadcast over the leading axes."""
    *batch, length, keys = shape
    row = g.expand(g.reshape(g.iota((length,)), (length, 1)), (length, keys))
    col = g.expand(g.reshape(g.iota((keys,)), (1, keys)), (length, keys))
    return g.expand(g.reshape(g.binary("le", col, row), (1,) * len(batch) + (length, keys)), tuple(shape))


def attention_parts(q: Node, k: Node, v: Node, scale: Node, causal: bool) -> tuple[Node, Node]:
    """Attention and its rows' log-sum-exp as primitives (in float32 for half inputs): the
    scores ``q k^T`` scaled and masked, the row maximum shifted out before the exponentials,
    their product with ``v`` divided by the row sums at the end (one multiply per output
    rather than one per score)."""
    acc = dtypes.float32 if q.dtype.itemsize < 4 else q.dtype
    *batch, length, depth = q.shape
    keys, depth_v = k.shape[-2], v.shape[-1]
    batch = tuple(batch)
    nd = len(batch)
    scores_shape = batch + (length, keys)
    wide = batch + (length, keys, depth)
    q3 = g.expand(g.reshape(g.cast(q, acc), batch + (length, 1, depth)), wide)
    k3 = g.expand(g.reshape(g.cast(k, acc), batch + (1, keys, depth)), wide)
    scores = g.reshape(g.reduce("sum", g.binary("mul", q3, k3), (nd + 2,)), scores_shape)
    scale = g.expand(g.reshape(g.cast(scale, acc), (1,) * len(scores_shape)), scores_shape)
    scores = g.binary("mul", scores, scale)
    if causal:
        scores = g.where(causal_keep(scores_shape), scores, g.const(float("-inf"), acc, scores_shape))
    m = g.reduce("max", scores, (nd + 1,))
    m = g.where(g.finite(m), m, g.const(0.0, acc, m.shape))
    e = g.unary("exp", g.binary("sub", scores, g.expand(m, scores_shape)))
    total = g.reduce("sum", e, (nd + 1,))
    wide_v = batch + (length, depth_v, keys)
    e3 = g.expand(g.reshape(e, batch + (length, 1, keys)), wide_v)
    vt = g.permute(g.cast(v, acc), tuple(range(nd)) + (nd + 1, nd))
    v3 = g.expand(g.reshape(vt, batch + (1, depth_v, keys)), wide_v)
    weighted = g.reshape(g.reduce("sum", g.binary("mul", e3, v3), (nd + 2,)), batch + (length, depth_v))
    out = g.binary("mul", weighted, g.expand(g.unary("recip", total), weighted.shape))
    lse = g.reshape(g.binary("add", g.unary("log", total), m), batch + (length,))
    return g.cast(out, q.dtype), g.cast(lse, dtypes.float32)


def _expand_attention(node: Node) -> Node:
    causal, output = node.arg
    return attention_parts(*node.srcs, bool(causal))[output]


_EXPANSIONS = {LAYER_NORM: _expand_layer_norm, SOFTMAX: _expand_softmax, ATTENTION: _expand_attention}
EXPANDED = frozenset(_EXPANSIONS)  # (the ops ``expand`` replaces)


def expand(node: Node, keep=None) -> Node:
    """``node`` with a composite replaced by its primitives (a graph rewrite's function), unless
    ``keep`` (the device's choice) says that its kernel computes it whole."""
    expansion = _EXPANSIONS.get(node.op)
    if expansion is None or (keep is not None and keep(node)):
        return node
    return expansion(node)
