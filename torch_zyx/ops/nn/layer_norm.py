"""Layer norm: the forward (composite nodes, lazy/composite.py: one kernel, both statistics
reduce in one pass over the rows and the normalization fuses after them), its three gradients
recorded as one op, and aten::layer_norm above autograd for calls that record no gradient
(dispatch → lazy graph, like every lowering).
"""

from __future__ import annotations

import torch

from ...lazy import composite
from ...lazy import graph as g
from ...lazy.composite import norm_shapes
from ...lazy.graph import Node
from ...record.pending import reraise_deferred, unsupported
from ...record.tensor import ZyxTensor, read, wrap
from ...record.transfer import zdtype
from ..registry import aten, dtype_name, register
from .functional import _acc_dtype, _bcast


def _check_layer_norm(shape: tuple, normalized_shape: list, weight: Node | None,
                      bias: Node | None) -> None:
    """ATen's argument checks of layer_norm, with its messages (``weight``, ``bias``: the
    operands' nodes)."""
    normalized = tuple(normalized_shape)
    if (normalized and shape[len(shape) - len(normalized):] == normalized
            and (weight is None or weight.shape == normalized)
            and (bias is None or bias.shape == normalized)):
        return  # (every call: the messages below are only built for a mistake)
    normalized = list(normalized)
    if not normalized:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                           "least one element, but got normalized_shape = []")
    for name, tensor in (("weight", weight), ("bias", bias)):
        if tensor is not None and list(tensor.shape) != normalized:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} "
                               f"of shape {list(tensor.shape)} and normalized_shape = {normalized}")
    if len(shape) < len(normalized) or list(shape[len(shape) - len(normalized):]) != normalized:
        raise RuntimeError(f"Given normalized_shape={normalized}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized))}], but got input of size{list(shape)}")


def _layer_norm_nodes(x, normalized_shape, weight, bias, eps, statistics: bool = True) -> tuple:
    """native_layer_norm's three results as nodes: the normalized input (scaled and shifted),
    the mean and the reciprocal standard deviation, each in the input's dtype (ATen saves the
    statistics in it, half inputs too) and each one composite node (lazy/composite.py); only
    the first when ``statistics`` is false."""
    node = read(x)
    weight = None if weight is None else read(weight)  # (another device's: ATen's error)
    bias = None if bias is None else read(bias)
    _check_layer_norm(node.shape, normalized_shape, weight, bias)
    dtype = node.dtype
    if not dtype.is_float:
        raise unsupported(f"\"LayerNormKernelImpl\" not implemented for '{dtype_name(x.dtype)}'")
    node = g.cast(node, _acc_dtype(dtype))
    shapes = norm_shapes(node.shape, normalized_shape)
    if node.numel == 0:
        nan = g.const(float("nan"), dtype, shapes.stat_shape)
        return g.cast(node, dtype), nan, nan
    eps = g.const(eps, node.dtype, shapes.stat_shape)
    dims = len(shapes.dims)
    out = g.cast(composite.layer_norm(node, eps, weight, bias, dims), dtype)
    if not statistics:
        return (out,)
    return (out, g.cast(composite.layer_norm(node, eps, None, None, dims, output=1), dtype),
            g.cast(composite.layer_norm(node, eps, None, None, dims, output=2), dtype))


@register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    nodes = _layer_norm_nodes(x, normalized_shape, weight, bias, eps)
    return tuple(wrap(node, x._storage.device) for node in nodes)


_forward_ad = torch.autograd.forward_ad
_dispatch_modes = torch._C._len_torch_dispatch_stack
_native_layer_norm = aten.native_layer_norm.default


