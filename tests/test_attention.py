"""Scaled dot-product attention as one op (ops/nn/attention.py): PyTorch's fused "overrideable"
SDPA op and its backward against CPU torch's attention in float64, and the device's choice
between it and the math form (integration/device_hooks.cpp). The fused kernel itself
(codegen/lower_attention.py) is checked without a GPU in test_cuda.py's emulator and on one by
its benchmark; here the op's node is expanded as on any device without that kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from torch_zyx.execute import contexts
from torch_zyx.integration import device_guard
from torch_zyx.lazy import composite
from torch_zyx.record.tensor import read

pytestmark = pytest.mark.usefixtures("no_fallback")

fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable


def _reference(q, k, v, causal: bool, scale: float | None):
    """CPU torch's attention and its rows' log-sum-exp, in float64."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    scale = 1 / q.shape[-1] ** 0.5 if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 3e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 40, 50, 16, 32), (1, 2, 64, 64, 64, 64), (3, 1, 17, 9, 8, 8)])
def test_fused_op_forward_and_backward_match_cpu(dtype, causal, shape):
    batch, heads, length, keys, depth, depth_v = shape
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, length, depth, generator=gen).to(dtype)
    k = torch.randn(batch, heads, keys, depth, generator=gen).to(dtype)
    v = torch.randn(batch, heads, keys, depth_v, generator=gen).to(dtype)
    scale = None if depth != 8 else 0.3
    out, lse = _reference(q, k, v, causal, scale)
    zq, zk, zv = (t.to("zyx").requires_grad_() for t in (q, k, v))
    results = fused(zq, zk, zv, is_causal=causal, scale=scale)
    got, got_lse = results[0], results[1]
    assert got.dtype == dtype and got.shape == out.shape and got_lse.dtype == torch.float32
    assert (results[4], results[5]) == (length, keys)
    tol = _TOLERANCE[dtype]
    torch.testing.assert_close(got.cpu().double(), out, rtol=tol, atol=tol)
    torch.testing.assert_close(got_lse.cpu().double(), lse, rtol=1e-5, atol=1e-5)

    grad = torch.randn(out.shape, generator=gen).to(dtype)
    got.backward(grad.to("zyx"))
    dq, dk, dv = (t.detach().double().requires_grad_() for t in (q, k, v))
    scores_scale = 1 / depth ** 0.5 if scale is None else scale
    scores = dq @ dk.transpose(-1, -2) * scores_scale
    if causal:
        scores = scores.masked_fill(~torch.ones(length, keys, dtype=torch.bool).tril(), float("-inf"))
    (torch.softmax(scores, -1) @ dv).backward(grad.double())
    for name, mine, theirs in (("q", zq, dq), ("k", zk, dk), ("v", zv, dv)):
        scale_of = theirs.grad.abs().max().item() + 1
        torch.testing.assert_close(mine.grad.cpu().double(), theirs.grad, rtol=tol * 4,
                                   atol=tol * 4 * scale_of, msg=lambda m, name=name: f"grad of {name}: {m}")


def test_fused_op_is_one_node_per_output_and_reads_views_in_place():
    q = torch.randn(2, 24, 4, 16)  # (batch, length, heads, depth), as a projection gives it
    zq = q.to("zyx").transpose(1, 2)
    out, lse = fused(zq, zq, zq, is_causal=True)[:2]
    assert read(out).op == composite.ATTENTION and read(lse).op == composite.ATTENTION
    want, want_lse = _reference(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2), True, None)
    torch.testing.assert_close(out.cpu().double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.cpu().double(), want_lse, rtol=1e-5, atol=1e-5)


def test_fused_op_refuses_a_mask_or_dropout():
    q = torch.randn(1, 1, 4, 16).to("zyx")
    with pytest.raises(RuntimeError, match="no attn_bias and no dropout"):
        fused(q, q, q, torch.zeros(4, 4).to("zyx"))
    with pytest.raises(RuntimeError, match="no attn_bias and no dropout"):
        fused(q, q, q, dropout_p=0.5)


