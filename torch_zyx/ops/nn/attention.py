"""Scaled dot-product attention as one op: PyTorch's "overrideable" fused SDPA op and its
backward, recorded into the lazy graph.

``F.scaled_dot_product_attention`` asks the device which kernel to use (ATen's
``_fused_sdp_choice`` stub: integration/device_hooks.cpp answers for zyx). For the calls a zyx
device runs as one fused kernel (half or bfloat16 on tensor cores, no mask or dropout,
codegen/lower_attention.py) it calls ``_scaled_dot_product_fused_attention_overrideable``,
recorded here as one ``ATTENTION`` composite node per output (lazy/composite.py): the attention
and its rows' log-sum-exp, which the backward reads instead of a saved probability matrix.
Every other call takes PyTorch's math form (matmuls and a softmax, which fuse as any graph
does), as does a device without the fused kernel when this op is called directly (the
kernelizer expands the node into the same primitives).

The backward recomputes the probabilities from the scores and the log-sum-exp (one more
``q k^T``, as flash attention's backward does), in float32 for half inputs, with the
products on the operands' dtype (tensor cores where there are some):
``dV = P^T dO``, ``dS = P (dO V^T - rowsum(dO O))``, ``dQ = scale dS K``, ``dK = scale dS^T Q``.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import composite
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ..linalg.matmul import matmul_nodes
from ..registry import aten, register


def _check(query, key, value, attn_bias, dropout_p) -> None:
    if attn_bias is not None or dropout_p:
        raise RuntimeError("zyx: the fused scaled_dot_product_attention op takes no attn_bias and no "
                           "dropout (F.scaled_dot_product_attention takes its math form for those)")
    if not (query.dim() >= 2 and key.dim() == query.dim() and value.dim() == query.dim()):
        raise RuntimeError("scaled_dot_product_attention: query, key and value must have the same number "
                           f"of dimensions, got {query.dim()}, {key.dim()} and {value.dim()}")
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise RuntimeError("zyx: the fused scaled_dot_product_attention op needs equal batch and head "
                           f"dims, got {tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
    if key.shape[-2] != value.shape[-2] or key.shape[-1] != query.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: shapes {tuple(query.shape)}, {tuple(key.shape)} "
                           f"and {tuple(value.shape)} do not match")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError("Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")


def _scale(query, scale) -> float:
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


@register(aten._scaled_dot_product_fused_attention_overrideable.default)
def fused_attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                    return_debug_mask=False, *, scale=None):
    _check(query, key, value, attn_bias, dropout_p)
    q, k, v = read(query), read(key), read(value)
    scale_node = g.const(_scale(query, scale), dtypes.float32)
    device = query._storage.device
    out = wrap(composite.attention(q, k, v, scale_node, is_causal, 0), device)
    lse = wrap(composite.attention(q, k, v, scale_node, is_causal, 1), device)
    empty = torch.empty(0, dtype=torch.int64, device=query.device)
    length, keys = query.shape[-2], key.shape[-2]
    return out, lse, empty, empty, length, keys, empty, empty, torch.empty(0, dtype=query.dtype,
                                                                          device=query.device)


def _transposed(x: Node) -> Node:
    nd = len(x.shape)
    return g.permute(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


@register(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                             cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                             philox_offset, *, scale=None):
    _check(query, key, value, attn_bias, dropout_p)
    q, k, v, o, do = (read(t) for t in (query, key, value, out, grad_out))
    dtype = q.dtype
    acc = dtypes.float32 if dtype.itemsize < 4 else dtype
    nd = len(q.shape)
    scale_value = _scale(query, scale)
    scores = matmul_nodes(q, _transposed(k))  # [..., L, S] in acc
    scores = g.binary("mul", scores, g.const(scale_value, acc, scores.shape))
    shape = scores.shape
    lse = g.expand(g.reshape(g.cast(read(logsumexp), acc), shape[:-1] + (1,)), shape)
    p = g.unary("exp", g.binary("sub", scores, lse))
    if is_causal:
        p = g.where(composite.causal_keep(shape), p, g.const(0.0, acc, shape))
    p_low = g.cast(p, dtype)
    device = query._storage.device
    grads = [None, None, None, None]
    if grad_input_mask[2]:
        grads[2] = wrap(g.cast(matmul_nodes(_transposed(p_low), do), dtype), device)
    if grad_input_mask[0] or grad_input_mask[1]:
        dp = matmul_nodes(do, _transposed(v))
        row_dot = g.reduce("sum", g.binary("mul", g.cast(do, acc), g.cast(o, acc)), (nd - 1,))
        ds = g.binary("mul", p, g.binary("sub", dp, g.expand(row_dot, shape)))
        ds = g.cast(g.binary("mul", ds, g.const(scale_value, acc, shape)), dtype)
        if grad_input_mask[0]:
            grads[0] = wrap(g.cast(matmul_nodes(ds, k), dtype), device)
        if grad_input_mask[1]:
            grads[1] = wrap(g.cast(matmul_nodes(_transposed(ds), q), dtype), device)
    return tuple(grads)
