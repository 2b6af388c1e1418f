"""Recurrent networks on zyx: nn.LSTM, nn.GRU, nn.RNN and their cells give CPU torch's outputs,
hidden states and gradients, and train as on CPU torch. On an accelerator device ATen runs
each LSTM/GRU step through the fused cell ops (``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell``
and their backward ops), which have no CPU kernel to fall back to: ops/nn/rnn.py lowers them.
"""

import copy

import pytest
import torch
from conftest import assert_close
from torch import nn

pytestmark = pytest.mark.usefixtures("no_fallback")

MODULES = {
    "lstm 2 layers batch_first": (lambda: nn.LSTM(6, 8, num_layers=2, batch_first=True), (3, 5, 6)),
    "lstm bidirectional no bias": (lambda: nn.LSTM(6, 8, bidirectional=True, bias=False), (5, 3, 6)),
    "lstm projections": (lambda: nn.LSTM(6, 8, proj_size=4), (5, 3, 6)),
    "gru 2 layers": (lambda: nn.GRU(6, 8, num_layers=2), (5, 3, 6)),
    "gru bidirectional batch_first": (lambda: nn.GRU(6, 8, bidirectional=True, batch_first=True), (3, 5, 6)),
    "gru no bias": (lambda: nn.GRU(6, 8, bias=False), (5, 3, 6)),
    "rnn relu": (lambda: nn.RNN(6, 8, nonlinearity="relu"), (5, 3, 6)),
    "lstm cell": (lambda: nn.LSTMCell(6, 8), (3, 6)),
    "gru cell": (lambda: nn.GRUCell(6, 8), (3, 6)),
    "gru cell no bias": (lambda: nn.GRUCell(6, 8, bias=False), (3, 6)),
}


def _outputs(module, x):
    out = module(x)
    flat = []
    for item in out if isinstance(out, tuple) else (out,):
        flat.extend(item if isinstance(item, tuple) else (item,))
    return flat


