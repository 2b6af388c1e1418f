"""Transformer modules in inference on zyx: PyTorch's fast path (eval mode, no autograd) calls
fused ops (_native_multi_head_attention, _transformer_encoder_layer_fwd, _masked_softmax,
_transform_bias_rescale_qkv) that ops/nn/transformer.py writes with zyx ops; results against CPU
torch, no CPU fallback."""

import copy

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.usefixtures("no_fallback")


def _masks(kind, batch=3, length=5):
    padding = torch.tensor([[False] * length, [False] * 3 + [True] * 2, [False] * 4 + [True]])[:batch]
    causal = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
    additive = torch.zeros(length, length).masked_fill(causal, float("-inf"))
    return {"none": (None, None), "padding": (None, padding), "causal": (causal, None),
            "additive": (additive, None), "causal+padding": (causal, padding)}[kind]


def _run(module, device, *inputs, **kwargs):
    module = copy.deepcopy(module).to(device).eval()
    moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with torch.inference_mode():
        return module(*(t.to(device) for t in inputs), **moved)


@pytest.mark.parametrize("mask", ["none", "padding", "causal", "additive", "causal+padding"])
@pytest.mark.parametrize("need_weights, average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_fast_path_matches_cpu(mask, need_weights, average):
    torch.manual_seed(0)
    module = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(3, 5, 16)
    attn_mask, padding = _masks(mask)
    kwargs = {"attn_mask": attn_mask, "key_padding_mask": padding, "need_weights": need_weights,
              "average_attn_weights": average}
    got, want = _run(module, "zyx", x, x, x, **kwargs), _run(module, "cpu", x, x, x, **kwargs)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-5)
    assert (got[1] is None) == (want[1] is None)
    if want[1] is not None:
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
def test_transformer_encoder_fast_path_matches_cpu(norm_first, activation, mask, counters):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=not norm_first)
    x = torch.randn(3, 5, 16)
    attn_mask, padding = _masks(mask)
    got = _run(encoder, "zyx", x, mask=attn_mask, src_key_padding_mask=padding)
    want = _run(encoder, "cpu", x, mask=attn_mask, src_key_padding_mask=padding)
    assert got.device.type == "zyx" and counters()["cpu_fallbacks"] == 0
    # CPU's nested path (eval, padding mask) leaves zeros at padded positions; zyx has no nested
    # tensors and takes the dense path: every unpadded position agrees.
    kept = ~padding if padding is not None else torch.ones(3, 5, dtype=torch.bool)
    torch.testing.assert_close(got.cpu()[kept], want[kept], rtol=1e-5, atol=1e-5)


def test_fast_path_half_precision():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).half()
    x = torch.randn(2, 6, 16).half()
    torch.testing.assert_close(_run(layer, "zyx", x).cpu(), _run(layer, "cpu", x), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("mask_type, mask_shape",
                         [(0, (5, 5)), (1, (2, 5)), (2, (2, 3, 5, 5)), (None, (2, 3, 5, 5))])
def test_masked_softmax_matches_cpu(mask_type, mask_shape):
    """Masked elements get no weight; a row with every element masked is NaN, as on the CPU."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, 5, generator=generator)
    mask = torch.rand(mask_shape, generator=generator) > 0.6
    mask.view(-1, 5)[1] = True
    got = torch._masked_softmax(scores.to("zyx"), mask.to("zyx"), 3, mask_type)
    torch.testing.assert_close(got.cpu(), torch._masked_softmax(scores, mask, 3, mask_type), equal_nan=True)


def test_transform_bias_rescale_qkv_matches_cpu():
    generator = torch.Generator().manual_seed(0)
    qkv, bias = torch.randn(2, 5, 24, generator=generator), torch.randn(24, generator=generator)
    got = torch._transform_bias_rescale_qkv(qkv.to("zyx"), bias.to("zyx"), 2)
    for z, c in zip(got, torch._transform_bias_rescale_qkv(qkv, bias, 2)):
        torch.testing.assert_close(z.cpu(), c)


def test_nested_tensor_request_raises_clearly():
    """zyx has no nested tensors: with mask_check=False the encoder asks for one directly."""
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 1, mask_check=False).to("zyx").eval()
    x = torch.randn(3, 5, 16, device="zyx")
    padding = _masks("padding")[1].to("zyx")
    expected = "zyx has no nested tensors.*enable_nested_tensor=False"
    with torch.no_grad(), pytest.raises(RuntimeError, match=expected):
        encoder(x, src_key_padding_mask=padding)
