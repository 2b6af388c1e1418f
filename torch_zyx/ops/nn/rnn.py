"""The fused recurrent cells ATen calls on accelerator devices, and their backward ops.

On a device other than the CPU, ATen's ``lstm_cell`` and ``gru_cell`` (what ``nn.LSTM``,
``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` run step by step) compute the two gate matmuls
themselves and hand the rest of the step to ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``,
which have kernels for CUDA only (the CPU cannot run them either, so they cannot fall back).
Their autograd formulas call ``_thnn_fused_lstm_cell_backward_impl`` and
``_thnn_fused_gru_cell_backward``. Each lowering here is elementwise work over the gates (one
kernel with the matmuls' results as inputs), computed as CUDA's kernels compute it: in float32
for half inputs, with the same saved workspace layout, so the forward and backward ops pair up
exactly as on CUDA.

``_pack_padded_sequence`` (``nn.utils.rnn.pack_padded_sequence``) has only a device-generic
C++ kernel, which zyx does not run (it would read device memory); it is one gather here.

Gate layout, per batch row: LSTM ``[input, forget, cell, output]`` x hidden, GRU
``[reset, input, new]`` x hidden. The LSTM workspace holds the four activated gates; the GRU
workspace ``[reset, input, new, hx, hidden new gate + its bias]``.
"""

from __future__ import annotations

import itertools

import torch

from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import from_cpu
from ..core.movement import concat_nodes
from ..indexing.index import index_take
from ..math.elementwise import add, mul, sigmoid, sub, tanh
from ..registry import aten, dtype_name, register
from .functional import _acc_dtype


def _gate(node: Node, index: int, hidden: int) -> Node:
    """Gate ``index`` of gates ``node`` (batch, k * hidden): its (batch, hidden) block."""
    batch = node.shape[0]
    return g.shrink(node, ((0, batch), (index * hidden, (index + 1) * hidden)))


def _bias_gate(bias: Node, index: int, hidden: int, batch: int) -> Node:
    block = g.shrink(bias, ((index * hidden, (index + 1) * hidden),))
    return g.expand(g.reshape(block, (1, hidden)), (batch, hidden))


def _inputs(*tensors) -> list[Node | None]:
    """The tensors' nodes in the accumulation dtype of the first one (None stays None)."""
    acc = _acc_dtype(read(tensors[0]).dtype)
    return [None if t is None else g.cast(read(t), acc) for t in tensors]


def _out(node: Node, like, device):
    return wrap(g.cast(node, read(like).dtype), device)


def _summed(gates: Node, like) -> Node:
    """A bias gradient: ``gates`` as stored in ``like``'s dtype, summed over the batch in the
    accumulation dtype (ATen sums the stored gradient), (k * hidden,)."""
    stored = g.cast(g.cast(gates, read(like).dtype), gates.dtype)
    return g.reshape(g.reduce("sum", stored, (0,)), (gates.shape[1],))


@register(aten._thnn_fused_lstm_cell.default)
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace) of one LSTM step from its gate pre-activations."""
    ig_in, hg_in, c_prev, b1, b2 = _inputs(input_gates, hidden_gates, cx, input_bias, hidden_bias)
    batch, hidden = c_prev.shape
    activated = []
    for index, activation in enumerate((sigmoid, sigmoid, tanh, sigmoid)):
        pre = add(_gate(ig_in, index, hidden), _gate(hg_in, index, hidden))
        if b1 is not None:
            pre = add(pre, add(_bias_gate(b1, index, hidden, batch), _bias_gate(b2, index, hidden, batch)))
        activated.append(activation(pre))
    in_gate, forget_gate, cell_gate, out_gate = activated
    cy = add(mul(forget_gate, c_prev), mul(in_gate, cell_gate))
    hy = mul(out_gate, tanh(cy))
    device = cx._storage.device
    return (_out(hy, cx, device), _out(cy, cx, device), _out(concat_nodes(activated, 1), input_gates, device))


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad_gates, grad_cx, grad_bias) of one LSTM step (grad_bias None without biases)."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    work, c_prev, c_new = _inputs(workspace, cx, cy)
    batch, hidden = c_prev.shape
    zero = g.const(0.0, work.dtype, (batch, hidden))
    grad_h = zero if grad_hy is None else g.cast(read(grad_hy), work.dtype)
    grad_c = zero if grad_cy is None else g.cast(read(grad_cy), work.dtype)
    in_gate, forget_gate, cell_gate, out_gate = (_gate(work, index, hidden) for index in range(4))
    one = g.const(1.0, work.dtype, (batch, hidden))
    tanh_cy = tanh(c_new)
    grad_out = mul(grad_h, tanh_cy)
    grad_cell = add(mul(mul(grad_h, out_gate), sub(one, mul(tanh_cy, tanh_cy))), grad_c)
    grads = [
        mul(mul(grad_cell, cell_gate), mul(sub(one, in_gate), in_gate)),
        mul(mul(grad_cell, c_prev), mul(sub(one, forget_gate), forget_gate)),
        mul(mul(grad_cell, in_gate), sub(one, mul(cell_gate, cell_gate))),
        mul(grad_out, mul(sub(one, out_gate), out_gate)),
    ]
    grad_gates = concat_nodes(grads, 1)
    device = cx._storage.device
    grad_bias = _out(_summed(grad_gates, workspace), workspace, device) if has_bias else None
    return (_out(grad_gates, workspace, device), _out(mul(grad_cell, forget_gate), cx, device), grad_bias)


@register(aten._thnn_fused_gru_cell.default)
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace) of one GRU step from its gate pre-activations."""
    ig_in, hg_in, h_prev, b1, b2 = _inputs(input_gates, hidden_gates, hx, input_bias, hidden_bias)
    batch, hidden = h_prev.shape
    parts = []
    for index in range(3):
        from_input, from_hidden = _gate(ig_in, index, hidden), _gate(hg_in, index, hidden)
        if b1 is not None:
            from_input = add(from_input, _bias_gate(b1, index, hidden, batch))
            from_hidden = add(from_hidden, _bias_gate(b2, index, hidden, batch))
        parts.append((from_input, from_hidden))
    reset_gate = sigmoid(add(*parts[0]))
    in_gate = sigmoid(add(*parts[1]))
    hidden_new = parts[2][1]
    new_gate = tanh(add(parts[2][0], mul(reset_gate, hidden_new)))
    hy = add(new_gate, mul(in_gate, sub(h_prev, new_gate)))
    device = hx._storage.device
    workspace = concat_nodes([reset_gate, in_gate, new_gate, h_prev, hidden_new], 1)
    return _out(hy, hx, device), _out(workspace, hx, device)


