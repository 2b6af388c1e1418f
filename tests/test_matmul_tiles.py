"""Block-tiled matmuls (codegen/lower_tiles.py) run on a device with work groups, against CPU torch.

GPUs get block tiles by default; here they are switched on for zyx:0 whatever it is, so the
OpenCL pass (PoCL: work groups, local memory and barriers on the CPU) runs the same kernels a
GPU does. The CUDA rendering of them is run by test_cuda's emulator and compiled by NVRTC.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import torch_zyx
from torch_zyx.codegen.lower_tiles import GPU_TILES
from torch_zyx.execute import realize
from torch_zyx.execute.contexts import devices


@pytest.fixture
def tiled():
    """zyx:0 with block tiles on (``compute_units`` chooses the tile: 4 takes 128 x 128 blocks for
    outputs of 256 x 512 or more, 64 x 64 from 128 x 128); skips on a device without work groups."""
    context = devices()[0]
    if not context.lowering.group_size:
        pytest.skip(f"block tiles need a device with work groups (OpenCL, CUDA); zyx:0 is "
                    f"{context.runtime.renderer}")
    saved = context.lowering
    context.lowering = dataclasses.replace(saved, block_tiles=GPU_TILES, compute_units=4)
    realize._plans.clear()
    realize._lowered.clear()
    yield
    context.lowering = saved
    realize._plans.clear()
    realize._lowered.clear()


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_rand.gen).to(dtype)


_rand.gen = torch.Generator().manual_seed(0)

CASES = [
    ("128x128 tiles", lambda a, b: a @ b, ((256, 40), (40, 512))),
    ("64x64 tiles", lambda a, b: a @ b, ((128, 64), (64, 256))),
    ("edges in m, n and k", lambda a, b: a @ b, ((100, 45), (45, 70))),
    ("linear + relu epilogue", lambda x, w, b: torch.relu(F.linear(x, w, b)), ((96, 80), (48, 80), (48,))),
    ("transposed A (a weight gradient)", lambda a, b: a.t() @ b, ((64, 96), (64, 40))),
    ("both transposed, kept reduce axis", lambda a, b: a.t() @ b.t(), ((40, 66), (33, 40))),
    ("batched", torch.bmm, ((3, 40, 33), (3, 33, 50))),
    ("operands are expressions", lambda a, b: torch.exp(a * 0.1) @ (b + 1), ((50, 37), (37, 45))),
    ("residual epilogue", lambda a, b, r: F.gelu(a @ b) + r, ((64, 48), (48, 72), (64, 72))),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_block_tiles_match_cpu(tiled, name, fn, shapes):
    inputs = [_rand(*shape) for shape in shapes]
    torch_zyx.reset_counters()
    got = fn(*[t.to("zyx") for t in inputs]).cpu()
    torch.testing.assert_close(got, fn(*inputs), rtol=1e-4, atol=1e-4)
    if name == "linear + relu epilogue":
        # One kernel: the bias and the ReLU in the matmul's epilogue, no operand packing.
        assert torch_zyx.counters()["kernels_launched"] == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_block_tiles_half_operands(tiled, dtype):
    a, b = _rand(70, 96, dtype=dtype), _rand(96, 80, dtype=dtype)
    expect = a.float() @ b.float()
    got = (a.to("zyx") @ b.to("zyx")).cpu()
    assert got.dtype == dtype
    tol = 1e-2 if dtype is torch.float16 else 5e-2
    torch.testing.assert_close(got.float(), expect, rtol=tol, atol=tol)


def test_block_tiles_train_a_linear_layer(tiled):
    """Forward and both gradients (A^T B and A B^T shapes) through the tiles."""
    x, w, b = _rand(64, 96), _rand(40, 96), _rand(40)
    leaves = [t.to("zyx").requires_grad_() for t in (x, w, b)]
    refs = [t.clone().requires_grad_() for t in (x, w, b)]
    F.silu(F.linear(*leaves)).square().sum().backward()
    F.silu(F.linear(*refs)).square().sum().backward()
    for leaf, ref in zip(leaves, refs):
        torch.testing.assert_close(leaf.grad.cpu(), ref.grad, rtol=1e-4, atol=1e-3)