def _device(fuses: bool) -> str | None:
    """zyx:0 when it runs bfloat16 attention as one fused kernel (``fuses``) or when it does
    not; else None. (Only zyx:0: PyTorch's autograd engine sizes its device queues by the
    device count it read at start.)"""
    return "zyx:0" if ("bfloat16" in contexts.devices()[0].lowering.tensor_cores) == fuses else None


@pytest.mark.parametrize("fuses", [False, True], ids=["math form", "fused kernel"])
def test_sdpa_takes_the_devices_kernel(fuses):
    device = _device(fuses)
    if device is None:
        pytest.skip("zyx:0 has no tensor cores (a GPU: CUDA)" if fuses else
                    "zyx:0 fuses bfloat16 attention")
    if fuses and not device_guard.native_hooks():
        pytest.skip("the device's C++ hooks are not loaded (ZYX_NATIVE=0): SDPA takes its math form")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 200, 64, generator=gen).to(torch.bfloat16) for _ in range(3))
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    got = F.scaled_dot_product_attention(*leaves, is_causal=True)
    assert (read(got).op == composite.ATTENTION) == fuses
    reference = [t.double().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*reference, is_causal=True)
    torch.testing.assert_close(got.cpu().double(), want, rtol=2e-2, atol=2e-2)
    grad = torch.randn(want.shape, generator=gen)
    got.backward(grad.to(torch.bfloat16).to(device))
    want.backward(grad.double())
    for mine, theirs in zip(leaves, reference):
        torch.testing.assert_close(mine.grad.cpu().double(), theirs.grad, rtol=5e-2, atol=5e-2)


# A process whose zyx:0 answers the choice of SDPA kernel as a device with fused bfloat16 attention
# does: F.scaled_dot_product_attention then records the fused op (expanded again by the kernelizer
# of this device, which has no such kernel) for the calls the kernel takes, the math form for
# the others, and its gradients come from the fused op's backward.
_CHOICE = textwrap.dedent("""
    import torch, torch.nn.functional as F
    import torch_zyx
    from torch_zyx.integration import device_guard
    from torch_zyx.lazy import composite
    from torch_zyx.record.tensor import read
    device_guard._attention_dtypes = lambda device: 2
    torch.manual_seed(0)
    def check(q, k, v, fused_expected, **kw):
        zq, zk, zv = (t.to("zyx").requires_grad_() for t in (q, k, v))
        zkw = {name: x.to("zyx") if isinstance(x, torch.Tensor) else x for name, x in kw.items()}
        got = F.scaled_dot_product_attention(zq, zk, zv, **zkw)
        assert (read(got).op == composite.ATTENTION) == fused_expected, (kw, read(got).op)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        want = F.scaled_dot_product_attention(*leaves, **kw)
        torch.testing.assert_close(got.cpu().double(), want, rtol=2e-2, atol=2e-2)
        grad = torch.randn(want.shape)
        got.backward(grad.to(q.dtype).to("zyx"))
        want.backward(grad.double())
        for mine, theirs in zip((zq, zk, zv), leaves):
            torch.testing.assert_close(mine.grad.cpu().double(), theirs.grad, rtol=5e-2, atol=5e-2)
    bf16 = torch.bfloat16
    q, k, v = (torch.randn(2, 4, 48, 32).to(bf16) for _ in range(3))
    check(q, k, v, True, is_causal=True)
    check(q, k, v, True)
    check(q.float(), k.float(), v.float(), False)  # float32: not fused on this device
    check(q, k, v, False, attn_mask=torch.ones(48, 48, dtype=torch.bool).tril())
    check(q[..., :8], k[..., :8], v, False)  # head size 8: not a multiple of 16
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        check(q, k, v, False)
    print("ok")
""")


@pytest.mark.skipif(not device_guard.native_hooks(), reason="the device's C++ hooks are not loaded "
                    "(ZYX_NATIVE=0 or no C++ compiler): SDPA always takes its math form")
def test_sdpa_takes_the_fused_op_where_the_device_fuses_it():
    result = subprocess.run([sys.executable, "-c", _CHOICE], capture_output=True, text=True,
                            env=dict(os.environ), timeout=300, check=False)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr
