"""The fused ops of PyTorch's transformer inference fast path, written with zyx's own ops.

In eval mode without autograd, nn.MultiheadAttention and nn.TransformerEncoderLayer call
``_native_multi_head_attention`` and ``_transformer_encoder_layer_fwd``, which call
``_transform_bias_rescale_qkv`` and ``_masked_softmax``. These have CPU and CUDA kernels only
(they fell back to the CPU per layer). Each is written here as ATen computes it
(attention.cpp, transformer.cpp, SoftMax.cpp), with aten ops on zyx tensors: the projections
are matmuls, the masked softmax a where and a softmax, so a layer records into one lazy graph
and fuses like the same layer in training mode.

Nested tensors: zyx has none. nn.TransformerEncoder's fast path (eval mode, a padding mask)
asks ``_nested_tensor_from_mask_left_aligned`` whether it may turn its input into a nested
tensor; on zyx the answer is always no, and the encoder takes its dense path with the padding
mask. Its results agree with CPU torch's at every unpadded position; CPU's nested path leaves
zeros at padded positions, the dense path computed values (as CPU torch gives in training mode
or with ``enable_nested_tensor=False``).
"""

from __future__ import annotations

import math

import torch

from ...lazy import graph as g
from ...record.tensor import read, wrap
from ..registry import aten, register
from .functional import _acc_dtype, softmax_node


@register(aten._masked_softmax.default)
def masked_softmax(x, mask, dim=None, mask_type=None):
    """Softmax over ``dim`` (the last by default) of the elements whose ``mask`` is False; a row
    with every element masked is NaN, as on the CPU. ``mask_type`` 0: an (L, L) attention mask of
    a (B, H, L, L) input; 1: a (B, L) padding mask; otherwise the input's shape."""
    if mask.dtype != torch.bool:
        raise RuntimeError("Mask should be a boolean tensor")
    shape = tuple(x.shape)
    if mask.dim() != 2 or x.dim() != 4:
        mask_type = 2
    if mask_type == 1:
        if shape[0] != mask.shape[0] or shape[2] != mask.shape[1]:
            raise RuntimeError("For mask_type == 1 mask shape should be (B, L)")
        mask = mask.view(shape[0], 1, 1, shape[2])
    elif mask_type == 0:
        if shape[2] != mask.shape[0] or shape[2] != mask.shape[1]:
            raise RuntimeError("For mask_type == 0 mask shape should be (L, L)")
    elif mask_type == 2 and tuple(mask.shape) != shape:
        raise RuntimeError("For mask_type == 2 mask shape should match input shape")
    dim = x.dim() - 1 if dim is None else dim % max(x.dim(), 1)
    node = read(x)
    masked = read(mask.expand(shape))
    value = g.cast(node, _acc_dtype(node.dtype))
    value = g.where(masked, g.const(float("-inf"), value.dtype, value.shape), value)
    return wrap(g.cast(softmax_node(value, dim, log=False), node.dtype), x._storage.device)


@register(aten._transform_bias_rescale_qkv.default)
def transform_bias_rescale_qkv(qkv, qkv_bias, num_heads):
    """(q, k, v), each (B, num_heads, T, D / num_heads), of a (B, T, 3D) projection: the bias
    added, q scaled by 1 / sqrt(D / num_heads)."""
    batch, length, three_d = qkv.shape
    embed = three_d // 3
    if embed % num_heads or three_d % 3:
        raise RuntimeError("Expected D % num_head == 0 and 3D % 3 == 0")
    head = embed // num_heads
    scale = 1.0 / math.sqrt(head)
    biased = qkv + qkv_bias
    parts = biased.view(batch, length, 3, num_heads, head).permute(2, 0, 3, 1, 4)
    return (parts[0] * scale).contiguous(), parts[1].contiguous(), parts[2].contiguous()