def _run(module, x):
    """Outputs, then the gradients of the input and of every parameter."""
    x = x.clone().requires_grad_()
    outputs = _outputs(module, x)
    loss = sum((o * torch.linspace(-1, 1, o.numel(), device=o.device).view(o.shape)).sum() for o in outputs)
    loss.backward()
    return [o.detach() for o in outputs], [x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize("name", MODULES)
def test_recurrent_modules_match_cpu(name):
    make, shape = MODULES[name]
    torch.manual_seed(0)
    module = make()
    x = torch.randn(shape)
    cpu_outputs, cpu_grads = _run(module, x)
    zyx_outputs, zyx_grads = _run(copy.deepcopy(module).to("zyx"), x.to("zyx"))
    assert_close(zyx_outputs, cpu_outputs, rtol=1e-5, atol=1e-5)
    assert_close(zyx_grads, cpu_grads, rtol=1e-4, atol=1e-5)


def test_lstm_language_model_trains_like_cpu():
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Embedding(20, 8), nn.Linear(16, 20)
            self.lstm = nn.LSTM(8, 16, batch_first=True)

        def forward(self, tokens):
            return self.head(self.lstm(self.embed(tokens))[0])

    model = Model()
    tokens = torch.randint(0, 20, (4, 7))
    losses = {}
    for device in ("cpu", "zyx"):
        net = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        data = tokens.to(device)
        losses[device] = []
        for _ in range(4):
            opt.zero_grad()
            logits = net(data[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 20), data[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
        if device == "cpu":
            cpu_state = net.state_dict()
        else:
            assert_close(list(net.state_dict().values()), list(cpu_state.values()), rtol=1e-4, atol=1e-5)
    assert losses["zyx"] == pytest.approx(losses["cpu"], rel=1e-5)
    assert losses["zyx"][-1] < losses["zyx"][0]


def _gates(batch, hidden, k, dtype):
    torch.manual_seed(1)
    return [torch.randn(batch, k * hidden, dtype=dtype) for _ in range(2)] + [
        torch.randn(k * hidden, dtype=dtype) for _ in range(2)]


def _lstm_reference(input_gates, hidden_gates, cx, b1, b2):
    """One LSTM step from gate pre-activations, in float64 (CUDA kernel's formula)."""
    gates = (input_gates + hidden_gates + b1 + b2).double().chunk(4, 1)
    i, f, c, o = gates[0].sigmoid(), gates[1].sigmoid(), gates[2].tanh(), gates[3].sigmoid()
    cy = f * cx.double() + i * c
    return o * cy.tanh(), cy, torch.cat([i, f, c, o], 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_lstm_cell_ops(dtype):
    """The fused LSTM cell and its backward op against float64 references: the step's formula,
    and autograd's own differentiable backward of it (what the fused backward replaces)."""
    input_gates, hidden_gates, b1, b2 = _gates(3, 5, 4, dtype)
    cx = torch.randn(3, 5, dtype=dtype)
    z = [t.to("zyx") for t in (input_gates, hidden_gates, cx, b1, b2)]
    hy, cy, workspace = torch.ops.aten._thnn_fused_lstm_cell(*z)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    for got, want in zip((hy, cy, workspace), _lstm_reference(input_gates, hidden_gates, cx, b1, b2)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().double(), want, **tol)
    grad_hy, grad_cy = torch.randn(3, 5, dtype=dtype), torch.randn(3, 5, dtype=dtype)
    grads = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
        grad_hy.to("zyx"), grad_cy.to("zyx"), z[2], cy, workspace, True)
    args64 = [t.double() for t in (grad_hy, grad_cy, input_gates, hidden_gates, b1, b2, cx)]
    want = torch.ops.aten._thnn_differentiable_lstm_cell_backward(*args64, cy.cpu().double())
    # (grad_gates is both gate gradients, grad_bias both bias gradients)
    for got, expected in zip(grads, (want[0], want[2], want[3])):
        torch.testing.assert_close(got.cpu().double(), expected, **tol)
    only_hy = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad_hy.to("zyx"), None, z[2], cy, workspace,
                                                                 False)
    assert only_hy[2] is None
    want = torch.ops.aten._thnn_differentiable_lstm_cell_backward(args64[0], None, *args64[2:],
                                                                  cy.cpu().double())
    torch.testing.assert_close(only_hy[0].cpu().double(), want[0], **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_gru_cell_ops(dtype):
    input_gates, hidden_gates, b1, b2 = _gates(3, 5, 3, dtype)
    hx = torch.randn(3, 5, dtype=dtype)
    z = [t.to("zyx") for t in (input_gates, hidden_gates, hx, b1, b2)]
    hy, workspace = torch.ops.aten._thnn_fused_gru_cell(*z)
    i64, h64, hx64, b164, b264 = (t.double() for t in (input_gates, hidden_gates, hx, b1, b2))
    ir, ii, in_ = (i64 + b164).chunk(3, 1)
    hr, hi, hn = (h64 + b264).chunk(3, 1)
    reset, update = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    new = (in_ + reset * hn).tanh()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(hy.cpu().double(), new + update * (hx64 - new), **tol)
    torch.testing.assert_close(workspace.cpu().double(), torch.cat([reset, update, new, hx64, hn], 1), **tol)
    grad_hy = torch.randn(3, 5, dtype=dtype)
    grads = torch.ops.aten._thnn_fused_gru_cell_backward(grad_hy.to("zyx"), workspace, True)
    want = torch.ops.aten._thnn_differentiable_gru_cell_backward(grad_hy.double(), i64, h64, hx64, b164, b264)
    for got, expected in zip(grads, want):
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().double(), expected, **tol)
    assert torch.ops.aten._thnn_fused_gru_cell_backward(grad_hy.to("zyx"), workspace, False)[3] is None


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequences_match_cpu(cell, enforce_sorted):
    torch.manual_seed(0)
    module = (nn.LSTM if cell == "lstm" else nn.GRU)(4, 6, batch_first=True)
    x = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 3, 2]) if enforce_sorted else torch.tensor([2, 5, 3])
    results = []
    for device in ("cpu", "zyx"):
        net = copy.deepcopy(module).to(device)
        inputs = x.to(device).detach().requires_grad_()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True,
                                                   enforce_sorted=enforce_sorted)
        assert packed.batch_sizes.device.type == "cpu"
        out, state = net(packed)
        padded, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        hidden = state[0] if cell == "lstm" else state
        (padded.sum() + hidden.pow(2).sum()).backward()
        results.append([padded.detach(), hidden.detach(), out.data.detach(), inputs.grad,
                        *[p.grad for p in net.parameters()]])
        assert out_lengths.tolist() == lengths.tolist()
    assert_close(results[1], results[0], rtol=1e-4, atol=1e-5)


LENGTH_ERRORS = {
    "unsorted": torch.tensor([2, 3]),
    "zero length": torch.tensor([3, 0]),
    "wrong count": torch.tensor([3, 2, 1]),
    "not int64": torch.tensor([3.0, 2.0]),
}


@pytest.mark.parametrize("name", LENGTH_ERRORS)
def test_pack_padded_sequence_errors_like_cpu(name):
    x = torch.randn(3, 2, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.ops.aten._pack_padded_sequence(x, LENGTH_ERRORS[name], False)
    with pytest.raises(RuntimeError) as zyx_error:
        torch.ops.aten._pack_padded_sequence(x.to("zyx"), LENGTH_ERRORS[name], False)
    assert str(zyx_error.value) == str(cpu_error.value)