@register(aten._thnn_fused_gru_cell_backward.default)
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias) of one
    GRU step (the bias gradients None without biases)."""
    grad_h, work = _inputs(grad_hy, workspace)
    batch, hidden = grad_h.shape
    reset_gate, in_gate, new_gate, h_prev, hidden_new = (_gate(work, index, hidden) for index in range(5))
    one = g.const(1.0, work.dtype, (batch, hidden))
    grad_in = mul(mul(grad_h, sub(h_prev, new_gate)), mul(sub(one, in_gate), in_gate))
    grad_hx = mul(grad_h, in_gate)
    grad_new = mul(mul(grad_h, sub(one, in_gate)), sub(one, mul(new_gate, new_gate)))
    grad_hidden_new = mul(grad_new, reset_gate)
    grad_reset = mul(mul(grad_new, hidden_new), mul(sub(one, reset_gate), reset_gate))
    grad_input_gates = concat_nodes([grad_reset, grad_in, grad_new], 1)
    grad_hidden_gates = concat_nodes([grad_reset, grad_in, grad_hidden_new], 1)
    device = grad_hy._storage.device
    biases = (None, None)
    if has_bias:
        biases = (_out(_summed(grad_input_gates, workspace), workspace, device),
                  _out(_summed(grad_hidden_gates, workspace), workspace, device))
    return (_out(grad_input_gates, workspace, device), _out(grad_hidden_gates, workspace, device),
            _out(grad_hx, grad_hy, device), *biases)


def _check_lengths(lengths, batch: int, numel: int) -> list[int]:
    """ATen's checks of ``_pack_padded_sequence``'s lengths, with its messages; the lengths."""
    if not (lengths.dim() == 1 and lengths.device.type == "cpu" and lengths.dtype == torch.int64):
        raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got "
                           f"{lengths.dim()}D {lengths.device} {dtype_name(lengths.dtype)} tensor")
    if numel == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if lengths.shape[0] != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lengths.shape[0]} "
                           f"(batch_size={batch})")
    values = lengths.tolist()
    if values[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in "
                           "'lengths' that is <= 0")
    if any(later > earlier for earlier, later in itertools.pairwise(values)):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                           "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or "
                           "pack_sequence to sidestep this requirement if you do not need ONNX "
                           "exportability.")
    return values


@register(aten._pack_padded_sequence.default)
def pack_padded_sequence(input, lengths, batch_first):
    """(data, batch_sizes): the time steps' rows of the sequences still running, step by step,
    read with one gather; batch_sizes stays a CPU tensor, as ATen returns it. The positions come
    from the lengths, which PyTorch requires on the CPU (no device value is read)."""
    node = read(input)
    if batch_first:
        node = g.permute(node, (1, 0, *range(2, len(node.shape))))
    steps, batch = node.shape[0], node.shape[1]
    values = _check_lengths(lengths, batch, node.numel)
    if values[0] > steps:
        raise IndexError(f"index {steps} is out of bounds for dimension 0 with size {steps}")
    batch_sizes = [sum(1 for length in values if length > step) for step in range(values[0])]
    positions = torch.tensor([step * batch + row for step in range(values[0])
                              for row in range(batch_sizes[step])], dtype=torch.int64)
    device = input._storage.device
    rows = g.reshape(node, (steps * batch, *node.shape[2:]))
    data = index_take(rows, 0, g.reshape(from_cpu(positions, device), (positions.numel(),)))
    return wrap(data, device), torch.tensor(batch_sizes, dtype=torch.int64)