def _check_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias):
    """ATen's argument checks of _native_multi_head_attention, with its messages."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3:
            raise RuntimeError(f"expected 3-D `{name}`, got {t.dim()}-D tensor")
    if query.shape[2] != embed_dim:
        raise RuntimeError(f"passed-in embed_dim {embed_dim} didn't match last dim of query {query.shape[2]}")
    if not (query.shape == key.shape == value.shape):
        raise RuntimeError("expected `query`/`key`/`value` shapes to match")
    if qkv_weight.dim() != 2:
        raise RuntimeError(f"expected 2-D `qkv_weight`, got {qkv_weight.dim()}-D tensor")
    if qkv_weight.shape[0] != 3 * embed_dim:
        raise RuntimeError("expected `qkv_weight` first dim to be 3x embed_dim")
    if qkv_weight.shape[1] != embed_dim:
        raise RuntimeError("expected `qkv_weight` second dim to be embed_Dim")
    if qkv_bias.dim() != 1:
        raise RuntimeError(f"expected 1-D `qkv_bias`, got {qkv_bias.dim()}-D tensor")
    if qkv_bias.shape[0] != 3 * embed_dim:
        raise RuntimeError("expected `qkv_bias` first dim and first dim of query to be equal")
    if embed_dim % num_head:
        raise RuntimeError("`embed_dim` must divide evenly by `num_heads`")


def _qkv_projection(query, key, value, embed_dim, qkv_weight):
    """The (B, T, 3D) projection; self-attention is one matmul, as in ATen."""
    if key is value and query is key:
        return torch.matmul(query, qkv_weight.t())
    weights = qkv_weight.split(embed_dim, 0)
    parts = [torch.matmul(t, w.t()) for t, w in zip((query, key, value), weights)]
    return torch.cat(parts, 2)


@register(aten._native_multi_head_attention.default)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    _check_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias)
    qkv = _qkv_projection(query, key, value, embed_dim, qkv_weight)
    if qkv.numel() == 0:
        return torch.empty_like(query), None
    q, k, v = transform_bias_rescale_qkv(qkv, qkv_bias, num_head)
    scores = torch.matmul(q, k.transpose(2, 3))
    if mask is None:
        weights = torch.softmax(scores, -1)
    else:
        weights = masked_softmax(scores, mask.bool(), scores.dim() - 1, mask_type)
    context = torch.matmul(weights, v)  # (B, H, T, D / H)
    batch, length = query.shape[0], query.shape[1]
    merged = context.permute(0, 2, 1, 3).reshape(batch, length, embed_dim)
    out = torch.nn.functional.linear(merged, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.sum(1) / num_head
    return out, weights


@register(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    """One nn.TransformerEncoderLayer (self-attention, then a two-layer feed-forward block, each
    with a residual and a layer norm before or after it)."""
    if src.numel() == 0:
        return src.clone()

    def norm(t, weight, bias):
        return torch.nn.functional.layer_norm(t, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                    proj_bias, mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = torch.nn.functional.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = torch.nn.functional.gelu(hidden) if use_gelu else torch.relu(hidden)
    x = torch.nn.functional.linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


@register(aten._nested_tensor_from_mask_left_aligned.default)
def nested_tensor_from_mask_left_aligned(t, mask):
    """False: zyx has no nested tensors, so none can be made from ``t`` and ``mask`` (the module
    docstring says what nn.TransformerEncoder does then)."""
    if mask.dim() != 2:
        raise RuntimeError(f"Padding mask should be 2D, got {mask.dim()}D")
    return False


@register(aten._nested_tensor_from_mask.default)
def nested_tensor_from_mask(t, mask, mask_check=True):
    """No nested tensors on zyx: raise what to do instead (through the CPU fallback, the CPU's
    nested result came back as "NestedTensorImpl doesn't support sizes")."""
    raise RuntimeError("zyx has no nested tensors: torch._nested_tensor_from_mask cannot build one (an "
                       "nn.TransformerEncoder in eval mode with a padding mask and mask_check=False "
                       "calls it); construct the encoder with enable_nested_tensor=False")