def _records_nothing_more(*operands) -> bool:
    """Whether an op on ``operands`` (zyx tensors or None) is its value and nothing else: no
    gradient recorded, no forward-mode level, no dispatch mode watching."""
    if _forward_ad._current_level >= 0 or _dispatch_modes():
        return False
    grad = torch.is_grad_enabled()
    for operand in operands:
        if operand is not None and (operand.__class__ is not ZyxTensor or (grad and operand.requires_grad)):
            return False
    return True


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """aten::layer_norm for zyx tensors, registered above autograd (torch_zyx._register).

    ATen's composite form calls native_layer_norm through the dispatcher and keeps its first
    result: two more tensors made and dropped every call. Where no gradient is recorded (no
    operand requires one, or grad mode is off; no forward-mode level, no dispatch mode that
    must see native_layer_norm) this records the normalized tensor alone: a synced small layer
    norm ~28 -> ~23 us on the 2-core box. Anything else takes the composite form's path.
    (Inference mode skips the autograd keys: the composite form runs there, below them.)"""
    if _records_nothing_more(input, weight, bias):
        try:
            nodes = _layer_norm_nodes(input, normalized_shape, weight, bias, eps, statistics=False)
        except NotImplementedError as exc:
            reraise_deferred(exc)  # (an error to raise leaves here, as in dispatch)
            nodes = None  # declined: what the dispatcher does with native_layer_norm decides
        if nodes is not None:
            return wrap(nodes[0], input._storage.device)
    return _native_layer_norm(input, normalized_shape, weight, bias, eps)[0]


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    """The three gradients of layer norm, as PyTorch's decomposition computes them (in the
    accumulation dtype, each cast to its tensor's dtype; None where ``output_mask`` says so or
    there is no weight/bias) but recorded as one op: the decomposition dispatches ~25 ops,
    ~0.7 ms of recording per call (two per transformer layer)."""
    node = read(x)
    dtype = node.dtype
    if not dtype.is_float:
        raise NotImplementedError  # (the decomposition's error)
    acc = _acc_dtype(dtype)
    shape = node.shape
    shapes = norm_shapes(shape, normalized_shape)
    dims, count, stat_shape = shapes.dims, shapes.count, shapes.stat_shape
    device = x._storage.device
    if node.numel == 0 or count == 0:
        raise NotImplementedError  # (zeros of each shape: the decomposition's)
    batch_dims = tuple(range(len(shape) - len(normalized_shape)))
    go = g.cast(read(grad_out), acc)
    mean_n = _bcast(g.reshape(g.cast(read(mean), acc), stat_shape), shape)
    rstd_n = g.reshape(g.cast(read(rstd), acc), stat_shape)
    x_hat = g.binary("mul", g.binary("sub", g.cast(node, acc), mean_n), _bcast(rstd_n, shape))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_x_hat = go
        if weight is not None:
            w = _bcast(g.reshape(g.cast(read(weight), acc), shapes.param_shape), shape)
            grad_x_hat = g.binary("mul", go, w)
        a = g.binary("mul", grad_x_hat, g.const(float(count), acc, shape))
        b = _bcast(g.reduce("sum", grad_x_hat, dims), shape)
        c = g.binary("mul", x_hat, _bcast(g.reduce("sum", g.binary("mul", grad_x_hat, x_hat), dims), shape))
        inner = g.binary("sub", g.binary("sub", a, b), c)
        scale = g.binary("div", rstd_n, g.const(float(count), acc, stat_shape))
        grad_input = wrap(g.cast(g.binary("mul", _bcast(scale, shape), inner), dtype), device)
    if output_mask[1] and weight is not None:
        product = g.binary("mul", go, x_hat)
        summed = g.reduce("sum", product, batch_dims) if batch_dims else product
        grad_weight = wrap(g.cast(g.reshape(summed, tuple(normalized_shape)), zdtype(weight.dtype)), device)
    if output_mask[2] and bias is not None:
        summed = g.reduce("sum", go, batch_dims) if batch_dims else go
        grad_bias = wrap(g.cast(g.reshape(summed, tuple(normalized_shape)), zdtype(bias.dtype)), device)
    return grad_input, grad_weight, grad_bias
